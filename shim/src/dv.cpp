// Vendor direct verbs (shim/README.md, "Direct verbs"): the mlx5dv and DEVX calls by which
// a program reaches a QP's work queue or a CQ's buffer past libibverbs. Each wrapper calls
// libmlx5's own, found with dlvsym(RTLD_NEXT) (the shim does not link libmlx5: these are
// only called by programs that loaded it), then tells the runtime what to stop tracking.
#include <dlfcn.h>
#include <infiniband/mlx5dv.h>

#include <cerrno>

#include "shim.hpp"
#include "unload/direct_verbs.hpp"

#define UNLOAD_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

template <class T>
T next(const char* name, const char* version) {
  return reinterpret_cast<T>(dlvsym(RTLD_NEXT, name, version));
}

void used(unload::DvCall call, ibv_context* ctx, ibv_qp* qp, ibv_cq* cq) {
  (void)unload::shim::real();  // the runtime is initialised
  unload_dv_used(static_cast<int>(call), ctx, qp, cq);
}

}  // namespace

// Before the real call: the program may post through the QP's queue as soon as it returns.
UNLOAD_EXPORT int mlx5dv_init_obj(mlx5dv_obj* obj, uint64_t obj_type) {
  static const auto real = next<int (*)(mlx5dv_obj*, uint64_t)>("mlx5dv_init_obj", "MLX5_1.2");
  if (!real) return EOPNOTSUPP;
  if (obj_type & MLX5DV_OBJ_QP) used(unload::DvCall::init_obj_qp, obj->qp.in->context, obj->qp.in, nullptr);
  if (obj_type & MLX5DV_OBJ_CQ) used(unload::DvCall::init_obj_cq, obj->cq.in->context, nullptr, obj->cq.in);
  return real(obj, obj_type);
}

UNLOAD_EXPORT ibv_qp* mlx5dv_create_qp(ibv_context* ctx, ibv_qp_init_attr_ex* attr, mlx5dv_qp_init_attr* dv) {
  static const auto real = next<ibv_qp* (*)(ibv_context*, ibv_qp_init_attr_ex*, mlx5dv_qp_init_attr*)>(
      "mlx5dv_create_qp", "MLX5_1.3");
  if (!real) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  ibv_qp* qp = real(ctx, attr, dv);
  if (qp) used(unload::DvCall::create_qp, ctx, qp, nullptr);
  return qp;
}

UNLOAD_EXPORT ibv_cq_ex* mlx5dv_create_cq(ibv_context* ctx, ibv_cq_init_attr_ex* attr,
                                          mlx5dv_cq_init_attr* dv) {
  static const auto real = next<ibv_cq_ex* (*)(ibv_context*, ibv_cq_init_attr_ex*, mlx5dv_cq_init_attr*)>(
      "mlx5dv_create_cq", "MLX5_1.1");
  if (!real) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  ibv_cq_ex* cq = real(ctx, attr, dv);
  if (cq) used(unload::DvCall::create_cq, ctx, nullptr, ibv_cq_ex_to_cq(cq));
  return cq;
}

// Before the real call: the object may be a QP on any of the context's CQs.
UNLOAD_EXPORT mlx5dv_devx_obj* mlx5dv_devx_obj_create(ibv_context* ctx, const void* in, size_t inlen,
                                                      void* out, size_t outlen) {
  static const auto real = next<mlx5dv_devx_obj* (*)(ibv_context*, const void*, size_t, void*, size_t)>(
      "mlx5dv_devx_obj_create", "MLX5_1.7");
  if (!real) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  used(unload::DvCall::devx_obj_create, ctx, nullptr, nullptr);
  return real(ctx, in, inlen, out, outlen);
}
