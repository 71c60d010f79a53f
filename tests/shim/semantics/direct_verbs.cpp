// direct_verbs: a QP opened with mlx5dv_init_obj (its send queue and CQ in the program's hands) is the NIC's
// alone under the shim: its writes and their completions are as without the shim.
//
//   sem_direct_verbs
//
// libmlx5 is loaded (RTLD_GLOBAL) and its entry points looked up in the global scope, as
// a program linked with it binds them (the shim's wrappers first). Skipped where libmlx5
// is missing or the device is no mlx5 device (rxe): mlx5dv cannot open its objects. Then
// an RC pair, mlx5dv_init_obj on the sender and its send CQ, 20 signaled writes polled
// with ibv_poll_cq. Printed: the completions and the target's checksum verdict.
#include <dlfcn.h>
#include <infiniband/mlx5dv.h>

#include <cstring>

#include "fixture.hpp"

using namespace sem;

int main() {
  Env e = open_env();
  if (!dlopen("libmlx5.so.1", RTLD_NOW | RTLD_GLOBAL)) skip("no libmlx5.so.1: no mlx5 direct verbs here");
  auto supported = reinterpret_cast<bool (*)(ibv_device*)>(dlsym(RTLD_DEFAULT, "mlx5dv_is_supported"));
  auto init_obj = reinterpret_cast<int (*)(mlx5dv_obj*, uint64_t)>(dlsym(RTLD_DEFAULT, "mlx5dv_init_obj"));
  if (!supported || !init_obj) skip("libmlx5.so.1 lacks mlx5dv_is_supported or mlx5dv_init_obj");
  if (!supported(e.ctx->device))
    skip("the device is no mlx5 device (rxe): mlx5dv cannot open its QPs, the decision is host-tested");
  watchdog(60, "direct_verbs did not finish");
  ibv_cq* cq = make_cq(e, 64);
  ibv_cq* rcq = make_cq(e, 64);
  Pair p = make_pair(e, cq, rcq, 4096, 4096);
  mlx5dv_qp dqp{};
  mlx5dv_cq dcq{};
  mlx5dv_obj obj{};
  obj.qp.in = p.s;
  obj.qp.out = &dqp;
  obj.cq.in = cq;
  obj.cq.out = &dcq;
  out("mlx5dv_init_obj: %s", init_obj(&obj, MLX5DV_OBJ_QP | MLX5DV_OBJ_CQ) == 0 ? "ok" : "failed");
  fill(p.src, 4096, 7);
  for (uint64_t i = 0; i < 20; ++i)
    if (post_write(p.s, i, p.src + i * 128, 128, p.smr->lkey, reinterpret_cast<uintptr_t>(p.dst) + i * 128,
                   p.dmr->rkey, IBV_SEND_SIGNALED))
      die("ibv_post_send");
  std::vector<ibv_wc> wcs;
  collect(cq, wcs, 20, 10000);
  collect_extra(cq, wcs, 20);
  out("completions %s", describe(wcs).c_str());
  out("target %s", std::memcmp(p.dst, p.src, 20 * 128) == 0 ? "right" : "WRONG");
  return 0;
}
