// The NIC lane: the memo, its checks, and the route it stands for.
#include "nic_lane.hpp"

#include "learn.hpp"
#include "registry.hpp"
#include "stage.hpp"
#include "stats.hpp"
#include "tunables.hpp"

namespace unload::rt {

void nic_lane_arm(QpRec* q, const ibv_send_wr& w, const Route& rt, Why direct_why) {
  NicLaneMemo& x = q->nic_lane;
  x.armed = false;
  // The adaptive policy's decision, and not one it timed (a warm-up, a trial or an
  // exploration is, and is not the settled path: arming would end the express lane's memo
  // for it).
  if (!rt.adaptive || rt.t0 != 0 || !lane_write_shape(w) || !plain_path(rt.path) ||
      g_windows.load(std::memory_order_relaxed) != 0)
    return;
  x.inline_data = rt.req.user_inline;
  if (!x.inline_data && !source_keep(q, w.sg_list[0], &x.source)) return;
  x.stage_ok = stage_usable(q->sq.stage);
  x.registered = q->peer.registered;
  x.on_this_host = q->peer.on_this_host();
  x.nic_outstanding = nic_outstanding(q->sq);
  x.path = rt.path;
  x.preferred = rt.preferred;
  x.why = rt.why;
  x.direct_why = direct_why;
  x.length = rt.req.length;
  x.rkey = rt.req.rkey;
  x.tunables_seq = tunables_seq();
  x.eligible = rt.eligible;
  x.policy_gen = 0;  // another shape, perhaps: vouched for once reused again
  x.armed = true;
  // The policy's settled decision is now the NIC: an express memo left by an earlier
  // mapped write would take every write first, route it in full and never let this lane
  // (nor the QP's settling) have one. The next mapped write of the full path arms it again.
  q->express.disarm();
}

bool nic_lane_take(QpRec* q, const ibv_send_wr& w, const Tunables& t, Why direct_why, Route* rt) {
  NicLaneMemo& x = q->nic_lane;
  if (!x.armed || !lane_write_shape(w)) return false;
  const ibv_sge& sg = w.sg_list[0];
  const bool signaled = wr_signaled(q, w);
  if (!signaled || sg.length != x.length || w.wr.rdma.rkey != x.rkey ||
      ((w.send_flags & IBV_SEND_INLINE) != 0) != x.inline_data)
    return false;
  if (!x.inline_data && !source_holds(x.source, sg)) return false;
  if (tunables_seq() != x.tunables_seq || g_windows.load(std::memory_order_relaxed) != 0 ||
      q->peer.registered != x.registered || q->peer.on_this_host() != x.on_this_host ||
      nic_outstanding(q->sq) != x.nic_outstanding || stage_usable(q->sq.stage) != x.stage_ok ||
      !lane_clear(q) || direct_why != x.direct_why)
    return false;
  WriteRequest& r = rt->req;
  r = one_sge_write(x.inline_data, true, x.length, x.rkey, w.wr.rdma.remote_addr);
  if (!route_reuses_nic(q, x, r, t)) return false;
  rt->path = x.path;
  rt->preferred = x.preferred;
  rt->why = x.why;
  rt->eligible = x.eligible;
  rt->reused = true;
  return true;
}

void nic_lane_settled(QpRec* q) {
  NicLaneMemo& x = q->nic_lane;
  if (x.nic_outstanding) return;
  x.nic_outstanding = true;
  x.policy_gen = 0;  // the policy vouched for the feature as it was
}

bool nic_lane_may_settle(const Route& rt) {
  return rt.path != Path::unload_inline || !t_policy || !t_policy->settled_charges();
}

}  // namespace unload::rt
