// Per-send-queue tracking and the completion merger (DESIGN.md section 3, "Completions").
//
// Every request the shim posts on a tracked QP (RC or UC) takes an entry in the QP's
// SqRing, in post order. A request that goes to the NIC carries, instead of the program's
// wr_id, a tag naming its entry; its completion is mapped back through the tag, which
// yields the program's wr_id and tells whether the shim asked for the completion itself
// (hidden). A request the CPU executes (direct path) has no NIC completion: its entry is
// marked done and its completion is synthesised, but only once every earlier entry of the
// same send queue has completed, so completions leave each send queue in post order
// whatever path each request took.
//
// Concurrency: one posting thread and one polling thread per QP at a time (the producer
// owns tail_, the consumer owns head_). No allocation after init(), no locks, no syscalls.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace unload::rt {

struct SqEntry {
  uint64_t seq;          // absolute position in post order
  uint64_t user_wr_id;   // the program's wr_id
  uint64_t post_ns;      // when it was posted (adaptive mode's cost measurement), else 0
  uint64_t remote_addr;  // what the policy saw, for observe()
  uint32_t length;
  uint32_t rkey;
  uint32_t byte_len;     // synthetic completions: wc.byte_len
  uint32_t saved_flags;  // the program's send_flags, restored after the provider's call
  uint16_t sge_count;
  uint8_t path;          // a policy::Path value
  uint8_t flags;         // kSignaled | kHidden | kCpu | kWrite | kMarker
  uint8_t opcode;        // synthetic completions: an ibv_wc_opcode
  uint8_t status;        // synthetic completions: an ibv_wc_status
  std::atomic<uint8_t> done;  // synthetic completions: the CPU finished the request
  uint8_t stage_slot_valid;  // stage path: the staging bytes up to stage_end are freed
  uint64_t stage_end;        // when this entry completes
  ibv_sge stage_sge;         // the request's payload in the staging slot
  ibv_sge* saved_sg;         // the program's SGE list, restored after the provider's call
  int saved_nsge;
};

enum : uint8_t {
  kSignaled = 1u << 0,  // the program asked for a completion
  kHidden = 1u << 1,    // the shim asked for a completion the program did not
  kCpu = 1u << 2,       // executed by the CPU: completion synthesised by the shim
  kWrite = 1u << 3,     // an RDMA WRITE (with or without immediate)
  kMarker = 1u << 4,    // the shim's own request (a fence or wake-up marker): never shown
};

// What the consumer learns when it pops entries. A Sink has:
//   void retired(SqEntry&)            a NIC request completed silently (unsignaled)
//   void nic(SqEntry&, ibv_wc&)       a NIC request's own completion (wc.wr_id is the tag)
//   void cpu(SqEntry&)                a CPU-executed request completed (synthesise it)
// all called in post order.
class SqRing {
 public:
  // capacity: rounded up to a power of two; at least the send queue's depth plus room
  // for CPU-executed requests awaiting earlier NIC completions.
  int init(uint32_t capacity);

  uint32_t capacity() const { return mask_ + 1; }
  uint64_t head() const { return head_.load(std::memory_order_acquire); }
  uint64_t tail() const { return tail_.load(std::memory_order_acquire); }
  uint64_t in_flight() const { return tail() - head(); }
  // NIC requests not yet known complete (the direct path's fence condition).
  uint64_t nic_outstanding() const { return nic_posted_.load(std::memory_order_acquire) - nic_done_.load(std::memory_order_acquire); }

  // Producer side. reserve() returns the next free entry (nullptr when full); nothing is
  // visible to the consumer until publish(). rollback() forgets reserved-but-unposted
  // entries back to a tail value taken before.
  SqEntry* reserve(uint64_t pending_tail) {
    if (pending_tail - head_.load(std::memory_order_acquire) >= capacity()) return nullptr;
    SqEntry* e = &slots_[pending_tail & mask_];
    e->seq = pending_tail;
    e->done.store(0, std::memory_order_relaxed);
    e->stage_slot_valid = 0;
    return e;
  }
  void publish(uint64_t new_tail, uint64_t nic_count) {
    // Single writer (the producer): a plain add, no read-modify-write on the fast path.
    nic_posted_.store(nic_posted_.load(std::memory_order_relaxed) + nic_count, std::memory_order_relaxed);
    tail_.store(new_tail, std::memory_order_release);
  }
  void rollback(uint64_t to_tail, uint64_t nic_count) {
    nic_posted_.store(nic_posted_.load(std::memory_order_relaxed) - nic_count, std::memory_order_relaxed);
    tail_.store(to_tail, std::memory_order_release);
  }
  SqEntry* at(uint64_t seq) const { return &slots_[seq & mask_]; }
  // Producer side: whether the newest request still in flight will produce a NIC
  // completion (so waiting for it needs no marker). Its entry cannot be reused under us:
  // only the producer reserves.
  bool last_signaled() const {
    const uint64_t t = tail_.load(std::memory_order_relaxed);
    if (t == head_.load(std::memory_order_acquire)) return false;
    return (slots_[(t - 1) & mask_].flags & (kSignaled | kHidden)) != 0;
  }
  uint64_t tag_of(const SqEntry* e) const { return reinterpret_cast<uintptr_t>(e); }
  // The entry a NIC completion's wr_id names, or nullptr when the wr_id is not a tag of
  // this ring (a receive completion, or a request posted around the shim).
  SqEntry* entry_of_tag(uint64_t wr_id) const {
    const uintptr_t base = reinterpret_cast<uintptr_t>(slots_.get());
    if (wr_id < base || wr_id >= base + capacity() * sizeof(SqEntry)) return nullptr;
    if ((wr_id - base) % sizeof(SqEntry) != 0) return nullptr;
    return reinterpret_cast<SqEntry*>(wr_id);
  }

  // Consumer side: a NIC completion for `e` arrived. Every earlier entry is complete too
  // (NIC completions of one send queue come in order; unsignaled ones are implied), and
  // so is every done CPU-executed entry right after it.
  template <class Sink>
  void on_nic_completion(SqEntry* e, ibv_wc& wc, Sink& sink) {
    uint64_t h = head_.load(std::memory_order_relaxed);
    uint64_t nic = 0;
    for (; h != e->seq; ++h) {
      SqEntry& x = slots_[h & mask_];
      if (x.flags & kCpu) {
        sink.cpu(x);
      } else {
        ++nic;
        sink.retired(x);
      }
    }
    ++nic;
    sink.nic(*e, wc);
    nic_done_.store(nic_done_.load(std::memory_order_relaxed) + nic, std::memory_order_release);  // consumer only
    head_.store(h + 1, std::memory_order_release);
    drain_ready(sink);
  }

  // Consumer side: completions of done CPU-executed entries at the head.
  template <class Sink>
  void drain_ready(Sink& sink) {
    uint64_t h = head_.load(std::memory_order_relaxed);
    const uint64_t t = tail_.load(std::memory_order_acquire);
    for (; h != t; ++h) {
      SqEntry& x = slots_[h & mask_];
      if (!(x.flags & kCpu) || !x.done.load(std::memory_order_acquire)) break;
      sink.cpu(x);
      head_.store(h + 1, std::memory_order_release);
    }
  }

  // Every request entry popped so far, for statistics and tests.
  uint64_t popped() const { return head(); }

 private:
  std::unique_ptr<SqEntry[]> slots_;
  uint32_t mask_ = 0;
  alignas(64) std::atomic<uint64_t> tail_{0};
  std::atomic<uint64_t> nic_posted_{0};
  alignas(64) std::atomic<uint64_t> head_{0};
  std::atomic<uint64_t> nic_done_{0};
};

// A synthetic work completion for a CPU-executed entry.
inline ibv_wc synth_wc(const SqEntry& e, uint32_t qp_num) {
  ibv_wc wc{};
  wc.wr_id = e.user_wr_id;
  wc.status = static_cast<ibv_wc_status>(e.status);
  wc.opcode = static_cast<ibv_wc_opcode>(e.opcode);
  wc.qp_num = qp_num;
  wc.byte_len = e.byte_len;
  return wc;
}

}  // namespace unload::rt
