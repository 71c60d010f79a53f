// A robust, change-following estimate of one path's cost in one write class.
#pragma once

#include <cstdint>

namespace unload::policy {

// Two estimates from one stream of samples:
//
//  - `recent`: the median of the last kWindow samples. A median ignores up to 3 wild
//    samples in 8 (interrupts, preemption, a page fault, a retransmission: write costs
//    have a heavy right tail), and a window forgets an old regime after 5 new samples.
//  - `settled`: a decayed mean of samples clipped to [recent/2, 3*recent/2], with weight
//    1/n up to n = 32 and 1/32 after, so it starts as a plain mean and ends as an EWMA
//    over ~60 samples. Clipping around the median keeps outliers from dragging it (an
//    outlier moves it by at most 1/64), and averaging ~60 samples gives it about a third
//    of the noise of an 8-sample median, which is what keeps decisions between two
//    nearly equal paths from flapping.
//
// Decisions use `settled`. When `recent` leaves it by more than kChangePct, the regime
// has changed and `settled` jumps to `recent`. Why this split and not one decayed
// quantile: a path the policy is not using is only sampled by exploration (1 write in 32
// by default) and then by a short trial, so an estimator that needs tens of samples to
// move 2x would take thousands of writes to notice the other path got cheaper; one with
// few samples is too noisy to hold a 10% hysteresis. With 20% sample noise the median of
// 8 has ~9% spread, so 40% is a >4-sigma event under noise alone but is crossed by any
// 2x change within 5 samples.
class CostEstimate {
 public:
  static constexpr unsigned kWindow = 8;
  static constexpr unsigned kChangePct = 40;
  // A path's warm-up starts with this many samples; see complete_from_probe().
  static constexpr unsigned kProbe = 2;

  void add(uint64_t cost_ns);
  // Warm from the samples so far (kProbe of them), repeated to fill the window: for a
  // path the policy has seen is far dearer than another, whose remaining warm-up samples
  // would only cost. Later samples replace the copies as they would real ones.
  void complete_from_probe();
  // The least of the samples in the window: costs have a heavy right tail, never a left
  // one, so a path is clearly dear when even this is.
  uint32_t least_ns() const;

  uint32_t settled_ns() const { return settled_ns_; }
  uint32_t recent_ns() const { return recent_ns_; }
  uint32_t samples() const { return samples_; }
  bool warm() const { return samples_ >= kWindow; }

 private:
  uint32_t window_[kWindow] = {};  // ring, oldest at head_ once full
  uint32_t settled_ns_ = 0;
  uint32_t recent_ns_ = 0;
  uint16_t samples_ = 0;  // saturates
  uint8_t head_ = 0;
};

}  // namespace unload::policy
