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
// list   one ibv_post_send list: the SEND, then 300 pairs of an unsignaled 8 B write and an
//        unsignaled 8 B read (the last read signaled); then the receive. Each write is a
//        direct run of its own behind the stuck SEND: the list must not wait for each.
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

constexpr int kListPairs = 300;

// The "list" mode (see the top).
int run_list(Env& e) {
  ibv_cq* cq = make_cq(e, 64);
  ibv_cq* rcq = make_cq(e, 16);
  QpCaps caps;
  caps.send_wr = 1024;
  Pair p = make_pair(e, cq, rcq, 4096, 4096, caps);
  uint8_t* rbuf = alloc(4096);
  ibv_mr* rmr = reg(e, rbuf, 4096, IBV_ACCESS_LOCAL_WRITE);
  uint8_t* back = alloc(4096);
  ibv_mr* bmr = reg(e, back, 4096, IBV_ACCESS_LOCAL_WRITE);
  fill(p.src, 4096, 9);
  watchdog(10, "post_bounded list: the list did not return, or completions never came");
  std::vector<ibv_send_wr> wrs(1 + 2 * kListPairs);
  std::vector<ibv_sge> sges(wrs.size());
  sges[0] = {reinterpret_cast<uintptr_t>(p.src) + 3072, 16, p.smr->lkey};
  wrs[0].wr_id = 1;
  wrs[0].opcode = IBV_WR_SEND;
  wrs[0].send_flags = IBV_SEND_SIGNALED;
  for (int i = 0; i < kListPairs; ++i) {
    ibv_send_wr& w = wrs[1 + 2 * i];
    ibv_send_wr& r = wrs[2 + 2 * i];
    const uint64_t off = static_cast<uint64_t>(i) * 8;
    sges[1 + 2 * i] = {reinterpret_cast<uintptr_t>(p.src) + off, 8, p.smr->lkey};
    w.wr_id = 100 + static_cast<uint64_t>(i);
    w.opcode = IBV_WR_RDMA_WRITE;
    w.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(p.dst) + off;
    w.wr.rdma.rkey = p.dmr->rkey;
    sges[2 + 2 * i] = {reinterpret_cast<uintptr_t>(back) + off, 8, bmr->lkey};
    r.wr_id = 1000 + static_cast<uint64_t>(i);
    r.opcode = IBV_WR_RDMA_READ;
    r.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(p.dst) + off;
    r.wr.rdma.rkey = p.dmr->rkey;
  }
  wrs.back().send_flags = IBV_SEND_SIGNALED;
  for (size_t i = 0; i < wrs.size(); ++i) {
    wrs[i].sg_list = &sges[i];
    wrs[i].num_sge = 1;
    wrs[i].next = i + 1 < wrs.size() ? &wrs[i + 1] : nullptr;
  }
  ibv_send_wr* bad = nullptr;
  const int rc = ibv_post_send(p.s, wrs.data(), &bad);
  const int rrc = post_recv(p.r, 3, rbuf, 64, rmr->lkey);
  std::vector<ibv_wc> wcs, rwcs;
  collect(cq, wcs, rc ? 0 : 2, 20000);
  collect_extra(cq, wcs, 100);
  collect(rcq, rwcs, 1, 5000);
  collect_extra(rcq, rwcs, 50);
  const size_t n = kListPairs * 8;
  out("post_bounded list: post_rc %d bad %s, recv_rc %d", rc, bad ? "set" : "none", rrc);
  out("send completions %s", describe(wcs).c_str());
  out("receive completions %s", describe(rwcs).c_str());
  out("writes placed %s; reads returned them %s", std::memcmp(p.dst, p.src, n) == 0 ? "yes" : "NO",
      std::memcmp(back, p.src, n) == 0 ? "yes" : "NO");
  out("qp %s/%s", qp_state(p.s), qp_state(p.r));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "rnr";
  if (mode != "rnr" && mode != "reset" && mode != "list") return 2;
  Env e = open_env();
  if (mode == "list") return run_list(e);
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
