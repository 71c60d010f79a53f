// Private records of the runtime: one per context, QP, CQ and memory region the program
// made through the shim. Each embeds nothing public (the provider owns the verbs objects);
// they are found through lock-free tables keyed by the verbs object's address (or, for
// completions, by context and QP number).
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>

#include "config.hpp"
#include "poll_gate.hpp"
#include "tables.hpp"
#include "wc_queue.hpp"
#include "unload/classify.hpp"
#include "unload/runtime.h"
#include "unload/sq_ring.hpp"

namespace unload::rt {

extern unload_real_verbs g_real;

struct ContextRec {
  ibv_context* ctx;
  uint32_t id;  // small and unique: keys the per-context tables
  // The provider's entry points we replaced.
  int (*post_send)(ibv_qp*, ibv_send_wr*, ibv_send_wr**);
  int (*poll_cq)(ibv_cq*, int, ibv_wc*);
  int (*req_notify_cq)(ibv_cq*, int);
  ibv_qp* (*create_qp_ex)(ibv_context*, ibv_qp_init_attr_ex*);
  ibv_cq_ex* (*create_cq_ex)(ibv_context*, ibv_cq_init_attr_ex*);
};

struct CqRec;

// The most SGEs of a wr_* write that may be held for the direct path (the kmod's iovec cap).
constexpr uint32_t kHeldMaxSge = 32;

struct QpRec {
  ibv_qp* qp;
  ContextRec* c;
  ibv_cq* send_cq;        // kept: the QP is gone when its record is freed
  CqRec* scq;             // the send CQ's record (nullptr: not made through the shim)
  uint32_t qp_num;
  uint32_t max_inline;    // the QP's real inline cap
  bool tracked;           // RC/UC: requests go through the ring
  bool sq_sig_all;
  bool peer_local;        // destination GID is one of this host's
  uint32_t dest_qp_num;
  // The kmod's view (UNLOAD_IOC_REG_QP once the QP is in RTS): UNLOAD_PEER_* flags, and
  // when to ask again while the peer is local but not yet paired.
  uint32_t peer_flags;
  uint32_t kmod_qp_handle;  // the registration's handle (kmod_direct names the QP by it)
  bool kmod_registered;
  // Requests were posted around the ring (all_offload): some may still be in flight, and
  // no completion of the ring would say when they are done. The next fence posts a marker.
  bool untracked;
  uint32_t reg_countdown;
  uint32_t reg_backoff;
  SqRing ring;
  // unload.stage: this QP's staging arena from the kmod, registered once on its PD, used
  // as a byte ring; the consumer frees up to an entry's stage_end when it completes.
  uint8_t* stage_base;
  ibv_mr* stage_mr;
  uint32_t stage_size;
  uint32_t stage_arena;  // the kmod's arena id: freed (after munmap) at QP destruction
  uint64_t stage_tail;
  std::atomic<uint64_t> stage_head{0};
  uint64_t x_stage_start;
  // ibv_qp_ex (wr_* API): the provider's table and the request being built.
  ibv_qp_ex* qpx;
  ibv_qp_ex orig;
  uint64_t x_start;       // ring tail at wr_start
  uint64_t x_tail;        // ring tail as the batch grows
  uint64_t x_nic;         // NIC requests in the batch
  // The write being built, not yet given to the provider (see qp_ex.cpp, "Held writes"):
  // its header until the payload call, and to the end of the batch if it goes direct.
  bool x_pass;            // the batch goes to the provider untouched (all_offload at wr_start)
  bool x_pass_write;      // ... and its request being built is a write, not yet counted
  uint8_t x_held;         // kHeldNone, kHeldHeader or kHeldDirect
  bool x_held_first;      // the batch's first request (so it may go direct)
  bool x_held_imm;        // wr_rdma_write_imm
  __be32 x_held_imm_data;
  uint32_t x_held_rkey;
  uint32_t x_held_flags;  // wr_flags when the write was started
  uint32_t x_held_nsge;
  uint64_t x_held_addr;
  uint64_t x_held_wr_id;
  uint64_t x_held_t0;     // adaptive: when the policy chose direct
  ibv_sge x_held_sge[kHeldMaxSge];
  uint64_t x_writes[policy::kPathCount];  // statistics of the batch, committed by wr_complete
  uint64_t x_bytes[policy::kPathCount];
};

struct CqRec {
  ibv_cq* cq;
  ibv_cq_ex* cqx;         // non-null for ibv_create_cq_ex CQs
  ContextRec* c;
  // ibv_cq_ex polling: the provider's functions, and the state of a poll sequence
  // (start_poll .. end_poll, inside the gate). A completion the shim made (a direct
  // write's) is handed over without the provider: `synth` says the current one is
  // `cur`, and the read_* hooks answer from it.
  ibv_cq_ex orig;
  uint64_t wc_flags;       // what the program asked ibv_create_cq_ex for
  bool cqx_direct;         // its completions can be made by the shim (see cqx_hooks_install)
  bool synth;
  bool provider_open;      // the provider's start_poll succeeded; its end_poll is due
  bool gate_how;
  ibv_poll_cq_attr attr;
  ibv_wc cur;
  // Completions made ready but not yet handed over: the direct path's (pushed by the
  // posting thread) and those the program's array had no room for.
  WcQueue pending;
  // Serialises the CQ's consumers (poll-and-merge): the send-queue rings have one
  // consumer at a time, and a fence polls from the posting thread while the program may
  // poll from another. Biased to the first poller: no atomic read-modify-write for it.
  PollGate gate;
  // QPs whose send CQ this is, to map ibv_cq_ex completions whose QP number the provider
  // does not give (set at QP creation, cleared at destruction; the rest by number).
  std::atomic<QpRec*> send_qps[8];
  // A request of the shim's (a ring entry, a marker, a direct write's completion) may
  // reach this CQ: set once, before the first such request; until then polling passes the
  // provider's completions through without merging.
  std::atomic<bool> tracked{false};
  // Completion channel: the program armed the CQ (ibv_req_notify_cq, not solicited-only)
  // and no wake-up marker was posted since. See hook_req_notify_cq.
  std::atomic<bool> armed{false};
};

struct MrRec {
  ibv_mr* mr;
  ibv_pd* pd;
  uint64_t addr;    // the process's virtual address
  uint64_t iova;    // the address requests use
  uint64_t length;
  int access;       // as registered (or last re-registered)
  uint64_t kmod_handle;  // registered with the kmod: a source by lkey, a target if
                         // REMOTE_WRITE (0: not registered)
};

// Key for per-context QP numbers (completions name the QP by number).
inline uint64_t qpn_key(const ContextRec* c, uint32_t qpn) {
  return (static_cast<uint64_t>(c->id + 1) << 32) | qpn;
}
inline uint64_t lkey_key(const ContextRec* c, uint32_t lkey) {
  return (static_cast<uint64_t>(c->id + 1) << 32) | lkey;
}

}  // namespace unload::rt
