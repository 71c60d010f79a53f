// The express lane: the memo, its checks, and the write placed through the mapping.
#include "express.hpp"

#include "direct.hpp"
#include "kmod.hpp"
#include "mapped.hpp"
#include "registry.hpp"
#include "stats.hpp"
#include "tunables.hpp"

namespace unload::rt {

namespace {

// What direct_blocker, the list's checks and the fence found for q and may have changed
// without disarming the memo: the session (a forked child's is another), no failure,
// nothing in flight or posted around the ring (so no fence to wait and room in the queue).
bool direct_clear(const QpRec* q) {
  return q->peer.session == g_kmod.session && !q->failed.load(std::memory_order_acquire) &&
         send_queue_quiet(q->sq);
}

}  // namespace

void express_arm(QpRec* q, const ibv_send_wr& w, const Route& rt) {
  ExpressMemo& x = q->express;
  x.armed.store(false, std::memory_order_relaxed);
  if (!lane_write_shape(w) || rt.path != Path::unload_mapped || rt.preferred != Path::unload_mapped ||
      rt.translated || g_windows.load(std::memory_order_relaxed) != 0)
    return;
  const int target = mapped_index_of(q, rt.req.rkey);
  if (target < 0) return;
  x.epoch = memo_epoch();  // before what it vouches for is looked at again (the module's words)
  if (!mapped_view_of(q, static_cast<uint32_t>(target), rt.req.length, x.view)) return;
  x.inline_data = rt.req.user_inline;
  if (!x.inline_data && !source_keep(q, w.sg_list[0], &x.source)) return;
  x.target = static_cast<uint8_t>(target);
  x.length = rt.req.length;
  x.rkey = rt.req.rkey;
  x.tunables_seq = tunables_seq();
  x.eligible = rt.eligible;
  x.policy_gen = 0;  // another shape, perhaps: vouched for once reused again
  x.wc = placed_write_wc(0, x.length, q->qp_num);  // a write of this shape's, but its wr_id
  x.armed.store(true, std::memory_order_relaxed);
}

namespace {

// The memo's write to `remote_addr` as classify() would describe it.
WriteRequest lane_request(const ExpressMemo& x, uint64_t remote_addr, bool signaled) {
  return one_sge_write(x.inline_data, signaled, x.length, x.rkey, remote_addr);
}

// A reused decision's write that the view refused: the full path goes on as from route().
Express lane_routed(const ExpressMemo& x, const ibv_send_wr& w, bool signaled, Route* rt) {
  rt->req = lane_request(x, w.wr.rdma.remote_addr, signaled);
  rt->path = Path::unload_mapped;
  rt->preferred = Path::unload_mapped;
  rt->eligible = x.eligible;
  return Express::routed;
}

// A completion queued while q's CQ may be armed: the marker's target is this write's.
[[gnu::noinline, gnu::cold]] void lane_wake(QpRec* q, const ExpressMemo& x, uint64_t remote_addr) {
  wake_armed(q, lane_request(x, remote_addr, true), nullptr);
}

// place_mapped_one for a reused decision's write, from the memo: its view, its count, its
// completion from the template, nothing timed.
bool lane_place(QpRec* q, const ExpressMemo& x, const ibv_send_wr& w, bool signaled) {
  CqRec* c = q->scq;
  const uint64_t addr = w.wr.rdma.remote_addr;
  uint64_t ticket = 0;
  // The completion's cell first: a full queue sends the write on to the module's copy.
  if (signaled && !c->pending.claim(ticket)) return false;
  if (!place_mapped_view(x.view, addr, reinterpret_cast<const void*>(w.sg_list[0].addr), x.length)) {
    if (signaled) c->pending.cancel(ticket);
    return false;
  }
  count_mapped_write(x.length, true);
  q->peer.last_rkey = x.rkey;
  q->peer.last_addr = addr;
  q->peer.has_last = true;
  if (!signaled) return true;
  ibv_wc& wc = c->pending.cell(ticket);
  copy_wc(wc, x.wc);
  wc.wr_id = w.wr_id;
  c->pending.publish(ticket);
  if (c->cq->channel) {  // else never armed (wake_after_queueing)
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (c->armed.load(std::memory_order_relaxed)) lane_wake(q, x, addr);
  }
  return true;
}

}  // namespace

Express express_post(QpRec* q, const ibv_send_wr& w, const Tunables& t, Route* rt) {
  const ExpressMemo& x = q->express;
  if (!x.armed.load(std::memory_order_relaxed) || !lane_write_shape(w)) return Express::declined;
  const ibv_sge& sg = w.sg_list[0];
  if (sg.length != x.length || w.wr.rdma.rkey != x.rkey ||
      ((w.send_flags & IBV_SEND_INLINE) != 0) != x.inline_data)
    return Express::declined;
  if (memo_epoch() != x.epoch || (!x.inline_data && !source_inside(x.source, sg)) ||
      tunables_seq() != x.tunables_seq || !direct_clear(q))
    return Express::declined;
  const bool signaled = q->sq.sig_all | ((w.send_flags & IBV_SEND_SIGNALED) != 0);
  if (route_reuses_mapped(q, w.wr.rdma.remote_addr, x.eligible, t))
    return lane_place(q, x, w, signaled) ? Express::placed : lane_routed(x, w, signaled, rt);
  // Not the reused decision (a sample is due, an observe ended the reuse, or a mode that
  // decides each write): the route decides it as the full path would, with nothing
  // blocking direct (direct_clear), and from its own memo.
  *rt = route(q, w, t, Why::none);
  // Another path (the module's copy by cost, an exploration): the full post takes it, and
  // a translated source, which the memo's region rules out, the gathering engine.
  if (rt->path != Path::unload_mapped || rt->translated) return Express::routed;
  return place_mapped_one(q, w.sg_list, w.wr_id, *rt, x.target) ? Express::placed : Express::routed;
}

}  // namespace unload::rt
