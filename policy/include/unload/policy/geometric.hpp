// Exploration's countdown: a geometric gap drawn in integer arithmetic.
#pragma once

#include <cstdint>

namespace unload::policy {

// The number of draw points up to and including the next that explores, when each does
// with probability 2^-shift: floor(log(u) / log(1 - 2^-shift)) + 1 for u uniform in
// (0, 1]. Drawn with a table of log2 and one division rather than std::log: under an
// emulator (QEMU's TCG) a floating-point logarithm costs as much as a few hundred integer
// instructions, and the runtime draws one every 2^shift writes of a settled class.
class GeometricGap {
 public:
  static constexpr uint64_t kNever = UINT64_MAX;
  static constexpr uint64_t kFar = uint64_t{1} << 60;  // a gap this long is never

  // shift 0, or 64 and above: never.
  explicit GeometricGap(uint32_t shift);
  GeometricGap() = default;  // never

  // The gap for `random`, 64 uniformly random bits (its top 53 make u).
  uint64_t draw(uint64_t random) const;

  // -log2(u) in units of 2^-kFracBits, for u = (r + 1) * 2^-53, r < 2^53.
  static uint64_t neg_log2_of_u(uint64_t r);

  static constexpr int kFracBits = 24;

 private:
  uint32_t shift_ = 0;
  // -log2(1 - 2^-shift) * 2^shift in units of 2^-kFracBits: between 1/ln 2 and 2, so
  // kept to about 8 significant decimals at every shift.
  uint64_t scaled_denominator_ = 0;
};

}  // namespace unload::policy
