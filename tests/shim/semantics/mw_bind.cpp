// mw_bind: a memory window of type 2 bound on the responder's QP, then written and read through by the
// sender, then the window invalidated and written through again: the statuses and bytes as
// the NIC has them.
//
//   sem_mw_bind
//
// The responder's target MR allows MW binding; a type 2 window over its second KiB is bound
// with IBV_WR_BIND_MW (remote write and read), signaled; the sender writes 64 B through the
// window's rkey, then reads them back; the responder invalidates the window
// (IBV_WR_LOCAL_INV); the sender writes through the stale rkey (a remote access error).
// Then a type 1 window bound with ibv_bind_mw on another sender and written through at
// once, behind the bind in the same send queue.
// Skipped where the provider has no type 2 windows. Printed: each step's completions, the
// target's verdict, the QP states.
#include <cstring>

#include "fixture.hpp"

using namespace sem;

int main() {
  Env e = open_env();
  ibv_cq* cq = make_cq(e, 16);
  ibv_cq* rcq = make_cq(e, 16);
  Pair p = make_pair(e, cq, rcq, 4096, 4096);
  uint8_t* tgt = alloc(4096);
  ibv_mr* tmr = reg(e, tgt, 4096, kRemote | IBV_ACCESS_MW_BIND);
  uint8_t* back = alloc(4096);
  ibv_mr* bmr = reg(e, back, 4096, IBV_ACCESS_LOCAL_WRITE);
  ibv_mw* mw = ibv_alloc_mw(e.pd, IBV_MW_TYPE_2);
  if (!mw) skip("the provider allocates no type 2 memory window");
  watchdog(60, "mw_bind did not finish");
  fill(p.src, 4096, 11);
  const uintptr_t win = reinterpret_cast<uintptr_t>(tgt) + 1024;

  ibv_send_wr w{}, *bad = nullptr;
  w.wr_id = 10;
  w.opcode = IBV_WR_BIND_MW;
  w.send_flags = IBV_SEND_SIGNALED;
  w.bind_mw.mw = mw;
  w.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
  w.bind_mw.bind_info.mr = tmr;
  w.bind_mw.bind_info.addr = win;
  w.bind_mw.bind_info.length = 1024;
  w.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  const int brc = ibv_post_send(p.r, &w, &bad);
  std::vector<ibv_wc> rw;
  collect(rcq, rw, brc ? 0 : 1, 5000);
  out("bind: post_rc %d, %s", brc, describe(rw).c_str());
  const uint32_t rkey = w.bind_mw.rkey;

  std::vector<ibv_wc> wcs;
  const int wrc = post_write(p.s, 20, p.src, 64, p.smr->lkey, win, rkey, IBV_SEND_SIGNALED);
  collect(cq, wcs, wrc ? 0 : 1, 5000);
  ibv_sge sg{reinterpret_cast<uintptr_t>(back), 64, bmr->lkey};
  ibv_send_wr r{};
  r.wr_id = 21;
  r.opcode = IBV_WR_RDMA_READ;
  r.sg_list = &sg;
  r.num_sge = 1;
  r.send_flags = IBV_SEND_SIGNALED;
  r.wr.rdma.remote_addr = win;
  r.wr.rdma.rkey = rkey;
  const int rrc = ibv_post_send(p.s, &r, &bad);
  collect(cq, wcs, (wrc ? 0 : 1) + (rrc ? 0 : 1), 5000);
  out("write and read through the window: post_rc %d %d, %s; target %s, read back %s", wrc, rrc,
      describe(wcs).c_str(), std::memcmp(tgt + 1024, p.src, 64) == 0 ? "right" : "WRONG",
      std::memcmp(back, p.src, 64) == 0 ? "right" : "WRONG");

  ibv_send_wr inv{};
  inv.wr_id = 30;
  inv.opcode = IBV_WR_LOCAL_INV;
  inv.send_flags = IBV_SEND_SIGNALED;
  inv.invalidate_rkey = rkey;
  rw.clear();
  const int irc = ibv_post_send(p.r, &inv, &bad);
  collect(rcq, rw, irc ? 0 : 1, 5000);
  out("invalidate: post_rc %d, %s", irc, describe(rw).c_str());
  wcs.clear();
  const int src2 = post_write(p.s, 40, p.src + 64, 64, p.smr->lkey, win + 64, rkey, IBV_SEND_SIGNALED);
  collect(cq, wcs, src2 ? 0 : 1, 10000);
  collect_extra(cq, wcs, 50);
  out("write through the stale rkey: post_rc %d, %s; target %s", src2, describe(wcs).c_str(),
      std::memcmp(tgt + 1088, p.src + 64, 64) == 0 ? "written" : "untouched");
  out("qp %s/%s", qp_state(p.s), qp_state(p.r));

  // Type 1: bound by ibv_bind_mw on a fresh sender, then written through at once (the
  // sender's queue orders the write behind the bind; nothing waits for its completion).
  ibv_mw* mw1 = ibv_alloc_mw(e.pd, IBV_MW_TYPE_1);
  if (!mw1) {
    out("type 1: the provider allocates none");
    return 0;
  }
  Pair q = make_pair(e, cq, rcq, 4096, 4096);
  fill(q.src, 4096, 12);
  ibv_mw_bind b{};
  b.wr_id = 50;
  b.send_flags = IBV_SEND_SIGNALED;
  b.bind_info.mr = tmr;
  b.bind_info.addr = reinterpret_cast<uintptr_t>(tgt) + 2048;
  b.bind_info.length = 1024;
  b.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
  const int b1 = ibv_bind_mw(q.s, mw1, &b);
  wcs.clear();
  const int w1 = post_write(q.s, 60, q.src, 64, q.smr->lkey, b.bind_info.addr, mw1->rkey, IBV_SEND_SIGNALED);
  collect(cq, wcs, (b1 ? 0 : 1) + (w1 ? 0 : 1), 5000);
  collect_extra(cq, wcs, 50);
  out("type 1: bind_rc %d, write_rc %d, %s; target %s", b1, w1, describe(wcs).c_str(),
      std::memcmp(tgt + 2048, q.src, 64) == 0 ? "right" : "WRONG");
  out("qp %s/%s", qp_state(q.s), qp_state(q.r));
  return 0;
}
