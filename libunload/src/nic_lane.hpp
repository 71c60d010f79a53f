// The NIC lane (docs/design.md, "The NIC lane"): a lone signaled write of the shape the
// full path last gave the NIC as a plain write (post.cpp) by the adaptive policy's settled
// decision, taken without classifying and routing it again. What that route answered
// depended on the request (kind, length, rkey, inline or its source region), the QP's
// blockers, queue and peer, the tunables, the stage arena and the windows; the memo keeps
// each, and the lane takes a write only while all of them hold and the policy reuses its
// decision or decides it as surely for another target page (vouched as the express
// lane's, counted as route() counts it). A write the lane
// declines takes the full path, which decides it as it would have: a NIC write is exact
// however it was chosen, so the lane can only differ in what it costs.
#pragma once

#include "records.hpp"
#include "route.hpp"

namespace unload::rt {

// The full path gave the one-request list `w` to the NIC as a plain write, routed `rt`,
// with `direct_why` keeping the CPU paths off: remembers its shape when the adaptive policy
// decided it (Route::adaptive) without timing it, reused or not (a decision for another
// target page counts as much). Post gate.
void nic_lane_arm(QpRec* q, const ibv_send_wr& w, const Route& rt, Why direct_why);

// Whether the lane takes `w` (`t`: tunables(), read for this post; `direct_why`: what keeps
// the CPU paths off it now, as the full path finds it): then *rt is its route, the
// policy's decision taken, and the caller posts it plain. Post gate.
bool nic_lane_take(QpRec* q, const ibv_send_wr& w, const Tunables& t, Why direct_why, Route* rt);

// q was just settled on the NIC (post.cpp): its requests go around the ring from now on, so
// the policy's feature the memo kept (a NIC request in flight) is true at every later
// consult. The memo takes it, to be vouched for again, rather than declining each consult.
void nic_lane_settled(QpRec* q);

// Whether a write the lane took, routed `rt`, counts toward settling its QP on the NIC
// (post.cpp): not an inline one whose decision draws on the thread's capped CPU budget,
// since each such write must reach the policy to be charged, and a settled QP's posts do
// not (one in 64 consults).
bool nic_lane_may_settle(const Route& rt);

}  // namespace unload::rt
