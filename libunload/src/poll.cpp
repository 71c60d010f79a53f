// The completion merger behind ibv_poll_cq (ops.poll_cq): NIC completions mapped back to the
// program's requests, the shim's own hidden, the shim-made ones handed over in order.
#include "internal.hpp"

namespace unload::rt {

namespace {

struct PollSink {
  Emitter* em;
  QpRec* q;
  void retired(SqEntry& e) { stage_release(q, e); }
  void nic(SqEntry& e, ibv_wc& wc) {
    stage_release(q, e);
    wc.wr_id = e.user_wr_id;
    if (e.post_ns && wc.status == IBV_WC_SUCCESS && t_policy) {
      WriteRequest r;
      r.length = e.length;
      r.sge_count = e.sge_count;
      r.rkey = e.rkey;
      r.remote_addr = e.remote_addr;
      const policy::WriteFeatures f = features_of(q, r, PathSet::all(), false);
      t_policy->observe(static_cast<Path>(e.path), f, now_ns() - e.post_ns);
    }
    if ((e.flags & kMarker) || ((e.flags & kHidden) && wc.status == IBV_WC_SUCCESS)) return;
    em->emit(wc);
  }
  void cpu(SqEntry& e) {
    if ((e.flags & kSignaled) || e.status != IBV_WC_SUCCESS) em->emit(synth_wc(e, q->qp_num));
  }
};

}  // namespace

// Maps one NIC completion (in place) and emits what follows from it.
void merge_one(CqRec* c, Emitter& em, ibv_wc& wc) {
  QpRec* q = g_qps_by_num.find(qpn_key(c->c, wc.qp_num));
  SqEntry* e = q ? q->ring.entry_of_tag(wc.wr_id) : nullptr;
  if (!e) { em.emit(wc); return; }
  PollSink sink{&em, q};
  q->ring.on_nic_completion(e, wc, sink);
}

namespace {

// Merges the completions the provider just put in wc[got, got + r), in place and in order;
// returns how many the array holds now.
int merge_polled(CqRec* c, ibv_wc* wc, int n, int got, int r) {
  Emitter em{c, wc, n, got, got};
  for (int i = got; i < got + r; ++i) {
    ibv_wc cur = wc[i];
    em.limit = i + 1;
    merge_one(c, em, cur);
  }
  return em.o;
}

int poll_merge(CqRec* c, ibv_cq* cq, int n, ibv_wc* wc) {
  int got = c->pending.pop(wc, n);
  while (got < n) {
    const int r = c->c->poll_cq(cq, n - got, wc + got);
    if (r < 0) return got ? got : r;
    if (r == 0) break;
    const int before = got;
    got = merge_polled(c, wc, n, got, r);
    if (!c->pending.empty()) {  // order put some behind queued ones: hand those over first
      got += c->pending.pop(wc + got, n - got);
      break;
    }
    if (r < n - before) break;  // polled everything there was
  }
  return got;
}

}  // namespace

// Polling is serialised per CQ by its gate (see poll_gate.hpp: free for the usual single
// poller): the merger pops send-queue rings, which have one consumer at a time, and several
// threads may poll one CQ, or a fence poll it from the posting thread.
int hook_poll_cq(ibv_cq* cq, int n, ibv_wc* wc) {
  CqRec* c = g_cqs.find(key_of(cq));
  if (__builtin_expect(!c, 0)) return context_find(cq->context)->poll_cq(cq, n, wc);
  const bool how = c->gate.enter(this_tid());
  int got;
  if (__builtin_expect(!c->tracked.load(std::memory_order_acquire), 0)) {
    // Nothing of the shim's reached this CQ yet (offload from the start): the provider's
    // completions are the program's as they are. Looked at again after the poll: a request
    // the shim tracked may have been posted meanwhile (its flag store precedes the
    // provider's release of the request), and its completion polled here.
    got = c->c->poll_cq(cq, n, wc);
    if (got > 0 && c->tracked.load(std::memory_order_acquire)) {
      got = merge_polled(c, wc, n, 0, got);
      if (!c->pending.empty()) got += c->pending.pop(wc + got, n - got);
    }
  } else {
    got = poll_merge(c, cq, n, wc);
  }
  c->gate.leave(how);
  return got;
}

// ibv_req_notify_cq (ops.req_notify_cq). `armed` is set only once the provider armed the
// CQ, so a marker posted after wake_channel saw it produces a CQE the arming covers; the
// fence pairs with wake_channel's (see there) before the program's next poll.
int hook_req_notify_cq(ibv_cq* cq, int solicited_only) {
  CqRec* c = g_cqs.find(key_of(cq));
  if (__builtin_expect(!c, 0)) return context_find(cq->context)->req_notify_cq(cq, solicited_only);
  const int rc = c->c->req_notify_cq(cq, solicited_only);
  // Solicited-only: send completions fire no event without the shim either.
  if (rc == 0 && !solicited_only) c->armed.store(true, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return rc;
}

}  // namespace unload::rt
