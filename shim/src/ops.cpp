// The provider entry points the shim replaces, one table per object, the way a provider
// lays out its own ops: a context's (ibv_post_send, ibv_poll_cq, ibv_req_notify_cq and the
// extended create calls are static inline in verbs.h and dispatch through them), an
// ibv_qp_ex's wr_* table and an ibv_cq_ex's polling table. The provider's entry points are
// saved in the runtime's record of the object first (unload_*_provider), then each slot the
// provider fills takes the engine's entry point of the same name.
#include "ops.hpp"

#include "shim.hpp"
#include "unload/runtime.h"

#include <cstddef>

namespace unload::shim {

namespace {

// The wr_* entries of an ibv_qp_ex the engine takes over; the others (wr_set_ud_addr,
// wr_set_xrc_srqn: not RC) stay the provider's.
// clang-format 14 re-wraps these lists differently on every pass: left as written.
// clang-format off
#define UNLOAD_QPX_OPS(X)                                                                  \
  X(wr_atomic_cmp_swp) X(wr_atomic_fetch_add) X(wr_bind_mw) X(wr_local_inv)               \
  X(wr_rdma_read) X(wr_rdma_write) X(wr_rdma_write_imm) X(wr_send) X(wr_send_imm)          \
  X(wr_send_inv) X(wr_send_tso) X(wr_atomic_write) X(wr_set_sge) X(wr_set_sge_list)        \
  X(wr_set_inline_data) X(wr_set_inline_data_list) X(wr_start) X(wr_complete) X(wr_abort)

// The polling entries of an ibv_cq_ex: every one the provider has (it has the read_* the
// program's wc_flags asked for), so a completion of the shim's can be current whatever the
// program reads.
#define UNLOAD_CQX_OPS(X)                                                                  \
  X(start_poll) X(next_poll) X(end_poll) X(read_opcode) X(read_vendor_err)                 \
  X(read_byte_len) X(read_imm_data) X(read_qp_num) X(read_src_qp) X(read_wc_flags)         \
  X(read_slid) X(read_sl) X(read_dlid_path_bits)
// clang-format on

void install_qpx(ibv_qp* qp) {
  ibv_qp_ex* qpx = real().qp_to_qp_ex ? real().qp_to_qp_ex(qp) : nullptr;
  ibv_qp_ex* saved = qpx ? unload_qpx_provider(qp) : nullptr;
  if (!saved) return;
  *saved = *qpx;
#define X(name) \
  if (qpx->name) qpx->name = unload_qpx_##name;
  UNLOAD_QPX_OPS(X)
#undef X
}

void install_cqx(ibv_cq_ex* cqx) {
  if (!cqx->start_poll || !cqx->next_poll || !cqx->end_poll) return;
  ibv_cq_ex* saved = unload_cqx_provider(cqx);
  if (!saved) return;
  *saved = *cqx;
#define X(name) \
  if (cqx->name) cqx->name = unload_cqx_##name;
  UNLOAD_CQX_OPS(X)
#undef X
}

ibv_qp* create_qp_ex(ibv_context* ctx, ibv_qp_init_attr_ex* attr) {
  ibv_qp* qp = unload_qp_create_ex(ctx, attr);
  if (qp && (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS)) install_qpx(qp);
  return qp;
}

ibv_cq_ex* create_cq_ex(ibv_context* ctx, ibv_cq_init_attr_ex* attr) {
  ibv_cq_ex* cqx = unload_cq_create_ex(ctx, attr);
  if (cqx) install_cqx(cqx);
  return cqx;
}

// The context's table.
constexpr unload_provider_ops kContextOps = {
    .post_send = unload_qp_post_send,
    .poll_cq = unload_cq_poll,
    .req_notify_cq = unload_cq_req_notify,
    .create_qp_ex = create_qp_ex,
    .create_cq_ex = create_cq_ex,
    .alloc_mw = unload_mw_alloc,
    .dealloc_mw = unload_mw_dealloc,
    .bind_mw = unload_qp_bind_mw,
};

// Whether the provider's verbs_context is large enough to hold `member`.
#define UNLOAD_VCTX_HAS(v, member) ((v) && (v)->sz >= sizeof(*(v)) - offsetof(verbs_context, member))

}  // namespace

void ops_install_context(ibv_context* ctx) {
  unload_provider_ops* saved = unload_context_provider(ctx);
  if (!saved) return;
  verbs_context* v = verbs_get_ctx(ctx);
  saved->post_send = ctx->ops.post_send;
  saved->poll_cq = ctx->ops.poll_cq;
  saved->req_notify_cq = ctx->ops.req_notify_cq;
  saved->bind_mw = ctx->ops.bind_mw;
  if (unload_mode_offload_pinned()) {
    // Nothing of the shim's can reach a CQ: the provider's polls as they are.
    ctx->ops.post_send = unload_qp_post_send_pinned;
  } else {
    ctx->ops.post_send = kContextOps.post_send;
    ctx->ops.poll_cq = kContextOps.poll_cq;
    if (saved->req_notify_cq) ctx->ops.req_notify_cq = kContextOps.req_notify_cq;
  }
  if (ctx->ops.alloc_mw && ctx->ops.dealloc_mw) {  // windows: recorded (NIC only)
    saved->alloc_mw = ctx->ops.alloc_mw;
    saved->dealloc_mw = ctx->ops.dealloc_mw;
    ctx->ops.alloc_mw = kContextOps.alloc_mw;
    ctx->ops.dealloc_mw = kContextOps.dealloc_mw;
  }
  if (saved->bind_mw) ctx->ops.bind_mw = kContextOps.bind_mw;
  if (UNLOAD_VCTX_HAS(v, create_qp_ex) && v->create_qp_ex) {
    saved->create_qp_ex = v->create_qp_ex;
    v->create_qp_ex = kContextOps.create_qp_ex;
  }
  if (UNLOAD_VCTX_HAS(v, create_cq_ex) && v->create_cq_ex) {
    saved->create_cq_ex = v->create_cq_ex;
    v->create_cq_ex = kContextOps.create_cq_ex;
  }
}

void ops_restore_context(ibv_context* ctx) {
  const unload_provider_ops* saved = unload_context_provider(ctx);
  if (!saved) return;
  ctx->ops.post_send = saved->post_send;
  ctx->ops.poll_cq = saved->poll_cq;
  ctx->ops.req_notify_cq = saved->req_notify_cq;
  if (saved->alloc_mw) {
    ctx->ops.alloc_mw = saved->alloc_mw;
    ctx->ops.dealloc_mw = saved->dealloc_mw;
  }
  ctx->ops.bind_mw = saved->bind_mw;
  if (verbs_context* v = verbs_get_ctx(ctx)) {
    if (saved->create_qp_ex) v->create_qp_ex = saved->create_qp_ex;
    if (saved->create_cq_ex) v->create_cq_ex = saved->create_cq_ex;
  }
}

}  // namespace unload::shim
