// Completions the shim made and the program has not polled yet, in the order they must be
// handed over: a bounded queue with many producers (the posting threads of direct writes,
// and the poller itself when the program's array has no room) and one consumer (the thread
// inside the CQ's gate). Producers claim a cell with a compare-and-swap on the tail and
// publish it through the cell's sequence number, so the consumer never waits on a producer
// and takes no lock; a claimed cell not yet published reads as the end of the queue.
//
// A direct write claims its completion's cell before it places anything (so a full queue
// sends the write to the NIC instead of losing its completion) and fills or cancels it
// after; the consumer skips cancelled cells.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>
#include <memory>

namespace unload::rt {

// A completion in three 16-byte moves: GCC copies one with `rep movs`, which callgrind and
// TCG run a word at a time.
[[gnu::always_inline]] inline void copy_wc(ibv_wc& to, const ibv_wc& from) {
  typedef uint64_t Chunk __attribute__((vector_size(16), may_alias, aligned(8)));
  static_assert(sizeof(ibv_wc) == 3 * sizeof(Chunk));
  Chunk* d = reinterpret_cast<Chunk*>(&to);
  const Chunk* s = reinterpret_cast<const Chunk*>(&from);
  d[0] = s[0];
  d[1] = s[1];
  d[2] = s[2];
}

class WcQueue {
 public:
  // capacity: rounded up to a power of two. 0 or -ENOMEM.
  int init(uint32_t capacity);
  uint32_t capacity() const { return static_cast<uint32_t>(mask_ + 1); }

  // Any thread: claims the next cell. false when full.
  [[gnu::always_inline]] bool claim(uint64_t& ticket) {
    uint64_t pos = tail_.load(std::memory_order_relaxed);
    for (;;) {
      Cell& c = cells_[pos & mask_];
      const uint64_t seq = c.seq.load(std::memory_order_acquire);
      const int64_t diff = static_cast<int64_t>(seq - pos);
      if (diff == 0) {
        if (tail_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
          ticket = pos;
          return true;
        }
      } else if (diff < 0) {
        return false;
      } else {
        pos = tail_.load(std::memory_order_relaxed);
      }
    }
  }
  // The claimant: publishes its cell with a completion, or as void.
  void fill(uint64_t ticket, const ibv_wc& wc) {
    Cell& c = cells_[ticket & mask_];
    copy_wc(c.wc, wc);
    c.live = true;
    c.seq.store(ticket + 1, std::memory_order_release);
  }
  // fill() in two steps, for a claimant that builds the completion in its cell.
  ibv_wc& cell(uint64_t ticket) { return cells_[ticket & mask_].wc; }
  void publish(uint64_t ticket) {
    Cell& c = cells_[ticket & mask_];
    c.live = true;
    c.seq.store(ticket + 1, std::memory_order_release);
  }
  void cancel(uint64_t ticket) {
    Cell& c = cells_[ticket & mask_];
    c.live = false;
    c.seq.store(ticket + 1, std::memory_order_release);
  }
  // Any thread. false when full.
  bool push(const ibv_wc& wc) {
    uint64_t t;
    if (!claim(t)) return false;
    fill(t, wc);
    return true;
  }

  // Consumer only.
  bool empty() {
    skip_void();
    return cells_[head_ & mask_].seq.load(std::memory_order_acquire) != head_ + 1;
  }
  // Consumer only: no cell claimed, published or not. Only then may a provider's completion
  // bypass the queue: a cell still being filled (a direct write in its ioctl) reads as the
  // end of the queue, yet cells published behind it may hold earlier completions of the QP
  // whose completion is at hand (its direct writes, then a NIC write that completed fast).
  bool idle() {
    skip_void();
    return tail_.load(std::memory_order_acquire) == head_;
  }
  // Consumer only: cells free now (a lower bound while producers run).
  uint32_t room() const {
    return static_cast<uint32_t>(capacity() - (tail_.load(std::memory_order_relaxed) - head_));
  }
  int pop(ibv_wc* out, int n) {
    int o = 0;
    while (o < n) {
      Cell& c = cells_[head_ & mask_];
      if (c.seq.load(std::memory_order_acquire) != head_ + 1) break;
      if (c.live) copy_wc(out[o++], c.wc);
      c.seq.store(head_ + mask_ + 1, std::memory_order_release);  // free for lap + 1
      ++head_;
    }
    return o;
  }
  // Consumer only: the published completions of QP `qpn` become void (the provider purged
  // that QP's CQEs). A cell claimed but not yet published is its producer's, and kept.
  void purge_qp(uint32_t qpn) {
    const uint64_t tail = tail_.load(std::memory_order_acquire);
    for (uint64_t pos = head_; pos != tail; ++pos) {
      Cell& c = cells_[pos & mask_];
      if (c.seq.load(std::memory_order_acquire) == pos + 1 && c.live && c.wc.qp_num == qpn) c.live = false;
    }
  }
  // With every producer and the consumer excluded: a larger queue, same contents. 0 or -ENOMEM.
  int grow(uint32_t capacity);

 private:
  void skip_void() {
    for (;;) {
      Cell& c = cells_[head_ & mask_];
      if (c.seq.load(std::memory_order_acquire) != head_ + 1 || c.live) return;
      c.seq.store(head_ + mask_ + 1, std::memory_order_release);
      ++head_;
    }
  }
  struct Cell {
    std::atomic<uint64_t> seq;  // == position: free; == position + 1: published
    bool live;                  // published with a completion (not cancelled)
    ibv_wc wc;
  };
  std::unique_ptr<Cell[]> cells_;
  uint64_t mask_ = 0;
  alignas(64) std::atomic<uint64_t> tail_{0};
  alignas(64) uint64_t head_ = 0;
};

}  // namespace unload::rt
