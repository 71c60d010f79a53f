// ibv_poll_cq: the provider's completions through the merger, the shim-made ones handed
// over in order; and the completion channel's arming.
#include "unload/runtime.h"

#include "direct.hpp"
#include "learn.hpp"
#include "merge.hpp"
#include "registry.hpp"
#include "remote_ring.hpp"
#include "route.hpp"

namespace unload::rt {

namespace {

// Merges the completions the provider just put in wc[got, got + r), in place and in order;
// returns how many the array holds now. Out of line: inlined, its frame made every empty
// poll save and restore registers it never used (a third of the shim's poll).
// *drained: a settled QP whose ring the merge emptied (Emitter::drained), if any and if
// `drained` is given.
[[gnu::noinline]] int merge_polled(CqRec* c, ibv_wc* wc, int n, int got, int r, QpRec** drained) {
  Emitter em{c, wc, n, got, got};
  for (int i = got; i < got + r; ++i) {
    em.limit = i + 1;
    merge_wc(c, em, wc[i]);  // mapped in place: an emit writes at or below i
  }
  if (em.drained && drained) *drained = em.drained;
  return em.o;
}

// How many the provider may give into wc[got, n): never more than the pending queue can
// take, where what the array has no room for goes.
int provider_want(CqRec* c, int n, int got) {
  const uint32_t room = c->pending.room();
  return n - got < static_cast<int>(room) ? n - got : static_cast<int>(room);
}

// The provider's completions merged into wc[got, n), `got` already popped from the queue
// and `r` of `want` just polled into wc + got; returns how many the array holds now.
[[gnu::always_inline]] inline int poll_merge_from(CqRec* c, int n, ibv_wc* wc, int got, int r, int want,
                                                  QpRec** drained) {
  for (;;) {
    if (r < 0) return got ? got : r;
    if (r == 0) break;
    if (merge_quiet(c, wc + got, r)) {  // the queue was idle: nothing to hand over first
      got += r;
    } else {
      got = merge_polled(c, wc, n, got, r, drained);
      if (!c->pending.empty()) {  // order put some behind queued ones: hand those over first
        got += c->pending.pop(wc + got, n - got);
        break;
      }
    }
    if (r < want || got >= n) break;  // polled everything there was, or the array is full
    want = provider_want(c, n, got);
    if (want <= 0) break;
    r = c->c->provider.poll_cq(c->cq, want, wc + got);
  }
  return got;
}

// The provider's completions merged into wc[got, n), `got` already popped from the
// queue; returns how many the array holds now.
int poll_merge_more(CqRec* c, int n, ibv_wc* wc, int got, QpRec** drained) {
  if (got >= n) return got;
  const int want = provider_want(c, n, got);
  if (want <= 0) return got;
  return poll_merge_from(c, n, wc, got, c->c->provider.poll_cq(c->cq, want, wc + got), want, drained);
}

// A QP settled on the NIC held its send CQ for its ring's entries (a consult's write,
// post.cpp, settle_again), and the poll just emptied the ring: the CQ is let go now, as
// its next post would (settled_release), so that polls pass through again without waiting
// a round of the program's QPs. By any poller, without q's post gate (entering it from
// another thread than the poster's would turn it shared for good): the hold is one word,
// which this and the post's own release clear once between them, and a post of q may have
// taken the CQ again meanwhile. Such a post cleared `settled` before the hold's
// read-modify-write (unsettle, cq_hold): ordered before the clear here, it is seen by the
// look after it, which holds the CQ again; ordered after, the post finds the CQ let go and
// counts its hold itself. A QP that settles again has its new entries in the ring before
// `settled` (released). No go-through can come between: that is this gate's. Inside c's gate.
[[gnu::noinline]] void settled_let_go(QpRec* q) {
  SendQueue& sq = q->sq;
  const auto let_go = [&sq] {
    return sq.settled.load(std::memory_order_acquire) && sq.ring.in_flight() == 0;
  };
  if (!let_go() || !cq_release(q)) return;
  if (!let_go()) cq_hold(q);  // its epoch is the one just kept: `untracked` left as it is
}

// Inside c's gate, after a merge, no QP holding c (each send QP on it settled on the NIC,
// nothing of the shim's in its ring): with nothing queued, polls pass through again until
// a tracked request is posted. Cleared, then looked at again: a QP that holds c counts
// itself before it looks at `tracked` (mark_tracked), so either the second look sees its
// count or its look sees the clear and sets `tracked` again (all seq_cst). Out of line: a
// poll of a held CQ pays only the test of `holders`.
[[gnu::noinline]] void cq_go_through(CqRec* c) {
  if (c->cqx || !c->pending.idle()) return;
  c->through_epoch.fetch_add(1, std::memory_order_seq_cst);  // first: cq_hold's look
  c->tracked.store(false, std::memory_order_seq_cst);
  if (c->holders.load(std::memory_order_seq_cst) != 0 || !c->pending.idle())
    c->tracked.store(true, std::memory_order_seq_cst);
  else
    ++thread_stats().cq_through;
}

}  // namespace

}  // namespace unload::rt

using namespace unload::rt;

// A pass-through poll whose completions include one of a request the shim tracked, posted
// after the poll looked at `tracked`: merged as a tracked poll would have, in the gate. The
// request's QP held the CQ again for it; settled, with its ring emptied, it lets go here,
// or the CQ stayed held with nothing left to retire.
[[gnu::noinline]] static int poll_through_merge(CqRec* c, int n, ibv_wc* wc, int got) {
  QpRec* drained = nullptr;
  got = merge_polled(c, wc, n, 0, got, &drained);
  if (!c->pending.empty()) got += c->pending.pop(wc + got, n - got);
  if (drained) {
    settled_let_go(drained);
    if (c->holders.load(std::memory_order_relaxed) == 0) cq_go_through(c);
  }
  return got;
}

// A poll of a CQ nothing of the shim's can reach (offload from the start, or every QP on
// it settled on the NIC): the provider's completions are the program's as they are.
// `tracked` is looked at again after the poll: a request the shim tracked may have been
// posted meanwhile and its completion polled here.
[[gnu::noinline]] static int poll_through_locked(ibv_cq* cq, CqRec* c, int n, ibv_wc* wc) {
  GateScope g(c->gate);
  const int got = c->c->provider.poll_cq(cq, n, wc);
  if (__builtin_expect(got > 0 && c->tracked.load(std::memory_order_acquire), 0))
    return poll_through_merge(c, n, wc, got);
  return got;
}
// As poll_through_locked, for the gate's owner: entered its way, or else handed on, so that
// nothing is called before the provider's poll and only the CQ, the count and the array
// are kept across it.
[[gnu::always_inline]] static inline int poll_through_owned(ibv_cq* cq, CqRec* c, int n, ibv_wc* wc) {
  if (__builtin_expect(!c->gate.try_enter_biased(t_hot.tid), 0)) return poll_through_locked(cq, c, n, wc);
  int got = c->c->provider.poll_cq(cq, n, wc);
  if (__builtin_expect(got > 0 && c->tracked.load(std::memory_order_acquire), 0))
    got = poll_through_merge(c, n, wc, got);
  c->gate.leave(Gate::kBiased);
  return got;
}
[[gnu::noinline]] static int poll_through(ibv_cq* cq, CqRec* c, int n, ibv_wc* wc) {
  return poll_through_owned(cq, c, n, wc);
}

// What poll_merging_more does after the merge, the array holding `got`.
[[gnu::always_inline]] static inline int poll_merging_done(CqRec* c, int got, bool how, QpRec* drained) {
  note_poll(got);
  if (drained) [[unlikely]]
    settled_let_go(drained);
  if (__builtin_expect(c->holders.load(std::memory_order_relaxed) == 0, 0)) cq_go_through(c);
  c->gate.leave(how);
  return got;
}

// poll_merging once the queue did not fill the array, or no QP holds c: the provider's
// completions merged after the `got` popped, in the gate entered `how`, which it leaves.
[[gnu::noinline]] static int poll_merging_more(CqRec* c, int n, ibv_wc* wc, int got, bool how) {
  QpRec* drained = nullptr;
  got = poll_merge_more(c, n, wc, got, &drained);
  return poll_merging_done(c, got, how, drained);
}

// poll_merging with its queue empty and a QP holding c, the gate entered the owner's way:
// the provider's poll straight into the array, and an empty one (a spin for a NIC
// completion) returns at once, with no merge, no loop and no look at the CQ's holders;
// what it polled is merged as poll_merging_more merges it.
[[gnu::noinline]] static int poll_merging_provider(CqRec* c, int n, ibv_wc* wc) {
  const int want = provider_want(c, n, 0);
  const int r = want > 0 ? c->c->provider.poll_cq(c->cq, want, wc) : 0;
  if (r == 0) {
    note_poll(0);
    c->gate.leave(Gate::kBiased);
    return 0;
  }
  // Two statements: as one call's arguments, `drained` could be read before the merge set it
  // (their order is unspecified; GCC read it first, and no settled QP's poll let its CQ go).
  QpRec* drained = nullptr;
  const int got = poll_merge_from(c, n, wc, 0, r, want, &drained);
  return poll_merging_done(c, got, Gate::kBiased, drained);
}

// poll_merging for a thread the owner's way into the gate refused: entered in full.
[[gnu::noinline]] static int poll_merging_locked(CqRec* c, int n, ibv_wc* wc) {
  const bool how = c->gate.enter(this_tid());
  return poll_merging_more(c, n, wc, c->pending.pop(wc, n), how);
}

// A poll of a CQ the shim tracks: through the merger, inside the gate. The queue first:
// what it holds comes before anything the provider has, so an array it fills is the
// poll's answer. Every other case is a tail call, so that the usual one (a CPU path's
// completion polled one at a time) needs no frame.
[[gnu::noinline]] static int poll_merging(CqRec* c, int n, ibv_wc* wc) {
  if (__builtin_expect(!c->gate.try_enter_biased(t_hot.tid), 0)) return poll_merging_locked(c, n, wc);
  const int got = c->pending.pop(wc, n);
  if (got == 0 && c->holders.load(std::memory_order_relaxed) != 0) return poll_merging_provider(c, n, wc);
  if (__builtin_expect(got <= 0 || got < n || c->holders.load(std::memory_order_relaxed) == 0, 0))
    return poll_merging_more(c, n, wc, got, Gate::kBiased);
  note_poll(got);  // got > 0: no clock read
  c->gate.leave(Gate::kBiased);
  return got;
}

// A poll with remote writes outstanding: progressed first (before the gate: it may give a
// failed remote write to the NIC), then as any other.
[[gnu::noinline]] static int poll_tracked(ibv_cq* cq, CqRec* c, int n, ibv_wc* wc) {
  remote_progress();
  if (!c->tracked.load(std::memory_order_acquire)) return poll_through(cq, c, n, wc);
  return poll_merging(c, n, wc);
}

// The poll's way in when the thread's memo holds another CQ (a program that polls two in
// turn): the lookup in full, then as the front.
[[gnu::noinline]] static int poll_front_slow(ibv_cq* cq, int n, ibv_wc* wc) {
  CqRec* c = cq_find(cq);
  if (__builtin_expect(!c, 0)) return context_find(cq->context)->provider.poll_cq(cq, n, wc);
  if (!c->tracked.load(std::memory_order_acquire) && !remote_outstanding()) return poll_through(cq, c, n, wc);
  return poll_tracked(cq, c, n, wc);
}

// ops.poll_cq. Polling is serialised per CQ by its gate (free for the usual single
// poller). Its front calls nothing but the provider's poll and, in a tail, the others, so
// that it saves only what it keeps across that poll.
extern "C" int unload_cq_poll(ibv_cq* cq, int n, ibv_wc* wc) {
  CqRec* c = cq_find_memo(cq);
  if (__builtin_expect(!c, 0)) return poll_front_slow(cq, n, wc);
  if (__builtin_expect(remote_outstanding(), 0)) return poll_tracked(cq, c, n, wc);
  if (__builtin_expect(c->tracked.load(std::memory_order_acquire), 0)) return poll_merging(c, n, wc);
  return poll_through_owned(cq, c, n, wc);
}

// `armed` is set only once the provider armed the CQ, so a marker posted after the direct
// path saw it produces a CQE the arming covers. Completions the shim queued before the
// arming would, on a NIC, have arrived later and fired the event (mlx5 fires at once on a
// non-empty CQ): so the event is made to fire now.
extern "C" int unload_cq_req_notify(ibv_cq* cq, int solicited_only) {
  CqRec* c = cq_find(cq);
  if (__builtin_expect(!c, 0)) return context_find(cq->context)->provider.req_notify_cq(cq, solicited_only);
  const int rc = c->c->provider.req_notify_cq(cq, solicited_only);
  if (rc != 0 || solicited_only) return rc;  // solicited-only: send completions fire no event anyway
  c->armed.store(true, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  // Nothing of the shim's ever reached the CQ: nothing is queued. One that comes later was
  // marked tracked before it was queued, and its queuer looks at `armed` after a fence.
  if (!c->tracked.load(std::memory_order_relaxed)) return rc;
  bool queued;
  {
    GateScope g(c->gate);
    queued = !c->pending.empty();
  }
  if (queued) wake_channel_now(c);
  return rc;
}
