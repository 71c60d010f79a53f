// express_change: a stream of writes of one shape, then a change the next write of that shape must see.
//
//   sem_express_change
//
// Each case on a fresh pair: 48 signaled writes of one shape (same source region, rkey,
// length, flags; each to its own place), each collected; then the change; then one more
// write of that shape (wr_id 999). Under the shim the stream's writes after the first are the
// express lane's (libunload/src/express.cpp), which must notice the change as the full
// route does: at 64 B, and at 12 B, which its plain case takes (no call, the request
// compared a word at a time). Printed per case: ibv_post_send's value for the last write, its completions
// (wr_id:status), both QP states, and whether its bytes reached the target.
#include <cstring>
#include <string>

#include "fixture.hpp"

using namespace sem;

namespace {

enum class Change {
  none,
  source_dereg,
  target_dereg,
  sender_err,
  source_elsewhere,
  source_straddles,
  window,
  responder_narrowed
};

constexpr int kStream = 48;
void run(Env& e, const char* name, Change change, uint32_t len) {
  ibv_cq* cq = make_cq(e, 64);
  QpCaps caps;
  caps.send_wr = 16;
  ibv_qp* s = make_qp(e, cq, cq, caps);
  ibv_qp* r = make_qp(e, cq, cq, caps);
  uint8_t* src = alloc(8192);
  uint8_t* dst = alloc(8192);
  fill(src, 8192, 23);
  std::memset(dst, 0, 8192);
  ibv_mr* smr = reg(e, src, 4096, IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* dmr = reg(e, dst, 8192, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  connect_pair(e, s, r);
  ibv_sge sg{reinterpret_cast<uintptr_t>(src), len, smr->lkey};
  ibv_send_wr wr{}, *bad = nullptr;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.sg_list = &sg;
  wr.num_sge = 1;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.rkey = dmr->rkey;
  std::vector<ibv_wc> got;
  for (int i = 0; i < kStream; ++i) {
    wr.wr_id = static_cast<uint64_t>(i + 1);
    wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(dst + i * len);
    if (ibv_post_send(s, &wr, &bad)) die("ibv_post_send (stream)");
    got.clear();
    collect(cq, got, 1, 5000);
    if (got.size() != 1 || got[0].status != IBV_WC_SUCCESS)
      die(("stream write " + std::to_string(i) + ": " + describe(got)).c_str(), 0);
  }
  ibv_mr* other = nullptr;
  ibv_mw* mw = nullptr;
  switch (change) {
    case Change::none:
      break;
    case Change::source_dereg:  // the lkey names no region now
      if (ibv_dereg_mr(smr)) die("ibv_dereg_mr (source)");
      break;
    case Change::target_dereg:  // the rkey names no region now
      if (ibv_dereg_mr(dmr)) die("ibv_dereg_mr (target)");
      break;
    case Change::sender_err: {
      ibv_qp_attr a{};
      a.qp_state = IBV_QPS_ERR;
      if (ibv_modify_qp(s, &a, IBV_QP_STATE)) die("ibv_modify_qp ERR");
      break;
    }
    case Change::source_elsewhere:  // the same lkey, the SGE past its region's end
      sg.addr = reinterpret_cast<uintptr_t>(src + 4096);
      break;
    case Change::source_straddles:  // the same lkey, the SGE's last bytes past its region's end
      sg.addr = reinterpret_cast<uintptr_t>(src + 4096 - len / 2);
      break;
    case Change::window:  // a memory window now exists (the write still names the region)
      mw = ibv_alloc_mw(e.pd, IBV_MW_TYPE_1);
      if (!mw) die("ibv_alloc_mw");
      break;
    case Change::responder_narrowed: {  // the responder takes no RDMA WRITE now
      ibv_qp_attr a{};
      a.qp_access_flags = 0;
      if (ibv_modify_qp(r, &a, IBV_QP_ACCESS_FLAGS)) die("ibv_modify_qp ACCESS_FLAGS");
      break;
    }
  }
  const uint64_t last = reinterpret_cast<uintptr_t>(dst + kStream * len);
  wr.wr_id = 999;
  wr.wr.rdma.remote_addr = last;
  const int prc = ibv_post_send(s, &wr, &bad);
  got.clear();
  collect(cq, got, prc == 0 ? 1 : 0, 5000);
  collect_extra(cq, got, 200);
  const bool placed = std::memcmp(dst + kStream * len, reinterpret_cast<const void*>(sg.addr), len) == 0;
  out("%s, %u B: post %d, completions %s, sender %s, responder %s, last write %s", name, len, prc,
      describe(got).c_str(), qp_state(s), qp_state(r), placed ? "placed" : "not placed");
  if (mw && ibv_dealloc_mw(mw)) die("ibv_dealloc_mw");
  (void)other;
}

}  // namespace

int main() {
  Env e = open_env();
  watchdog(240, "express_change did not finish");
  for (const uint32_t len : {64u, 12u}) {
    run(e, "none", Change::none, len);
    run(e, "source_dereg", Change::source_dereg, len);
    run(e, "target_dereg", Change::target_dereg, len);
    run(e, "sender_err", Change::sender_err, len);
    run(e, "source_elsewhere", Change::source_elsewhere, len);
    run(e, "source_straddles", Change::source_straddles, len);
    run(e, "window", Change::window, len);
    run(e, "responder_narrowed", Change::responder_narrowed, len);
  }
  return 0;
}
