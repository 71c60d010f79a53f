// The token bucket that keeps CPU copy time within cpu_budget_pct of wall time.
#pragma once

#include <cstdint>

namespace unload::policy {

// Tokens are nanoseconds of CPU copy time. They accrue at budget_pct/100 ns per ns of
// wall time and are spent by the measured copy time of CPU-path writes. A write may take
// a CPU path only while the balance is positive, so the overshoot is at most the writes
// already decided but not yet charged; the balance may go negative and must be repaid
// before the next CPU write, so over any long interval the CPU share stays within
// budget_pct plus kBurstNs/interval. The burst (the cap on saved-up tokens) lets a quiet
// thread unload a short burst at full speed, but no more than kBurstNs of wall time's
// worth of budget.
class CpuBudget {
 public:
  static constexpr uint64_t kBurstNs = 1'000'000;  // 1 ms of wall time

  // Accrues tokens for the wall time since the last refill.
  void refill(uint64_t now_ns, uint32_t budget_pct) {
    pct_ = budget_pct;
    if (budget_pct >= 100) return;
    if (!started_) {
      started_ = true;
      last_ns_ = now_ns;
      tokens_ns_ = cap(budget_pct);
      return;
    }
    uint64_t elapsed = now_ns > last_ns_ ? now_ns - last_ns_ : 0;
    last_ns_ = now_ns > last_ns_ ? now_ns : last_ns_;
    if (elapsed > kBurstNs) elapsed = kBurstNs;  // more could not be kept anyway
    // Keep the sub-nanosecond remainder: dropping it would under-refill by up to 1 ns per
    // call, which at one call per microsecond is a tenth of a point of budget.
    const uint64_t scaled = elapsed * budget_pct + remainder_;
    remainder_ = static_cast<uint32_t>(scaled % 100);
    tokens_ns_ += static_cast<int64_t>(scaled / 100);
    if (tokens_ns_ > cap(budget_pct)) tokens_ns_ = cap(budget_pct);
  }

  bool allows_cpu(uint32_t budget_pct) const { return budget_pct >= 100 || tokens_ns_ > 0; }

  static constexpr uint64_t kMaxChargeNs =
      1'000'000'000;  // one absurd sample cannot lock out CPU paths for years
  void charge(uint64_t cpu_ns) {
    tokens_ns_ -= static_cast<int64_t>(cpu_ns < kMaxChargeNs ? cpu_ns : kMaxChargeNs);
  }

  int64_t tokens_ns() const { return tokens_ns_; }
  // The most tokens that can be saved up at the budget of the last refill.
  uint64_t burst_tokens_ns() const { return static_cast<uint64_t>(cap(pct_ < 100 ? pct_ : 100)); }
  bool started() const { return started_; }

 private:
  static constexpr int64_t cap(uint32_t budget_pct) {
    return static_cast<int64_t>(kBurstNs * budget_pct / 100);
  }

  int64_t tokens_ns_ = 0;
  uint64_t last_ns_ = 0;
  uint32_t remainder_ = 0;
  uint32_t pct_ = 100;
  bool started_ = false;
};

}  // namespace unload::policy
