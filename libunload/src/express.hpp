// The express lane (docs/design.md, "The express lane"): a write of the shape the full
// path last sent direct through a mapping on its QP, taken without routing it again.
// What route() answered for that shape depended on the request (opcode, flags, length,
// rkey, its source region), the QP's peer and queue, the tunables, the stage arena, the
// windows and the mapping. The memo keeps the answer with each of those, and the lane
// takes a write only while all of them still hold, each a load or two. The policy still
// decides every write (its reused decision, counted as route() counts it, or route()
// itself when there is none to reuse), and the mapping's word still stands for what the
// responder checks.
#pragma once

#include <cstdint>

#include "records.hpp"
#include "route.hpp"

namespace unload::rt {

enum class Express : uint8_t {
  declined,  // not the memo's shape, or something it depended on changed: nothing done
  placed,    // placed and finished as the full path finishes it (its completion queued)
  refused,   // the policy's reused decision, which the mapping refused: express_route
  decide,    // the memo's shape but not a reused decision: express_route, which routes it
  held,      // express_take_plainly's: the memo holds, nothing done: express_take_held
  wake,      // express_take_plainly's: placed, its completion queued on an armed CQ: express_wake
};

// The full path placed the one-request list `w` direct, routed `rt`: remembers its shape
// when a mapping of its target is granted. Post gate.
void express_arm(QpRec* q, const ibv_send_wr& w, const Route& rt);

// Takes `w` when the memo is armed, `w` is of its shape and nothing the memo depended on
// changed, and places it when the policy reuses its decision; `t` is tunables(), read for
// this post. Builds no Route, so that the lane's own post keeps a small frame. Post gate.
Express express_take(QpRec* q, const ibv_send_wr& w, const Tunables& t);
// express_take for a `w` the memo was found to hold for (express_take_plainly's `held`).
Express express_take_held(QpRec* q, const ibv_send_wr& w, const Tunables& t);

// express_take for a post that calls nothing (and so saves no register): a write of a
// plain memo (records.hpp, ExpressMemo::plain) that the policy reuses with nothing but
// its countdown to count, and whose count flushes nothing, or `held`, nothing done, or
// `declined`. Post gate.
Express express_take_plainly(QpRec* q, const ibv_send_wr& w);
// After express_take_plainly's `wake`: the marker that wakes the CQ's channel, as the
// full lane posts it. Post gate.
void express_wake(QpRec* q, const ibv_send_wr& w);

// After express_take's `refused` or `decide`: places `w` as the full path would (true),
// or routes it in *rt for the full path to go on from (false). Post gate.
bool express_route(QpRec* q, const ibv_send_wr& w, const Tunables& t, Express e, Route* rt);

}  // namespace unload::rt
