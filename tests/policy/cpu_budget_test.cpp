// The CPU budget's token bucket: it accrues budget_pct of wall time, caps saved tokens at the burst, must be
// repaid when overdrawn, and is unlimited from 100%.
#include <gtest/gtest.h>

#include "unload/policy/cpu_budget.hpp"

namespace unload::policy {
namespace {

TEST(policy_cpu_budget, StartsWithAFullBurst) {
  CpuBudget b;
  b.refill(1000, 10);
  EXPECT_EQ(b.tokens_ns(), static_cast<int64_t>(CpuBudget::kBurstNs / 10));
  EXPECT_TRUE(b.allows_cpu(10));
}

TEST(policy_cpu_budget, OverdrawnUntilRepaidAtTheBudgetRate) {
  CpuBudget b;
  b.refill(0, 10);
  b.charge(CpuBudget::kBurstNs / 10 + 500);  // 500 ns overdrawn
  EXPECT_FALSE(b.allows_cpu(10));
  b.refill(5000, 10);  // 5 us at 10% repays exactly 500 ns
  EXPECT_FALSE(b.allows_cpu(10));
  b.refill(5010, 10);
  EXPECT_TRUE(b.allows_cpu(10));
}

TEST(policy_cpu_budget, SavedTokensAreCappedAtTheBurst) {
  CpuBudget b;
  b.refill(0, 20);
  b.refill(10'000'000'000, 20);  // ten idle seconds
  EXPECT_EQ(b.tokens_ns(), static_cast<int64_t>(CpuBudget::kBurstNs / 5));
}

TEST(policy_cpu_budget, KeepsFractionsOfANanosecond) {
  CpuBudget b;
  b.refill(0, 7);
  b.charge(CpuBudget::kBurstNs * 7 / 100);
  for (uint64_t t = 1; t <= 100; ++t) b.refill(t * 3, 7);  // 300 ns at 7% = 21 ns
  EXPECT_EQ(b.tokens_ns(), 21);
}

TEST(policy_cpu_budget, ZeroBudgetNeverAllows) {
  CpuBudget b;
  b.refill(0, 0);
  b.refill(1'000'000, 0);
  EXPECT_FALSE(b.allows_cpu(0));
}

TEST(policy_cpu_budget, HundredPercentIsUnlimited) {
  CpuBudget b;
  b.charge(1'000'000'000);
  EXPECT_TRUE(b.allows_cpu(100));
  EXPECT_TRUE(b.allows_cpu(150));
}

TEST(policy_cpu_budget, ClockGoingBackwardsAccruesNothing) {
  CpuBudget b;
  b.refill(1'000'000, 10);
  b.charge(CpuBudget::kBurstNs / 10);
  b.refill(500, 10);
  EXPECT_EQ(b.tokens_ns(), 0);
}

}  // namespace
}  // namespace unload::policy
