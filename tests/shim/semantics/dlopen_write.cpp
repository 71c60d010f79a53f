// dlopen_write: a program that does not link libibverbs but dlopens it and takes every entry point with
// dlsym (as transport modules and language bindings do): its signaled 64 B writes complete once each, in
// order, and land.
//
//   sem_dlopen_write [WRITES]
//
// Built without the fixture (which links libibverbs): its few helpers are here. One
// loopback pair; write k carries a pattern of k, posted and polled before the next.
// Printed: the writes, the completions (exact or the first bad one), the target.
#include <infiniband/verbs.h>

#include <dlfcn.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "check.hpp"
#include "rc_qp.hpp"

#undef ibv_reg_mr

using unload::test::die;
using unload::test::skip;

namespace {

// The entry points used, taken with dlsym (ibv_post_send and ibv_poll_cq are inline).
struct Verbs {
  decltype(&::ibv_get_device_list) get_device_list;
  decltype(&::ibv_get_device_name) get_device_name;
  decltype(&::ibv_open_device) open_device;
  decltype(&::ibv_alloc_pd) alloc_pd;
  decltype(&::ibv_create_cq) create_cq;
  decltype(&::ibv_create_qp) create_qp;
  decltype(&::ibv_modify_qp) modify_qp;
  decltype(&::ibv_query_gid) query_gid;
  decltype(&::ibv_reg_mr) reg_mr;
} V;

void load() {
  void* h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) skip("cannot dlopen libibverbs.so.1");
#define L(f)                                                          \
  V.f = reinterpret_cast<decltype(V.f)>(dlsym(h, "ibv_" #f));         \
  if (!V.f) {                                                         \
    std::fprintf(stderr, "setup: dlsym ibv_" #f ": %s\n", dlerror()); \
    std::exit(2);                                                     \
  }
  L(get_device_list)
  L(get_device_name)
  L(open_device)
  L(alloc_pd)
  L(create_cq)
  L(create_qp)
  L(modify_qp)
  L(query_gid)
  L(reg_mr)
#undef L
}

uint64_t now_ms() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000 + static_cast<uint64_t>(ts.tv_nsec) / 1000000;
}

ibv_qp* make_qp(ibv_pd* pd, ibv_cq* cq) {
  ibv_qp_init_attr a{};
  a.send_cq = cq;
  a.recv_cq = cq;
  a.qp_type = IBV_QPT_RC;
  a.cap.max_send_wr = 16;
  a.cap.max_recv_wr = 16;
  a.cap.max_send_sge = 1;
  a.cap.max_recv_sge = 1;
  ibv_qp* qp = V.create_qp(pd, &a);
  if (!qp) die("ibv_create_qp");
  return qp;
}

void connect(ibv_qp* qp, uint32_t dest, const ibv_gid& gid, int gid_index) {
  unload::test::RcPath p;
  p.dest_qpn = dest;
  p.dgid = gid;
  p.sgid_index = gid_index;
  if (unload::test::rc_to_init(qp, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE, V.modify_qp))
    die("modify INIT");
  if (unload::test::rc_to_rtr(qp, p, V.modify_qp)) die("modify RTR");
  if (unload::test::rc_to_rts(qp, p, V.modify_qp)) die("modify RTS");
}

}  // namespace

int main(int argc, char** argv) {
  const long writes = argc > 1 ? std::atol(argv[1]) : 200;
  load();
  const char* want = std::getenv("UNLOAD_TEST_DEV") ? std::getenv("UNLOAD_TEST_DEV") : "rxe0";
  const int gid_index = std::getenv("UNLOAD_TEST_GID") ? std::atoi(std::getenv("UNLOAD_TEST_GID")) : 1;
  int n = 0;
  ibv_context* ctx = nullptr;
  ibv_device** list = V.get_device_list(&n);
  for (int i = 0; list && i < n; ++i)
    if (std::strcmp(V.get_device_name(list[i]), want) == 0) ctx = V.open_device(list[i]);
  if (!ctx) skip("no RDMA device named by UNLOAD_TEST_DEV (rxe0)");
  ibv_pd* pd = V.alloc_pd(ctx);
  if (!pd) die("ibv_alloc_pd");
  ibv_gid gid;
  if (V.query_gid(ctx, 1, gid_index, &gid)) die("ibv_query_gid");
  ibv_cq* cq = V.create_cq(ctx, 16, nullptr, nullptr, 0);
  if (!cq) die("ibv_create_cq");
  ibv_qp* s = make_qp(pd, cq);
  ibv_qp* r = make_qp(pd, cq);
  static uint8_t src[64], dst[64];
  ibv_mr* smr = V.reg_mr(pd, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* dmr = V.reg_mr(pd, dst, sizeof dst, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (!smr || !dmr) die("ibv_reg_mr");
  connect(s, r->qp_num, gid, gid_index);
  connect(r, s->qp_num, gid, gid_index);
  std::string verdict = "exact";
  long landed = 0;
  for (long k = 0; k < writes && verdict == "exact"; ++k) {
    for (size_t i = 0; i < sizeof src; ++i) src[i] = static_cast<uint8_t>(k * 31 + i);
    ibv_sge sg{reinterpret_cast<uintptr_t>(src), sizeof src, smr->lkey};
    ibv_send_wr wr{}, *bad = nullptr;
    wr.wr_id = static_cast<uint64_t>(k) * 7 + 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.sg_list = &sg;
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(dst);
    wr.wr.rdma.rkey = dmr->rkey;
    if (int rc = ibv_post_send(s, &wr, &bad)) {
      verdict = "POST FAILED at write " + std::to_string(k) + ": " + std::strerror(rc);
      break;
    }
    ibv_wc wc;
    int got = 0;
    const uint64_t end = now_ms() + 5000;
    while ((got = ibv_poll_cq(cq, 1, &wc)) == 0 && now_ms() < end) {
    }
    if (got != 1 || wc.status != IBV_WC_SUCCESS || wc.wr_id != wr.wr_id || wc.qp_num != s->qp_num)
      verdict = "WRONG at write " + std::to_string(k) + (got == 1 ? "" : " (none within 5 s)");
    else if (std::memcmp(src, dst, sizeof dst) == 0)
      ++landed;
  }
  std::printf("dlopen_write: %ld signaled 64 B writes through a dlopen'ed libibverbs\n", writes);
  std::printf("completions: %s\n", verdict.c_str());
  std::printf("writes whose bytes were in place at their completion: %ld\n", landed);
  return 0;
}
