// What the provider tells a program of a new QP's capacities. The shim creates RC/UC QPs
// with more room than asked (its markers, the inline path), so the provider's answer to the
// program's own request is learnt once per distinct request (a QP made with exactly it, then
// destroyed) and remembered; ibv_create_qp and ibv_query_qp then say those (docs/design.md).
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

namespace unload::rt {

// What decides the provider's answer.
struct CapsAsk {
  uint32_t ctx_id = 0;
  uint32_t qp_type = 0;
  ibv_qp_cap cap{};
  bool sig_all = false;
  uint64_t comp_mask = 0;  // ibv_create_qp_ex's, 0 for ibv_create_qp
  uint64_t send_ops = 0;
  uint32_t create_flags = 0;
};

// The provider's answers for a QP made with exactly the program's request: at create, and
// ibv_query_qp's (rxe, for one, reports the request at create and its real depths later).
struct CapsShown {
  ibv_qp_cap created{};
  ibv_qp_cap queried{};       // ibv_query_qp's attr->cap
  ibv_qp_cap queried_init{};  // ... and its init_attr->cap
};

// The answer remembered for `k`, if any.
bool caps_lookup(const CapsAsk& k, CapsShown* shown);
void caps_remember(const CapsAsk& k, const CapsShown& shown);

}  // namespace unload::rt
