// The completion merger (docs/design.md, "Completions"): the one place where a provider
// completion of a shim-tracked request is mapped back to the program's, and where the
// shim's own are hidden. ibv_poll_cq (poll.cpp), ibv_cq_ex polling (cq_ex.cpp) and the
// fence (direct.cpp) all go through it, inside the CQ's gate.
#pragma once

#include "records.hpp"

namespace unload::rt {

// The ring entry a completion's wr_id tags, and its QP; nullptr when it is no tag (a
// receive, or a request posted around the shim). `qpn` may be 0 when the provider does
// not say (then the CQ's send QPs are searched).
SqEntry* tagged_entry(CqRec* c, uint32_t qpn, uint64_t wr_id, QpRec** q);

// Entry `e` of `q` completed with `*status`: frees the staging bytes through it, lets adaptive
// mode learn the path's cost and records a failure (the NIC flushes what follows); the
// caller retires it and every earlier entry (ring.retire_through) once the completion is
// where the program will find it. Returns whether the program may see the completion;
// *wr_id gets the program's wr_id. A hidden request that failed first (RETRY_EXC_ERR, a NAK) leaves
// its status to the QP's next completion the program sees, which the NIC flushed: *status
// becomes the cause, as the program's own request would have met it.
bool merge_entry(QpRec* q, SqEntry* e, ibv_wc_status* status, uint64_t* wr_id);

// Hands completions to the program's array while there is room and nothing is queued
// (or being queued) before them; queues the rest on the CQ, in order. The caller polls the provider for no
// more than the queue's room (pending.room()), so the queue never overflows.
struct Emitter {
  CqRec* cq;
  ibv_wc* out;
  int n;
  int o;
  int limit;  // positions below limit are free to write
  // A QP settled on the NIC whose ring a completion here emptied: it may let the CQ go
  // (poll.cpp, settled_let_go).
  QpRec* drained = nullptr;
  void emit(const ibv_wc& wc) {
    if (o < limit && o < n && cq->pending.idle()) {
      if (&out[o] != &wc) copy_wc(out[o], wc);  // the poll's own array, merged in place: there already
      ++o;
      return;
    }
    cq->pending.push(wc);
  }
};

// One ibv_wc from the provider: mapped in place, emitted if the program may see it.
void merge_wc(CqRec* c, Emitter& em, ibv_wc& wc);

// The r completions at wc, just polled from the provider, when none needs mapping: nothing
// in the pending queue before them, no error, and the send completions all of one QP with
// no ring entry in flight. Then merging each would only count that QP's plain completions,
// which this does at once; returns whether it did (false: merge them one by one). Inside
// the CQ's gate, after the poll.
bool merge_quiet(CqRec* c, const ibv_wc* wc, int r);

// Polls the provider into the CQ's pending queue, merged, as far as the queue has room.
// Inside the CQ's gate. Returns how many the provider gave.
int poll_provider_into_pending(CqRec* c);

}  // namespace unload::rt
