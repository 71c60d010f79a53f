// Remote writes that do not wait (kmod/uapi/unload.h, UNLOAD_URING_REMOTE): the process's
// io_uring to the module, each QP's writes in flight on it, and their verdicts, merged in
// order with the NIC's completions (docs/design.md, "A remote write's walk").
//
// A posted write is read and checked by the module at submission and queued behind its
// QP's earlier ones; ibv_post_send returns then. Its verdict comes back as a CQE, reaped by
// whoever comes first: a poll of any CQ, or a poster that must wait for it. A placed write
// fills its completion's cell; one not placed ends its QP's epoch, and the module cancels
// the rest of the epoch unsent, so the shim hands them all to the NIC in order, under the
// QP's post gate, before anything else is posted on it.
#pragma once

#include "request.hpp"

namespace unload::rt {

struct RemoteQueue;

// Whether w may go remote without waiting: not turned off (UNLOAD_REMOTE_ASYNC=0), the QP's
// send CQ has no completion channel (whose event the shim raises only from the posting
// thread) and the request's copy fits an entry (a few SGEs; inline data the NIC may need
// again).
bool remote_async_fits(const QpRec* q, const DirectWrite& w);

// Submits w[0..n) to the module with one io_uring_enter, each behind the QP's writes in
// flight; inside q's post gate, after the fence. Returns how many it took (all, unless the
// CQ's pending queue or the QP's entries ran out: *why then says so, and the caller sends
// the rest to the NIC, which waits for these first).
int submit_remote_async(QpRec* q, const DirectWrite* w, int n, Why* why);

// How many remote writes q has in flight, or not placed and not yet given to the NIC: what
// the send queue must keep room for (the NIC may take them yet). Whether some were not placed.
uint32_t remote_in_flight(const QpRec* q);
bool remote_failed(const QpRec* q);
// Inline: every post asks, and a QP that never went remote has no queue.
inline bool remote_pending(const QpRec* q) {
  return q->rq.load(std::memory_order_acquire) && remote_in_flight(q) != 0;
}
inline uint32_t remote_in_flight_if_any(const QpRec* q) {
  return q->rq.load(std::memory_order_acquire) ? remote_in_flight(q) : 0;
}

// Waits for q's remote writes' verdicts and gives the ones not placed to the NIC, in
// order: what any other request of q needs before it is posted. Inside q's post gate.
void remote_settle(QpRec* q);
inline void remote_settle_if_pending(QpRec* q) {
  if (remote_pending(q)) remote_settle(q);
}
inline void remote_settle_if_failed(QpRec* q) {
  if (q->rq.load(std::memory_order_acquire) && remote_failed(q)) remote_settle(q);
}

// From ibv_poll_cq, no gate held: reaps the verdicts that are in, and gives a QP's failed
// writes to the NIC when its post gate is free. A load and a branch without remote writes.
extern std::atomic<uint64_t> g_remote_outstanding;
void remote_progress_slow();
inline bool remote_outstanding() {
  return g_remote_outstanding.load(std::memory_order_relaxed) != 0;
}
inline void remote_progress() {
  if (remote_outstanding()) remote_progress_slow();
}

// At q's destruction, its writes settled: frees its queue.
void remote_release(QpRec* q);

// In a forked child: lets go of the parent's ring, which nothing of the child may reach.
void remote_ring_leave_inherited();

// The NIC's outcome for a write to a peer that stopped answering (the module's -ECOMM):
// the write completes in `ticket` with IBV_WC_RETRY_EXC_ERR and the QP goes to ERR.
void fail_unanswered(QpRec* q, uint64_t wr_id, uint64_t ticket);

}  // namespace unload::rt
