// Completions the shim made and the program has not polled yet, in the order they must be
// handed over: a bounded queue with many producers (the posting threads of direct writes,
// and the poller itself when the program's array has no room) and one consumer (the thread
// inside the CQ's PollGate). Producers claim a cell with a compare-and-swap on the tail and
// publish it through the cell's sequence number, so the consumer never waits on a producer
// and takes no lock; a claimed cell not yet published reads as the end of the queue.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>
#include <memory>

namespace unload::rt {

class WcQueue {
 public:
  // capacity: rounded up to a power of two. 0 or -ENOMEM.
  int init(uint32_t capacity);
  uint32_t capacity() const { return static_cast<uint32_t>(mask_ + 1); }

  // Any thread. false when full (the caller's CQ overran: more completions than its size).
  bool push(const ibv_wc& wc) {
    uint64_t pos = tail_.load(std::memory_order_relaxed);
    for (;;) {
      Cell& c = cells_[pos & mask_];
      const uint64_t seq = c.seq.load(std::memory_order_acquire);
      const int64_t diff = static_cast<int64_t>(seq - pos);
      if (diff == 0) {
        if (tail_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
          c.wc = wc;
          c.seq.store(pos + 1, std::memory_order_release);
          return true;
        }
      } else if (diff < 0) {
        return false;
      } else {
        pos = tail_.load(std::memory_order_relaxed);
      }
    }
  }

  // Consumer only.
  bool empty() const { return cells_[head_ & mask_].seq.load(std::memory_order_acquire) != head_ + 1; }
  int pop(ibv_wc* out, int n) {
    int o = 0;
    while (o < n) {
      Cell& c = cells_[head_ & mask_];
      if (c.seq.load(std::memory_order_acquire) != head_ + 1) break;
      out[o++] = c.wc;
      c.seq.store(head_ + mask_ + 1, std::memory_order_release);  // free for lap + 1
      ++head_;
    }
    return o;
  }

 private:
  struct Cell {
    std::atomic<uint64_t> seq;  // == position: free; == position + 1: holds a completion
    ibv_wc wc;
  };
  std::unique_ptr<Cell[]> cells_;
  uint64_t mask_ = 0;
  alignas(64) std::atomic<uint64_t> tail_{0};
  alignas(64) uint64_t head_ = 0;
};

}  // namespace unload::rt
