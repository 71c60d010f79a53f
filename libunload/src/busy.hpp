// A QP's busy byte: the responder's half of the mapped protocol (kmod/uapi/unload.h, "The
// busy page"). rxe moves a QP to ERR by itself when a request of its own fails, and says so
// only in that request's completion; so a peer writes through a mapping of this QP's
// regions only while the byte says no NIC request of this QP is in flight or failed.
//
// Memory ordering. A poster publishes its ring entry, then (seq_cst fence) reads the byte
// and raises it if it is 0, all before the provider sees the request. A settler, which
// found the queue quiet, stores 0, then (seq_cst) looks at the queue again and raises the
// byte back if a request came meanwhile. Either the settler's second look sees the
// poster's entry, or the poster's read comes after the settler's 0 and raises it: the byte
// is never 0 with a request in flight for longer than a settler's two looks.
#pragma once

#include <atomic>
#include <cstdint>

#include "kmod.hpp"
#include "records.hpp"

namespace unload::rt {

// q's byte, or nullptr: not registered in this session (or none: an older module), or a
// QP whose peer is on another host. Only a pair on this host reads a QP's byte (the module
// pairs QPs of this host, and a mapping is of a paired responder's regions); left as the
// module raised it at registration, it says busy, which costs a pair nothing it can have.
// A QP whose peer moves here is registered anew (its byte raised again) before it pairs.
inline uint8_t* busy_byte(const QpRec* q) {
  if (!q->peer.on_this_host()) return nullptr;
  const uint64_t v = q->peer.busy.load(std::memory_order_acquire);
  if (!v || (v >> 32) != g_kmod.session || !g_kmod.busy) return nullptr;
  return g_kmod.busy + (static_cast<uint32_t>(v) - 1);
}

// Whether q's send queue may hold a NIC request, or had one fail, or q is being modified
// out of what it takes as a responder (objects.cpp).
inline bool busy_now(const QpRec* q) {
  return !send_queue_quiet(q->sq) || q->failed.load(std::memory_order_relaxed) ||
         q->narrowing.load(std::memory_order_seq_cst) != 0;
}

// Before a NIC request of q reaches the provider (its ring entry published, its plain count
// raised, or `untracked` or `failed` set).
inline void busy_raise(QpRec* q) {
  uint8_t* b = busy_byte(q);
  if (!b) return;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (__atomic_load_n(b, __ATOMIC_RELAXED) == 0) __atomic_store_n(b, 1, __ATOMIC_SEQ_CST);
}

// After requests of q completed (or the QP was registered, which raises the byte): 0 when
// nothing is in flight and nothing failed.
inline void busy_settle(QpRec* q) {
  uint8_t* b = busy_byte(q);
  if (!b || __atomic_load_n(b, __ATOMIC_RELAXED) == 0 || busy_now(q)) return;
  __atomic_store_n(b, 0, __ATOMIC_SEQ_CST);
  if (busy_now(q)) __atomic_store_n(b, 1, __ATOMIC_SEQ_CST);
}

// q was registered (again) in this session, its byte at `slot` (raised by the module).
inline void busy_attach(QpRec* q, uint32_t slot) {
  q->peer.busy.store(static_cast<uint64_t>(g_kmod.session) << 32 | (slot + 1), std::memory_order_release);
  busy_settle(q);
}

// Before q's registration goes: its byte may be another QP's next.
inline void busy_detach(QpRec* q) { q->peer.busy.store(0, std::memory_order_release); }

}  // namespace unload::rt
