// An RC QP from RESET to RTS, for the test programs and the verbs benchmark: the three
// modify_qp steps with the attributes they all share, the ones that differ named in RcPath.
// Header-only, so a program that loads libibverbs with dlopen passes its own modify_qp.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

namespace unload::verbs {

// ibv_modify_qp, or a program's own pointer to it (sem_dlopen_write, which dlopens libibverbs).
using ModifyQp = int (*)(ibv_qp*, ibv_qp_attr*, int);

// The connection: the far end and how to reach it, and both directions' first PSN.
struct RcPath {
  uint32_t dest_qpn = 0;
  ibv_gid dgid{};
  int sgid_index = 0;
  ibv_mtu mtu = IBV_MTU_1024;
  uint32_t rq_psn = 0;         // the first PSN this QP expects
  uint32_t sq_psn = 0;         // the first PSN it sends
  uint8_t min_rnr_timer = 12;  // IBTA code: 12 is 0.64 ms
  uint8_t hop_limit = 1;
  uint8_t timeout = 14;  // local ACK timeout, 4.096 us << timeout
  uint8_t port = 1;
};

// RESET -> INIT on `port` with these access flags. 0, or modify_qp's error.
inline int rc_to_init(ibv_qp* qp, int access, ModifyQp modify = ibv_modify_qp, uint8_t port = 1) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = port;
  a.qp_access_flags = static_cast<unsigned>(access);
  return modify(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

// INIT -> RTR towards p's far end (a GRH: RoCE), one read or atomic in flight.
inline int rc_to_rtr(ibv_qp* qp, const RcPath& p, ModifyQp modify = ibv_modify_qp) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = p.mtu;
  a.dest_qp_num = p.dest_qpn;
  a.rq_psn = p.rq_psn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = p.min_rnr_timer;
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = p.dgid;
  a.ah_attr.grh.sgid_index = static_cast<uint8_t>(p.sgid_index);
  a.ah_attr.grh.hop_limit = p.hop_limit;
  a.ah_attr.port_num = p.port;
  return modify(qp, &a,
                IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                    IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

// RTR -> RTS: p.sq_psn first, retries and RNR retries at their maximum (7: unbounded RNR).
inline int rc_to_rts(ibv_qp* qp, const RcPath& p, ModifyQp modify = ibv_modify_qp) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = p.timeout;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.sq_psn = p.sq_psn;
  a.max_rd_atomic = 1;
  return modify(qp, &a,
                IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                    IBV_QP_MAX_QP_RD_ATOMIC);
}

}  // namespace unload::verbs

// The names verbs_check (its dlopen build links no support library) still spells.
namespace unload::test {
using verbs::ModifyQp;
using verbs::rc_to_init;
using verbs::rc_to_rtr;
using verbs::rc_to_rts;
using verbs::RcPath;
}  // namespace unload::test
