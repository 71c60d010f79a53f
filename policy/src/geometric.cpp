#include "unload/policy/geometric.hpp"

#include <array>
#include <bit>

namespace unload::policy {

namespace {

// ln(x) for x in [1, 2], as a constant expression: 2 atanh((x - 1) / (x + 1)), whose
// series in y <= 1/3 gains a factor of 9 a term.
constexpr double ln_1_to_2(double x) {
  const double y = (x - 1.0) / (x + 1.0);
  const double y2 = y * y;
  double term = y;
  double sum = 0.0;
  for (int k = 1; k < 60; k += 2) {
    sum += term / k;
    term *= y2;
  }
  return 2.0 * sum;
}

constexpr int kTableBits = 8;  // log2(1 + i/256); linear between entries (error < 3e-6)
constexpr double kLn2 = 0.69314718055994530942;

constexpr std::array<uint32_t, (1u << kTableBits) + 1> make_log2_table() {
  std::array<uint32_t, (1u << kTableBits) + 1> t{};
  for (uint32_t i = 0; i <= (1u << kTableBits); ++i) {
    const double v = ln_1_to_2(1.0 + static_cast<double>(i) / (1u << kTableBits)) / kLn2;
    t[i] = static_cast<uint32_t>(v * (1u << GeometricGap::kFracBits) + 0.5);
  }
  return t;
}

constexpr auto kLog2Table = make_log2_table();
static_assert(kLog2Table[0] == 0 && kLog2Table[1u << kTableBits] == 1u << GeometricGap::kFracBits);

// -ln(1 - x) for x in (0, 1/2]: the series of x^k / k, each term at most half the one
// before. Written out, with pow2, so that the shim needs no libm: a library the programs it
// is preloaded into may not load (rping does not), at a cost to every process's start.
double neg_ln_1_minus(double x) {
  double sum = 0.0;
  double term = x;
  for (int k = 1; k < 80 && term > 0.0; ++k) {
    sum += term / k;
    term *= x;
  }
  return sum;
}

// 2^n for n in [0, 127], exactly.
double pow2(uint32_t n) {
  double p = 1.0;
  for (uint32_t i = 0; i < n; ++i) p *= 2.0;
  return p;
}

}  // namespace

GeometricGap::GeometricGap(uint32_t shift) {
  if (shift == 0 || shift >= 64) return;
  shift_ = shift;
  // Once per tunable change: the one floating-point step.
  const double d = neg_ln_1_minus(1.0 / pow2(shift)) / kLn2;
  scaled_denominator_ = static_cast<uint64_t>(d * pow2(shift + kFracBits) + 0.5);
}

uint64_t GeometricGap::neg_log2_of_u(uint64_t r) {
  const uint64_t v = r + 1;  // in [1, 2^53]
  const int lead = std::countl_zero(v);
  const uint64_t exponent = 63 - static_cast<uint64_t>(lead);
  const uint64_t m = v << lead;  // 1.f with the 1 at bit 63
  const uint64_t index = (m >> (63 - kTableBits)) & ((1u << kTableBits) - 1);
  const uint64_t within = (m >> (63 - kTableBits - kFracBits)) & ((uint64_t{1} << kFracBits) - 1);
  const uint64_t lo = kLog2Table[index];
  const uint64_t log2_m = lo + (((kLog2Table[index + 1] - lo) * within) >> kFracBits);
  return ((53 - exponent) << kFracBits) - log2_m;
}

uint64_t GeometricGap::draw(uint64_t random) const {
  if (shift_ == 0) return kNever;
  // -log2(u) < 54 * 2^24 < 2^30: shifted by up to 33 bits it stays within 64.
  const uint64_t num = neg_log2_of_u(random >> 11);
  if (shift_ <= 33) return (num << shift_) / scaled_denominator_ + 1;
  const unsigned __int128 misses = (static_cast<unsigned __int128>(num) << shift_) / scaled_denominator_;
  return misses < kFar ? static_cast<uint64_t>(misses) + 1 : kNever;
}

}  // namespace unload::policy
