// A request as the paths receive it: its route (what the route decided, route.hpp) and its
// SGEs checked against the regions made through the shim.
#pragma once

#include "classify.hpp"
#include "records.hpp"
#include "unload.h"

namespace unload::rt {

// What route() decided for one request (route.hpp).
struct Route {
  WriteRequest req;
  Path path = Path::offload;
  uint64_t t0 = 0;          // adaptive, a sampled write: when the policy had chosen (its cost runs from here)
  bool translated = false;  // SGEs name an iova other than their address
  Path preferred = Path::offload;  // what the mode wants: direct, or the forced path
  Why why = Why::none;             // why `path` is not `preferred` (docs/sysfs.md)
  policy::PathSet eligible = Path::offload;  // the paths it could take (what the policy weighed)
  bool reused = false;  // adaptive reused its settled decision (no clock, no sample)
  // The adaptive policy decided `path`: the mode adaptive, no path forced, more than the
  // NIC to weigh (else route() asks it nothing).
  bool adaptive = false;
};

// One write the CPU places (direct, mapped or remote): its local buffers, its wr_id, its
// route.
struct DirectWrite {
  const ibv_sge* sg;
  uint64_t wr_id;
  Route rt;
};

// The paths a plain write takes (post.cpp), the NIC given it as built or inline with no
// ring entry: what the NIC lane remembers and a QP settled on the NIC posts.
inline bool plain_path(Path p) {
  return p == Path::offload || p == Path::unload_inline;
}

// A request the express and NIC lanes can take: a lone RDMA WRITE of one SGE with no flag
// but SIGNALED, INLINE and SOLICITED (a fence's or an immediate's route reads more than
// their memos keep, and a list is the full path's to order).
inline bool lane_write_shape(const ibv_send_wr& w) {
  constexpr unsigned kShapeFlags = IBV_SEND_SIGNALED | IBV_SEND_INLINE | IBV_SEND_SOLICITED;
  return !w.next && w.opcode == IBV_WR_RDMA_WRITE && w.num_sge == 1 && !(w.send_flags & ~kShapeFlags);
}

// Whether w asks for a completion on q: its flag, or a QP that signals every request.
inline bool wr_signaled(const QpRec* q, const ibv_send_wr& w) {
  return q->sq.sig_all | ((w.send_flags & IBV_SEND_SIGNALED) != 0);
}

// The reason to count for a write routed `rt` and carried out on `taken`: none when it
// took its preferred path; the route's reason when it was routed elsewhere; `fallback`
// when it was routed to its preferred path but that path could not run it after all.
inline Why route_why(const Route& rt, Path taken, Why fallback) {
  if (taken == rt.preferred) return Why::none;
  if (rt.why != Why::none) return rt.why;  // routed elsewhere, for this reason
  return fallback != Why::none ? fallback : Why::no_room;
}

// Do the SGEs lie inside regions registered through the shim on the QP's PD? Sets
// *translated when one of them is a region whose iova is not its address
// (ibv_reg_mr_iova2): the inline and stage copies read SGEs as process addresses, so
// only direct, given translated SGEs, can take such a request.
// Memory the CPU must not touch (an MR made NIC only, nic_only.hpp) is not valid either.
// sges_why says which: none, region, or nic_memory.
Why sges_why(const QpRec* q, const ibv_sge* sg, uint32_t n, bool* translated);
inline bool sges_valid(const QpRec* q, const ibv_sge* sg, uint32_t n, bool* translated) {
  return sges_why(q, sg, n, translated) == Why::none;
}

// Does `rkey` name a memory window made through the shim (a write to it takes the NIC)?
bool window_rkey(const QpRec* q, uint32_t rkey);

// The SGEs (already valid) as process addresses, into out[0..n).
void sges_translate(const QpRec* q, const ibv_sge* sg, uint32_t n, ibv_sge* out);

// The module's request for a write: what every request says, its sender, its target, its
// length; the source is the caller's.
[[gnu::always_inline]] inline void request_head(const QpRec* q, const WriteRequest& r,
                                                unload_direct_req& req) {
  req = unload_direct_req{};
  req.qp_num = q->qp_num;
  req.qp_handle = q->peer.handle;
  req.rkey = r.rkey;
  req.remote_addr = r.remote_addr;
  req.length = r.length;
}
// The module's request for w (iov: room for its segment list); false when it cannot take it.
bool build_request(const QpRec* q, const DirectWrite& w, unload_direct_req& req, unload_iov* iov);

}  // namespace unload::rt
