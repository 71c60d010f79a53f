// The direct path: the fence, the kmod's copy, the completion, and the markers.
#include "direct.hpp"

#include "busy.hpp"
#include "cq_ex.hpp"
#include "hidden.hpp"
#include "kmod.hpp"
#include "learn.hpp"
#include "mapped.hpp"
#include "merge.hpp"
#include "registry.hpp"
#include "stats.hpp"
#include "tunables.hpp"
#include "unload.h"

#include <cerrno>

namespace unload::rt {

namespace {

// A fence waits at most this long without progress, and this long in all: past it the
// write takes the NIC, so ibv_post_send returns in bounded time whatever the QP waits on
// (a SEND on RNR before a receive this thread posts later, a QP reset under us).
constexpr uint64_t kFenceIdleNs = 50'000'000;
constexpr uint64_t kFenceTotalNs = 500'000'000;

// Posts the shim's own signaled zero-length RDMA WRITE on the QP, to a target the program
// itself named (valid whatever the responder checks). It places nothing and consumes
// nothing at the peer; its completion is never shown. Inside q's post gate. 0 or -errno.
int post_marker(QpRec* q, uint32_t rkey, uint64_t remote_addr, const CarriedSample* s = nullptr) {
  mark_tracked(q);
  SqRing& ring = q->sq.ring;
  const uint64_t tail = ring.tail();
  SqEntry* e = ring.reserve(tail);
  if (!e) return -ENOMEM;
  e->user_wr_id = 0;
  // A carried sample is the write's, learnt when the marker completes (merge_entry): its
  // decision's time, its features, and the CPU its copy took as the post's.
  e->post_ns = s ? s->t0 : 0;
  e->post_call_ns = s ? s->cpu_ns : 0;
  e->remote_addr = remote_addr;
  e->stage_mark = q->sq.stage.tail;
  e->length = s ? s->length : 0;
  e->rkey = rkey;
  e->sge_count = s ? static_cast<uint16_t>(s->sge_count) : 0;
  e->path = s ? static_cast<uint8_t>(s->path) : 0;
  e->flags = kHidden | kMarker;
  ibv_send_wr w{}, *bad = nullptr;
  w.wr_id = ring.tag_of(e);
  w.opcode = IBV_WR_RDMA_WRITE;
  w.send_flags = IBV_SEND_SIGNALED;
  w.wr.rdma.rkey = rkey;
  w.wr.rdma.remote_addr = remote_addr;
  ring.publish(tail + 1);
  busy_raise(q);
  const int rc = q->c->provider.post_send(q->qp, &w, &bad);
  if (rc)
    ring.rollback(tail);
  else
    note_completing(q, tail);
  return rc ? -rc : 0;
}

}  // namespace

Why direct_blocker(QpRec* q, const Tunables& t) {
  if (q->qp->qp_type != IBV_QPT_RC) return Why::not_rc;
  if (!t.enabled || t.direct_max == 0) return Why::path_off;
  if (!kmod_present()) return Why::no_module;
  if (t.mode == static_cast<uint32_t>(policy::Mode::offload)) return Why::policy;
  // A registration of an earlier session (the parent's, in a forked child) is not this one's.
  if (!q->peer.registered || q->peer.session != g_kmod.session) return Why::unregistered;
  PeerLink& p = q->peer;
  if (p.flags & UNLOAD_PEER_POISONED)
    return Why::poisoned;  // a request of the pair failed a check: never again
  if (!(p.flags & UNLOAD_PEER_PAIRED)) {
    if (!(p.flags & UNLOAD_PEER_LOCAL)) return Why::remote_peer;
    if (--p.countdown != 0) return Why::unpaired;
    p.backoff = p.backoff < (1u << 16) ? p.backoff * 2 : p.backoff;
    p.countdown = p.backoff;
    uint32_t flags = 0, handle = 0, slot = 0;
    if (kmod_reg_qp(q->qp->context, q->qp_num, &flags, &handle, &slot) == 0) {
      p.flags = flags;
      p.handle = handle;
      busy_attach(q, slot);
    }
    if (p.flags & UNLOAD_PEER_POISONED) return Why::poisoned;
    if (!(p.flags & UNLOAD_PEER_PAIRED)) return Why::unpaired;
  }
  if (q->failed.load(std::memory_order_relaxed)) return Why::qp_error;
  if (q->sq.ring.head() < q->peer.stuck_below) return Why::queue;
  const CqRec* c = q->scq;
  return c && (!c->cqx || cqx_can_synthesise(c)) ? Why::none : Why::cq;
}

namespace {

// One round of the fence's wait: polls the send CQ through its gate (a program thread
// polling it meanwhile makes the same progress). Returns whether anything completed.
bool fence_poll(CqRec* c) {
  GateScope g(c->gate);
  return poll_provider_into_pending(c) > 0;
}

}  // namespace

// The ordering rule: a direct write is placed only after every earlier request of its QP
// executed at the responder. RC completes a QP's requests in order, and a request's
// completion means the responder executed it (the ACK follows placement; reads and
// atomics completed too), so it suffices that the ring is empty. When the newest request
// is unsignaled no completion would say so: a marker is posted behind it. IBV_SEND_FENCE
// asks for less (earlier reads and atomics only), so a direct write always honours it.
// Requests posted around the ring (`untracked`) have no entries: a marker stands for them.
// Plain writes (post.cpp) are signaled and their completions counted: the fence waits for
// the count, with no marker.
// docs/design.md, "Ordering", says what "executed" assumes on NICs with relaxed ordering.
//
// Inside q's post gate. 0 when the write may be placed now; else -errno: no room for a
// marker, an extended CQ with requests in flight, an earlier request failed, or the wait
// did not finish promptly.
int fence_wait(QpRec* q, const WriteRequest& r, bool* waited) {
  SendQueue& sq = q->sq;
  SqRing& ring = sq.ring;
  const bool untracked = sq.untracked.load(std::memory_order_relaxed);
  CqRec* c = q->scq;
  if (c->cqx && ring.in_flight() != 0) return -EBUSY;
  // With the ring empty the newest request is a plain write (signaled) unless nothing is
  // in flight at all, which the caller's fast path already passed.
  const bool marker = untracked || (ring.in_flight() != 0 ? !ring.last_signaled() : plain_idle(sq));
  if (marker) {
    if (int rc = post_marker(q, r.rkey, r.remote_addr)) return rc;
    passing_end(q);
    sq.untracked.store(false, std::memory_order_relaxed);
  }
  if (c->cqx) return -EBUSY;  // the marker's completion, polled by the program, clears the way
  const uint64_t start = now_ns();
  uint64_t last_progress = start;
  // Behind a marker only the ring is waited for: the plain count may lag for good where a
  // settled QP's completions passed a CQ straight through (poll.cpp).
  while (ring.in_flight() != 0 || (!marker && !plain_idle(sq))) {
    const uint64_t now = now_ns();
    if (fence_poll(c)) {
      last_progress = now;
    } else if (now - last_progress > kFenceIdleNs || now - start > kFenceTotalNs) {
      q->peer.stuck_below = ring.tail();  // no direct until these are done
      q->express.disarm();                // which it does not check
      // Plain writes whose completions were not seen: the next fence's marker stands for them.
      if (!plain_idle(sq)) sq.untracked.store(true, std::memory_order_relaxed);
      return -ETIMEDOUT;
    }
  }
  // Behind a marker everything before it is done, whatever the count saw: requests around
  // the ring count as plain completions too. The plain writes are the poster's (this gate).
  if (marker) sq.plain_done.store(sq.plain_posted.load(std::memory_order_relaxed), std::memory_order_release);
  if (q->failed.load(std::memory_order_acquire)) return -EIO;
  busy_settle(q);  // a poller that retired the marker may have seen `untracked` still set
  count_fence();
  *waited = true;
  return 0;
}

Why fence_why(int rc) {
  return rc == -ETIMEDOUT ? Why::fence
         : rc == -EBUSY   ? Why::queue
         : rc == -EIO     ? Why::qp_error
                          : Why::no_room;
}

// The rest of wake_after_queueing, with the fence behind it: the channel armed, or a sample
// to learn. A Dekker pair with unload_cq_req_notify: it arms, then (fence) looks at the
// queue; we queued, then (fence) look at `armed`; one marker per arming suffices, an
// arming fires once.
void wake_armed(QpRec* q, const WriteRequest& last, const CarriedSample* s) {
  CqRec* c = q->scq;
  if (c->cq->channel && c->armed.load(std::memory_order_relaxed) && c->armed.exchange(false)) {
    if (post_marker(q, last.rkey, last.remote_addr, s) == 0) return;
    c->armed.store(true);
  }
  if (s) observe_direct(q, s->path, last, s->cpu_ns);  // no marker: the program can see it now
}

bool carries_sample(const QpRec* q, const WriteRequest& r, bool timed) {
  return timed && r.signaled && q->scq->cq->channel && q->scq->armed.load(std::memory_order_relaxed);
}

namespace {

// When a run of direct writes was fenced and submitted, and its submission ended: read only
// when a write of it is timed.
struct RunClock {
  bool timed;
  uint64_t fenced_ns;  // the fence waited: ended then (0: it did not)
  uint64_t submit_ns;
  uint64_t end_ns;
};

// A timed write's cost, write i of a submission of m: its share of the routing from its
// decision to the submission (done for it and the m - i - 1 writes after it) and 1/m of the
// submission. Charged whole, each write of a posted list of 8 cost 8 writes' copies, which
// emptied the CPU budget and made direct look dearer than the NIC (ib_write_bw -l 8 went
// 1 % direct on 6.12). It runs from the fence's end when the fence waited: the policy weighs
// the fence itself (about one NIC write, policy/README.md), and a sample behind a stream's
// NIC requests would otherwise charge direct with the whole stream's drain.
uint64_t share_of_run(uint64_t t0, const RunClock& clk, int i, int m) {
  const uint64_t from = clk.fenced_ns > t0 ? clk.fenced_ns : t0;
  const uint64_t routing = clk.submit_ns > from ? (clk.submit_ns - from) / static_cast<uint64_t>(m - i) : 0;
  return routing + (clk.end_ns - clk.submit_ns) / static_cast<uint64_t>(m);
}

// A placed write's bookkeeping: the policy (`cost_ns` on path `p`, when it is timed), the
// marker target, its completion in `ticket` (claimed when signaled). Inlined in the
// module's and the mapped path's loops and the express lane: as a call it cost a small
// write a sixth of what its whole submission costs the shim. The caller counts it
// (count_writes, count_mapped_write).
[[gnu::always_inline]] inline void finish_direct(QpRec* q, Path p, const WriteRequest& r, uint64_t wr_id,
                                                 bool timed, uint64_t ticket, uint64_t cost_ns) {
  if (timed) observe_direct(q, p, r, cost_ns);
  q->peer.last_rkey = r.rkey;
  q->peer.last_addr = r.remote_addr;
  q->peer.has_last = true;
  if (!r.signaled) return;
  // Made in its cell: built on the stack and copied, it was a fifth of an express write.
  ibv_wc& wc = q->scq->pending.cell(ticket);
  wc = placed_write_wc(wr_id, r.length, q->qp_num);
  q->scq->pending.publish(ticket);
}

// build_request for a write of one buffer the module reads where the program put it: most
// of them, inlined in the loop (the general one costs a call and its segment list).
bool build_one(const QpRec* q, const DirectWrite& w, unload_direct_req& req, unload_iov* iov) {
  const WriteRequest& r = w.rt.req;
  if (r.sge_count != 1 || r.user_inline || w.rt.translated || g_kmod.max_iov == 0) [[unlikely]]
    return build_request(q, w, req, iov);
  request_head(q, r, req);
  req.iov = w.sg[0].addr;
  req.lkey = w.sg[0].lkey;
  return true;
}

// After the fence: the writes w[0..n) with one submission. Returns how many were placed;
// *why for the first one not placed. Nothing after it was placed.
int run_direct(QpRec* q, const DirectWrite* w, int n, Why* why, RunClock& clk) {
  CqRec* c = q->scq;
  unload_direct_req reqs[kDirectRunMax];
  uint64_t tickets[kDirectRunMax];  // set per write: zeroing all of them is a `rep stos`
  unload_iov iov[UNLOAD_MAX_IOV];
  int m = 0;
  // Each completion's cell first: a full queue sends the write to the NIC, never loses it.
  for (; m < n; ++m) {
    tickets[m] = 0;
    if (!build_one(q, w[m], reqs[m], iov)) {
      *why = Why::refused;
      break;
    }
    if (w[m].rt.req.signaled && !c->pending.claim(tickets[m])) {
      *why = Why::no_room;
      break;
    }
  }
  if (clk.timed) clk.submit_ns = now_ns();
  const int done = m ? kmod_submit(reqs, static_cast<uint32_t>(m)) : 0;
  if (clk.timed) clk.end_ns = now_ns();
  int placed = 0;
  bool signaled = false;
  CarriedSample carried{};
  for (; placed < done && reqs[placed].result == 0; ++placed) {
    const uint64_t t0 = w[placed].rt.t0;
    // Off the mapped path it prefers: the policy's reason, or the mapping's failure when
    // it was routed there.
    count_why(route_why(w[placed].rt, Path::unload_direct, Why::no_mapping));
    count_writes(Path::unload_direct, 1, w[placed].rt.req.length);
    const uint64_t cost = t0 ? share_of_run(t0, clk, placed, m) : 0;
    // Learnt as the path it was routed: a mapped write the module placed is what taking
    // the mapped path cost, and a class whose targets cannot be mapped learns so.
    if (placed == m - 1 && carries_sample(q, w[placed].rt.req, t0 != 0))
      carried = {w[placed].rt.path, t0, static_cast<uint32_t>(cost), w[placed].rt.req.length, w[placed].rt.req.sge_count};
    finish_direct(q, w[placed].rt.path, w[placed].rt.req, w[placed].wr_id, t0 != 0 && carried.t0 == 0,
                  tickets[placed], cost);
    signaled |= w[placed].rt.req.signaled;
  }
  for (int i = placed; i < m; ++i)
    if (w[i].rt.req.signaled) c->pending.cancel(tickets[i]);
  if (placed < m) {
    *why = Why::refused;
    // The next write asks the module what became of the pair (poisoned for good after a
    // violation, or not paired any more) instead of trying again blind.
    q->peer.flags &= ~UNLOAD_PEER_PAIRED;
    q->peer.countdown = 1;
    q->express.disarm();  // which does not check the flags
  }
  if (signaled) wake_after_queueing(q, w[placed - 1].rt.req, carried.t0 ? &carried : nullptr);
  return placed;
}

// The mapped engine's run: w[0..) placed by this process's stores while each write has a
// valid mapping; returns how many (the module's submission takes the rest, in order). A
// timed write is charged its share of the routing, as share_of_run does, and its own copy:
// charged from its decision, the first write of a list of 8 paid the other 7's routing and
// the last the others' copies (ib_write_bw -l 8 went 60 % direct in the default mode).
int run_mapped(QpRec* q, const DirectWrite* w, int n, const RunClock& clk) {
  CqRec* c = q->scq;
  const uint64_t run_ns = clk.timed ? now_ns() : 0;
  int placed = 0;
  bool signaled = false;
  CarriedSample carried{};
  for (; placed < n; ++placed) {
    const DirectWrite& x = w[placed];
    uint64_t ticket = 0;
    if (x.rt.req.signaled && !c->pending.claim(ticket)) break;
    uint64_t copy_ns = 0;
    if (!place_mapped(q, x.rt, x.sg, x.rt.t0 ? &copy_ns : nullptr)) {
      if (x.rt.req.signaled) c->pending.cancel(ticket);
      break;
    }
    uint64_t cost = 0;
    if (x.rt.t0) {
      const uint64_t from = clk.fenced_ns > x.rt.t0 ? clk.fenced_ns : x.rt.t0;
      const uint64_t routing = run_ns > from ? (run_ns - from) / static_cast<uint64_t>(n - placed) : 0;
      cost = routing + (now_ns() - copy_ns);
    }
    count_mapped_write(x.rt.req.length, false);
    if (placed == n - 1 && carries_sample(q, x.rt.req, x.rt.t0 != 0))
      carried = {Path::unload_mapped, x.rt.t0, static_cast<uint32_t>(cost), x.rt.req.length, x.rt.req.sge_count};
    finish_direct(q, Path::unload_mapped, x.rt.req, x.wr_id, x.rt.t0 != 0 && carried.t0 == 0, ticket, cost);
    signaled |= x.rt.req.signaled;
  }
  if (signaled) wake_after_queueing(q, w[placed - 1].rt.req, carried.t0 ? &carried : nullptr);
  return placed;
}

}  // namespace

namespace {

// place_mapped_one's finish for a timed write: run_mapped's charge for a run of one with
// no fence (the routing and the copy), learnt now or carried by the wake-up's marker.
[[gnu::noinline]] void finish_mapped_timed(QpRec* q, const Route& rt, uint64_t wr_id, uint64_t ticket) {
  const uint64_t cost = now_ns() - rt.t0;
  const bool carry = carries_sample(q, rt.req, true);
  finish_direct(q, Path::unload_mapped, rt.req, wr_id, !carry, ticket, cost);
  if (rt.req.signaled) {
    const CarriedSample s{Path::unload_mapped, rt.t0, static_cast<uint32_t>(cost), rt.req.length,
                          rt.req.sge_count};
    wake_after_queueing(q, rt.req, carry ? &s : nullptr);
  }
}

}  // namespace

bool place_mapped_one(QpRec* q, const ibv_sge* sg, uint64_t wr_id, const Route& rt, uint32_t target) {
  CqRec* c = q->scq;
  const WriteRequest& r = rt.req;
  uint64_t ticket = 0;
  // The completion's cell first: a full queue sends the write on to the module's copy.
  if (r.signaled && !c->pending.claim(ticket)) return false;
  if (!place_mapped_at(q, target, r.remote_addr, reinterpret_cast<const void*>(sg[0].addr), r.length)) {
    if (r.signaled) c->pending.cancel(ticket);
    return false;
  }
  count_mapped_write(r.length, true);
  if (rt.t0) [[unlikely]] {
    finish_mapped_timed(q, rt, wr_id, ticket);
    return true;
  }
  finish_direct(q, Path::unload_mapped, r, wr_id, false, ticket, 0);
  if (r.signaled) wake_after_queueing(q, r);
  return true;
}

int place_direct(QpRec* q, const DirectWrite* w, int n, Why* why) {
  bool waited = false;
  if (const int rc = fence_before_direct(q, w[0].rt.req, &waited)) {
    *why = fence_why(rc);
    return 0;
  }
  RunClock clk{};
  for (int i = 0; i < n && !clk.timed; ++i) clk.timed = w[i].rt.t0 != 0;
  if (clk.timed && waited) clk.fenced_ns = now_ns();
  // A run is of one path (post_tracked): the mapped path's writes its engine does not
  // place (no mapping, a busy responder) go on to the module's copy, in order.
  const int mapped = w[0].rt.path == Path::unload_mapped ? run_mapped(q, w, n, clk) : 0;
  if (mapped == n) return n;
  return mapped + run_direct(q, w + mapped, n - mapped, why, clk);
}

// Whether a request posted on `q` now will complete (and so fire the CQ's event): its send
// queue runs (RTS, SQD) or flushes (ERR); in RESET, INIT or RTR it would wait for ever.
bool marker_completes(const QpRec* q) {
  const uint8_t st = q->state.load(std::memory_order_acquire);
  return st == IBV_QPS_RTS || st == IBV_QPS_SQD || st == IBV_QPS_ERR;
}

// A marker goes only where it completes: on a QP in RESET or INIT it would never, and the
// arming it stands for would wait for ever. A queued completion is a direct write's (its QP
// was at RTS) or one drained at a destroy or RESET, which a purging provider drops and a
// keeping one would have in its CQ before the arming (no event for it there either).
void wake_channel_now(CqRec* c) {
  if (!c->armed.exchange(false)) return;
  std::lock_guard<std::mutex> keep(c->send_qps.mu);  // no QP of the list is destroyed meanwhile
  const SendQpList::Array* a = c->send_qps.list.load(std::memory_order_acquire);
  for (uint32_t i = 0; a && i < a->n; ++i) {
    QpRec* q = a->qps[i];
    GateScope g(q->sq.gate);
    if (q->peer.has_last && marker_completes(q) && post_marker(q, q->peer.last_rkey, q->peer.last_addr) == 0)
      return;
  }
  c->armed.store(true);
}

}  // namespace unload::rt
