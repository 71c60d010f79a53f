#include "unload/policy/cost_estimate.hpp"

#include <bit>

namespace unload::policy {
namespace {

void compare_exchange(uint32_t& a, uint32_t& b) {
  const uint32_t lo = a < b ? a : b;  // both compile to cmov: no branch to mispredict
  const uint32_t hi = a < b ? b : a;
  a = lo;
  b = hi;
}

// Median of a full window through the optimal 19-comparator sorting network for 8
// inputs: branch-free, where an insertion sort of noisy costs mispredicts on most
// comparisons and made observe() cost 70 ns.
uint32_t median_of_full_window(const uint32_t* window) {
  uint32_t v[CostEstimate::kWindow];
  for (unsigned i = 0; i < CostEstimate::kWindow; ++i) v[i] = window[i];
  static constexpr uint8_t kNetwork[][2] = {{0, 2}, {1, 3}, {4, 6}, {5, 7}, {0, 4}, {1, 5}, {2, 6},
                                            {3, 7}, {0, 1}, {2, 3}, {4, 5}, {6, 7}, {2, 4}, {3, 5},
                                            {1, 4}, {3, 6}, {1, 2}, {3, 4}, {5, 6}};
  for (const auto& c : kNetwork) compare_exchange(v[c[0]], v[c[1]]);
  return static_cast<uint32_t>((uint64_t{v[3]} + v[4]) / 2);
}

// Median of the first n < 8 samples, during warm-up only.
uint32_t median_of_prefix(const uint32_t* values, unsigned n) {
  uint32_t sorted[CostEstimate::kWindow];
  for (unsigned i = 0; i < n; ++i) {
    uint32_t v = values[i];
    unsigned j = i;
    for (; j > 0 && sorted[j - 1] > v; --j) sorted[j] = sorted[j - 1];
    sorted[j] = v;
  }
  return static_cast<uint32_t>((uint64_t{sorted[(n - 1) / 2]} + sorted[n / 2]) / 2);
}

bool differs_by_more_than_pct(uint32_t a, uint32_t reference, unsigned pct) {
  const uint64_t diff = a > reference ? a - reference : reference - a;
  return diff * 100 > uint64_t{reference} * pct;
}

}  // namespace

void CostEstimate::add(uint64_t cost_ns) {
  const uint32_t x = cost_ns < UINT32_MAX ? static_cast<uint32_t>(cost_ns) : UINT32_MAX;
  window_[head_] = x;
  head_ = static_cast<uint8_t>((head_ + 1) % kWindow);
  if (samples_ != UINT16_MAX) ++samples_;

  const unsigned n = samples_ < kWindow ? samples_ : kWindow;
  recent_ns_ = n == kWindow ? median_of_full_window(window_) : median_of_prefix(window_, n);
  if (samples_ == 1) {
    settled_ns_ = x;
    return;
  }
  if (n >= kWindow / 2 && differs_by_more_than_pct(recent_ns_, settled_ns_, kChangePct)) {
    settled_ns_ = recent_ns_;
    samples_ = samples_ > kWindow ? kWindow : samples_;  // weigh new samples as a fresh mean
    return;
  }
  const uint64_t lo = recent_ns_ / 2;
  const uint64_t hi = uint64_t{recent_ns_} + recent_ns_ / 2;
  const uint64_t clipped = x < lo ? lo : (x > hi ? hi : x);
  // Weight 2^-k with 2^k <= samples, capped at 1/32: a running mean that becomes an EWMA.
  const unsigned k = std::bit_width(static_cast<unsigned>(samples_)) - 1;
  const unsigned shift = k < 5 ? k : 5;
  const int64_t delta = static_cast<int64_t>(clipped) - static_cast<int64_t>(settled_ns_);
  // Round to nearest: a plain shift floors, and at 1/32 that biases the estimate 16 ns
  // low, 5% of a 300 ns inline write.
  const int64_t half = (int64_t{1} << shift) >> 1;
  settled_ns_ = static_cast<uint32_t>(static_cast<int64_t>(settled_ns_) + ((delta + half) >> shift));
}

void CostEstimate::complete_from_probe() {
  const unsigned n = samples_ < kWindow ? samples_ : kWindow;
  if (n == 0 || n == kWindow) return;
  for (unsigned i = n; i < kWindow; ++i) window_[i] = window_[i % n];
  head_ = 0;
  samples_ = kWindow;
  recent_ns_ = median_of_full_window(window_);
}

uint32_t CostEstimate::least_ns() const {
  const unsigned n = samples_ < kWindow ? samples_ : kWindow;
  uint32_t least = UINT32_MAX;
  for (unsigned i = 0; i < n; ++i) least = window_[i] < least ? window_[i] : least;
  return least;
}

}  // namespace unload::policy
