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
  x.epoch = memo_epoch();  // before what it vouches for is looked at again
  x.inline_data = rt.req.user_inline;
  if (!x.inline_data && !source_keep(q, w.sg_list[0], &x.source)) return;
  x.target = static_cast<uint8_t>(target);
  x.length = rt.req.length;
  x.rkey = rt.req.rkey;
  x.tunables_seq = tunables_seq();
  x.eligible = rt.eligible;
  x.policy_gen = 0;  // another shape, perhaps: vouched for once reused again
  x.armed.store(true, std::memory_order_relaxed);
}

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
  WriteRequest& r = rt->req;  // classify()'s answer for the shape
  r.is_write = true;
  r.user_inline = x.inline_data;
  r.signaled = q->sq.sig_all || (w.send_flags & IBV_SEND_SIGNALED);
  r.length = x.length;
  r.sge_count = 1;
  r.rkey = x.rkey;
  r.remote_addr = w.wr.rdma.remote_addr;
  if (route_reuses_mapped(q, r, x.eligible, t)) {
    rt->path = Path::unload_mapped;
    rt->preferred = Path::unload_mapped;
    rt->eligible = x.eligible;
  } else {
    // Not the reused decision (a sample is due, an observe ended the reuse, or a mode that
    // decides each write): the route decides it as the full path would, with nothing
    // blocking direct (direct_clear), and from its own memo.
    *rt = route(q, w, t, Why::none);
    // Another path (the module's copy by cost, an exploration): the full post takes it, and
    // a translated source, which the memo's region rules out, the gathering engine.
    if (rt->path != Path::unload_mapped || rt->translated) return Express::routed;
  }
  return place_mapped_one(q, w.sg_list, w.wr_id, *rt, x.target) ? Express::placed : Express::routed;
}

}  // namespace unload::rt
