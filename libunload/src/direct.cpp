// The direct path (unload.direct): the kmod places a write at a paired local peer; the fence
// that orders it behind its QP's NIC requests, and its completion.
#include "internal.hpp"

#include "kmod.hpp"
#include "unload.h"

#include <cerrno>
#include <cstdlib>

namespace unload::rt {

// Whether writes on this QP may go direct at all: a peer the kmod paired, and a send CQ
// that can hand over completions the shim makes. Ordering behind the QP's NIC requests is the
// fence's business (fence_before_direct), wake-ups on a completion channel the marker's
// (wake_channel).
bool direct_possible(QpRec* q, const Tunables& t) {
  if (!kmod_present() || !t.enabled || t.direct_max == 0 || !q->kmod_registered) return false;
  if (t.mode == static_cast<uint32_t>(Mode::offload)) return false;
  if (!(q->peer_flags & UNLOAD_PEER_PAIRED)) {
    // A local peer may register later (its process is still connecting): ask again,
    // less and less often.
    if (!(q->peer_flags & UNLOAD_PEER_LOCAL) || --q->reg_countdown != 0) return false;
    q->reg_backoff = q->reg_backoff < (1u << 16) ? q->reg_backoff * 2 : q->reg_backoff;
    q->reg_countdown = q->reg_backoff;
    uint32_t flags = 0, handle = 0;
    if (kmod_reg_qp(q->qp->context, q->qp_num, &flags, &handle) == 0) {
      q->peer_flags = flags;
      q->kmod_qp_handle = handle;
    }
    if (!(q->peer_flags & UNLOAD_PEER_PAIRED)) return false;
  }
  const ibv_cq* scq = q->qp->send_cq;
  if (!scq) return false;
  const CqRec* c = g_cqs.find(key_of(scq));
  return c && (!c->cqx || c->cqx_direct);
}

namespace {

// Posts the shim's own signaled zero-length RDMA WRITE on the QP (to a target the
// program's next write names, so it is valid whatever the responder checks). It places
// nothing and consumes nothing at the peer; its completion is never shown. 0 or -errno.
int post_marker(QpRec* q, uint32_t rkey, uint64_t remote_addr) {
  mark_tracked(q);
  const uint64_t tail = q->ring.tail();
  SqEntry* e = q->ring.reserve(tail);
  if (!e) return -ENOMEM;
  WriteRequest r;
  r.signaled = true;
  fill_entry(e, r, 0);
  e->flags = kHidden | kMarker;
  ibv_send_wr w{}, *bad = nullptr;
  w.wr_id = q->ring.tag_of(e);
  w.opcode = IBV_WR_RDMA_WRITE;
  w.send_flags = IBV_SEND_SIGNALED;
  w.wr.rdma.rkey = rkey;
  w.wr.rdma.remote_addr = remote_addr;
  q->ring.publish(tail + 1, 1);
  const int rc = q->c->post_send(q->qp, &w, &bad);
  if (rc) q->ring.rollback(tail, 1);
  return rc ? -rc : 0;
}

// One round of the fence's wait: polls the send CQ itself, through its gate (a program
// thread polling it at the same time makes the same progress). Every completion met goes
// through the merger into the CQ's pending queue, in order, for the program's next poll.
void fence_poll(CqRec* c) {
  const bool how = c->gate.enter(this_tid());
  ibv_wc wc[16];
  const int r = c->c->poll_cq(c->cq, 16, wc);
  Emitter em{c, nullptr, 0, 0, 0};
  for (int i = 0; i < r; ++i) merge_one(c, em, wc[i]);
  c->gate.leave(how);
}

}  // namespace

// DESIGN.md 3, "Ordering": a direct write is placed only after every earlier request of
// its QP executed at the responder. RC completes a QP's requests in order, and a request's
// completion means the responder executed it (the ACK comes after placement; reads and
// atomics completed too), so it suffices that every ring entry of the QP completed. When
// the newest one is unsignaled no completion would say so: a marker is posted behind it.
// Then the CQ is polled until the ring is empty. IBV_SEND_FENCE asks for less than this
// (earlier reads and atomics only), so a direct write always honours it. 0 when the write
// may go direct now; -errno when not (no room for the marker): the caller sends it to the
// NIC, which orders it by itself.
//
// An ibv_cq_ex send CQ is not polled here: what the fence met would have to be handed over
// later with every field the program asked for, timestamps included. A write behind
// requests still in flight on such a QP goes to the NIC.
//
// Requests posted around the ring (`untracked`) have no entries to wait for: a marker
// behind them stands for them (RC completes in order), then the ring is waited for as usual.
int fence_before_direct(QpRec* q, const WriteRequest& r) {
  if (q->ring.in_flight() == 0 && !q->untracked) return 0;
  CqRec* c = g_cqs.find(key_of(q->qp->send_cq));
  if (c->cqx && q->ring.in_flight() != 0) return -EBUSY;
  if (q->untracked || !q->ring.last_signaled()) {
    if (int rc = post_marker(q, r.rkey, r.remote_addr)) return rc;
    q->untracked = false;
  }
  if (c->cqx) return -EBUSY;  // the marker's completion, polled by the program, clears the way
  while (q->ring.in_flight() != 0) fence_poll(c);
  count_fence();
  return 0;
}

namespace {

// A shim-made completion was queued on `c`: when the program armed the CQ's completion
// channel, make the real CQ event fire with a marker on the QP, whose completion the
// merger hides. Protocol with hook_req_notify_cq (a Dekker pair): the program arms, then
// (fence) polls, which drains the pending queue; we queue, then (fence) look at `armed`.
// Either its poll sees our completion or we see it armed; a marker per arming suffices
// because an arming fires one event at most.
void wake_channel(QpRec* q, CqRec* c, const WriteRequest& r) {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (!c->armed.load(std::memory_order_relaxed) || !c->armed.exchange(false)) return;
  // After the fence of this write the send queue is empty, so the marker has room.
  if (post_marker(q, r.rkey, r.remote_addr) != 0) c->armed.store(true);
}

}  // namespace

// Runs one write on the direct path. 0 when placed (its completion queued if signaled),
// else non-zero: the caller sends it to the NIC, which reports whatever error it finds.
int run_direct(QpRec* q, const ibv_send_wr* w, const WriteRequest& r, uint64_t t0) {
  const int rc = kmod_direct(q->qp_num, q->kmod_qp_handle, r.rkey, r.remote_addr, w->sg_list, r.sge_count,
                             r.length);
  if (rc != 0) return rc;
  count_writes(Path::unload_direct, 1, r.length);
  if (t0 && t_policy) {  // adaptive: the write is complete now, fence included
    const policy::WriteFeatures f = features_of(q, r, PathSet::all(), false);
    t_policy->observe(Path::unload_direct, f, now_ns() - t0);
  }
  if (r.signaled) {
    ibv_wc wc{};
    wc.wr_id = w->wr_id;
    wc.status = IBV_WC_SUCCESS;
    wc.opcode = IBV_WC_RDMA_WRITE;
    wc.qp_num = q->qp_num;
    wc.byte_len = r.length;
    CqRec* c = g_cqs.find(key_of(q->qp->send_cq));
    // The queue holds twice the CQ's size; more would be an overrun of the CQ anyway.
    if (!c->pending.push(wc)) std::abort();
    if (c->cq->channel) wake_channel(q, c, r);
  }
  return 0;
}

}  // namespace unload::rt
