// ibv_post_send: each request routed once; a write going direct leaves the list (after the
// requests before it were posted and its fence), the rest go to the provider as copies
// that carry the ring's tags (docs/design.md, "A write's walk").
#include "post.hpp"

#include "busy.hpp"
#include "config.hpp"
#include "direct.hpp"
#include "express.hpp"
#include "nic_lane.hpp"
#include "registry.hpp"
#include "remote.hpp"
#include "remote_ring.hpp"
#include "stage.hpp"

#include <atomic>
#include <cerrno>

namespace unload::rt {

namespace {

// Requests handed to the provider per call: copies live on the stack, so a longer list goes
// in several calls, which is what the provider's own failure semantics allow (it stops at
// the first request it refuses, having posted the ones before).
constexpr int kChunk = 32;

// Copies of the program's requests for the provider, with their ring entries.
class Batch {
 public:
  explicit Batch(QpRec* q) : q_(q) {}

  bool full() const { return n_ == kChunk; }
  bool empty() const { return n_ == 0; }

  // Adds `w` on its routed path (`fallback`: why a direct route did not run). false when
  // the ring is full (the send queue is too).
  bool add(ibv_send_wr* w, const Route& rt, Why fallback = Why::none) {
    SendQueue& sq = q_->sq;
    if (n_ == 0) {
      // Remote writes posted before it are placed first; a fence's marker may have taken
      // entries since the last flush.
      remote_settle_if_pending(q_);
      start_ = sq.ring.tail();
      stage_start_ = sq.stage.tail;
    }
    SqEntry* e = sq.ring.reserve(start_ + static_cast<uint64_t>(n_));
    if (!e) return false;
    const WriteRequest& r = rt.req;
    ibv_send_wr& c = copies_[n_];
    c = *w;
    c.next = nullptr;
    Path p = rt.path;
    if (p == Path::unload_stage && !stage_copy(sq.stage, e, w->sg_list, r.sge_count, r.length))
      p = Path::offload;
    if (p == Path::unload_stage) {
      c.sg_list = &e->stage_sge;
      c.num_sge = 1;
    } else {
      e->stage_mark = sq.stage.tail;
    }
    if (p == Path::unload_inline) c.send_flags |= IBV_SEND_INLINE;
    why_[n_] = route_why(rt, p, fallback);
    e->user_wr_id = w->wr_id;
    e->post_ns = rt.t0;
    e->post_call_ns = 0;
    timed_ |= rt.t0 != 0;
    e->remote_addr = r.remote_addr;
    e->length = r.length;
    e->rkey = r.rkey;
    e->sge_count = static_cast<uint16_t>(r.sge_count);
    e->path = static_cast<uint8_t>(p);
    const bool ordering = w->opcode == IBV_WR_RDMA_READ || w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
                          w->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD;
    // An unsignaled request may carry a completion the program never sees (direct.hpp).
    const bool hidden = !r.signaled && take_hidden_signal(q_, e->seq, rt.t0 != 0);
    if (hidden) c.send_flags |= IBV_SEND_SIGNALED;
    if (r.signaled || hidden) note_completing(q_, e->seq);
    e->flags = static_cast<uint8_t>((r.signaled ? kSignaled : 0) | (hidden ? kHidden : 0) |
                                    (r.is_write ? kWrite : 0) | (ordering ? kOrdering : 0));
    if (ordering) sq.last_ordering = e->seq + 1;  // a fenced write later in this list sees it
    c.wr_id = sq.ring.tag_of(e);
    if (n_) copies_[n_ - 1].next = &c;
    origin_[n_++] = w;
    return true;
  }

  // Gives the copies to the provider. 0, or its errno with *bad the program's request it
  // refused (the ones before it were posted); the refused ones' entries are forgotten.
  // Inline: a direct write flushes an empty batch twice, and the call was a tenth of its
  // instructions in the shim.
  int flush(ibv_send_wr** bad) { return n_ ? give(bad) : 0; }

 private:
  [[gnu::noinline]] int give(ibv_send_wr** bad) {
    SendQueue& sq = q_->sq;
    sq.ring.publish(start_ + n_);
    busy_raise(q_);
    ibv_send_wr* bad_copy = nullptr;
    const int rc = q_->c->provider.post_send(q_->qp, copies_, &bad_copy);
    if (timed_) stamp_post_call();
    int posted = n_;
    if (rc) {
      posted = bad_copy ? static_cast<int>(bad_copy - copies_) : 0;
      if (posted < 0 || posted > n_) posted = 0;
      *bad = origin_[posted];
      rollback_refused(q_, start_ + static_cast<uint64_t>(posted));
      sq.stage.tail =
          posted ? sq.ring.at(start_ + static_cast<uint64_t>(posted) - 1)->stage_mark : stage_start_;
    }
    for (int i = 0; i < posted; ++i) {
      const SqEntry* e = sq.ring.at(start_ + static_cast<uint64_t>(i));
      count_why(why_[i]);  // before its write: both reach the counters page in one batch
      if (e->flags & kWrite) count_writes(static_cast<Path>(e->path), 1, e->length);
    }
    n_ = 0;
    timed_ = false;
    return rc;
  }

  // Adaptive: how long each timed request took to post, its policy decision to the
  // provider's return (observe() counts it as time the program spent on the NIC path).
  // A poller on another thread may merge an entry before it is stamped, and then counts
  // no post time: the value is advisory, hence relaxed. The entries cannot be reused
  // meanwhile: that takes a poster, and this thread holds the post gate.
  void stamp_post_call() {
    const uint64_t end = now_ns();
    for (int i = 0; i < n_; ++i) {
      SqEntry* e = q_->sq.ring.at(start_ + static_cast<uint64_t>(i));
      if (!e->post_ns || end <= e->post_ns) continue;
      const uint64_t took = end - e->post_ns;
      std::atomic_ref<uint32_t>(e->post_call_ns)
          .store(took < UINT32_MAX ? static_cast<uint32_t>(took) : UINT32_MAX, std::memory_order_relaxed);
    }
  }

  QpRec* q_;
  uint64_t start_ = 0;        // ring tail when the first copy was added
  uint64_t stage_start_ = 0;  // stage tail then
  int n_ = 0;
  bool timed_ = false;  // a request carries a policy timestamp (adaptive)
  ibv_send_wr copies_[kChunk];
  ibv_send_wr* origin_[kChunk];
  Why why_[kChunk];  // counted once posted
};

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

// Every write to the NIC as built (all_offload): the provider gets the program's list, with
// no ring entries; its completions carry the program's wr_ids, which the merger passes
// through. A later direct write is ordered behind them by the marker `untracked` asks for.
int post_untracked(QpRec* q, ibv_send_wr* wr, ibv_send_wr** bad) {
  if (remote_pending(q)) [[unlikely]] {  // the mode changed with remote writes in flight
    GateScope g(q->sq.gate);
    remote_settle(q);
  }
  if (!q->sq.untracked.load(std::memory_order_relaxed))
    q->sq.untracked.store(true, std::memory_order_relaxed);
  busy_raise(q);
  const int rc = q->c->provider.post_send(q->qp, wr, bad);
  for (const ibv_send_wr* w = wr; w && !(rc && w == *bad); w = w->next) {
    if (w->opcode != IBV_WR_RDMA_WRITE && w->opcode != IBV_WR_RDMA_WRITE_WITH_IMM) continue;
    uint64_t len = 0;
    for (int i = 0; i < w->num_sge; ++i) len += w->sg_list[i].length;
    count_writes(Path::offload, 1, len);
  }
  return rc;
}

// Whether the lone request w, routed rt, may go to the NIC as a plain write: a signaled
// write the route sent to the NIC, as built or inline, untimed (no sample waits for its
// cost), on a QP with nothing around the ring and a ring whose newest entry reports its
// own completion (so that every entry retires through the ring's completions), whose send
// CQ the shim polls through the merger that counts plain completions (not an extended one).
bool plain_fits(const QpRec* q, const ibv_send_wr& w, const Route& rt) {
  return (rt.path == Path::offload || rt.path == Path::unload_inline) && rt.t0 == 0 && rt.req.is_write &&
         rt.req.signaled && !w.next && plain_clear(q);
}

// A plain write: the program's request to the provider as built (inline: a copy that asks
// for it), no ring entry, no tag; the merger counts its completion (merge.cpp), and a later
// CPU-path write's fence waits for that count instead of a marker. What a tracked write
// spends on its entry and its tag's merge (about 225 instructions, callgrind) is for the
// writes the policy times and the stage path's, whose arena the completion frees.
int post_plain(QpRec* q, ibv_send_wr* w, const Route& rt, ibv_send_wr** bad) {
  remote_settle_if_pending(q);  // remote writes posted before it are placed first
  SendQueue& sq = q->sq;
  ibv_send_wr copy;
  ibv_send_wr* given = w;
  if (rt.path == Path::unload_inline) {
    copy = *w;
    copy.send_flags |= IBV_SEND_INLINE;
    given = &copy;
  }
  const uint64_t posted = sq.plain_posted.load(std::memory_order_relaxed);
  sq.plain_posted.store(posted + 1, std::memory_order_relaxed);  // first: it may complete at once
  busy_raise(q);
  ibv_send_wr* refused = nullptr;
  if (const int rc = q->c->provider.post_send(q->qp, given, &refused)) {
    sq.plain_posted.store(posted, std::memory_order_relaxed);
    busy_settle(q);
    *bad = w;
    return rc;
  }
  count_why(route_why(rt, rt.path, Why::none));  // before its write, as Batch::give counts
  count_writes(rt.path, 1, rt.req.length);
  return 0;
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

// Gives request w, routed rt, to the provider's batch (flushing it when full). 0 or the
// provider's errno with *bad set.
int to_nic(Batch& b, ibv_send_wr* w, const Route& rt, Why fallback, ibv_send_wr** bad) {
  if (b.full())
    if (int rc = b.flush(bad)) return rc;
  if (b.add(w, rt, fallback)) return 0;
  if (int rc = b.flush(bad)) return rc;
  if (b.add(w, rt, fallback)) return 0;
  *bad = w;  // still full: so is the send queue
  return ENOMEM;
}

// Does w carry more inline data than the program's QP takes? The real QP may take more
// (the inline path asks for room): the provider would accept what the program's own QP
// refuses, so the shim refuses it, where the provider would, with EINVAL.
bool inline_too_long(const QpRec* q, const ibv_send_wr* w) {
  if (!(w->send_flags & IBV_SEND_INLINE) || !q->roomy) return false;
  uint64_t len = 0;
  for (int i = 0; i < w->num_sge; ++i) len += w->sg_list[i].length;
  return len > q->shown.max_inline_data;
}

bool list_inline_too_long(const QpRec* q, const ibv_send_wr* wr) {
  for (; wr; wr = wr->next)
    if (inline_too_long(q, wr)) return true;
  return false;
}

// A list's writes that route direct one after another (a write with several SGEs alone)
// are placed with one submission; the requests before them go to the provider first, and
// what the module does not place goes after them, in order. `first`: the first request's
// route, when the express lane made it.
int post_tracked(QpRec* q, ibv_send_wr* wr, ibv_send_wr** bad, const Tunables& t, const Route* first = nullptr,
                 const Why* known_why = nullptr) {
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
    if (!policy::places_here(placing) && placing != Path::unload_remote) {
      if (w == wr && plain_fits(q, *w, rt)) {
        nic_lane_arm(q, *w, rt, direct_why);
        return post_plain(q, w, rt, bad);
      }
      if (int rc = to_nic(b, w, rt, Why::none, bad)) return rc;
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
      if (int rc = to_nic(b, origin[i], run[i].rt, fallback, bad)) return rc;
    }
    // A fence that gave up waited its limit once: the list's later runs would wait behind
    // the same requests, so they take the NIC (one wait per list, however long).
    if (fallback == Why::fence) direct_why = Why::fence;
  }
  return b.flush(bad);
}

}  // namespace

int post_routed(QpRec* q, const ibv_send_wr& w, const Route& rt, Why fallback) {
  Batch b(q);
  ibv_send_wr copy = w;
  copy.next = nullptr;
  ibv_send_wr* bad = nullptr;
  if (!b.add(&copy, rt, fallback)) return ENOMEM;
  return b.flush(&bad);
}

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

// ops.post_send. The program's list is never written: the provider gets copies.
extern "C" int unload_qp_post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
  QpRec* q = qp_find(qp);
  if (__builtin_expect(!q || !q->tracked, 0)) {
    ContextRec* c = q ? q->c : context_find(qp->context);
    return c->provider.post_send(qp, wr, bad);
  }
  const Tunables& t = tunables();
  if (all_offload(t) && !list_inline_too_long(q, wr)) return post_untracked(q, wr, bad);
  GateScope g(q->sq.gate);
  mark_tracked(q);
  if (q->express.armed) {
    Route rt;
    switch (express_post(q, *wr, t, &rt)) {
      case Express::placed:
        return 0;
      case Express::routed:
        return post_tracked(q, wr, bad, t, &rt);
      case Express::declined:
        break;
    }
  }
  if (q->nic_lane.armed) {
    // Found once: the blockers' pairing retries count down once a post, as on the full path.
    const Why direct_why = list_direct_why(q, wr, t);
    Route rt;
    if (nic_lane_take(q, *wr, t, direct_why, &rt)) {
      const int rc = post_plain(q, wr, rt, bad);
      if (rc == 0) ++thread_stats().nic_lane;
      return rc;
    }
    return post_tracked(q, wr, bad, t, nullptr, &direct_why);
  }
  return post_tracked(q, wr, bad, t);
}
