// The direct path (unload.direct): the kmod places a write at a paired local peer; the fence
// that orders it behind its QP's NIC requests; the shim's hidden marker requests.
#pragma once

#include "records.hpp"
#include "route.hpp"

namespace unload::rt {

// Inside q's post gate. 0 when the write may be placed now; else -errno and the caller
// sends it to the NIC (which orders it by itself): no room for a marker, an extended CQ
// with requests in flight, an earlier request failed, or the wait did not finish promptly.
int fence_before_direct(QpRec* q, const WriteRequest& r);

// Inside q's post gate, after the fence. 0 when placed (its completion queued if
// signaled); else non-zero and nothing was placed: the caller sends it to the NIC, which
// reports whatever error it finds.
int run_direct(QpRec* q, const ibv_sge* sg, uint64_t wr_id, const Route& rt);

// The fence, then the copy (inside q's post gate): 0 when placed; else nothing was
// placed, *why says what stopped it, and the caller sends the write to the NIC.
int place_direct(QpRec* q, const ibv_sge* sg, uint64_t wr_id, const Route& rt, Why* why);

// A completion was queued on `c` while its channel may be armed: make the real CQ event
// fire, with a marker on some QP of the CQ. From ibv_req_notify_cq (no gate held).
void wake_channel_now(CqRec* c);

}  // namespace unload::rt
