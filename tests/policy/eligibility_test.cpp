// Over random writes, tunables and observed costs, no mode ever returns a path that is not eligible for the
// write.
#include <gtest/gtest.h>

#include "test_support.hpp"

namespace unload::policy {
namespace {

TEST(policy_eligibility, NoModeEverReturnsAnIneligiblePath) {
  Prng rng(42);
  for (Mode mode : {Mode::offload, Mode::unload, Mode::threshold, Mode::adaptive}) {
    Policy policy(static_cast<uint64_t>(mode));
    Tunables t = testing::tunables_in(mode);
    t.explore_shift = 2;  // explore a lot: exploration must respect eligibility too
    uint64_t now = 0;
    for (int i = 0; i < 200'000; ++i) {
      if (i % 1000 == 0) {  // tunables change under the policy's feet
        t.inline_max = static_cast<uint32_t>(rng.next() % 2048);
        t.stage_max = static_cast<uint32_t>(rng.next() % 65536);
        t.direct_max = static_cast<uint32_t>(rng.next() % (1u << 20));
        t.threshold_bytes = static_cast<uint32_t>(rng.next() % 8192);
        t.cpu_budget_pct = static_cast<uint32_t>(rng.next() % 120);
        t.hysteresis_pct = static_cast<uint32_t>(rng.next() % 50);
      }
      WriteFeatures f{};
      f.length = static_cast<uint32_t>(rng.next() % (1u << (rng.next() % 21)));
      f.sge_count = 1 + static_cast<uint32_t>(rng.next() % 4);
      f.rkey = static_cast<uint32_t>(rng.next() % 4);
      f.remote_addr = (rng.next() % 64) << 12;
      f.eligible = PathSet::from_bits(static_cast<uint8_t>(rng.next()));
      f.peer_local = rng.next() % 2 == 0;
      f.nic_outstanding = rng.next() % 3 == 0;
      f.now_ns = now += 500;
      const PathSet allowed = effective_eligible(f, t);
      const Path p = policy.decide(f, t);
      ASSERT_TRUE(allowed.contains(p))
          << "mode " << static_cast<int>(mode) << " write " << i << " chose " << name_of(p);
      // Costs that vary by path and at random, so that adaptive moves around.
      policy.observe(p, f, 100 + index_of(p) * 300 + rng.next() % 2000);
    }
  }
}

}  // namespace
}  // namespace unload::policy
