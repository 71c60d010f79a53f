// The direct path (unload.direct): the kmod places a write at a paired local peer; the fence
// that orders it behind its QP's NIC requests; the shim's hidden marker requests.
#pragma once

#include "records.hpp"
#include "route.hpp"

namespace unload::rt {

// The fence (the write waits until its QP's earlier requests executed), then the module's
// copy; inside q's post gate. 0 when placed (its completion queued if signaled); else
// nothing was placed, *why says what stopped it, and the caller sends the write to the
// NIC, which orders it by itself and reports whatever error it finds.
int place_direct(QpRec* q, const ibv_sge* sg, uint64_t wr_id, const Route& rt, Why* why);

// A completion was queued on `c` while its channel may be armed: make the real CQ event
// fire, with a marker on some QP of the CQ. From ibv_req_notify_cq (no gate held).
void wake_channel_now(CqRec* c);

}  // namespace unload::rt
