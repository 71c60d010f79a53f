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

// This thread's id, cached (gettid is a syscall): a gate's owner (gate.hpp). Inline: every
// post and poll enters a gate, and the call was a tenth of an empty poll's instructions.
UNLOAD_TLS_HOT extern constinit thread_local uint32_t t_tid;  // constinit: no TLS wrapper call
uint32_t fetch_tid();
inline uint32_t this_tid() {
  return __builtin_expect(t_tid != 0, 1) ? t_tid : fetch_tid();
}
// In a forked child: its thread has a new id.
inline void tls_after_fork() {
  t_tid = 0;
}

}  // namespace unload::rt
