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
  routed,    // routed, and not placed here (another path, or the mapping refused it): the full
             // path goes on from *rt
};

// The full path placed the one-request list `w` direct, routed `rt`: remembers its shape
// when a mapping of its target is granted. Post gate.
void express_arm(QpRec* q, const ibv_send_wr& w, const Route& rt);

// Takes `w` when the memo is armed, `w` is of its shape and nothing the memo depended on
// changed; `t` is tunables(), read for this post. Post gate.
Express express_post(QpRec* q, const ibv_send_wr& w, const Tunables& t, Route* rt);

}  // namespace unload::rt
