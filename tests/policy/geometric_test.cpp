// Exploration's integer geometric draw: the floating-point formula's gap to its table's error, and geometric.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "unload/policy/geometric.hpp"
#include "unload/policy/prng.hpp"

namespace unload::policy {
namespace {

constexpr uint64_t kTop53 = (uint64_t{1} << 53) - 1;

// log(u) / log(1 - 2^-shift) in long double, u = (r + 1) 2^-53: the gap less one, unfloored.
long double exact_quotient(uint64_t r, uint32_t shift) {
  const long double u = (static_cast<long double>(r) + 1.0L) * 0x1p-53L;
  return std::log(u) / std::log1p(-std::ldexp(1.0L, -static_cast<int>(shift)));
}

TEST(policy_geometric, NegLog2OfUIsWithinTheTablesError) {
  Prng prng(7);
  for (int i = 0; i < 200'000; ++i) {
    const uint64_t r = i < 64 ? (uint64_t{1} << (i % 54)) - 1 : prng.next() >> 11;
    const long double want = -std::log2((static_cast<long double>(r) + 1.0L) * 0x1p-53L);
    const long double got =
        std::ldexp(static_cast<long double>(GeometricGap::neg_log2_of_u(r)), -GeometricGap::kFracBits);
    ASSERT_NEAR(static_cast<double>(got), static_cast<double>(want), 4e-6) << "r " << r;
  }
  EXPECT_EQ(GeometricGap::neg_log2_of_u(kTop53), 0u) << "u = 1";
  EXPECT_EQ(GeometricGap::neg_log2_of_u(0), uint64_t{53} << GeometricGap::kFracBits) << "u = 2^-53";
}

TEST(policy_geometric, DrawsTheFloatingPointFormulasGap) {
  for (const uint32_t shift : {1u, 2u, 3u, 5u, 7u, 12u, 20u, 31u, 33u, 34u, 40u, 63u}) {
    const GeometricGap gap(shift);
    // The table's log2 is good to 4e-6 of a bit, which the quotient divides by
    // -log2(1 - 2^-shift); the denominator is good to 1e-7 of itself.
    const long double per_bit = -1.0L / std::log2(1.0L - std::ldexp(1.0L, -static_cast<int>(shift)));
    Prng prng(shift);
    int exact = 0;
    constexpr int kDraws = 100'000;
    for (int i = 0; i < kDraws; ++i) {
      const uint64_t bits = i < 64 ? ((uint64_t{1} << (i % 54)) - 1) << 11 : prng.next();
      const long double q = exact_quotient(bits >> 11, shift);
      const uint64_t got = gap.draw(bits);
      if (q >= 0x1p60L) {
        EXPECT_EQ(got, GeometricGap::kNever) << "shift " << shift << " bits " << bits;
        continue;
      }
      const long double tol = 5e-6L * per_bit + 1e-7L * q;
      const auto lo = static_cast<uint64_t>(std::floor(std::max(q - tol, 0.0L))) + 1;
      const auto hi = static_cast<uint64_t>(std::floor(q + tol)) + 1;
      ASSERT_TRUE(got >= lo && got <= hi)
          << "shift " << shift << " bits " << bits << ": " << got << " for " << static_cast<double>(q);
      exact += lo == hi;
    }
    if (shift <= 7) {
      EXPECT_GT(exact, kDraws * 99 / 100) << "shift " << shift << ": the comparison tested little";
    }
  }
}

TEST(policy_geometric, GapsAreGeometric) {
  for (const uint32_t shift : {1u, 3u, 6u}) {
    const GeometricGap gap(shift);
    Prng prng(99);
    constexpr int kDraws = 1 << 20;
    const double p = std::ldexp(1.0, -static_cast<int>(shift));
    uint64_t sum = 0, ones = 0;
    for (int i = 0; i < kDraws; ++i) {
      const uint64_t g = gap.draw(prng.next());
      ASSERT_GE(g, 1u);
      sum += g;
      ones += g == 1;
    }
    EXPECT_NEAR(static_cast<double>(sum) / kDraws, 1.0 / p, 0.01 / p) << "shift " << shift;
    EXPECT_NEAR(static_cast<double>(ones) / kDraws, p, 0.01 * p + 0.002) << "shift " << shift;
  }
}

TEST(policy_geometric, ShiftZeroAndSixtyFourNeverExplore) {
  for (const uint32_t shift : {0u, 64u, 100u})
    for (const uint64_t bits : {uint64_t{0}, ~uint64_t{0}, uint64_t{12345} << 20})
      EXPECT_EQ(GeometricGap(shift).draw(bits), GeometricGap::kNever) << "shift " << shift;
}

}  // namespace
}  // namespace unload::policy
