// The send-queue ring: one entry per request the shim gave the provider on a tracked QP
// (RC or UC), in post order (docs/design.md, "Send queue").
//
// A request carries, instead of the program's wr_id, a tag naming its entry; its
// completion is mapped back through the tag, which yields the program's wr_id and says
// whether the program or the shim asked for it. Only requests the provider executes have
// entries: a write placed by the CPU (direct) is ordered by the fence instead, which waits
// for the ring to be empty, so every entry is a NIC request and a send queue's entries
// complete in ring order (RC and UC complete a send queue in order; an unsignaled request
// is complete once a later one is). Retiring is therefore O(1): the head jumps past the
// completed entry.
//
// Concurrency: one producer at a time (the posting thread inside the QP's post gate owns
// the tail) and one consumer at a time (the polling thread inside the send CQ's gate owns
// the head). No allocation after init(), no locks, no syscalls.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>
#include <memory>

namespace unload::rt {

struct SqEntry {
  uint64_t seq;          // absolute position in post order
  uint64_t user_wr_id;   // the program's wr_id
  uint64_t post_ns;      // when the policy chose its path (adaptive mode), else 0
  uint64_t remote_addr;  // what the policy saw, for observe()
  uint64_t stage_mark;   // the QP's stage-ring tail after this request: free below it once done
  uint32_t length;
  uint32_t rkey;
  uint16_t sge_count;
  uint8_t path;           // a policy::Path value
  uint8_t flags;          // kSignaled | kHidden | kWrite | kMarker | kOrdering
  uint32_t post_call_ns;  // adaptive: from post_ns until the provider's post_send returned
  ibv_sge stage_sge;      // stage path: the payload in the staging ring
};

enum : uint8_t {
  kSignaled = 1u << 0,  // the program asked for a completion
  kHidden = 1u << 1,    // the shim asked for a completion the program did not
  kWrite = 1u << 3,     // an RDMA WRITE (with or without immediate)
  kMarker = 1u << 4,    // the shim's own request (a fence or wake-up marker): never shown
  kOrdering = 1u << 5,  // an RDMA READ or atomic: what IBV_SEND_FENCE waits for
};

class SqRing {
 public:
  // capacity: rounded up to a power of two; at least the send queue's depth. 0 or -ENOMEM.
  int init(uint32_t capacity);

  uint32_t capacity() const { return mask_ + 1; }
  uint64_t head() const { return head_.load(std::memory_order_acquire); }
  uint64_t tail() const { return tail_.load(std::memory_order_acquire); }
  [[gnu::always_inline]] uint64_t in_flight() const { return tail() - head(); }

  // Producer side. reserve() returns the entry at `pending_tail` (nullptr when full);
  // nothing is visible to the consumer until publish(). rollback() forgets published
  // entries the provider did not take, back to a tail value taken before.
  SqEntry* reserve(uint64_t pending_tail) {
    if (pending_tail - head_.load(std::memory_order_acquire) >= capacity()) return nullptr;
    SqEntry* e = &slots_[pending_tail & mask_];
    e->seq = pending_tail;
    return e;
  }
  void publish(uint64_t new_tail) { tail_.store(new_tail, std::memory_order_release); }
  void rollback(uint64_t to_tail) { tail_.store(to_tail, std::memory_order_release); }
  SqEntry* at(uint64_t seq) const { return &slots_[seq & mask_]; }
  // Producer side: whether the newest request in flight will produce a completion (so
  // waiting for it needs no marker).
  bool last_signaled() const {
    const uint64_t t = tail_.load(std::memory_order_relaxed);
    if (t == head_.load(std::memory_order_acquire)) return false;
    return (slots_[(t - 1) & mask_].flags & (kSignaled | kHidden)) != 0;
  }

  uint64_t tag_of(const SqEntry* e) const { return reinterpret_cast<uintptr_t>(e); }
  // The entry a completion's wr_id names, or nullptr when the wr_id is no tag of this
  // ring's in-flight entries (a receive completion, a request posted around the shim).
  // An untracked QP's ring (UD, XRC, raw packet) has no slots and names no tag, wr_id 0
  // included: its completions share CQs with tracked QPs' and pass through unmapped.
  SqEntry* entry_of_tag(uint64_t wr_id) const {
    if (!slots_) return nullptr;
    const uintptr_t base = reinterpret_cast<uintptr_t>(slots_.get());
    if (wr_id < base || wr_id >= base + capacity() * sizeof(SqEntry)) return nullptr;
    if ((wr_id - base) % sizeof(SqEntry) != 0) return nullptr;
    SqEntry* e = &slots_[(wr_id - base) / sizeof(SqEntry)];
    const uint64_t h = head_.load(std::memory_order_relaxed);
    if (e->seq < h || e->seq >= tail_.load(std::memory_order_acquire)) return nullptr;
    return e;
  }

  // Consumer side: `e` completed, and with it every earlier entry.
  void retire_through(const SqEntry* e) { head_.store(e->seq + 1, std::memory_order_release); }
  // Consumer side, with the producer excluded too: forget every entry (the QP was reset;
  // the provider discarded its requests).
  void clear() { head_.store(tail_.load(std::memory_order_relaxed), std::memory_order_release); }

 private:
  std::unique_ptr<SqEntry[]> slots_;
  uint32_t mask_ = 0;
  alignas(64) std::atomic<uint64_t> tail_{0};
  alignas(64) std::atomic<uint64_t> head_{0};
};

}  // namespace unload::rt
