// The link to the kernel module (kmod/uapi/unload.h): session, control page, counters
// page, QP and region registration, staging arenas, direct submissions.
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>

#include "unload/policy.hpp"

struct unload_control;
struct unload_counters;

namespace unload::rt {

struct Kmod {
  int fd = -1;
  const unload_control* ctl = nullptr;
  unload_counters* cnt = nullptr;
  uint32_t max_iov = 0;
};
extern Kmod g_kmod;

// Opens the session; on failure returns a reason for the notice and leaves fd = -1.
const char* kmod_open();
// Copies the control page's tunables (consistent under the sequence counter) into t if
// they changed since `seq`; returns the sequence read.
uint32_t kmod_tunables(policy::Tunables& t, uint32_t seq);
// Adds to this session's counters page (offload, inline, stage; the module counts direct).
void kmod_count(policy::Path p, uint64_t n, uint64_t bytes);
void kmod_count_fence();
// 0 or -errno. peer_flags: UNLOAD_PEER_*.
int kmod_reg_qp(ibv_context* ctx, uint32_t qpn, uint32_t* peer_flags);
// Forgets a QP registered with kmod_reg_qp (at its destruction: QP numbers are reused,
// and the registration holds a reference on the device). 0 or -errno.
int kmod_unreg_qp(ibv_context* ctx, uint32_t qpn);
int kmod_reg_region(const ibv_mr* mr, uint64_t addr, uint64_t length, int access, uint64_t* handle);
int kmod_dereg_region(uint64_t handle);
// A staging arena mapped into this process: 0 or -errno.
int kmod_arena_alloc(size_t length, void** addr, size_t* out_len, uint32_t* id);
// Frees an arena (its pages go with the last mapping). 0 or -errno.
int kmod_arena_free(uint32_t id);
// One direct write. Returns 0 when placed, else the deny reason (> 0) or -errno.
int kmod_direct(uint32_t qpn, uint32_t rkey, uint64_t remote_addr, const ibv_sge* sg, uint32_t nsge,
                uint64_t length);

}  // namespace unload::rt
