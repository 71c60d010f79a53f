// The link to the kernel module (kmod/uapi/unload.h): session, control page, counters
// page, QP and region registration, staging arenas, direct submissions.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "unload/policy.hpp"

struct unload_control;
struct unload_counters;

struct unload_direct_req;
struct unload_map;

namespace unload::rt {

// The control page until the module's is mapped (and in a forked child until it opens its
// own session): its sequence is odd, a page being written, so no thread's copy of the
// tunables is ever fresh against it (tunables_fresh() needs no test of the module's own).
extern const unload_control kNoControl;
struct Kmod {
  int fd = -1;
  const unload_control* ctl = &kNoControl;  // written with release: the post's front reads it
  unload_counters* cnt = nullptr;
  const uint64_t* status = nullptr;  // the mappings' validity words (nullptr: an older module)
  uint8_t* busy = nullptr;            // this session's QPs' busy bytes (busy.hpp)
  uint32_t max_iov = 0;
  size_t ctl_size = 0, cnt_size = 0;
  // Which session of this process's (1, 2, ...: a forked child opens its own): handles and
  // registrations of an earlier one name nothing, or something else, in this one.
  uint32_t session = 0;
};
extern Kmod g_kmod;
// Published with release once g_kmod is whole (a forked child opens its session later).
extern std::atomic<bool> g_have_kmod;

// Opens the session; on failure returns a reason for the notice and leaves fd = -1.
const char* kmod_open();
// In a forked child: lets go of the parent's session (its file, control and counters
// pages), which nothing the child does may reach. kmod_open makes the child's own.
void kmod_leave_inherited();
// Copies the control page's tunables (consistent under the sequence counter) into t if
// they changed since `seq`; returns the sequence read.
uint32_t kmod_tunables(policy::Tunables& t, uint32_t seq);
// Adds to this session's counters page (offload, inline, stage; the module counts direct).
void kmod_count(policy::Path p, uint64_t n, uint64_t bytes);
void kmod_count_fence();
void kmod_count_why(unsigned why, uint64_t n);  // why: enum unload_why
// 0 or -errno. peer_flags: UNLOAD_PEER_*; handle: names the QP in kmod_direct (QP numbers
// are per device; the same registration keeps its handle).
// busy_slot: the QP's byte in the busy page (the module raised it).
int kmod_reg_qp(ibv_context* ctx, uint32_t qpn, uint32_t* peer_flags, uint32_t* handle,
                uint32_t* busy_slot);
// In a forked child: QP `qpn`, registered by the parent's session, was modified here
// (UNLOAD_IOC_QP_CHANGED): the parent's registration must not outlive the change unseen.
int kmod_qp_changed(ibv_context* ctx, uint32_t qpn);
// Forgets a QP registered with kmod_reg_qp (at its destruction: QP numbers are reused,
// and the registration holds a reference on the device). 0 or -errno.
int kmod_unreg_qp(ibv_context* ctx, uint32_t qpn);
// Any MR (a source by lkey, given by process address; with REMOTE_WRITE also a target by
// rkey, given by iova). The module checks it against the RDMA core's MR. 0 or -errno.
int kmod_reg_region(const ibv_mr* mr, uint64_t addr, uint64_t iova, uint64_t length, int access,
                    uint64_t* handle);
// The handle names the session too: one of an earlier session is -ESTALE, never sent.
int kmod_dereg_region(uint64_t handle);
// A staging arena mapped into this process: 0 or -errno. Free it (kmod_arena_free, after
// munmap) when its QP is destroyed: the module charges it until then.
int kmod_arena_alloc(size_t length, void** addr, size_t* out_len, uint32_t* id);
int kmod_arena_free(uint32_t id);
// A mapping of the peer's region `rkey` for sender QP (qpn, handle): 0 and *m filled, or
// -errno (-EPERM with m->peer_pid: the peer's mem file is wanted, mem_fd -1 or stale).
int kmod_map(uint32_t qpn, uint32_t handle, uint32_t rkey, int mem_fd, unload_map* m);
// Revokes mapping (slot, cookie) if it is still live; the caller munmaps it.
void kmod_unmap(uint32_t slot, uint64_t cookie);
// Direct writes, in order, with one submission that stops at the first the module does
// not place (UNLOAD_SUBMIT_STOP). Returns how many it processed (each request's result
// says whether it was placed: -EACCES for every refusal, and the caller posts that one to
// the NIC), or -errno when the submission itself failed (nothing placed).
// flags: UNLOAD_SUBMIT_* (UNLOAD_SUBMIT_STOP always; UNLOAD_SUBMIT_REMOTE for the remote path,
// whose results add -ECOMM: sent and unanswered, maybe placed).
int kmod_submit(unload_direct_req* reqs, uint32_t n, uint32_t flags = 0);
// An empty echo through the module's channel to the host whose GID is `dgid`, from `port`
// of ctx's device: 0 when the peer host's module answered, else -errno. `existing_only`:
// through a channel already up, never a connect (-ENOTCONN when there is none).
int kmod_probe_channel(ibv_context* ctx, uint8_t port, const ibv_gid& dgid, bool existing_only);
// How many channels to peer hosts came up since the module loaded (the control page's
// channels_up; 0 from a module without it). Only with the module present.
uint64_t kmod_channels_up();

}  // namespace unload::rt
