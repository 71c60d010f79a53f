// ops_owner: which library answers a context's ibv_post_send, ibv_poll_cq and
// ibv_req_notify_cq (verbs.h dispatches them through the context's ops, which the shim may
// replace): one line each, "poll_cq librxe-rdmav34.so".
#include <dlfcn.h>

#include <cstdio>
#include <cstring>

#include "verbs.hpp"

using namespace unload::test;

namespace {

const char* owner(const void* fn) {
  Dl_info i;
  if (!fn || !dladdr(fn, &i) || !i.dli_fname) return "none";
  const char* slash = std::strrchr(i.dli_fname, '/');
  return slash ? slash + 1 : i.dli_fname;
}

}  // namespace

int main() {
  const Device d = open_device();
  const ibv_context_ops& ops = d.ctx->ops;
  std::printf("post_send %s\n", owner(reinterpret_cast<const void*>(ops.post_send)));
  std::printf("poll_cq %s\n", owner(reinterpret_cast<const void*>(ops.poll_cq)));
  std::printf("req_notify_cq %s\n", owner(reinterpret_cast<const void*>(ops.req_notify_cq)));
  ibv_close_device(d.ctx);
  return kExitOk;
}
