// ibv_post_send: each request routed once; a write going direct leaves the list (after the
// requests before it were posted and its fence), the rest go to the provider as copies
// that carry the ring's tags (docs/design.md, "A write's walk").
#include "nic_post.hpp"

#include "busy.hpp"
#include "direct.hpp"
#include "express.hpp"
#include "nic_lane.hpp"
#include "registry.hpp"
#include "remote.hpp"
#include "remote_ring.hpp"
#include "stage.hpp"
#include "stats.hpp"
#include "tunables.hpp"

#include <atomic>
#include <cerrno>

namespace unload::rt {

namespace {

// Plain NIC writes of untimed adaptive decisions on this thread since one of its walked
// writes was routed off the NIC (settle_after_lane).
constinit thread_local uint32_t t_lane_streak = 0;

// Whether every request of a list passes the local checks (its SGEs in regions of the QP's
// PD). A request failing them moves the QP to error at the NIC, which flushes the earlier
// requests of the list still in flight: a write placed direct ahead of it could not be
// flushed, so such a list goes to the NIC whole. Memory the CPU must not touch is valid
// here: the NIC takes it.
bool list_locally_valid(const QpRec* q, const ibv_send_wr* wr) {
  bool translated = false;
  for (const ibv_send_wr* w = wr; w; w = w->next)
    if (w->num_sge > 0 && !(w->send_flags & IBV_SEND_INLINE) &&
        sges_why(q, w->sg_list, static_cast<uint32_t>(w->num_sge), &translated) == Why::region)
      return false;
  return true;
}

// The writes of list wr before `stop` (nullptr: all of it), and their bytes in *bytes.
uint64_t writes_before(const ibv_send_wr* wr, const ibv_send_wr* stop, uint64_t* bytes) {
  uint64_t writes = 0;
  *bytes = 0;
  for (const ibv_send_wr* w = wr; w && w != stop; w = w->next)
    if (is_write(w->opcode)) {
      ++writes;
      *bytes += wr_length(*w);
    }
  return writes;
}

// Counts the writes of a list the provider took (all of it, or those before *bad).
void count_offloaded(const ibv_send_wr* wr, int rc, ibv_send_wr* const* bad) {
  uint64_t bytes;
  if (const uint64_t writes = writes_before(wr, rc ? *bad : nullptr, &bytes))
    count_writes(Path::offload, writes, bytes);
}

// Every write to the NIC as built (all_offload): the provider gets the program's list, with
// no ring entries; its completions carry the program's wr_ids, which the merger passes
// through. A later direct write is ordered behind them by the marker `untracked` asks for.
[[gnu::noinline]] int post_untracked(QpRec* q, ibv_send_wr* wr, ibv_send_wr** bad) {
  if (remote_pending(q)) [[unlikely]] {  // the mode changed with remote writes in flight
    GateScope g(q->sq.gate);
    remote_settle(q);
  }
  if (!q->sq.untracked.load(std::memory_order_relaxed))
    q->sq.untracked.store(true, std::memory_order_relaxed);
  busy_raise(q);
  const int rc = q->c->provider.post_send(q->qp, wr, bad);
  count_offloaded(wr, rc, bad);
  // The next posts pass straight through, once nothing a tracked post left is in the way
  // (under the gate: a fence clears `untracked` there).
  if (!q->sq.passing.load(std::memory_order_relaxed)) {
    GateScope g(q->sq.gate);
    if (q->sq.untracked.load(std::memory_order_relaxed) && !remote_pending(q)) {
      if (q->sq.settled.load(std::memory_order_relaxed)) unsettle(q->sq);  // passing instead
      q->sq.passing.store(true, std::memory_order_relaxed);
    }
  }
  return rc;
}

// Does w carry more inline data than the program's QP takes? The real QP may take more
// (the inline path asks for room): the provider would accept what the program's own QP
// refuses, so the shim refuses it, where the provider would, with EINVAL. Inline, as
// plain_kind: the length is summed only for an inline request.
[[gnu::always_inline]] inline bool inline_too_long(const QpRec* q, const ibv_send_wr* w) {
  return __builtin_expect((w->send_flags & IBV_SEND_INLINE) && q->roomy, 0) &&
         wr_length(*w) > q->shown.max_inline_data;
}

// Whether the lone request w, routed rt, may go to the NIC as a plain write: a signaled
// write the route sent to the NIC, as built or inline, untimed (no sample waits for its
// cost), on a QP clear for it (lane_clear: nothing around the ring, or all of it with
// it when settled, behind a ring whose entries retire), whose send CQ the shim polls
// through the merger that counts plain completions (not an extended one).
bool plain_fits(const QpRec* q, const ibv_send_wr& w, const Route& rt) {
  return plain_path(rt.path) && rt.t0 == 0 && rt.req.is_write && rt.req.signaled && !w.next && lane_clear(q);
}

// A copy of w, into *copy, that asks the provider for IBV_SEND_INLINE (the inline path's
// write posted plain); the program's list is never written.
ibv_send_wr* asking_inline(const ibv_send_wr& w, ibv_send_wr* copy) {
  *copy = w;
  copy->send_flags |= IBV_SEND_INLINE;
  return copy;
}

// A plain request: the program's request to the provider as built (`as_inline`: a copy
// that asks for it), no ring entry, no tag; the merger counts its completion (merge.cpp),
// and a later CPU-path write's fence waits for that count instead of a marker. What a
// tracked request spends on its entry and its tag's merge (about 225 instructions on a
// write, callgrind) is for the writes the policy times and the stage path's, whose arena
// the completion frees. On a QP whose requests go around the ring (`untracked`: the lane's
// writes on a QP settled on the NIC) it goes around it, uncounted: the marker stands for
// it. 0 or the provider's errno with *bad = w.
int give_plain(QpRec* q, ibv_send_wr* w, bool as_inline, ibv_send_wr** bad) {
  remote_settle_if_pending(q);  // remote writes posted before it are placed first
  SendQueue& sq = q->sq;
  ibv_send_wr copy;
  ibv_send_wr* given = as_inline ? asking_inline(*w, &copy) : w;
  const bool counted = !sq.untracked.load(std::memory_order_relaxed);
  const uint64_t posted = sq.plain_posted.load(std::memory_order_relaxed);
  if (counted)
    sq.plain_posted.store(posted + 1, std::memory_order_relaxed);  // first: it may complete at once
  busy_raise(q);
  ibv_send_wr* refused = nullptr;
  if (const int rc = q->c->provider.post_send(q->qp, given, &refused)) {
    sq.plain_posted.store(posted, std::memory_order_relaxed);
    busy_settle(q);
    *bad = w;
    return rc;
  }
  if (counted && is_ordering(w->opcode)) sq.plain_ordering = posted + 1;  // a fenced copy waits for it
  return 0;
}

// A plain write, routed rt (offload or inline).
int post_plain(QpRec* q, ibv_send_wr* w, const Route& rt, ibv_send_wr** bad) {
  if (const int rc = give_plain(q, w, rt.path == Path::unload_inline, bad)) return rc;
  count_why(route_why(rt, rt.path, Why::none));  // before its write, as Batch::give counts
  count_writes(rt.path, 1, rt.req.length);
  return 0;
}

// Whether request w may be a plain one as far as it goes: signaled (a completion counts
// it), a write, send, READ or atomic (whose order the plain counts keep), within the
// program's inline cap. Inline: a settled post asks it of every request.
[[gnu::always_inline]] inline bool plain_kind(const QpRec* q, const ibv_send_wr& w) {
  switch (w.opcode) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM:
    case IBV_WR_SEND_WITH_INV:
    case IBV_WR_RDMA_READ:
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      break;
    default:
      return false;
  }
  return wr_signaled(q, w) && !inline_too_long(q, &w);
}

// Whether the lone request w, no write, may go to the NIC as a plain request, the QP
// clear as for a plain write (lane_clear: on a QP whose requests go around the ring, it
// goes around too, as the lane's writes do). No CPU path could take it, so nothing is
// routed.
bool plain_other_fits(const QpRec* q, const ibv_send_wr& w) {
  return !w.next && !is_write(w.opcode) && plain_kind(q, w) && lane_clear(q);
}

// Whether the list fits the send queue's room as the program knows it (its max_send_wr,
// less what is in flight). A list that may not is the provider's to cut: a direct write
// takes no slot, so the CPU could not stop where the provider would (providers accept up
// to their real depth, which may exceed what they report: rxe on 6.1 reports the depth
// asked for and takes up to the next power of two less one).
bool list_fits(const QpRec* q, const ibv_send_wr* wr) {
  // Remote writes in flight hold a place: the NIC may have to take them yet.
  const uint64_t used = nic_in_flight(q->sq) + remote_in_flight_if_any(q);
  if (used >= q->sq.max_wr) return false;
  uint64_t room = q->sq.max_wr - used;
  for (const ibv_send_wr* w = wr; w; w = w->next)
    if (room-- == 0) return false;
  return true;
}

// What keeps the writes of list `wr` from going direct (or remote: places_remote), none
// when nothing does.
Why list_direct_why(QpRec* q, ibv_send_wr* wr, const Tunables& t) {
  const Why why = cpu_blocker(q, t);
  if (why != Why::none) return why;
  if (!list_fits(q, wr)) return Why::queue;
  return wr->next && !list_locally_valid(q, wr) ? Why::region : Why::none;
}

// Adds w to a batch behind the QP's remote writes in flight: a batch's first request places
// them first (a fence's marker may have taken entries since the last flush).
bool add_behind_remote(Batch& b, QpRec* q, ibv_send_wr* w, const Route& rt, Why fallback) {
  if (b.empty()) remote_settle_if_pending(q);
  return b.add(w, rt, fallback);
}

// Gives request w, routed rt, to the provider's batch (flushing it when full). 0 or the
// provider's errno with *bad set.
int to_nic(Batch& b, QpRec* q, ibv_send_wr* w, const Route& rt, Why fallback, ibv_send_wr** bad) {
  if (b.full())
    if (int rc = b.flush(bad)) return rc;
  if (add_behind_remote(b, q, w, rt, fallback)) return 0;
  if (int rc = b.flush(bad)) return rc;
  if (add_behind_remote(b, q, w, rt, fallback)) return 0;
  *bad = w;  // still full: so is the send queue
  return ENOMEM;
}

bool list_inline_too_long(const QpRec* q, const ibv_send_wr* wr) {
  for (; wr; wr = wr->next)
    if (inline_too_long(q, wr)) return true;
  return false;
}

// Plain NIC writes of untimed adaptive decisions a thread posts in a row (none of its
// walked writes routed off the NIC between them) before the QPs they go on count as settled.
constexpr uint32_t kSettledAfter = 16;

// Whether q may settle on the NIC now, its write given the NIC: the thread's streak
// long enough, no remote write of q in flight and no request of it failed.
bool may_settle_now(const QpRec* q) {
  return t_lane_streak >= kSettledAfter && !remote_pending(q) && !q->failed.load(std::memory_order_relaxed);
}

// After a plain write of q the NIC lane took, or the full path gave the NIC as it armed the
// lane (a write the lane would have taken), inside the gate: once the thread's streak
// reached kSettledAfter, q is settled on the NIC (SendQueue::settled). Counted a thread,
// not a QP: a program that spreads its writes over many QPs gives each too few in a row. A
// sample, a trial or an exploration that stays on the NIC ends no streak. Settling on the
// full path's write saves each QP a write: at 1024 QPs, a round of the others. Not with
// remote writes in flight or a request failed. Settled, its requests go around the ring
// (`untracked`, the busy byte raised for them), and once its ring is empty its send CQ is
// held for it no more (settled_release): with every QP on it settled, polls pass through.
void settle_after_lane(QpRec* q, const Route& rt) {
  if (!plain_path(rt.path)) return;
  // A settled QP whose consult found the decision charging the budget is tracked again
  // (its writes are still the NIC's: the streak goes on).
  if (!nic_lane_may_settle(rt)) [[unlikely]] {
    if (q->sq.settled.load(std::memory_order_relaxed)) mark_tracked(q);
    return;
  }
  if (t_lane_streak < kSettledAfter) ++t_lane_streak;
  if (!may_settle_now(q)) return;
  SendQueue& sq = q->sq;
  sq.settled_why = route_why(rt, rt.path, Why::none);
  sq.settled_path = rt.path;
  if (!sq.untracked.load(std::memory_order_relaxed)) {
    sq.untracked.store(true, std::memory_order_relaxed);
    busy_raise(q);  // a poller may have lowered it since the lane's write
  }
  sq.settled.store(true, std::memory_order_release);  // after its ring entries: settled_let_go
  nic_lane_settled(q);
  settled_release(q);
}

// A QP settled when its post came, tracked for it (post_tracked_settled), whose lone write
// the full path gave the NIC, routed `rt` (a sample, or a decision the lane could not
// vouch for or had no memo for): settled again at once, as it was, when settle_after_lane
// would settle it. A timed write's entry holds the send CQ until it retires, and the
// program's poll lets it go then (poll.cpp, settled_let_go). Left tracked, the QP waited
// for its own next write, at 1024 QPs a round of the others later, holding the CQ all the
// while: every poll went through the merger. Post gate.
void settle_again(QpRec* q, const Route& rt) {
  SendQueue& sq = q->sq;
  if (!plain_path(rt.path) || !nic_lane_may_settle(rt) || !sq.untracked.load(std::memory_order_relaxed) ||
      !may_settle_now(q))
    return;
  sq.settled.store(true, std::memory_order_release);  // after its ring entries: settled_let_go
  settled_release(q);
}

// A list's writes that route direct one after another (a write with several SGEs alone)
// are placed with one submission; the requests before them go to the provider first, and
// what the module does not place goes after them, in order. `first`: the first request's
// route, when the express lane made it. `lone_nic`: the route of a lone request the NIC
// was given (its path left as it was for any other list).
int post_tracked(QpRec* q, ibv_send_wr* wr, ibv_send_wr** bad, const Tunables& t,
                 const Route* first = nullptr, const Why* known_why = nullptr, Route* lone_nic = nullptr) {
  Why direct_why = known_why ? *known_why : list_direct_why(q, wr, t);
  Batch b(q);
  DirectRun run;
  ibv_send_wr* origin[kDirectRunMax];
  ibv_send_wr* w = wr;
  Route rt;
  bool routed = first != nullptr;  // rt is already w's route
  if (first) rt = *first;
  while (w) {
    if (inline_too_long(q, w)) {  // the requests before it are posted, as by the provider
      if (int rc = b.flush(bad)) return rc;
      *bad = w;
      return EINVAL;
    }
    if (!routed) rt = route(q, *w, t, direct_why);
    routed = false;
    const Path placing = rt.path;  // direct, mapped or remote: the CPU places the run
    if (!plain_path(placing)) t_lane_streak = 0;  // off the NIC as built or inline: the streak ends
    if (!policy::places_here(placing) && placing != Path::unload_remote) {
      if (lone_nic && w == wr && !w->next) *lone_nic = rt;
      if (w == wr && plain_fits(q, *w, rt)) {
        nic_lane_arm(q, *w, rt, direct_why);
        const int rc = post_plain(q, w, rt, bad);
        if (rc == 0 && q->nic_lane.armed) settle_after_lane(q, rt);  // what the lane would have taken
        return rc;
      }
      if (int rc = to_nic(b, q, w, rt, Why::none, bad)) return rc;
      w = w->next;
      continue;
    }
    int n = 0;
    run.set(n, w->sg_list, w->wr_id, rt);
    origin[n++] = w;
    for (w = w->next; w && run[0].rt.req.sge_count <= 1 && n < kDirectRunMax; w = w->next) {
      rt = route(q, *w, t, direct_why);
      if (rt.path != placing || rt.req.sge_count > 1) {
        routed = true;
        break;
      }
      run.set(n, w->sg_list, w->wr_id, rt);
      origin[n++] = w;
    }
    if (int rc = b.flush(bad)) return rc;  // the requests before the run go first
    Why fallback = Why::none;
    // Not placed: the NIC takes them as built, and reports what it finds.
    const int done = placing == Path::unload_remote ? place_remote(q, run.data(), n, &fallback)
                                                    : place_direct(q, run.data(), n, &fallback);
    if (done == 1 && n == 1 && w == nullptr && origin[0] == wr && placing == Path::unload_mapped)
      express_arm(q, *wr, run[0].rt);
    for (int i = done; i < n; ++i) {
      run[i].rt.path = Path::offload;
      if (int rc = to_nic(b, q, origin[i], run[i].rt, fallback, bad)) return rc;
    }
    // A fence that gave up waited its limit once: the list's later runs would wait behind
    // the same requests, so they take the NIC (one wait per list, however long).
    if (fallback == Why::fence) direct_why = Why::fence;
  }
  return b.flush(bad);
}

// post_tracked for a QP that was settled when its post came (a consult the lane declined,
// or one whose lane memo a timed write ended), tracked now: settled again at once if the
// full path gave its lone write the NIC (settle_again). Post gate.
int post_tracked_settled(QpRec* q, ibv_send_wr* wr, ibv_send_wr** bad, const Tunables& t,
                         const Why* known_why) {
  Route lone;
  lone.path = Path::unload_direct;  // none: set only for a lone write given the NIC
  const int rc = post_tracked(q, wr, bad, t, nullptr, known_why, &lone);
  if (rc == 0) settle_again(q, lone);
  return rc;
}

}  // namespace

}  // namespace unload::rt

using namespace unload::rt;

// ops.bind_mw (ibv_bind_mw, type 1 windows): the provider posts the bind on the QP itself,
// past the ring, so no completion of the ring would say when it executed. Like a request
// posted around the ring, it makes the next fence post a marker behind it: a later direct
// write is placed only once the bind (and all before it) executed.
extern "C" int unload_qp_bind_mw(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* bind) {
  QpRec* q = g_qps.find(key_of(qp));
  ContextRec* c = q ? q->c : context_find(qp->context);
  if (q && q->tracked) {
    GateScope g(q->sq.gate);  // not held over the provider's call: it may post through ops.post_send
    mark_tracked(q);
    q->sq.untracked.store(true, std::memory_order_relaxed);
    busy_raise(q);
  }
  return c->provider.bind_mw(qp, mw, bind);
}

namespace unload::rt {
namespace {

// Whether the lone request w, on a QP settled on the inline path, goes inline as the lane's
// writes did: a write of one SGE the QP's real inline cap takes, in the source region the
// lane kept (so a bad source the NIC would refuse never goes inline). Post gate.
bool settled_inline(const QpRec* q, const ibv_send_wr& w) {
  const NicLaneMemo& x = q->nic_lane;
  return !w.next && is_write(w.opcode) && !(w.send_flags & IBV_SEND_INLINE) && w.num_sge == 1 &&
         w.sg_list[0].length <= q->sq.max_inline && x.armed && !x.inline_data &&
         source_holds(x.source, w.sg_list[0]);
}

}  // namespace
}  // namespace unload::rt

// The post that does not pass straight through: out of line, so that one that does saves
// and restores no register this one needs.
[[gnu::noinline]] static int post_slow(ibv_qp* qp, QpRec* q, ibv_send_wr* wr, ibv_send_wr** bad) {
  if (__builtin_expect(!q || !q->tracked, 0)) {
    ContextRec* c = q ? q->c : context_find(qp->context);
    return c->provider.post_send(qp, wr, bad);
  }
  const Tunables& t = tunables();
  if (all_offload(t) && !list_inline_too_long(q, wr)) return post_untracked(q, wr, bad);
  GateScope g(q->sq.gate);
  // A settled QP's consult (SendQueue::settled): the NIC lane, which asks the policy to
  // vouch for its decision, takes the write around the ring as the settled posts went, and
  // the QP stays settled, holding its CQ for nothing; a write the lane declines is tracked,
  // and settled again if the full path gives it the NIC (post_tracked_settled). (Settled
  // implies `untracked`: no plain request of it is counted.)
  const bool settled = q->sq.settled.load(std::memory_order_relaxed);
  const bool consult = settled && q->nic_lane.armed && !q->express.armed.load(std::memory_order_relaxed);
  if (consult && plain_other_fits(q, *wr)) {
    // No write, nothing to ask the policy: around the ring as a settled post, and the
    // consult moves to the thread's next post.
    t_hot.view.settled_left = 1;
    return give_plain(q, wr, false, bad);
  }
  if (!consult) {
    mark_tracked(q);
    if (plain_other_fits(q, *wr)) return give_plain(q, wr, false, bad);
  }
  if (q->nic_lane.armed) {
    // Found once: the blockers' pairing retries count down once a post, as on the full path.
    const Why direct_why = list_direct_why(q, wr, t);
    Route rt;
    if (nic_lane_take(q, *wr, t, direct_why, &rt)) {
      const int rc = post_plain(q, wr, rt, bad);
      if (rc == 0) {
        ++thread_stats().nic_lane;
        settle_after_lane(q, rt);
      }
      return rc;
    }
    if (consult) mark_tracked(q);
    return settled ? post_tracked_settled(q, wr, bad, t, &direct_why)
                   : post_tracked(q, wr, bad, t, nullptr, &direct_why);
  }
  return settled ? post_tracked_settled(q, wr, bad, t, nullptr) : post_tracked(q, wr, bad, t);
}

// The express lane's post past its plain one, in the gate (entered `how`): the full lane
// (express_take_held) for a write its memo holds for, a marker to wake an armed CQ, a
// write it declined, which post_slow takes afresh without the lane, or one the route is
// to decide or carry on (express_route).
[[gnu::noinline]] static int post_express_full(QpRec* q, ibv_send_wr* wr, ibv_send_wr** bad, bool how,
                                               Express e) {
  SendQueue& sq = q->sq;
  const Tunables& t = tunables();
  if (e == Express::held) e = express_take_held(q, *wr, t);
  int rc = 0;
  switch (e) {
    case Express::declined:
      sq.gate.leave(how);
      return post_slow(q->qp, q, wr, bad);
    case Express::wake:
      express_wake(q, *wr);
      break;
    case Express::refused:
    case Express::decide: {
      Route rt;
      if (!express_route(q, *wr, t, e, &rt)) rc = post_tracked(q, wr, bad, t, &rt);
      break;
    }
    case Express::placed:
    case Express::held:
      break;
  }
  sq.gate.leave(how);
  return rc;
}

// post_express when the gate is not its owner's to enter alone (shared, or this thread's
// id not yet known): the full lane.
[[gnu::noinline]] static int post_express_entering(QpRec* q, ibv_send_wr* wr, ibv_send_wr** bad) {
  const bool how = q->sq.gate.enter(this_tid());
  mark_tracked(q);
  const Express e = express_take(q, *wr, tunables());
  if (e == Express::placed) {
    q->sq.gate.leave(how);
    return 0;
  }
  return post_express_full(q, wr, bad, how, e);
}

// A post on a QP whose express memo is armed (express.hpp), the lane's only way in: the
// lane in the gate, tracked as post_slow tracks a QP with a memo (never consulted: a QP
// settled on the NIC with a memo is tracked again). The owner's way into the gate and the
// plain lane call nothing, so this saves no register; everything else goes on in
// post_express_full, a tail call.
[[gnu::noinline]] static int post_express(QpRec* q, ibv_send_wr* wr, ibv_send_wr** bad) {
  if (__builtin_expect(!q->tracked, 0)) return post_slow(q->qp, q, wr, bad);  // vendor direct verbs
  SendQueue& sq = q->sq;
  if (__builtin_expect(!sq.gate.try_enter_biased(t_hot.tid), 0)) return post_express_entering(q, wr, bad);
  mark_tracked(q);
  const Express e = express_take_plainly(q, *wr);
  if (__builtin_expect(e == Express::placed, 1)) {
    sq.gate.leave(Gate::kBiased);
    return 0;
  }
  return post_express_full(q, wr, bad, Gate::kBiased, e);
}

// A refused post's answer, out of line: a return of its own keeps the post's count from
// holding the answer across the batch's call.
[[gnu::noinline]] static int post_refused(int rc) {
  return rc;
}

// A lone request every write of which goes to the NIC as built (the pinned post, and a
// QP passing straight through): the provider's post, a write counted once taken. Only
// its length is kept across the provider's post (a refused write was not posted:
// nothing to count); a request of another kind is the provider's alone.
[[gnu::always_inline]] static inline int post_offload_lone(const ContextRec* c, ibv_qp* qp, ibv_send_wr* wr,
                                                           ibv_send_wr** bad) {
  if (!is_write(wr->opcode)) return c->provider.post_send(qp, wr, bad);
  const uint64_t len = wr_length(*wr);
  if (const int rc = c->provider.post_send(qp, wr, bad); __builtin_expect(rc != 0, 0))
    return post_refused(rc);
  count_writes(Path::offload, 1, len);
  return 0;
}

// An offload post on a QP whose requests pass straight through (SendQueue::passing): the
// list walked once (the shim's inline limit held, its writes counted), then the provider's
// post. A list the provider cuts short is counted again, up to where it stopped.
[[gnu::noinline]] static int post_passing_list(QpRec* q, ibv_send_wr* wr, ibv_send_wr** bad) {
  uint64_t writes = 0, bytes = 0;
  for (const ibv_send_wr* w = wr; w; w = w->next) {
    const uint64_t len = wr_length(*w);
    if (__builtin_expect((w->send_flags & IBV_SEND_INLINE) && q->roomy, 0) && len > q->shown.max_inline_data)
      return post_slow(q->qp, q, wr, bad);
    const bool write = is_write(w->opcode);
    writes += write;
    bytes += write ? len : 0;
  }
  const int rc = q->c->provider.post_send(q->qp, wr, bad);
  if (__builtin_expect(rc == 0, 1)) {
    if (writes) count_writes(Path::offload, writes, bytes);
  } else {
    count_offloaded(wr, rc, bad);
  }
  return rc;
}

// post_passing_list for the usual post, a lone request: as the pinned post
// (unload_qp_post_send_pinned), with the shim's inline limit held first.
[[gnu::noinline]] static int post_passing(QpRec* q, ibv_send_wr* wr, ibv_send_wr** bad) {
  if (__builtin_expect(wr->next != nullptr, 0)) return post_passing_list(q, wr, bad);
  if (__builtin_expect((wr->send_flags & IBV_SEND_INLINE) && q->roomy, 0) &&
      wr_length(*wr) > q->shown.max_inline_data)
    return post_slow(q->qp, q, wr, bad);
  return post_offload_lone(q->c, q->qp, wr, bad);
}

// A post on a QP settled on the NIC (SendQueue::settled): the list walked once, then,
// inside the gate (a fence's marker is posted under it), given to the provider as built
// (a lone write as the inline lane's was, settled_inline), around the ring, and counted.
// Any request a plain one could not be, or `settled` gone meanwhile, takes the full way.
[[gnu::noinline]] static int post_settled_list(QpRec* q, ibv_send_wr* wr, ibv_send_wr** bad) {
  uint64_t writes = 0, bytes = 0;
  for (const ibv_send_wr* w = wr; w; w = w->next) {
    if (__builtin_expect(!plain_kind(q, *w), 0)) return post_slow(q->qp, q, wr, bad);
    if (is_write(w->opcode)) {
      ++writes;
      bytes += wr_length(*w);
    }
  }
  {
    GateScope g(q->sq.gate);
    SendQueue& sq = q->sq;
    if (__builtin_expect(sq.settled.load(std::memory_order_relaxed), 1)) {
      if (__builtin_expect(cq_held(sq), 0)) settled_release(q);
      ibv_send_wr copy;
      const bool as_inline = sq.settled_path == Path::unload_inline && settled_inline(q, *wr);
      ibv_send_wr* given = as_inline ? asking_inline(*wr, &copy) : wr;
      const int rc = q->c->provider.post_send(q->qp, given, bad);
      if (__builtin_expect(rc != 0, 0)) {
        if (as_inline) *bad = wr;
        writes = writes_before(wr, *bad, &bytes);
      }
      // The reason before its writes, as Batch::give counts.
      if (writes)
        count_settled(as_inline ? Path::unload_inline : Path::offload, sq.settled_why, writes, bytes);
      return rc;
    }
  }
  return post_slow(q->qp, q, wr, bad);
}

// post_settled for a QP whose lane gave its lone writes from the lane's source inline
// (settled_inline): those asked as inline in a copy; the rest as built.
[[gnu::noinline]] static int post_settled_inline(QpRec* q, ibv_send_wr* wr, ibv_send_wr** bad) {
  SendQueue& sq = q->sq;
  ibv_send_wr copy;
  const bool as_inline = settled_inline(q, *wr);
  const int rc = q->c->provider.post_send(q->qp, as_inline ? asking_inline(*wr, &copy) : wr, bad);
  const Why why = sq.settled_why;
  sq.gate.leave(Gate::kBiased);
  if (__builtin_expect(rc != 0, 0)) {
    *bad = wr;
    return rc;
  }
  if (is_write(wr->opcode))
    count_settled(as_inline ? Path::unload_inline : Path::offload, why, 1, wr_length(*wr));
  return 0;
}

// post_settled_list for the usual post, a lone request given by the gate's owner: out of
// line, as post_passing, and handing every other case on, so that only the QP and the
// write's length are kept across the provider's post. A lone request refused is not posted
// at all: nothing to count.
[[gnu::noinline]] static int post_settled(QpRec* q, ibv_send_wr* wr, ibv_send_wr** bad) {
  SendQueue& sq = q->sq;
  if (__builtin_expect(wr->next != nullptr, 0)) return post_settled_list(q, wr, bad);
  if (__builtin_expect(!plain_kind(q, *wr), 0)) return post_slow(q->qp, q, wr, bad);
  if (__builtin_expect(!sq.gate.try_enter_biased(t_hot.tid), 0)) return post_settled_list(q, wr, bad);
  if (__builtin_expect(!sq.settled.load(std::memory_order_relaxed) || cq_held(sq), 0)) {
    sq.gate.leave(Gate::kBiased);
    return post_settled_list(q, wr, bad);
  }
  if (sq.settled_path == Path::unload_inline) return post_settled_inline(q, wr, bad);  // in the gate
  constexpr uint64_t kNotWrite = ~uint64_t{0};  // above any sum of 32-bit lengths
  const uint64_t len = is_write(wr->opcode) ? wr_length(*wr) : kNotWrite;
  const int rc = q->c->provider.post_send(q->qp, wr, bad);
  const Why why = sq.settled_why;
  sq.gate.leave(Gate::kBiased);
  if (__builtin_expect(rc != 0, 0)) return post_refused(rc);
  if (len != kNotWrite) count_settled(Path::offload, why, 1, len);
  return 0;
}

// A pinned post of a list: the provider's post, then the writes it took counted (all, or
// those before *bad).
[[gnu::noinline]] static int post_pinned_list(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
  const int rc = context_find(qp->context)->provider.post_send(qp, wr, bad);
  count_offloaded(wr, rc, bad);
  return rc;
}

// ops.post_send of a process pinned to the NIC (offload_pinned): the provider's post, then
// the writes it took counted. No record is looked up: nothing of the QP's changes while
// every request goes as built, its QP was made as asked (no room beyond it to refuse), and
// the program's polls go to the provider unwrapped.
extern "C" int unload_qp_post_send_pinned(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
  if (__builtin_expect(wr->next != nullptr, 0)) return post_pinned_list(qp, wr, bad);
  return post_offload_lone(context_find(qp->context), qp, wr, bad);
}

// ops.post_send's way in when its front cannot tell (no memo of the QP, the tunables moved,
// a consult due): the same choice, asked in full.
[[gnu::noinline]] static int post_front_slow(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
  QpRec* q = qp_find(qp);
  if (q && q->sq.passing.load(std::memory_order_relaxed) && offload_now()) return post_passing(q, wr, bad);
  if (q && q->sq.settled.load(std::memory_order_relaxed) && settled_now()) return post_settled(q, wr, bad);
  if (q && q->express.armed.load(std::memory_order_relaxed) && !offload_now())
    return post_express(q, wr, bad);
  return post_slow(qp, q, wr, bad);
}

// ops.post_send. The program's list is never written: the provider gets copies. Its front
// decides, from the thread's memo of the QP and its fresh tunables, between a post that
// passes straight through, one on a QP settled on the NIC and one for the express lane,
// and calls nothing else, so that it saves no register; any other case asks
// post_front_slow.
extern "C" int unload_qp_post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
  QpRec* q = qp_find_front(qp);
  if (__builtin_expect(q != nullptr && tunables_fresh(), 1)) {
    if (t_hot.view.offload) {
      if (__builtin_expect(q->sq.passing.load(std::memory_order_relaxed), 1)) return post_passing(q, wr, bad);
    } else if (q->sq.settled.load(std::memory_order_relaxed) && settled_countdown()) {
      return post_settled(q, wr, bad);  // settled_now(), the tunables looked at above
    } else if (q->express.armed.load(std::memory_order_relaxed)) {
      return post_express(q, wr, bad);
    }
    return post_slow(qp, q, wr, bad);
  }
  return post_front_slow(qp, wr, bad);
}
