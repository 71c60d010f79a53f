// A cheap, seedable, deterministic generator for exploration draws.
#pragma once

#include <cstdint>

namespace unload::policy {

// xorshift64*: three shifts and a multiply per draw, good enough statistically for
// choosing when and where to explore, and reproducible across platforms, which the
// standard library's engines-with-distributions are not.
class Prng {
 public:
  explicit constexpr Prng(uint64_t seed) : state_(splitmix(seed)) {}

  constexpr uint64_t next() {
    state_ ^= state_ >> 12;
    state_ ^= state_ << 25;
    state_ ^= state_ >> 27;
    return state_ * 0x2545F4914F6CDD1DULL;
  }

 private:
  // splitmix64 spreads any seed (including 0, which xorshift cannot leave) over the state.
  static constexpr uint64_t splitmix(uint64_t x) {
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    x ^= x >> 31;
    return x != 0 ? x : 1;
  }

  uint64_t state_;
};

}  // namespace unload::policy
