// Thread-locals of the per-write paths: where they live, and the thread's id.
#pragma once

// The runtime lives in the preload shim, which the loader maps at program start, so its
// thread-locals sit in the static TLS block. initial-exec reaches them with one %fs-relative
// load; the default model for a shared object calls __tls_get_addr on every access, several
// per post and per poll. Only for small variables: a shim dlopen()ed later would need their
// room in the static block's small surplus.
#define UNLOAD_TLS_HOT [[gnu::tls_model("initial-exec")]]

#include <cstdint>

namespace unload::rt {

struct QpRec;
struct CqRec;
struct ThreadStats;

// A thread's last lookup in one table, kept while the table did not change: a thread
// mostly posts on one QP and polls one CQ, and the probe was a sixth of an empty poll.
template <class V>
struct LastFound {
  uint64_t key = 0;
  V* val = nullptr;
  uint64_t changes = 0;
};

// Posts on QPs settled on the NIC between the thread's consults of the policy (tunables.hpp).
constexpr uint32_t kSettledConsultEvery = 64;

// What the post's front reads of this thread's view of the control page (tunables.hpp).
struct FrontView {
  uint32_t seq = 1;  // the page's sequence t_tunables was taken at; odd: never a stable one
  uint32_t settled_left = kSettledConsultEvery;  // posts on settled QPs before a consult
  bool offload = false;                          // all_offload(t_tunables)
};

// The thread-locals every post and poll reads, in one block: a function finds the block
// with one load of its offset and each member at a constant from there, where each
// thread-local apart costs a load of its own (a NIC write read four of them).
struct ThreadHot {
  uint32_t tid = 0;  // this thread's id, cached (gettid is a syscall): a gate's owner (gate.hpp)
  FrontView view;
  LastFound<QpRec> last_qp;  // the post's and poll's lookups' memos (registry.hpp)
  LastFound<CqRec> last_cq;
  ThreadStats* stats = nullptr;  // made at the thread's first count (stats.hpp)
};
UNLOAD_TLS_HOT extern constinit thread_local ThreadHot t_hot;  // constinit: no TLS wrapper call

// This thread's id. Inline: every post and poll enters a gate, and the call was a tenth of
// an empty poll's instructions.
uint32_t fetch_tid();
inline uint32_t this_tid() {
  return __builtin_expect(t_hot.tid != 0, 1) ? t_hot.tid : fetch_tid();
}
// In a forked child: its thread has a new id.
inline void tls_after_fork() {
  t_hot.tid = 0;
}

}  // namespace unload::rt
