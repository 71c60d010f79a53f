// narrow_modify: a responder QP loses REMOTE_WRITE (ibv_modify_qp, RTS to RTS); a write its
// peer posts once the provider has changed the QP meets it as the NIC does: a NAK, nothing
// placed.
//
//   sem_narrow_modify
//
// Under the shim a same-host pair's writes go through a mapping of the target, and the
// responder's shim tells the module of the change with calls of its own during
// ibv_modify_qp. This program takes those calls (its own ioctl, which the shim's resolve
// to: the executable comes first) and, at each one on /dev/unload's ioctl type once the
// provider shows the responder without REMOTE_WRITE, posts the write there, inside the
// modify; a mapping still live then would place it. Without the shim (or with no such
// call) the write is posted when the modify returns. Printed: the first write's
// completion, the modify's result, the late write's completions within 2 s, whether its
// bytes reached the target, and both QPs' states.
#include <stdarg.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fixture.hpp"

using namespace sem;

namespace {

constexpr unsigned kUnloadIocType = 0xE7;  // UNLOAD_IOC_MAGIC (kmod/uapi/unload.h)

Pair* g_pair = nullptr;
bool g_armed = false;       // during the modify
bool g_posted = false;      // the late write went
thread_local bool g_inside = false;

// Has the provider already taken the responder's REMOTE_WRITE away?
bool responder_narrowed() {
  ibv_qp_attr a{};
  ibv_qp_init_attr init{};
  return ibv_query_qp(g_pair->r, &a, IBV_QP_ACCESS_FLAGS, &init) == 0 &&
         !(a.qp_access_flags & IBV_ACCESS_REMOTE_WRITE);
}

void post_late() {
  const uintptr_t dst = reinterpret_cast<uintptr_t>(g_pair->dst);
  if (post_write(g_pair->s, 2, g_pair->src + 1024, 64, g_pair->smr->lkey, dst + 1024, g_pair->dmr->rkey,
                 IBV_SEND_SIGNALED))
    die("ibv_post_send 2");
  g_posted = true;
}

}  // namespace

// Every ioctl of the process, the shim's included.
extern "C" int ioctl(int fd, unsigned long req, ...) noexcept {
  va_list ap;
  va_start(ap, req);
  void* arg = va_arg(ap, void*);
  va_end(ap);
  if (g_armed && !g_posted && !g_inside && ((req >> 8) & 0xff) == kUnloadIocType) {
    g_inside = true;
    if (responder_narrowed()) post_late();
    g_inside = false;
  }
  return static_cast<int>(syscall(SYS_ioctl, fd, req, arg));
}

int main() {
  Env e = open_env();
  ibv_cq* cq = make_cq(e, 16);
  ibv_cq* rcq = make_cq(e, 16);
  Pair p = make_pair(e, cq, rcq, 4096, 4096);
  g_pair = &p;
  watchdog(60, "narrow_modify did not finish");
  fill(p.src, 4096, 11);
  const uintptr_t dst = reinterpret_cast<uintptr_t>(p.dst);
  std::vector<ibv_wc> wcs;
  if (post_write(p.s, 1, p.src, 64, p.smr->lkey, dst, p.dmr->rkey, IBV_SEND_SIGNALED)) die("ibv_post_send 1");
  collect(cq, wcs, 1, 5000);
  out("first write: %s", describe(wcs).c_str());

  ibv_qp_attr a{};
  a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE;
  g_armed = true;
  const int rc = ibv_modify_qp(p.r, &a, IBV_QP_ACCESS_FLAGS);
  g_armed = false;
  out("responder's REMOTE_WRITE taken away: %s", rc == 0 ? "done" : "refused");
  if (!g_posted) post_late();

  wcs.clear();
  collect(cq, wcs, 1, 2000);
  out("late write: %s", wcs.empty() ? "no completion in 2 s" : describe(wcs).c_str());
  out("late write's bytes at the target: %s", p.dst[1024 + 63] == p.src[1024 + 63] ? "placed" : "not placed");
  out("sender %s, responder %s", qp_state(p.s), qp_state(p.r));
  return 0;
}
