// The preload shim (docs/design.md, section 5): only interposition. Each exported wrapper
// resolves the real libibverbs once (dlopen + dlvsym: RTLD_NEXT finds nothing when the
// program loads libibverbs with dlopen itself), guards against recursion, and calls the
// runtime. ibv_post_send, ibv_poll_cq, ibv_create_qp_ex, ibv_create_cq_ex and the wr_* /
// ibv_cq_ex polling tables are static inline or per-object function pointers: ops.cpp
// replaces those in every context and object the program opens or creates.
#include <dlfcn.h>
#include <pthread.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "ops.hpp"

#include "shim.hpp"
#include "unload/runtime.h"

// verbs.h makes ibv_reg_mr a macro (for IBV_ACCESS_OPTIONAL_RANGE); the symbol is what we export.
#undef ibv_reg_mr
#undef ibv_reg_mr_iova

#define UNLOAD_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

unload_real_verbs g_real;
pthread_once_t g_once = PTHREAD_ONCE_INIT;
// The recursion guard. Initial-exec, as the runtime's thread-locals: the shim is preloaded,
// so it has static TLS, and every wrapper reads it (a __tls_get_addr call otherwise).
[[gnu::tls_model("initial-exec")]] constinit thread_local bool t_inside = false;
// init_once() finished: the table is complete (release), so later calls skip pthread_once.
std::atomic<bool> g_ready{false};

template <class T>
void resolve(void* lib, T& slot, const char* name, const char* version) {
  slot = reinterpret_cast<T>(dlvsym(lib, name, version));
}

void init_once() {
  void* lib = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    std::fprintf(stderr, "unload: cannot load libibverbs.so.1: %s\n", dlerror());
    std::abort();
  }
  resolve(lib, g_real.open_device, "ibv_open_device", "IBVERBS_1.1");
  resolve(lib, g_real.close_device, "ibv_close_device", "IBVERBS_1.1");
  resolve(lib, g_real.query_device, "ibv_query_device", "IBVERBS_1.1");
  resolve(lib, g_real.query_gid, "ibv_query_gid", "IBVERBS_1.1");
  resolve(lib, g_real.query_port, "ibv_query_port", "IBVERBS_1.1");
  resolve(lib, g_real.create_qp, "ibv_create_qp", "IBVERBS_1.1");
  resolve(lib, g_real.modify_qp, "ibv_modify_qp", "IBVERBS_1.1");
  resolve(lib, g_real.query_qp, "ibv_query_qp", "IBVERBS_1.1");
  resolve(lib, g_real.destroy_qp, "ibv_destroy_qp", "IBVERBS_1.1");
  resolve(lib, g_real.reg_mr, "ibv_reg_mr", "IBVERBS_1.1");
  resolve(lib, g_real.reg_mr_iova, "ibv_reg_mr_iova", "IBVERBS_1.7");
  resolve(lib, g_real.reg_mr_iova2, "ibv_reg_mr_iova2", "IBVERBS_1.8");
  resolve(lib, g_real.dereg_mr, "ibv_dereg_mr", "IBVERBS_1.1");
  resolve(lib, g_real.create_cq, "ibv_create_cq", "IBVERBS_1.1");
  resolve(lib, g_real.destroy_cq, "ibv_destroy_cq", "IBVERBS_1.1");
  resolve(lib, g_real.resize_cq, "ibv_resize_cq", "IBVERBS_1.1");
  resolve(lib, g_real.rereg_mr, "ibv_rereg_mr", "IBVERBS_1.1");
  resolve(lib, g_real.get_cq_event, "ibv_get_cq_event", "IBVERBS_1.1");
  resolve(lib, g_real.ack_cq_events, "ibv_ack_cq_events", "IBVERBS_1.1");
  resolve(lib, g_real.qp_to_qp_ex, "ibv_qp_to_qp_ex", "IBVERBS_1.6");
  resolve(lib, g_real.reg_dmabuf_mr, "ibv_reg_dmabuf_mr", "IBVERBS_1.12");
  if (!g_real.open_device || !g_real.create_qp || !g_real.reg_mr || !g_real.create_cq) {
    std::fprintf(stderr, "unload: libibverbs.so.1 lacks the IBVERBS_1.1 entry points\n");
    std::abort();
  }
  unload_runtime_init(&g_real);
  g_ready.store(true, std::memory_order_release);
}

}  // namespace

const unload_real_verbs& unload::shim::real() {
  if (__builtin_expect(!g_ready.load(std::memory_order_acquire), 0)) pthread_once(&g_once, init_once);
  return g_real;
}

namespace {

// Scope of one wrapper: true when this is the outermost call into the shim.
struct Guard {
  bool outer;
  Guard() : outer(!t_inside) { t_inside = true; }
  ~Guard() {
    if (outer) t_inside = false;
  }
};

}  // namespace

// Each wrapper: the real function when re-entered, else the runtime.
#define SHIM(real_call, runtime_call)                \
  const unload_real_verbs& r = unload::shim::real(); \
  Guard g;                                           \
  return g.outer ? runtime_call : r.real_call

namespace {

ibv_context* context_open(ibv_device* d) {
  ibv_context* ctx = unload_context_open(d);
  if (ctx) unload::shim::ops_install_context(ctx);
  return ctx;
}

int context_close(ibv_context* ctx) {
  unload::shim::ops_restore_context(ctx);
  return unload_context_close(ctx);
}

}  // namespace

UNLOAD_EXPORT ibv_context* ibv_open_device(ibv_device* d) {
  SHIM(open_device(d), context_open(d));
}
UNLOAD_EXPORT int ibv_close_device(ibv_context* c) {
  SHIM(close_device(c), context_close(c));
}
UNLOAD_EXPORT ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* a) {
  SHIM(create_qp(pd, a), unload_qp_create(pd, a));
}
UNLOAD_EXPORT int ibv_modify_qp(ibv_qp* qp, ibv_qp_attr* a, int m) {
  SHIM(modify_qp(qp, a, m), unload_qp_modify(qp, a, m));
}
UNLOAD_EXPORT int ibv_query_qp(ibv_qp* qp, ibv_qp_attr* a, int m, ibv_qp_init_attr* i) {
  SHIM(query_qp(qp, a, m, i), unload_qp_query(qp, a, m, i));
}
UNLOAD_EXPORT int ibv_destroy_qp(ibv_qp* qp) {
  SHIM(destroy_qp(qp), unload_qp_destroy(qp));
}
UNLOAD_EXPORT ibv_mr* ibv_reg_mr(ibv_pd* pd, void* a, size_t l, int acc) {
  SHIM(reg_mr(pd, a, l, acc), unload_mr_reg(pd, a, l, acc));
}
UNLOAD_EXPORT ibv_mr* ibv_reg_mr_iova(ibv_pd* pd, void* a, size_t l, uint64_t iova, int acc) {
  SHIM(reg_mr_iova(pd, a, l, iova, acc), unload_mr_reg_iova2(pd, a, l, iova, static_cast<unsigned>(acc)));
}
UNLOAD_EXPORT ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* a, size_t l, uint64_t iova, unsigned acc) {
  SHIM(reg_mr_iova2(pd, a, l, iova, acc), unload_mr_reg_iova2(pd, a, l, iova, acc));
}
// Exported only as IBVERBS_1.12: a libibverbs without it has no program calling it.
UNLOAD_EXPORT ibv_mr* ibv_reg_dmabuf_mr(ibv_pd* pd, uint64_t off, size_t l, uint64_t iova, int fd, int acc) {
  SHIM(reg_dmabuf_mr(pd, off, l, iova, fd, acc), unload_mr_reg_dmabuf(pd, off, l, iova, fd, acc));
}
UNLOAD_EXPORT int ibv_dereg_mr(ibv_mr* mr) {
  SHIM(dereg_mr(mr), unload_mr_dereg(mr));
}
UNLOAD_EXPORT int ibv_rereg_mr(ibv_mr* mr, int f, ibv_pd* pd, void* a, size_t l, int acc) {
  SHIM(rereg_mr(mr, f, pd, a, l, acc), unload_mr_rereg(mr, f, pd, a, l, acc));
}
UNLOAD_EXPORT ibv_cq* ibv_create_cq(ibv_context* c, int n, void* u, ibv_comp_channel* ch, int v) {
  SHIM(create_cq(c, n, u, ch, v), unload_cq_create(c, n, u, ch, v));
}
UNLOAD_EXPORT int ibv_destroy_cq(ibv_cq* cq) {
  SHIM(destroy_cq(cq), unload_cq_destroy(cq));
}
UNLOAD_EXPORT int ibv_resize_cq(ibv_cq* cq, int n) {
  SHIM(resize_cq(cq, n), unload_cq_resize(cq, n));
}
UNLOAD_EXPORT int ibv_get_cq_event(ibv_comp_channel* ch, ibv_cq** cq, void** uc) {
  SHIM(get_cq_event(ch, cq, uc), unload_cq_get_event(ch, cq, uc));
}

void* unload::shim::wrapper_of(const char* name) {
  static const struct {
    const char* name;
    void* fn;
  } table[] = {
      {"ibv_open_device", reinterpret_cast<void*>(&ibv_open_device)},
      {"ibv_close_device", reinterpret_cast<void*>(&ibv_close_device)},
      {"ibv_create_qp", reinterpret_cast<void*>(&ibv_create_qp)},
      {"ibv_modify_qp", reinterpret_cast<void*>(&ibv_modify_qp)},
      {"ibv_query_qp", reinterpret_cast<void*>(&ibv_query_qp)},
      {"ibv_destroy_qp", reinterpret_cast<void*>(&ibv_destroy_qp)},
      {"ibv_reg_mr", reinterpret_cast<void*>(&ibv_reg_mr)},
      {"ibv_reg_mr_iova", reinterpret_cast<void*>(&ibv_reg_mr_iova)},
      {"ibv_reg_mr_iova2", reinterpret_cast<void*>(&ibv_reg_mr_iova2)},
      {"ibv_reg_dmabuf_mr", reinterpret_cast<void*>(&ibv_reg_dmabuf_mr)},
      {"ibv_dereg_mr", reinterpret_cast<void*>(&ibv_dereg_mr)},
      {"ibv_rereg_mr", reinterpret_cast<void*>(&ibv_rereg_mr)},
      {"ibv_create_cq", reinterpret_cast<void*>(&ibv_create_cq)},
      {"ibv_destroy_cq", reinterpret_cast<void*>(&ibv_destroy_cq)},
      {"ibv_resize_cq", reinterpret_cast<void*>(&ibv_resize_cq)},
      {"ibv_get_cq_event", reinterpret_cast<void*>(&ibv_get_cq_event)},
  };
  for (const auto& e : table)
    if (std::strcmp(e.name, name) == 0) return e.fn;
  return nullptr;
}
