// post_bounded: ibv_post_send returns in bounded time where an ordering wait could not finish (a SEND waiting
// on RNR for a receive this thread posts next; a QP reset with requests outstanding).
//
//   sem_post_bounded rnr|reset
//
// rnr    a signaled SEND with no receive posted at the responder (rnr_retry 7: it waits),
//        then a signaled 64 B write; only after both posts return does the same thread
//        post the receive. The SEND completes, then the write.
// reset  a SEND as above (never received), then both QPs are reset and reconnected
//        (the reset discards the SEND); then a signaled 64 B write, which completes.
//        rxe on 6.12 sometimes completes that write without placing it, with or without
//        the shim (its responder counts a duplicate request): semantics.sh runs it again.
// A post that does not return is the watchdog's (10 s): "FAIL: watchdog: ...".
#include <cstring>
#include <string>

#include "fixture.hpp"

using namespace sem;

namespace {

int post_send_op(ibv_qp* qp, uint64_t wr_id, const void* src, uint32_t len, uint32_t lkey) {
  ibv_sge sg{reinterpret_cast<uintptr_t>(src), len, lkey};
  ibv_send_wr wr{}, *bad = nullptr;
  wr.wr_id = wr_id;
  wr.opcode = IBV_WR_SEND;
  wr.sg_list = &sg;
  wr.num_sge = 1;
  wr.send_flags = IBV_SEND_SIGNALED;
  return ibv_post_send(qp, &wr, &bad);
}

int post_recv(ibv_qp* qp, uint64_t wr_id, void* buf, uint32_t len, uint32_t lkey) {
  ibv_sge sg{reinterpret_cast<uintptr_t>(buf), len, lkey};
  ibv_recv_wr wr{}, *bad = nullptr;
  wr.wr_id = wr_id;
  wr.sg_list = &sg;
  wr.num_sge = 1;
  return ibv_post_recv(qp, &wr, &bad);
}

void reset(Env& e, ibv_qp* qp, uint32_t dest) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RESET;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE)) die("modify RESET");
  connect(e, qp, dest);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "rnr";
  if (mode != "rnr" && mode != "reset") return 2;
  Env e = open_env();
  ibv_cq* cq = make_cq(e, 16);
  ibv_cq* rcq = make_cq(e, 16);
  Pair p = make_pair(e, cq, rcq, 4096, 4096);
  uint8_t* rbuf = alloc(4096);
  ibv_mr* rmr = reg(e, rbuf, 4096, IBV_ACCESS_LOCAL_WRITE);
  fill(p.src, 4096, 7);
  watchdog(10, mode == "rnr" ? "post_bounded rnr: a post did not return, or completions never came"
                             : "post_bounded reset: a post did not return, or completions never came");
  std::string rcs;
  rcs += std::to_string(post_send_op(p.s, 1, p.src + 1024, 16, p.smr->lkey));
  if (mode == "reset") {
    sleep_ms(20);  // the SEND is on the wire, NAKed
    reset(e, p.s, p.r->qp_num);
    reset(e, p.r, p.s->qp_num);
  }
  rcs += " " + std::to_string(post_write(p.s, 2, p.src, 64, p.smr->lkey, reinterpret_cast<uintptr_t>(p.dst),
                                         p.dmr->rkey, IBV_SEND_SIGNALED));
  rcs += " " + std::to_string(post_recv(p.r, 3, rbuf, 64, rmr->lkey));
  std::vector<ibv_wc> wcs, rwcs;
  collect(cq, wcs, mode == "rnr" ? 2 : 1, 20000);
  collect_extra(cq, wcs, 100);
  collect(rcq, rwcs, mode == "rnr" ? 1 : 0, 5000);
  collect_extra(rcq, rwcs, 50);
  out("post_bounded %s: post_rcs %s", mode.c_str(), rcs.c_str());
  out("send completions %s", describe(wcs).c_str());
  out("receive completions %s", describe(rwcs).c_str());
  out("write placed %s; send received %s", std::memcmp(p.dst, p.src, 64) == 0 ? "yes" : "NO",
      std::memcmp(rbuf, p.src + 1024, 16) == 0 ? "yes" : "no");
  out("qp %s/%s", qp_state(p.s), qp_state(p.r));
  return 0;
}
