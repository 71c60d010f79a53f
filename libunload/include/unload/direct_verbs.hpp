// Vendor direct verbs (mlx5dv, DEVX): once a program reaches a QP's work queue or a CQ's
// buffer past libibverbs, it posts WQEs and reads CQEs the shim never sees, so no tag of
// the shim's and no completion it queued may meet that object. What each call takes out of
// the shim's tracking (shim/README.md, "Direct verbs").
#pragma once

#include <cstdint>

namespace unload {

enum class DvCall : uint8_t {
  init_obj_qp,      // mlx5dv_init_obj(MLX5DV_OBJ_QP): the QP's send queue, in the program's hands
  init_obj_cq,      // mlx5dv_init_obj(MLX5DV_OBJ_CQ): the CQ's buffer, polled by the program
  create_qp,        // mlx5dv_create_qp: made past the shim, on CQs the shim may have recorded
  create_cq,        // mlx5dv_create_cq: made past the shim, never recorded
  devx_obj_create,  // a DEVX object: may be a QP or CQ on any of the context's objects
};

struct DvUntrack {
  bool qp;       // the QP named (tracked no more)
  bool its_cqs;  // its CQs (or the CQ named): every QP on them, now and later
  bool context;  // every QP the context makes from now on
};

constexpr DvUntrack dv_untrack(DvCall call) {
  switch (call) {
    case DvCall::init_obj_qp:
      return {true, true, false};
    case DvCall::init_obj_cq:
      return {false, true, false};
    case DvCall::create_qp:
      return {true, true, false};
    case DvCall::create_cq:
      return {false, false, false};  // unrecorded: QPs on it are untracked by the CQ rule
    case DvCall::devx_obj_create:
      return {false, false, true};
  }
  return {true, true, true};
}

}  // namespace unload
