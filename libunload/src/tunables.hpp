// Tunables (control page or UNLOAD_* environment) and the kmod link's state.
#pragma once

#include <atomic>
#include <cstdint>

#include "kmod.hpp"
#include "tls.hpp"
#include "unload.h"
#include "unload/policy.hpp"

namespace unload::rt {

using policy::Path;
using policy::Tunables;

// The tunables in force. Without the kmod: parsed once from the environment. With it: a
// copy taken from the control page under its sequence counter, narrowed by the process's
// UNLOAD_* limits where lower (env_tunables.hpp); UNLOAD_MODE still wins.
// Inline: every post reads them, and the call was a seventh of an offload post's
// instructions in the shim; the fast case is the copy whose sequence the page still shows.
const Tunables& tunables_slow();
UNLOAD_TLS_HOT extern constinit thread_local Tunables t_tunables;  // constinit: no TLS wrapper call
// This thread's copy is the control page's current one.
inline bool tunables_fresh() {
  // Without the module the page is kNoControl, whose odd sequence no copy was taken at.
  const unload_control* ctl = __atomic_load_n(&g_kmod.ctl, __ATOMIC_ACQUIRE);
  return __atomic_load_n(&ctl->seq, __ATOMIC_ACQUIRE) == t_hot.view.seq;
}
inline const Tunables& tunables() {
  return __builtin_expect(tunables_fresh(), 1) ? t_tunables : tunables_slow();
}
// Every write to the NIC as the program built it (shim off, mode offload, UNLOAD_PATH=offload):
// the post paths then pass requests through untracked.
bool all_offload(const Tunables& t);
// all_offload() for the life of the process, whatever the control page says (UNLOAD_MODE=
// offload, UNLOAD_PATH=offload or UNLOAD_ENABLED=0 in its environment): nothing of the
// shim's ever reaches a CQ, so the shim leaves the polls to the provider
// (unload_qp_post_send_pinned, post.cpp).
bool offload_pinned();
// all_offload(tunables()), as the post that passes straight through asks it: a load and a
// compare while the control page is unchanged (t_hot.view.offload is taken with t_tunables).
bool offload_now_slow();
inline bool offload_now() {
  return __builtin_expect(tunables_fresh(), 1) ? t_hot.view.offload : offload_now_slow();
}
// Whether a post on a QP settled on the NIC (SendQueue::settled) may pass straight
// through: the tunables unchanged and not all offload (else the full way sees what
// changed), and this thread's countdown to its next consult of the policy not run out.
// The countdown alone (the post's front has looked at the tunables itself).
inline bool settled_countdown() {
  if (__builtin_expect(--t_hot.view.settled_left != 0, 1)) return true;
  t_hot.view.settled_left = kSettledConsultEvery;
  return false;
}
inline bool settled_now() {
  if (__builtin_expect(!tunables_fresh() || t_hot.view.offload, 0)) return false;
  return settled_countdown();
}
// The control page's sequence this thread's tunables() copy was taken at: unchanged, so
// are the tunables (with the kmod; a constant without it).
uint32_t tunables_seq();

// UNLOAD_PATH=offload|inline|stage|direct|mapped|remote: every write takes that path when it is
// eligible, the NIC otherwise, whatever the mode (for benchmarks that compare paths).
// Returns true and sets `p` when a path is forced.
bool forced_path(Path& p);

// Whether the kmod is present (stage and direct are possible).
bool kmod_present();

// UNLOAD_MAPPED is not 0 and the module gave this session a status page.
bool mapped_enabled();

// Once per process: read the environment, open the kmod (or print the notice).
void tunables_init();
// In a forked child: the parent's session let go of; the child opens its own at its first
// use of the module (kmod_present, tunables).
void tunables_after_fork();

// A switch in the environment, 0 or 1 (unset: true); anything else is reported and kept on.
bool env_switch_on(const char* var);

// Monotonic nanoseconds (vDSO, no syscall).
uint64_t now_ns();

}  // namespace unload::rt
