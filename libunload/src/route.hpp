// The route of a request: what it is and which path it takes, decided once per request
// (docs/design.md, "Route"). Both post APIs (ibv_post_send and wr_*) call route(); nothing
// else decides a path.
#pragma once

#include "records.hpp"
#include "request.hpp"
#include "stats.hpp"
#include "tunables.hpp"

namespace unload::rt {


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

// The express lane's decision (express.hpp) for a write of its memo's shape to
// `remote_addr`, the memo having found it eligible for `eligible`, which holds mapped: true
// when route() would send it mapped with nothing owed and untimed (mapped forced, or
// adaptive reusing a settled mapped decision, which this counts as route() does); false,
// with nothing counted, when route() must decide.
bool route_reuses_mapped(QpRec* q, uint64_t remote_addr, policy::PathSet eligible, const Tunables& t);
// route_reuses_mapped's answer when it calls nothing (mapped forced, or a vouched reuse
// with nothing but its countdown to count): false, nothing counted, else.
bool route_reuses_mapped_plainly(const QpRec* q, uint64_t remote_addr);
// The same for the NIC lane (nic_lane.hpp): whether adaptive reuses, for r of the memo's
// shape, the settled decision the memo took (x.path), or decides x.path for r's other
// target page as surely, counted as route() counts it.
bool route_reuses_nic(QpRec* q, NicLaneMemo& x, const WriteRequest& r, const Tunables& t);


}  // namespace unload::rt
