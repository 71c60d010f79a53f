// The cost estimate: a plain mean at first, robust to outliers, steady under noise, and quick to follow a 2x
// change.
#include <gtest/gtest.h>

#include "unload/policy/cost_estimate.hpp"
#include "unload/policy/prng.hpp"

namespace unload::policy {
namespace {

// 1000 +- 20% uniform noise.
uint64_t noisy_1000(Prng& rng) {
  return 800 + rng.next() % 401;
}

TEST(policy_cost_estimate, FirstSampleIsTheEstimate) {
  CostEstimate e;
  e.add(1234);
  EXPECT_EQ(e.settled_ns(), 1234u);
  EXPECT_EQ(e.recent_ns(), 1234u);
  EXPECT_FALSE(e.warm());
}

TEST(policy_cost_estimate, WarmAfterAFullWindow) {
  CostEstimate e;
  for (unsigned i = 0; i < CostEstimate::kWindow; ++i) {
    EXPECT_FALSE(e.warm());
    e.add(100);
  }
  EXPECT_TRUE(e.warm());
}

TEST(policy_cost_estimate, SettlesNearTheCentreUnderNoise) {
  Prng rng(1);
  CostEstimate e;
  uint32_t lo = UINT32_MAX, hi = 0;
  double sum = 0;
  constexpr int kSamples = 100'000, kSkip = 1000;
  for (int i = 0; i < kSamples; ++i) {
    e.add(noisy_1000(rng));
    if (i < kSkip) continue;
    lo = std::min(lo, e.settled_ns());
    hi = std::max(hi, e.settled_ns());
    sum += e.settled_ns();
  }
  // +-20% sample noise: the settled estimate never strays 8% (so never resets) and is
  // unbiased to 1%.
  EXPECT_GE(lo, 920u);
  EXPECT_LE(hi, 1080u);
  EXPECT_NEAR(sum / (kSamples - kSkip), 1000.0, 10.0);
}

TEST(policy_cost_estimate, OutliersBarelyMoveIt) {
  Prng rng(2);
  CostEstimate e;
  for (int i = 0; i < 1000; ++i) e.add(noisy_1000(rng));
  // Three huge outliers in a row: a quarter-second stall, twice, and a clock glitch.
  e.add(250'000'000);
  e.add(250'000'000);
  e.add(UINT64_MAX);
  EXPECT_LE(e.settled_ns(), 1150u);
  EXPECT_LE(e.recent_ns(), 1250u);
}

TEST(policy_cost_estimate, FollowsAHalvingWithinFiveSamples) {
  Prng rng(3);
  CostEstimate e;
  for (int i = 0; i < 1000; ++i) e.add(noisy_1000(rng));
  for (int i = 0; i < 5; ++i) e.add(noisy_1000(rng) / 2);
  EXPECT_LE(e.settled_ns(), 620u);
}

TEST(policy_cost_estimate, FollowsADoublingWithinFiveSamples) {
  Prng rng(4);
  CostEstimate e;
  for (int i = 0; i < 1000; ++i) e.add(noisy_1000(rng));
  for (int i = 0; i < 5; ++i) e.add(noisy_1000(rng) * 2);
  EXPECT_GE(e.settled_ns(), 1600u);
}

TEST(policy_cost_estimate, DriftsWithASmallChangeInsteadOfJumping) {
  Prng rng(5);
  CostEstimate e;
  for (int i = 0; i < 1000; ++i) e.add(noisy_1000(rng));
  for (int i = 0; i < 5; ++i) e.add(noisy_1000(rng) * 12 / 10);  // +20%: not a regime change
  EXPECT_LE(e.settled_ns(), 1100u);
  for (int i = 0; i < 300; ++i) e.add(noisy_1000(rng) * 12 / 10);
  EXPECT_GE(e.settled_ns(), 1130u);
}

}  // namespace
}  // namespace unload::policy
