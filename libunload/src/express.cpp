// The express lane: the memo, its checks, and the write placed through the mapping.
#include "express.hpp"

#include "direct.hpp"
#include "kmod.hpp"
#include "mapped.hpp"
#include "registry.hpp"
#include "stage.hpp"
#include "stats.hpp"
#include "tunables.hpp"
#include "unload.h"

namespace unload::rt {

namespace {

// What direct_blocker, the list's checks and the fence found for q, read again: paired
// with a peer on this host in this session, no failure, nothing in flight or posted
// around the ring (so no fence to wait and room in the queue), no fence given up on.
bool direct_clear(const QpRec* q) {
  const PeerLink& p = q->peer;
  return p.registered && p.session == g_kmod.session &&
         (p.flags & (UNLOAD_PEER_PAIRED | UNLOAD_PEER_POISONED)) == UNLOAD_PEER_PAIRED && p.on_this_host() &&
         !q->failed.load(std::memory_order_acquire) && send_queue_quiet(q->sq) &&
         q->sq.ring.head() >= p.stuck_below;
}

// The source of a write that is not inline, as route() found it (source_holds), and the
// stage path's part of the eligible set unchanged.
bool source_as_routed(const QpRec* q, const ExpressMemo& x, const ibv_sge& sg) {
  return source_holds(x.source, sg) && stage_usable(q->sq.stage) == x.stage_ok;
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
  x.inline_data = rt.req.user_inline;
  if (!x.inline_data) {
    if (!source_keep(q, w.sg_list[0], &x.source)) return;
    x.stage_ok = stage_usable(q->sq.stage);
  }
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
  if (!x.inline_data && !source_as_routed(q, x, sg)) return Express::declined;
  if (tunables_seq() != x.tunables_seq || g_windows.load(std::memory_order_relaxed) != 0 || !direct_clear(q))
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
