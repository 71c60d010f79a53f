// The ibv_qp_ex wr_* API: every request built gets a ring entry, and a write its path once
// its payload call gives the length.
#include "internal.hpp"

#include <cstdlib>

namespace unload::rt {

namespace {

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

#define UNLOAD_QPX_PASS(name, params, args)                          \
  void hook_##name params {                                          \
    QpRec* q = qpx_rec(qp);                                          \
    q->x_write = nullptr;                                            \
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

void hook_wr_rdma_write(ibv_qp_ex* qp, uint32_t rkey, uint64_t addr) {
  QpRec* q = qpx_rec(qp);
  SqEntry* e = qpx_request(q, qp, true, [&] { q->orig.wr_rdma_write(qp, rkey, addr); });
  if (e) { e->rkey = rkey; e->remote_addr = addr; }
  q->x_write = e;
}

void hook_wr_rdma_write_imm(ibv_qp_ex* qp, uint32_t rkey, uint64_t addr, __be32 imm) {
  QpRec* q = qpx_rec(qp);
  SqEntry* e = qpx_request(q, qp, true, [&] { q->orig.wr_rdma_write_imm(qp, rkey, addr, imm); });
  if (e) { e->rkey = rkey; e->remote_addr = addr; }
  q->x_write = e;
}

// The payload of the pending write: pick its path now that its length is known.
Path qpx_payload(QpRec* q, const ibv_sge* sg, uint32_t n, bool user_inline) {
  SqEntry* e = q->x_write;
  q->x_write = nullptr;
  if (!e) return Path::offload;
  WriteRequest r;
  r.is_write = true;
  r.user_inline = user_inline;
  r.signaled = e->flags & kSignaled;
  r.sge_count = n;
  uint64_t len = 0;
  for (uint32_t i = 0; i < n; ++i) len += sg[i].length;
  r.length = len > UINT32_MAX ? UINT32_MAX : static_cast<uint32_t>(len);
  r.rkey = e->rkey;
  r.remote_addr = e->remote_addr;
  e->length = r.length;
  e->sge_count = static_cast<uint16_t>(n);
  Path p = choose_path(q, r, sg, tunables(), e);
  if (p == Path::unload_stage && !stage_copy(q, e, sg, n, r.length)) p = Path::offload;
  e->path = static_cast<uint8_t>(p);
  q->x_writes[policy::index_of(p)]++;
  q->x_bytes[policy::index_of(p)] += r.length;
  return p;
}

void hook_wr_set_sge(ibv_qp_ex* qp, uint32_t lkey, uint64_t addr, uint32_t length) {
  QpRec* q = qpx_rec(qp);
  const ibv_sge sge{addr, length, lkey};
  SqEntry* e = q->x_write;
  const Path p = qpx_payload(q, &sge, 1, false);
  if (p == Path::unload_inline) {
    q->orig.wr_set_inline_data(qp, reinterpret_cast<void*>(addr), length);
  } else if (p == Path::unload_stage) {
    q->orig.wr_set_sge(qp, e->stage_sge.lkey, e->stage_sge.addr, length);
  } else {
    q->orig.wr_set_sge(qp, lkey, addr, length);
  }
}

void hook_wr_set_sge_list(ibv_qp_ex* qp, size_t n, const ibv_sge* sg) {
  QpRec* q = qpx_rec(qp);
  constexpr size_t kMax = 16;
  SqEntry* e = q->x_write;
  const Path p = n <= kMax ? qpx_payload(q, sg, static_cast<uint32_t>(n), false) : Path::offload;
  if (p == Path::unload_inline) {
    ibv_data_buf bufs[kMax];
    for (size_t i = 0; i < n; ++i) bufs[i] = {reinterpret_cast<void*>(sg[i].addr), sg[i].length};
    q->orig.wr_set_inline_data_list(qp, n, bufs);
    return;
  }
  if (p == Path::unload_stage) {
    q->orig.wr_set_sge(qp, e->stage_sge.lkey, e->stage_sge.addr, e->stage_sge.length);
    return;
  }
  if (n > kMax) q->x_write = nullptr;  // too scattered for the CPU paths: offload
  q->orig.wr_set_sge_list(qp, n, sg);
}

void hook_wr_set_inline_data(ibv_qp_ex* qp, void* addr, size_t length) {
  QpRec* q = qpx_rec(qp);
  const ibv_sge sge{reinterpret_cast<uintptr_t>(addr), static_cast<uint32_t>(length), 0};
  qpx_payload(q, &sge, 1, true);
  q->orig.wr_set_inline_data(qp, addr, length);
}

void hook_wr_set_inline_data_list(ibv_qp_ex* qp, size_t n, const ibv_data_buf* bufs) {
  QpRec* q = qpx_rec(qp);
  uint64_t len = 0;
  for (size_t i = 0; i < n; ++i) len += bufs[i].length;
  const ibv_sge sge{0, static_cast<uint32_t>(len), 0};
  qpx_payload(q, &sge, 1, true);
  q->orig.wr_set_inline_data_list(qp, n, bufs);
}

void qpx_reset_batch(QpRec* q) {
  q->x_write = nullptr;
  for (unsigned i = 0; i < policy::kPathCount; ++i) q->x_writes[i] = q->x_bytes[i] = 0;
  q->x_nic = 0;
}

void hook_wr_start(ibv_qp_ex* qp) {
  QpRec* q = qpx_rec(qp);
  q->x_start = q->x_tail = q->ring.tail();
  q->x_stage_start = q->stage_tail;
  qpx_reset_batch(q);
  q->orig.wr_start(qp);
}

int hook_wr_complete(ibv_qp_ex* qp) {
  QpRec* q = qpx_rec(qp);
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
