// close_device: after writes, ibv_close_device succeeds, whether the program destroyed every object first
// (destroy) or left them to the close (keep).
//
//   sem_close_device destroy|keep [LINGER_SECONDS]
//
// One pair, 20 signaled random writes (1 B to 32 B), all polled; then destroy: both QPs,
// both MRs, the CQ and the PD, each call's value printed; then ibv_close_device. Printed:
// the completions, the target, the values, then "closed". LINGER_SECONDS (0): the program
// then stays alive that long with its device closed (link_delete.sh removes the device
// meanwhile).
#include <unistd.h>

#include <cstring>
#include <random>

#include "fixture.hpp"

using namespace sem;

int main(int argc, char** argv) {
  const bool destroy = argc > 1 && std::string(argv[1]) == "destroy";
  const unsigned linger = argc > 2 ? static_cast<unsigned>(std::atoi(argv[2])) : 0;
  Env e = open_env();
  ibv_cq* cq = make_cq(e, 32);
  QpCaps caps;
  caps.send_wr = 32;
  Pair p = make_pair(e, cq, cq, 64, 4096, caps);
  std::vector<uint8_t> shadow(p.dst_len, 0);
  std::mt19937_64 rng(1);
  watchdog(60, "close_device did not finish");
  for (uint64_t k = 0; k < 20; ++k) {
    const uint32_t len = 1 + static_cast<uint32_t>(rng() % 32);
    const size_t off = rng() % (p.dst_len - len);
    for (uint32_t i = 0; i < len; ++i) p.src[i] = static_cast<uint8_t>(rng());
    std::memcpy(&shadow[off], p.src, len);
    if (int rc = post_write(p.s, k, p.src, len, p.smr->lkey, reinterpret_cast<uintptr_t>(p.dst + off),
                            p.dmr->rkey, IBV_SEND_SIGNALED)) {
      errno = rc;
      die("ibv_post_send");
    }
    std::vector<ibv_wc> one;
    collect(cq, one, 1, 5000, 1);
    if (one.size() != 1 || one[0].status != IBV_WC_SUCCESS || one[0].wr_id != k)
      out("write %llu: completion %s", static_cast<unsigned long long>(k), describe(one).c_str());
  }
  out("close_device (%s): 20 signaled writes polled one by one, target %s", destroy ? "destroy" : "keep",
      std::memcmp(p.dst, shadow.data(), p.dst_len) == 0 ? "right" : "WRONG");
  if (destroy) {
    // In this order: each object before what it uses.
    const int qs = ibv_destroy_qp(p.s);
    const int qr = ibv_destroy_qp(p.r);
    const int ms = ibv_dereg_mr(p.smr);
    const int md = ibv_dereg_mr(p.dmr);
    const int c = ibv_destroy_cq(cq);
    const int pd = ibv_dealloc_pd(e.pd);
    out("destroy qp %d %d, dereg mr %d %d, destroy cq %d, dealloc pd %d", qs, qr, ms, md, c, pd);
  }
  out("close device %d", ibv_close_device(e.ctx));
  stop_watchdogs();
  out("closed");
  if (linger) sleep(linger);
  return 0;
}
