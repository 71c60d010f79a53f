// Where the records are found: lock-free tables keyed by the verbs object's address (or, for
// completions, by context and QP number; for local checks, by context and lkey).
#pragma once

#include "records.hpp"
#include "tables.hpp"

namespace unload::rt {

extern PtrTable<QpRec> g_qps;            // by ibv_qp*
extern PtrTable<QpRec> g_qps_by_num;     // by qpn_key(context, qp_num)
extern PtrTable<CqRec, 12> g_cqs;        // by ibv_cq*
extern PtrTable<MrRec> g_mrs;            // by lkey_key(context, lkey)
extern PtrTable<ibv_mw> g_mws;           // by mw_key(context, rkey) (nic_only.hpp)
// Moves before a region's record leaves g_mrs: what was learnt of a region (the express
// lane's source check) holds while it has not moved.
extern std::atomic<uint64_t> g_mr_epoch;
extern std::atomic<uint32_t> g_windows;  // how many g_mws holds: 0, no write looks

ContextRec* context_find(const ibv_context* ctx);

inline uint64_t qpn_key(const ContextRec* c, uint32_t qpn) {
  return (static_cast<uint64_t>(c->id + 1) << 32) | qpn;
}
inline uint64_t lkey_key(const ContextRec* c, uint32_t lkey) {
  return (static_cast<uint64_t>(c->id + 1) << 32) | lkey;
}

}  // namespace unload::rt
