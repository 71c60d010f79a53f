// The remote path (unload.remote): a run of writes sent by this host's module to the host
// their QP is connected to, whose module places them under the responder's checks
// (docs/design.md, "A remote write's walk"). Direct's fence and request building serve it
// (direct.hpp); what differs is here: the channel's probe, the submission's flag, and the
// answer a sender gets when the target host stopped answering.
#include "remote.hpp"

#include "remote_ring.hpp"

#include "kmod.hpp"
#include "learn.hpp"
#include "registry.hpp"
#include "route.hpp"
#include "stats.hpp"
#include "tunables.hpp"
#include "unload.h"

#include <cerrno>

namespace unload::rt {

Why remote_blocker(QpRec* q, const Tunables& t) {
  if (q->qp->qp_type != IBV_QPT_RC) return Why::not_rc;
  if (!t.enabled || t.direct_max == 0) return Why::path_off;
  if (!kmod_present()) return Why::no_module;
  Path forced;
  const bool is_forced = forced_path(forced);
  if (!is_forced && t.mode == static_cast<uint32_t>(policy::Mode::offload)) return Why::policy;
  if (!q->peer.registered || q->peer.session != g_kmod.session) return Why::unregistered;
  PeerLink& p = q->peer;
  // Read from the AV at the program's modify and from the module's report: either says the
  // peer QP is on this host, where direct places it without a network.
  if (p.on_this_host()) return Why::local_peer;
  if (q->failed.load(std::memory_order_relaxed)) return Why::qp_error;
  if (q->sq.ring.head() < p.stuck_below) return Why::queue;
  const CqRec* c = q->scq;
  if (!c || c->cqx) return Why::cq;  // an ibv_cq_ex's poll sequence is not the fence's to drive
  // Once per registration: does the peer host's module answer? A host without one would
  // refuse every write after a connect attempt each; the probe asks once, and again only
  // after a channel came up somewhere (the count read before the probe, so one coming up
  // during it is asked about next time). Unforced, only a channel already up counts
  // (opened by `unloadctl probe`, a forced run, or the peer): the probe then puts nothing
  // on the wire, so a peer without unload sees no change.
  // This host's module without a key (channel/key) refuses at once: the channel is closed.
  if (p.channel >= 2 && kmod_channels_up() != p.channels_seen) p.channel = 0;
  if (p.channel == 0) {
    p.channels_seen = kmod_channels_up();
    const int rc = kmod_probe_channel(q->qp->context, p.port, p.dgid, !is_forced);
    p.channel = rc == 0 ? 1 : rc == -ENOKEY ? 3 : 2;
  }
  return p.channel == 1 ? Why::none : p.channel == 3 ? Why::no_key : Why::no_channel;
}

int place_remote(QpRec* q, const DirectWrite* w, int n, Why* why) {
  // A failed epoch's writes go to the NIC first: the fence then waits for them.
  remote_settle_if_failed(q);
  bool waited = false;
  if (const int rc = fence_before_direct(q, w[0].rt.req, &waited)) {
    *why = fence_why(rc);
    return 0;
  }
  bool fits = true;
  for (int i = 0; i < n && fits; ++i) fits = remote_async_fits(q, w[i]);
  if (fits) {
    const int done = submit_remote_async(q, w, n, why);
    if (done || *why != Why::no_module) return done;
    *why = Why::none;  // no ring here: the synchronous submission
  }
  remote_settle_if_pending(q);  // it must not pass the writes in flight
  CqRec* c = q->scq;
  unload_direct_req reqs[kDirectRunMax];
  uint64_t tickets[kDirectRunMax];
  unload_iov iov[UNLOAD_MAX_IOV];
  int m = 0;
  // A cell for every write, signaled or not: an unanswered one completes in error whatever
  // the program asked for, as on the NIC. A full queue sends the rest to the NIC.
  for (; m < n; ++m) {
    if (!build_request(q, w[m], reqs[m], iov)) {
      *why = Why::refused;
      break;
    }
    if (!c->pending.claim(tickets[m])) {
      *why = Why::no_room;
      break;
    }
  }
  const int done = m ? kmod_submit(reqs, static_cast<uint32_t>(m), UNLOAD_SUBMIT_REMOTE) : 0;
  bool timed = false;  // a sampled write's cost: its share of the submission, from its route
  for (int i = 0; i < m; ++i) timed |= w[i].rt.t0 != 0;
  const uint64_t end_ns = timed ? now_ns() : 0;
  int placed = 0;
  bool queued = false;
  for (; placed < done && reqs[placed].result == 0; ++placed) {
    const WriteRequest& r = w[placed].rt.req;
    count_writes(Path::unload_remote, 1, r.length);
    if (const uint64_t t0 = w[placed].rt.t0) observe_remote(q, r, (end_ns - t0) / static_cast<uint64_t>(m));
    q->peer.last_rkey = r.rkey;
    q->peer.last_addr = r.remote_addr;
    q->peer.has_last = true;
    if (!r.signaled) {
      c->pending.cancel(tickets[placed]);
      continue;
    }
    ibv_wc wc{};
    wc.wr_id = w[placed].wr_id;
    wc.status = IBV_WC_SUCCESS;
    wc.opcode = IBV_WC_RDMA_WRITE;
    wc.qp_num = q->qp_num;
    wc.byte_len = r.length;
    c->pending.fill(tickets[placed], wc);
    queued = true;
  }
  int consumed = placed;
  if (placed < done && reqs[placed].result == -ECOMM) {
    count_writes(Path::unload_remote, 1, w[placed].rt.req.length);
    fail_unanswered(q, w[placed].wr_id, tickets[placed]);
    queued = true;
    *why = Why::qp_error;  // the rest flush on the NIC, behind it
    consumed = placed + 1;
  } else if (placed < m) {
    *why = Why::refused;  // -EACCES: the NIC gives the responder's own verdict
  }
  for (int i = consumed; i < m; ++i) c->pending.cancel(tickets[i]);
  if (queued) wake_after_queueing(q, w[consumed - 1].rt.req);
  return consumed;
}

}  // namespace unload::rt
