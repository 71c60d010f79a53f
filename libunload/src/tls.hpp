// Thread-locals of the per-write paths.
#pragma once

// The runtime lives in the preload shim, which the loader maps at program start, so its
// thread-locals sit in the static TLS block. initial-exec reaches them with one %fs-relative
// load; the default model for a shared object calls __tls_get_addr on every access, several
// per post and per poll. Only for small variables: a shim dlopen()ed later would need their
// room in the static block's small surplus.
#define UNLOAD_TLS_HOT [[gnu::tls_model("initial-exec")]]
