// The ibv_qp_ex wr_* API: every request built gets a ring entry, and a write its path once
// its payload call gives the length.
//
// Held writes. A write's path is known only at its payload call, but the provider must
// hear of it before: wr_rdma_write(_imm) writes the WQE's header, flags included, and
// some providers (rxe among them) read inline data only when IBV_SEND_INLINE was in the
// flags then. So the shim holds every write's header (kHeldHeader) and gives it to the
// provider at the payload call, once the path is chosen, with IBV_SEND_INLINE added when
// the shim inlines it. Anything else the program calls first (another request,
// wr_complete) hands the header over as it is, in its place.
//
// The provider posts a batch whole at wr_complete, so a direct write inside a batch could
// not wait for the batch's earlier requests (they are not posted yet) and cannot be taken
// back once the provider has it. So only the first request of a batch may go direct: its
// payload call then holds it to the end (kHeldDirect). It goes to the provider anyway as
// soon as the program builds anything behind it, in its place, so the batch keeps its
// order. At wr_complete a write still held is the whole batch: the provider's empty batch
// is closed with wr_abort (the QP's send queue is free again for the fence's marker), then
// the write runs direct, or, refused, is posted to the NIC with ibv_post_send. wr_abort
// drops a held write: nothing was placed.
//
// Pass-through batches. When every write goes to the NIC as built (all_offload, decided
// at wr_start), the batch goes to the provider untouched: no ring entries, no held
// headers; writes are only counted, and the QP is marked `untracked` for the next fence.
#include "internal.hpp"

#include "unload.h"

#include <cstdlib>

namespace unload::rt {

static_assert(kHeldMaxSge == UNLOAD_MAX_IOV, "a held write's SGEs are one direct request's iovec");

namespace {

enum : uint8_t { kHeldNone, kHeldHeader, kHeldDirect };

// Hooks are installed only on QPs with a record, and the record lives until destroy.
QpRec* qpx_rec(ibv_qp_ex* qpx) {
  QpRec* q = g_qps.find(key_of(&qpx->qp_base));
  if (__builtin_expect(!q, 0)) std::abort();
  return q;
}

// Starts an entry for the request the program is building; swaps its wr_id for the tag
// around the provider's call.
template <class F>
SqEntry* qpx_request(QpRec* q, ibv_qp_ex* qpx, bool is_write, F&& call) {
  SqEntry* e = q->ring.reserve(q->x_tail);
  if (!e) {  // ring full: so is the send queue; the provider will refuse the batch
    call();
    return nullptr;
  }
  WriteRequest r;
  r.is_write = is_write;
  r.signaled = q->sq_sig_all || (qpx->wr_flags & IBV_SEND_SIGNALED);
  fill_entry(e, r, qpx->wr_id);
  const uint64_t user = qpx->wr_id;
  qpx->wr_id = q->ring.tag_of(e);
  call();
  qpx->wr_id = user;
  q->ring.publish(++q->x_tail, 1);
  q->x_nic++;
  return e;
}

// The held write as the program described it (for the direct path and the NIC fallback).
ibv_send_wr held_wr(QpRec* q) {
  ibv_send_wr w{};
  w.wr_id = q->x_held_wr_id;
  w.sg_list = q->x_held_sge;
  w.num_sge = static_cast<int>(q->x_held_nsge);
  w.opcode = IBV_WR_RDMA_WRITE;
  w.send_flags = q->x_held_flags;
  w.wr.rdma.remote_addr = q->x_held_addr;
  w.wr.rdma.rkey = q->x_held_rkey;
  return w;
}

// Gives the provider the held write's header (a ring entry, the tag as wr_id), with
// `extra_flags` added to the program's. The entry, or nullptr when the ring is full (the
// provider will refuse the batch).
SqEntry* qpx_issue_header(QpRec* q, ibv_qp_ex* qp, uint32_t extra_flags) {
  q->x_held = kHeldNone;
  const uint64_t wr_id = qp->wr_id;
  const uint32_t flags = qp->wr_flags;
  qp->wr_id = q->x_held_wr_id;
  qp->wr_flags = q->x_held_flags | extra_flags;
  SqEntry* e = qpx_request(q, qp, true, [&] {
    if (q->x_held_imm) q->orig.wr_rdma_write_imm(qp, q->x_held_rkey, q->x_held_addr, q->x_held_imm_data);
    else q->orig.wr_rdma_write(qp, q->x_held_rkey, q->x_held_addr);
  });
  if (e) {
    e->rkey = q->x_held_rkey;
    e->remote_addr = q->x_held_addr;
  }
  qp->wr_id = wr_id;
  qp->wr_flags = flags;
  return e;
}

void qpx_count(QpRec* q, Path p, uint32_t length) {
  q->x_writes[policy::index_of(p)]++;
  q->x_bytes[policy::index_of(p)] += length;
}

// The held write's payload, given as SGEs: picks its path, then gives the provider the
// header and the payload that path needs. `direct_ok`: the write may go direct (it is the
// batch's first request and this is its own payload call).
// Returns true when the write stays held for the direct path.
bool qpx_write_payload(QpRec* q, ibv_qp_ex* qp, size_t n, const ibv_sge* sg, bool direct_ok) {
  constexpr size_t kMax = 16;  // the CPU paths' SGE limit in the wr_* API
  WriteRequest r;
  r.is_write = true;
  r.with_imm = q->x_held_imm;
  r.signaled = q->sq_sig_all || (q->x_held_flags & IBV_SEND_SIGNALED);
  r.fence = q->x_held_flags & IBV_SEND_FENCE;
  r.sge_count = static_cast<uint32_t>(n);
  uint64_t len = 0;
  for (size_t i = 0; i < n; ++i) len += sg[i].length;
  r.length = len > UINT32_MAX ? UINT32_MAX : static_cast<uint32_t>(len);
  r.rkey = q->x_held_rkey;
  r.remote_addr = q->x_held_addr;
  if (direct_ok && !r.with_imm && n <= kHeldMaxSge) {
    q->x_held_nsge = static_cast<uint32_t>(n);
    for (size_t i = 0; i < n; ++i) q->x_held_sge[i] = sg[i];  // the program's list is theirs again on return
    const ibv_send_wr w = held_wr(q);
    WriteRequest wr_r;
    uint64_t t0 = 0;
    if (wants_direct(q, &w, tunables(), wr_r, t0)) {
      q->x_held = kHeldDirect;
      q->x_held_t0 = t0;
      return true;
    }
  }
  SqEntry probe;
  probe.post_ns = 0;
  Path p = n <= kMax ? choose_path(q, r, sg, tunables(), &probe) : Path::offload;
  SqEntry* e = qpx_issue_header(q, qp, p == Path::unload_inline ? IBV_SEND_INLINE : 0);
  if (e) {
    e->length = r.length;
    e->sge_count = static_cast<uint16_t>(n);
    e->post_ns = probe.post_ns;
    if (p == Path::unload_stage && !stage_copy(q, e, sg, static_cast<uint32_t>(n), r.length)) p = Path::offload;
    e->path = static_cast<uint8_t>(p);
    qpx_count(q, p, r.length);
  } else {
    p = Path::offload;
  }
  if (p == Path::unload_inline) {
    if (n == 1) {
      q->orig.wr_set_inline_data(qp, reinterpret_cast<void*>(sg[0].addr), sg[0].length);
      return false;
    }
    ibv_data_buf bufs[kMax];
    for (size_t i = 0; i < n; ++i) bufs[i] = {reinterpret_cast<void*>(sg[i].addr), sg[i].length};
    q->orig.wr_set_inline_data_list(qp, n, bufs);
  } else if (p == Path::unload_stage) {
    q->orig.wr_set_sge(qp, e->stage_sge.lkey, e->stage_sge.addr, e->stage_sge.length);
  } else if (n == 1) {
    q->orig.wr_set_sge(qp, sg[0].lkey, sg[0].addr, sg[0].length);
  } else {
    q->orig.wr_set_sge_list(qp, n, sg);
  }
  return false;
}

// Hands whatever write is held to the provider, where it stands in the batch (before
// whatever the program builds next): a header as the program gave it, a direct write with
// its payload, on the path the policy picks among the others.
void qpx_release_held(QpRec* q, ibv_qp_ex* qp) {
  const uint8_t held = q->x_held;
  if (held == kHeldNone) return;
  if (held == kHeldDirect) {
    qpx_write_payload(q, qp, q->x_held_nsge, q->x_held_sge, false);
    return;
  }
  if (SqEntry* e = qpx_issue_header(q, qp, 0)) {
    e->path = static_cast<uint8_t>(Path::offload);
    qpx_count(q, Path::offload, 0);
  }
}

#define UNLOAD_QPX_PASS(name, params, args)                          \
  void hook_##name params {                                          \
    QpRec* q = qpx_rec(qp);                                          \
    if (q->x_pass) {                                                 \
      q->x_pass_write = false;                                       \
      q->orig.name args;                                             \
      return;                                                        \
    }                                                                \
    qpx_release_held(q, qp);                                         \
    qpx_request(q, qp, false, [&] { q->orig.name args; });           \
  }
UNLOAD_QPX_PASS(wr_atomic_cmp_swp, (ibv_qp_ex* qp, uint32_t rkey, uint64_t addr, uint64_t cmp, uint64_t swp), (qp, rkey, addr, cmp, swp))
UNLOAD_QPX_PASS(wr_atomic_fetch_add, (ibv_qp_ex* qp, uint32_t rkey, uint64_t addr, uint64_t add), (qp, rkey, addr, add))
UNLOAD_QPX_PASS(wr_bind_mw, (ibv_qp_ex* qp, ibv_mw* mw, uint32_t rkey, const ibv_mw_bind_info* info), (qp, mw, rkey, info))
UNLOAD_QPX_PASS(wr_local_inv, (ibv_qp_ex* qp, uint32_t rkey), (qp, rkey))
UNLOAD_QPX_PASS(wr_rdma_read, (ibv_qp_ex* qp, uint32_t rkey, uint64_t addr), (qp, rkey, addr))
UNLOAD_QPX_PASS(wr_send, (ibv_qp_ex* qp), (qp))
UNLOAD_QPX_PASS(wr_send_imm, (ibv_qp_ex* qp, __be32 imm), (qp, imm))
UNLOAD_QPX_PASS(wr_send_inv, (ibv_qp_ex* qp, uint32_t rkey), (qp, rkey))
UNLOAD_QPX_PASS(wr_send_tso, (ibv_qp_ex* qp, void* hdr, uint16_t hdr_sz, uint16_t mss), (qp, hdr, hdr_sz, mss))
UNLOAD_QPX_PASS(wr_atomic_write, (ibv_qp_ex* qp, uint32_t rkey, uint64_t addr, const void* op), (qp, rkey, addr, op))
#undef UNLOAD_QPX_PASS

void qpx_hold_header(QpRec* q, ibv_qp_ex* qp, uint32_t rkey, uint64_t addr, bool imm, __be32 imm_data) {
  qpx_release_held(q, qp);
  q->x_held = kHeldHeader;
  q->x_held_first = q->x_nic == 0;
  q->x_held_imm = imm;
  q->x_held_imm_data = imm_data;
  q->x_held_rkey = rkey;
  q->x_held_addr = addr;
  q->x_held_wr_id = qp->wr_id;
  q->x_held_flags = qp->wr_flags;
  q->x_held_nsge = 0;
}

void hook_wr_rdma_write(ibv_qp_ex* qp, uint32_t rkey, uint64_t addr) {
  QpRec* q = qpx_rec(qp);
  if (q->x_pass) {
    q->x_pass_write = true;
    q->orig.wr_rdma_write(qp, rkey, addr);
    return;
  }
  qpx_hold_header(q, qp, rkey, addr, false, 0);
}

void hook_wr_rdma_write_imm(ibv_qp_ex* qp, uint32_t rkey, uint64_t addr, __be32 imm) {
  QpRec* q = qpx_rec(qp);
  if (q->x_pass) {
    q->x_pass_write = true;
    q->orig.wr_rdma_write_imm(qp, rkey, addr, imm);
    return;
  }
  qpx_hold_header(q, qp, rkey, addr, true, imm);
}

// A pass-through batch's payload call: counts the write it completes.
void qpx_pass_count(QpRec* q, uint64_t length) {
  if (!q->x_pass_write) return;
  q->x_pass_write = false;
  qpx_count(q, Path::offload, length > UINT32_MAX ? UINT32_MAX : static_cast<uint32_t>(length));
}

// A payload call for the held header: its path now. A payload call with nothing held
// (misuse, or a second payload for one write) goes to the provider as it is.
void qpx_sge_payload(ibv_qp_ex* qp, size_t n, const ibv_sge* sg) {
  QpRec* q = qpx_rec(qp);
  if (q->x_pass) {
    uint64_t len = 0;
    for (size_t i = 0; i < n; ++i) len += sg[i].length;
    qpx_pass_count(q, len);
  } else if (q->x_held == kHeldHeader) {
    qpx_write_payload(q, qp, n, sg, q->x_held_first && direct_possible(q, tunables()));
    return;
  }
  if (n == 1) q->orig.wr_set_sge(qp, sg[0].lkey, sg[0].addr, sg[0].length);
  else q->orig.wr_set_sge_list(qp, n, sg);
}

void hook_wr_set_sge(ibv_qp_ex* qp, uint32_t lkey, uint64_t addr, uint32_t length) {
  const ibv_sge sge{addr, length, lkey};
  qpx_sge_payload(qp, 1, &sge);
}

void hook_wr_set_sge_list(ibv_qp_ex* qp, size_t n, const ibv_sge* sg) { qpx_sge_payload(qp, n, sg); }

// The program inlines the payload itself: the NIC path, with the program's flags.
void qpx_user_inline(QpRec* q, ibv_qp_ex* qp, uint64_t length) {
  if (q->x_held != kHeldHeader) return;
  if (SqEntry* e = qpx_issue_header(q, qp, 0)) {
    e->length = length > UINT32_MAX ? UINT32_MAX : static_cast<uint32_t>(length);
    e->path = static_cast<uint8_t>(Path::offload);
    qpx_count(q, Path::offload, e->length);
  }
}

void hook_wr_set_inline_data(ibv_qp_ex* qp, void* addr, size_t length) {
  QpRec* q = qpx_rec(qp);
  if (q->x_pass) qpx_pass_count(q, length);
  else qpx_user_inline(q, qp, length);
  q->orig.wr_set_inline_data(qp, addr, length);
}

void hook_wr_set_inline_data_list(ibv_qp_ex* qp, size_t n, const ibv_data_buf* bufs) {
  QpRec* q = qpx_rec(qp);
  uint64_t len = 0;
  for (size_t i = 0; i < n; ++i) len += bufs[i].length;
  if (q->x_pass) qpx_pass_count(q, len);
  else qpx_user_inline(q, qp, len);
  q->orig.wr_set_inline_data_list(qp, n, bufs);
}

void qpx_reset_batch(QpRec* q) {
  q->x_held = kHeldNone;
  for (unsigned i = 0; i < policy::kPathCount; ++i) q->x_writes[i] = q->x_bytes[i] = 0;
  q->x_nic = 0;
}

void hook_wr_start(ibv_qp_ex* qp) {
  QpRec* q = qpx_rec(qp);
  q->x_start = q->x_tail = q->ring.tail();
  q->x_stage_start = q->stage_tail;
  qpx_reset_batch(q);
  q->x_pass = all_offload(tunables());
  if (!q->x_pass) mark_tracked(q);
  q->x_pass_write = false;
  q->orig.wr_start(qp);
}

// A held direct write is the whole batch (see "Held writes" above).
int qpx_complete_held(QpRec* q, ibv_qp_ex* qp) {
  q->x_held = kHeldNone;
  q->orig.wr_abort(qp);
  ibv_send_wr w = held_wr(q);
  const WriteRequest r = classify(w, q->sq_sig_all);
  int rc = 0;
  if (fence_before_direct(q, r) != 0 || run_direct(q, &w, r, q->x_held_t0) != 0) {
    ibv_send_wr* bad = nullptr;
    rc = post_send_nic(q, &qp->qp_base, &w, &bad);
  }
  qpx_reset_batch(q);
  return rc;
}

int hook_wr_complete(ibv_qp_ex* qp) {
  QpRec* q = qpx_rec(qp);
  if (q->x_pass) q->untracked = true;  // whatever the provider took is in flight untracked
  if (q->x_held == kHeldDirect) return qpx_complete_held(q, qp);
  qpx_release_held(q, qp);  // a header without payload: the provider judges it
  const int rc = q->orig.wr_complete(qp);
  if (rc) {
    q->ring.rollback(q->x_start, q->x_nic);
    q->stage_tail = q->x_stage_start;
  } else {
    for (unsigned i = 0; i < policy::kPathCount; ++i)
      if (q->x_writes[i]) count_writes(static_cast<Path>(i), q->x_writes[i], q->x_bytes[i]);
  }
  qpx_reset_batch(q);
  return rc;
}

void hook_wr_abort(ibv_qp_ex* qp) {
  QpRec* q = qpx_rec(qp);
  q->orig.wr_abort(qp);
  q->ring.rollback(q->x_start, q->x_nic);
  q->stage_tail = q->x_stage_start;
  qpx_reset_batch(q);
}

}  // namespace

void install_qpx(QpRec* q, ibv_qp_ex* qpx) {
  q->qpx = qpx;
  q->orig = *qpx;
#define SET(name) if (qpx->name) qpx->name = hook_##name
  SET(wr_atomic_cmp_swp); SET(wr_atomic_fetch_add); SET(wr_bind_mw); SET(wr_local_inv);
  SET(wr_rdma_read); SET(wr_rdma_write); SET(wr_rdma_write_imm); SET(wr_send);
  SET(wr_send_imm); SET(wr_send_inv); SET(wr_send_tso); SET(wr_atomic_write);
  SET(wr_set_sge); SET(wr_set_sge_list); SET(wr_set_inline_data); SET(wr_set_inline_data_list);
  SET(wr_start); SET(wr_complete); SET(wr_abort);
#undef SET
}

}  // namespace unload::rt
