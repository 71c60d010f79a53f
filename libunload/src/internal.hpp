// What the runtime's files share: the object tables, and the entry points one concern
// offers the others (each explained where it is defined, in the file named above it).
#pragma once

#include "runtime.hpp"

#include <cstdint>
#include <cstdlib>

namespace unload::rt {

using policy::Mode;
using policy::PathSet;

inline uint64_t key_of(const void* p) { return reinterpret_cast<uintptr_t>(p); }

// Before the first request of the shim's on `q` (see CqRec::tracked). A relaxed store is
// enough: the provider releases the request after it, and the poller acquires the
// completion before it looks.
inline void mark_tracked(QpRec* q) {
  if (q->scq && !q->scq->tracked.load(std::memory_order_relaxed)) q->scq->tracked.store(true, std::memory_order_relaxed);
}

// objects.cpp
extern PtrTable<QpRec> g_qps;        // by ibv_qp*
extern PtrTable<QpRec> g_qps_by_num; // by (context, qp_num)
extern PtrTable<CqRec, 12> g_cqs;    // by ibv_cq*
extern PtrTable<MrRec> g_mrs;        // by (context, lkey)
ContextRec* context_find(const ibv_context* ctx);

// path.cpp
// Whether every write goes to the NIC as the program built it (shim off, mode offload, or
// UNLOAD_PATH=offload): the post paths then pass requests through untracked.
bool all_offload(const Tunables& t);
extern constinit thread_local policy::Policy* t_policy;
bool sges_valid(const QpRec* q, const ibv_sge* sg, uint32_t n);
policy::WriteFeatures features_of(const QpRec* q, const WriteRequest& r, PathSet eligible, bool adaptive);
Path choose_path(const QpRec* q, const WriteRequest& r, const ibv_sge* sg, const Tunables& t,
                 SqEntry* e, bool direct_ok = false);
void fill_entry(SqEntry* e, const WriteRequest& r, uint64_t user_wr_id);

// stage.cpp
bool stage_copy(QpRec* q, SqEntry* e, const ibv_sge* sg, uint32_t n, uint32_t len);
void stage_release(QpRec* q, const SqEntry& e);

// poll.cpp: the merger, also used by the fence (direct.cpp).

// Hands completions to the program's array while there is room and nothing is queued
// before them; queues the rest on the CQ, in order.
struct Emitter {
  CqRec* cq;
  ibv_wc* out;
  int n;
  int o;
  int limit;  // positions below limit are free to write
  void emit(const ibv_wc& wc) {
    if (o < limit && o < n && cq->pending.empty()) {
      out[o++] = wc;
      return;
    }
    if (!cq->pending.push(wc)) std::abort();  // cannot happen: bounded by the CQ's own size
  }
};

void merge_one(CqRec* c, Emitter& em, ibv_wc& wc);
int hook_poll_cq(ibv_cq* cq, int n, ibv_wc* wc);
int hook_req_notify_cq(ibv_cq* cq, int solicited_only);

// direct.cpp
bool direct_possible(QpRec* q, const Tunables& t);
int fence_before_direct(QpRec* q, const WriteRequest& r);
int run_direct(QpRec* q, const ibv_send_wr* w, const WriteRequest& r, uint64_t t0);

// post.cpp
int hook_post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad);
int post_send_nic(QpRec* q, ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad);
bool wants_direct(QpRec* q, const ibv_send_wr* w, const Tunables& t, WriteRequest& r, uint64_t& t0);

// cq_ex.cpp
void cqx_hooks_install(CqRec* r, ibv_cq_ex* cqx, uint64_t wc_flags);

// qp_ex.cpp
void install_qpx(QpRec* q, ibv_qp_ex* qpx);

}  // namespace unload::rt
