// error_status: a write that fails (bad rkey, out of bounds, target without remote write, bad lkey, QP in
// error) after a good unsignaled one: the statuses, the QP states and the target as the NIC has them.
//
//   sem_error_status
//
// Each case on a fresh pair: one ibv_post_send of a good unsignaled 16 B write (wr_id 1)
// then the signaled 64 B write under test (wr_id 1234); "qp_in_error" moves the sender
// to ERR first and posts the second alone; "good" is the control. Printed per case:
// ibv_post_send's value, the completions (wr_id:status), both QP states, and whether
// the good write's bytes reached the target.
#include <cstring>

#include "fixture.hpp"

using namespace sem;

namespace {

enum How { kGood, kBadRkey, kOutOfBounds, kBadLkey, kQpInError };

void run(Env& e, const char* name, int target_access, How how) {
  ibv_cq* cq = make_cq(e, 16);
  QpCaps caps;
  caps.send_wr = 16;
  ibv_qp* s = make_qp(e, cq, cq, caps);
  ibv_qp* r = make_qp(e, cq, cq, caps);
  uint8_t* src = alloc(4096);
  uint8_t* dst = alloc(4096);
  fill(src, 4096, 11);
  ibv_mr* smr = reg(e, src, 4096, IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* dmr = reg(e, dst, 4096, target_access);
  connect_pair(e, s, r);
  if (how == kQpInError) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_ERR;
    if (ibv_modify_qp(s, &a, IBV_QP_STATE)) die("ibv_modify_qp ERR");
  }
  ibv_sge sg{reinterpret_cast<uintptr_t>(src + 64), 64, how == kBadLkey ? smr->lkey + 0x1000 : smr->lkey};
  ibv_send_wr wr{}, w0{}, *bad = nullptr;
  wr.wr_id = 1234;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.sg_list = &sg;
  wr.num_sge = 1;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(dst + 1024);
  wr.wr.rdma.rkey = how == kBadRkey ? dmr->rkey + 0x1000 : dmr->rkey;
  if (how == kOutOfBounds) wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(dst + 4096 - 32);
  ibv_sge sg0{reinterpret_cast<uintptr_t>(src), 16, smr->lkey};
  w0.wr_id = 1;
  w0.opcode = IBV_WR_RDMA_WRITE;
  w0.sg_list = &sg0;
  w0.num_sge = 1;
  w0.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(dst);
  w0.wr.rdma.rkey = dmr->rkey;
  w0.next = &wr;
  const int prc = ibv_post_send(s, how == kQpInError ? &wr : &w0, &bad);
  std::vector<ibv_wc> got;
  collect(cq, got, 1, 5000);
  collect_extra(cq, got, 200);
  const bool first = std::memcmp(dst, src, 16) == 0;
  out("%s: post %d, completions %s, sender %s, responder %s, good write %s", name, prc, describe(got).c_str(),
      qp_state(s), qp_state(r), first ? "placed" : "not placed");
}

}  // namespace

int main() {
  Env e = open_env();
  watchdog(120, "error_status did not finish");
  const int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  run(e, "good", rw, kGood);
  run(e, "bad_rkey", rw, kBadRkey);
  run(e, "out_of_bounds", rw, kOutOfBounds);
  run(e, "no_remote_write", IBV_ACCESS_LOCAL_WRITE, kGood);
  run(e, "bad_lkey", rw, kBadLkey);
  run(e, "qp_in_error", rw, kQpInError);
  return 0;
}
