// The ibv_qp_ex wr_* API: every request built gets a ring entry, and a write its route once
// its payload call gives the length.
//
// Held writes. A write's path is known only at its payload call, but the provider must
// hear of it before: wr_rdma_write(_imm) writes the WQE's header, flags included, and
// some providers (rxe among them) read inline data only when IBV_SEND_INLINE was in the
// flags then. So the shim holds every write's header (kHeldHeader) and gives it to the
// provider at the payload call, once routed, with IBV_SEND_INLINE added when the shim
// inlines it. Anything else the program calls first (another request, wr_complete) hands
// the header over as it is, in its place.
//
// The provider posts a batch whole at wr_complete, so a write the CPU places (direct, or
// remote for a peer on another host) inside a batch could not wait for the batch's earlier
// requests (they are not posted yet) and cannot be taken back once the provider has it.
// So only the first request of a batch may take a CPU path: its payload call then holds it
// to the end (kHeldCpu). It goes to the provider on the NIC as soon as the program builds
// anything behind it, in its place. At wr_complete a write still held is the whole batch:
// the provider's empty batch is closed with wr_abort, then the write runs on its path or,
// refused, is posted to the NIC. wr_abort drops a held write.
//
// The QP's post gate is held from wr_start to wr_complete or wr_abort: a batch is one
// producer of the ring, as an ibv_post_send is.
//
// Pass-through batches. When every write goes to the NIC as built (all_offload, decided
// at wr_start), the batch goes to the provider untouched: no ring entries, no held
// headers; writes are only counted, and the QP is marked `untracked` for the next fence.
#include "qp_ex.hpp"

#include "busy.hpp"
#include "direct.hpp"
#include "hidden.hpp"
#include "nic_post.hpp"
#include "parts.hpp"
#include "registry.hpp"
#include "remote.hpp"
#include "remote_ring.hpp"
#include "route.hpp"
#include "stage.hpp"
#include "stats.hpp"
#include "tunables.hpp"
#include "unload.h"

#include <cstring>
#include <new>

namespace unload::rt {

namespace {

enum : uint8_t { kHeldNone, kHeldHeader, kHeldCpu };

// The most SGEs of a wr_* write that may be held for a CPU path (the kmod's iovec cap).
constexpr uint32_t kHeldMaxSge = UNLOAD_MAX_IOV;
// The CPU paths' SGE limit in the wr_* API.
constexpr size_t kMaxSge = 16;
// Multi-SGE payloads the shim inlines are gathered here first: a provider's inline-data-list
// path need not handle several buffers (rxe's places nothing), one buffer it must.
constexpr size_t kGatherMax = 16384;
thread_local uint8_t t_gather[kGatherMax];

}  // namespace

// A held write, as the program described it.
struct HeldWrite {
  uint8_t state = kHeldNone;
  bool first = false;  // the batch's first request (so it may go direct)
  bool imm = false;    // wr_rdma_write_imm
  __be32 imm_data = 0;
  uint32_t rkey = 0;
  uint32_t flags = 0;  // wr_flags when the write was started
  uint32_t nsge = 0;
  uint64_t addr = 0;
  uint64_t wr_id = 0;
  Route route;  // kHeldCpu: its route
  ibv_sge sge[kHeldMaxSge];
};

struct QpxState {
  ibv_qp_ex orig;  // the provider's table
  bool gate_how = false;
  bool pass = false;        // the batch goes to the provider untouched
  bool pass_write = false;  // ... and its request being built is a write, not yet counted
  uint64_t start = 0;       // ring tail at wr_start
  uint64_t tail = 0;        // ring tail as the batch grows
  uint64_t stage_start = 0;
  uint64_t nic = 0;    // requests given to the provider in the batch
  bool timed = false;  // a request of the batch carries a policy timestamp (adaptive)
  HeldWrite held;
  uint64_t writes[policy::kPathCount] = {};  // statistics, committed by wr_complete
  uint64_t bytes[policy::kPathCount] = {};
  uint64_t why_not[UNLOAD_WHY_COUNT] = {};
};

namespace {

// Hooks are installed only on QPs with a record, which lives until destroy.
QpRec* qpx_rec(ibv_qp_ex* qpx) {
  return g_qps.find(key_of(&qpx->qp_base));
}

// Starts an entry for the request the program is building; swaps its wr_id for the tag
// around the provider's call.
template <class F>
SqEntry* request(QpRec* q, ibv_qp_ex* qpx, uint8_t flags, F&& call, bool timed = false) {
  QpxState* s = q->qpx;
  SqEntry* e = q->sq.ring.reserve(s->tail);
  if (!e) {  // ring full: so is the send queue; the provider will refuse the batch
    call();
    return nullptr;
  }
  const bool signaled = q->sq.sig_all || (qpx->wr_flags & IBV_SEND_SIGNALED);
  // An unsignaled request may carry a completion the program never sees (direct.hpp).
  const bool hidden = !signaled && take_hidden_signal(q, e->seq, timed);
  if (hidden) qpx->wr_flags |= IBV_SEND_SIGNALED;
  if (signaled || hidden) note_completing(q, e->seq);
  e->user_wr_id = qpx->wr_id;
  e->post_ns = 0;
  e->post_call_ns = 0;
  e->remote_addr = 0;
  e->stage_mark = q->sq.stage.tail;
  e->length = 0;
  e->rkey = 0;
  e->sge_count = 0;
  e->path = 0;
  e->flags = static_cast<uint8_t>(flags | (signaled ? kSignaled : 0) | (hidden ? kHidden : 0));
  if (flags & kOrdering) q->sq.last_ordering = e->seq + 1;
  const uint64_t user = qpx->wr_id;
  qpx->wr_id = q->sq.ring.tag_of(e);
  call();
  qpx->wr_id = user;
  if (hidden) qpx->wr_flags &= ~static_cast<uint32_t>(IBV_SEND_SIGNALED);
  q->sq.ring.publish(++s->tail);
  s->nic++;
  return e;
}

// The held write as an ibv_send_wr (for the direct path and the NIC fallback).
ibv_send_wr held_wr(HeldWrite& h) {
  ibv_send_wr w{};
  w.wr_id = h.wr_id;
  w.sg_list = h.sge;
  w.num_sge = static_cast<int>(h.nsge);
  w.opcode = h.imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
  w.imm_data = h.imm_data;
  w.send_flags = h.flags;
  w.wr.rdma.remote_addr = h.addr;
  w.wr.rdma.rkey = h.rkey;
  return w;
}

// Gives the provider the held write's header with `extra_flags` added to the program's.
// The entry, or nullptr when the ring is full (the provider will refuse the batch).
SqEntry* issue_header(QpRec* q, ibv_qp_ex* qp, uint32_t extra_flags, bool timed = false) {
  QpxState* s = q->qpx;
  HeldWrite& h = s->held;
  h.state = kHeldNone;
  const uint64_t wr_id = qp->wr_id;
  const uint32_t flags = qp->wr_flags;
  qp->wr_id = h.wr_id;
  qp->wr_flags = h.flags | extra_flags;
  SqEntry* e = request(
      q, qp, kWrite,
      [&] {
        if (h.imm)
          s->orig.wr_rdma_write_imm(qp, h.rkey, h.addr, h.imm_data);
        else
          s->orig.wr_rdma_write(qp, h.rkey, h.addr);
      },
      timed);
  if (e) {
    e->rkey = h.rkey;
    e->remote_addr = h.addr;
  }
  qp->wr_id = wr_id;
  qp->wr_flags = flags;
  return e;
}

void count(QpxState* s, Path p, uint64_t length) {
  s->writes[policy::index_of(p)]++;
  s->bytes[policy::index_of(p)] += length;
}

WriteRequest held_request(const QpRec* q, const HeldWrite& h, size_t n, const ibv_sge* sg) {
  WriteRequest r;
  r.is_write = true;
  r.with_imm = h.imm;
  r.signaled = q->sq.sig_all || (h.flags & IBV_SEND_SIGNALED);
  r.fence = h.flags & IBV_SEND_FENCE;
  r.sge_count = static_cast<uint32_t>(n);
  uint64_t len = 0;
  for (size_t i = 0; i < n; ++i) len += sg[i].length;
  r.length = len > UINT32_MAX ? UINT32_MAX : static_cast<uint32_t>(len);
  r.rkey = h.rkey;
  r.remote_addr = h.addr;
  return r;
}

// Gives the provider the held header and the payload its path needs.
void issue_payload(QpRec* q, ibv_qp_ex* qp, size_t n, const ibv_sge* sg, const Route& rt) {
  QpxState* s = q->qpx;
  Path p = rt.path;
  if (n > kMaxSge) p = Path::offload;
  if (p == Path::unload_inline && n > 1 && rt.req.length > kGatherMax) p = Path::offload;
  SqEntry* e = issue_header(q, qp, p == Path::unload_inline ? IBV_SEND_INLINE : 0, rt.t0 != 0);
  if (e) {
    e->length = rt.req.length;
    e->sge_count = static_cast<uint16_t>(n);
    e->post_ns = rt.t0;
    e->post_call_ns = 0;  // stamped at wr_complete, where the provider posts
    s->timed |= rt.t0 != 0;
    if (p == Path::unload_stage && !stage_copy(q->sq.stage, e, sg, static_cast<uint32_t>(n), rt.req.length))
      p = Path::offload;
    e->path = static_cast<uint8_t>(p);
  } else {
    p = Path::offload;  // the provider refuses the batch anyway
  }
  count(s, p, rt.req.length);
  if (const Why why = route_why(rt, p, Why::no_room); why != Why::none)
    s->why_not[static_cast<unsigned>(why)]++;
  if (p == Path::unload_inline) {
    if (n == 1) {
      s->orig.wr_set_inline_data(qp, reinterpret_cast<void*>(sg[0].addr), sg[0].length);
      return;
    }
    size_t off = 0;
    for (size_t i = 0; i < n; ++i) {
      std::memcpy(t_gather + off, reinterpret_cast<const void*>(sg[i].addr), sg[i].length);
      off += sg[i].length;
    }
    s->orig.wr_set_inline_data(qp, t_gather, off);  // the provider copies it now
  } else if (p == Path::unload_stage) {
    s->orig.wr_set_sge(qp, e->stage_sge.lkey, e->stage_sge.addr, e->stage_sge.length);
  } else if (n == 1) {
    s->orig.wr_set_sge(qp, sg[0].lkey, sg[0].addr, sg[0].length);
  } else {
    s->orig.wr_set_sge_list(qp, n, sg);
  }
}

// The held write's payload, given as SGEs: its route, once. Held on for a CPU path (direct
// or remote) when it is the batch's first request; otherwise given to the provider now.
void write_payload(QpRec* q, ibv_qp_ex* qp, size_t n, const ibv_sge* sg) {
  QpxState* s = q->qpx;
  HeldWrite& h = s->held;
  const Tunables& t = tunables();
  // Only a batch's first write can be held back for a CPU path.
  const Why direct_why = !h.first ? Why::queue : n > kHeldMaxSge ? Why::size : cpu_blocker(q, t);
  Route rt = route(q, held_request(q, h, n, sg), sg, t, direct_why);
  if (policy::places_here(rt.path) || rt.path == Path::unload_remote) {
    h.nsge = static_cast<uint32_t>(n);
    for (size_t i = 0; i < n; ++i) h.sge[i] = sg[i];  // the program's list is theirs again on return
    h.route = rt;
    h.state = kHeldCpu;
    return;
  }
  issue_payload(q, qp, n, sg, rt);
}

// Hands whatever write is held to the provider, where it stands in the batch (before
// whatever the program builds next): a header as the program gave it, a write held for a
// CPU path on the NIC with its payload.
void release_held(QpRec* q, ibv_qp_ex* qp) {
  HeldWrite& h = q->qpx->held;
  if (h.state == kHeldNone) return;
  if (h.state == kHeldCpu) {
    Route rt = h.route;
    rt.path = Path::offload;
    rt.why = Why::queue;  // no longer the batch's only request: the reason the others get
    issue_payload(q, qp, h.nsge, h.sge, rt);
    return;
  }
  if (SqEntry* e = issue_header(q, qp, 0)) e->path = static_cast<uint8_t>(Path::offload);
  count(q->qpx, Path::offload, 0);
}

}  // namespace

// The engine entry points the shim installs in the QP's table (unload/runtime.h) and their
// helpers.

#define UNLOAD_QPX_PASS(name, flags, params, args)     \
  extern "C" void unload_qpx_##name params {           \
    QpRec* q = qpx_rec(qp);                            \
    if (!q) return;                                    \
    QpxState* s = q->qpx;                              \
    if (s->pass) {                                     \
      s->pass_write = false;                           \
      s->orig.name args;                               \
      return;                                          \
    }                                                  \
    release_held(q, qp);                               \
    request(q, qp, flags, [&] { s->orig.name args; }); \
  }
UNLOAD_QPX_PASS(wr_atomic_cmp_swp, kOrdering,
                (ibv_qp_ex * qp, uint32_t rkey, uint64_t addr, uint64_t cmp, uint64_t swp),
                (qp, rkey, addr, cmp, swp))
UNLOAD_QPX_PASS(wr_atomic_fetch_add, kOrdering, (ibv_qp_ex * qp, uint32_t rkey, uint64_t addr, uint64_t add),
                (qp, rkey, addr, add))
UNLOAD_QPX_PASS(wr_bind_mw, 0, (ibv_qp_ex * qp, ibv_mw* mw, uint32_t rkey, const ibv_mw_bind_info* info),
                (qp, mw, rkey, info))
UNLOAD_QPX_PASS(wr_local_inv, 0, (ibv_qp_ex * qp, uint32_t rkey), (qp, rkey))
UNLOAD_QPX_PASS(wr_rdma_read, kOrdering, (ibv_qp_ex * qp, uint32_t rkey, uint64_t addr), (qp, rkey, addr))
UNLOAD_QPX_PASS(wr_send, 0, (ibv_qp_ex * qp), (qp))
UNLOAD_QPX_PASS(wr_send_imm, 0, (ibv_qp_ex * qp, __be32 imm), (qp, imm))
UNLOAD_QPX_PASS(wr_send_inv, 0, (ibv_qp_ex * qp, uint32_t rkey), (qp, rkey))
UNLOAD_QPX_PASS(wr_send_tso, 0, (ibv_qp_ex * qp, void* hdr, uint16_t hdr_sz, uint16_t mss),
                (qp, hdr, hdr_sz, mss))
UNLOAD_QPX_PASS(wr_atomic_write, kOrdering, (ibv_qp_ex * qp, uint32_t rkey, uint64_t addr, const void* op),
                (qp, rkey, addr, op))
#undef UNLOAD_QPX_PASS

static void hold_header(QpRec* q, ibv_qp_ex* qp, uint32_t rkey, uint64_t addr, bool imm, __be32 imm_data) {
  QpxState* s = q->qpx;
  release_held(q, qp);
  HeldWrite& h = s->held;
  h.state = kHeldHeader;
  h.first = s->nic == 0;
  h.imm = imm;
  h.imm_data = imm_data;
  h.rkey = rkey;
  h.addr = addr;
  h.wr_id = qp->wr_id;
  h.flags = qp->wr_flags;
  h.nsge = 0;
}

extern "C" void unload_qpx_wr_rdma_write(ibv_qp_ex* qp, uint32_t rkey, uint64_t addr) {
  QpRec* q = qpx_rec(qp);
  if (!q) return;
  if (q->qpx->pass) {
    q->qpx->pass_write = true;
    q->qpx->orig.wr_rdma_write(qp, rkey, addr);
    return;
  }
  hold_header(q, qp, rkey, addr, false, 0);
}

extern "C" void unload_qpx_wr_rdma_write_imm(ibv_qp_ex* qp, uint32_t rkey, uint64_t addr, __be32 imm) {
  QpRec* q = qpx_rec(qp);
  if (!q) return;
  if (q->qpx->pass) {
    q->qpx->pass_write = true;
    q->qpx->orig.wr_rdma_write_imm(qp, rkey, addr, imm);
    return;
  }
  hold_header(q, qp, rkey, addr, true, imm);
}

// A pass-through batch's payload call: counts the write it completes.
static void pass_count(QpxState* s, uint64_t length) {
  if (!s->pass_write) return;
  s->pass_write = false;
  count(s, Path::offload, length);
}

// A payload call for the held header: its route now. A payload call with nothing held
// (misuse, or a second payload for one write) goes to the provider as it is.
static void sge_payload(ibv_qp_ex* qp, size_t n, const ibv_sge* sg) {
  QpRec* q = qpx_rec(qp);
  if (!q) return;
  QpxState* s = q->qpx;
  if (s->pass) {
    uint64_t len = 0;
    for (size_t i = 0; i < n; ++i) len += sg[i].length;
    pass_count(s, len);
  } else if (s->held.state == kHeldHeader) {
    write_payload(q, qp, n, sg);
    return;
  }
  if (n == 1)
    s->orig.wr_set_sge(qp, sg[0].lkey, sg[0].addr, sg[0].length);
  else
    s->orig.wr_set_sge_list(qp, n, sg);
}

extern "C" void unload_qpx_wr_set_sge(ibv_qp_ex* qp, uint32_t lkey, uint64_t addr, uint32_t length) {
  const ibv_sge sge{addr, length, lkey};
  sge_payload(qp, 1, &sge);
}

extern "C" void unload_qpx_wr_set_sge_list(ibv_qp_ex* qp, size_t n, const ibv_sge* sg) {
  sge_payload(qp, n, sg);
}

// The program inlines the payload itself: the NIC path, with the program's flags.
static void user_inline(QpRec* q, ibv_qp_ex* qp, uint64_t length) {
  if (q->qpx->held.state != kHeldHeader) return;
  if (SqEntry* e = issue_header(q, qp, 0)) {
    e->length = length > UINT32_MAX ? UINT32_MAX : static_cast<uint32_t>(length);
    e->path = static_cast<uint8_t>(Path::offload);
  }
  count(q->qpx, Path::offload, length);
}

extern "C" void unload_qpx_wr_set_inline_data(ibv_qp_ex* qp, void* addr, size_t length) {
  QpRec* q = qpx_rec(qp);
  if (!q) return;
  if (q->qpx->pass)
    pass_count(q->qpx, length);
  else
    user_inline(q, qp, length);
  q->qpx->orig.wr_set_inline_data(qp, addr, length);
}

extern "C" void unload_qpx_wr_set_inline_data_list(ibv_qp_ex* qp, size_t n, const ibv_data_buf* bufs) {
  QpRec* q = qpx_rec(qp);
  if (!q) return;
  uint64_t len = 0;
  for (size_t i = 0; i < n; ++i) len += bufs[i].length;
  if (q->qpx->pass)
    pass_count(q->qpx, len);
  else
    user_inline(q, qp, len);
  q->qpx->orig.wr_set_inline_data_list(qp, n, bufs);
}

static void reset_batch(QpxState* s) {
  s->held.state = kHeldNone;
  for (unsigned i = 0; i < policy::kPathCount; ++i) s->writes[i] = s->bytes[i] = 0;
  for (uint64_t& n : s->why_not) n = 0;
  s->nic = 0;
  s->timed = false;
}

extern "C" void unload_qpx_wr_start(ibv_qp_ex* qp) {
  QpRec* q = qpx_rec(qp);
  if (!q) return;
  QpxState* s = q->qpx;
  const bool how = q->sq.gate.enter(this_tid());
  s->gate_how = how;
  remote_settle_if_pending(q);  // the batch's requests go behind its remote writes
  s->start = s->tail = q->sq.ring.tail();
  s->stage_start = q->sq.stage.tail;
  reset_batch(s);
  s->pass = all_offload(tunables());
  if (!s->pass) mark_tracked(q);
  s->pass_write = false;
  s->orig.wr_start(qp);
}

static void end_batch(QpRec* q) {
  reset_batch(q->qpx);
  q->sq.gate.leave(q->qpx->gate_how);
}

// A held write is the whole batch (see "Held writes" above).
static int complete_held(QpRec* q, ibv_qp_ex* qp) {
  QpxState* s = q->qpx;
  HeldWrite& h = s->held;
  h.state = kHeldNone;
  s->orig.wr_abort(qp);
  const ibv_send_wr w = held_wr(h);
  Route rt = h.route;
  int rc = 0;
  // A full send queue refuses the batch on the NIC path; the provider says how.
  Why why = Why::queue;
  const bool room = nic_in_flight(q->sq) < q->sq.max_wr;
  const DirectWrite d{h.sge, h.wr_id, rt};
  const bool remote = rt.path == Path::unload_remote;
  if (!room || (remote ? place_remote(q, &d, 1, &why) : place_direct(q, &d, 1, &why)) != 1) {
    rt.path = Path::offload;
    remote_settle_if_pending(q);
    rc = post_routed(q, w, rt, why);
  }
  end_batch(q);
  return rc;
}

extern "C" int unload_qpx_wr_complete(ibv_qp_ex* qp) {
  QpRec* q = qpx_rec(qp);
  if (!q) return EINVAL;
  QpxState* s = q->qpx;
  if (s->pass) {
    q->sq.untracked.store(true, std::memory_order_relaxed);  // in flight untracked
    busy_raise(q);
  }
  if (s->held.state == kHeldCpu) return complete_held(q, qp);
  release_held(q, qp);  // a header without payload: the provider judges it
  busy_raise(q);
  const int rc = s->orig.wr_complete(qp);
  if (rc) {
    rollback_refused(q, s->start);
    q->sq.stage.tail = s->stage_start;
  } else {
    if (s->timed) stamp_post_calls(q, s->start, q->sq.ring.tail());
    for (unsigned i = 0; i < policy::kPathCount; ++i)
      if (s->writes[i]) count_writes(static_cast<Path>(i), s->writes[i], s->bytes[i]);
    for (unsigned i = 0; i < UNLOAD_WHY_COUNT; ++i)
      if (s->why_not[i]) count_why(static_cast<Why>(i), s->why_not[i]);
  }
  end_batch(q);
  return rc;
}

extern "C" void unload_qpx_wr_abort(ibv_qp_ex* qp) {
  QpRec* q = qpx_rec(qp);
  if (!q) return;
  QpxState* s = q->qpx;
  s->orig.wr_abort(qp);
  rollback_refused(q, s->start);
  q->sq.stage.tail = s->stage_start;
  end_batch(q);
}

// The shim saves the QP's own table here, then installs the unload_qpx_* entry points.
extern "C" ibv_qp_ex* unload_qpx_provider(ibv_qp* qp) {
  QpRec* q = g_qps.find(key_of(qp));
  if (!q || !q->tracked) return nullptr;
  if (!q->qpx) q->qpx = new (std::nothrow) QpxState{};
  return q->qpx ? &q->qpx->orig : nullptr;
}

void qpx_release(QpRec* q) {
  delete q->qpx;
  q->qpx = nullptr;
}

const Part g_qpx_part = {.qp_release = qpx_release};

}  // namespace unload::rt
