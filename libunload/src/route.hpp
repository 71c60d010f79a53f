// The route of a request: what it is and which path it takes, decided once per request
// (docs/design.md, "Route"). Both post APIs (ibv_post_send and wr_*) call route(); nothing
// else decides a path.
#pragma once

#include "config.hpp"
#include "records.hpp"
#include "unload/classify.hpp"

namespace unload::rt {

struct Route {
  WriteRequest req;
  Path path = Path::offload;
  uint64_t t0 = 0;          // adaptive, a sampled write: when the policy had chosen (its cost runs from here)
  bool translated = false;  // SGEs name an iova other than their address
  Path preferred = Path::offload;  // what the mode wants: direct, or the forced path
  Why why = Why::none;             // why `path` is not `preferred` (docs/sysfs.md)
  policy::PathSet eligible = Path::offload;  // the paths it could take (what the policy weighed)
  bool reused = false;  // adaptive reused its settled decision (no clock, no sample)
};

// A request the express and NIC lanes can take: a lone RDMA WRITE of one SGE with no flag
// but SIGNALED, INLINE and SOLICITED (a fence's or an immediate's route reads more than
// their memos keep, and a list is the full path's to order).
inline bool lane_write_shape(const ibv_send_wr& w) {
  constexpr unsigned kShapeFlags = IBV_SEND_SIGNALED | IBV_SEND_INLINE | IBV_SEND_SOLICITED;
  return !w.next && w.opcode == IBV_WR_RDMA_WRITE && w.num_sge == 1 && !(w.send_flags & ~kShapeFlags);
}

// Every write to the NIC as the program built it (shim off, mode offload, UNLOAD_PATH=offload):
// the post paths then pass requests through untracked.
bool all_offload(const Tunables& t);

// What keeps writes on `q` from going direct now (none: a peer the kmod paired, a send CQ
// that can take shim-made completions, no failure seen). Asks the kmod again, less and
// less often, while a local peer is not paired yet (it may still be connecting).
Why direct_blocker(QpRec* q, const Tunables& t);
inline bool direct_possible(QpRec* q, const Tunables& t) {
  return direct_blocker(q, t) == Why::none;
}

// Whether the CPU places q's writes through the remote path rather than direct: forced by
// UNLOAD_PATH=remote, or, in the modes that rank, a registered peer on another host (direct
// is for one on this host). The caller's `direct_why` is then remote_blocker's.
bool places_remote(const QpRec* q);

// The route of one request whose local buffers are `sg[0..n)`. `direct_why`: what keeps
// the caller from running a direct write at this point (direct_blocker, or the request's
// position), none when it can.
Route route(QpRec* q, const WriteRequest& r, const ibv_sge* sg, const Tunables& t, Why direct_why);
inline Route route(QpRec* q, const ibv_send_wr& w, const Tunables& t, Why direct_why) {
  return route(q, classify(w, q->sq.sig_all), w.sg_list, t, direct_why);
}

// The express lane's decision (express.hpp) for a write its memo found eligible for
// `eligible`, which holds mapped: true when route() would send it mapped with nothing
// owed (mapped forced, or adaptive reusing a settled mapped decision, which this counts
// as route() does); false, with nothing counted, when route() must decide.
bool route_reuses_mapped(QpRec* q, const WriteRequest& r, policy::PathSet eligible, const Tunables& t);
// The same for the NIC lane (nic_lane.hpp): whether adaptive reuses, for r of the memo's
// shape, the settled decision the memo took (x.path), counted as route() counts it.
bool route_reuses_nic(QpRec* q, NicLaneMemo& x, const WriteRequest& r, const Tunables& t);

// The reason to count for a write routed `rt` and carried out on `taken`: none when it
// took its preferred path; the route's reason when it was routed elsewhere; `fallback`
// when it was routed to its preferred path but that path could not run it after all.
Why route_why(const Route& rt, Path taken, Why fallback);

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

// Adaptive mode: the policy of this thread (or, for a thread that never posts, the next
// poster's on `q`) learns the cost of a path that finished, and
// for an offloaded write how long this thread spent on it in verbs calls: its post
// (`post_call_ns` of its `t0 .. completion`: a software NIC such as rxe does the NIC's work
// inside post_send, on the caller's CPU) and its busy-poll for the completion.
void observe(QpRec* q, Path p, uint32_t length, uint32_t sge_count, uint32_t rkey, uint64_t remote_addr,
             uint64_t t0, uint64_t post_call_ns = 0);
// As observe(), for a direct or mapped write (`p`) whose cost the caller measured (its
// share of a submission of several), all of it CPU time.
void observe_direct(QpRec* q, Path p, const WriteRequest& r, uint64_t cost_ns);
// As observe_direct, for a remote write: its post to its verdict, none of it this host's
// CPU (the program runs on, or sleeps, while the peer's module places it), so the CPU
// budget is not charged.
void observe_remote(QpRec* q, const WriteRequest& r, uint64_t cost_ns);

// What the program's ibv_poll_cq returned (after the merge): a run of empty polls is a
// wait for the NIC, which observe() reports to the policy.
void note_poll(int got);

}  // namespace unload::rt
