// ud_rc_one_cq: an RC QP and a UD QP complete on one CQ; every completion keeps its own
// wr_id (the UD receive's is 0), none is lost, invented or crashes the poll.
//
//   sem_ud_rc_one_cq
//
// The shared CQ is the RC sender's send CQ and the UD QP's receive CQ. Round 1: a
// signaled RC write, polled; then a UD SEND to the UD QP, whose receive (wr_id 0) is
// polled. Round 2: both in flight at once (printed sorted by wr_id: their order between
// two QPs is the NIC's). Round 3: an unsignaled RC write then a signaled one, with a UD
// receive in between.
#include <algorithm>
#include <cstring>

#include "fixture.hpp"

using namespace sem;

namespace {

constexpr uint32_t kQkey = 0x11111111;
constexpr uint32_t kUdLen = 64;
constexpr uint32_t kGrh = 40;  // a UD receive buffer starts with the GRH

ibv_qp* make_ud(Env& e, ibv_cq* scq, ibv_cq* rcq) {
  ibv_qp_init_attr a{};
  a.send_cq = scq;
  a.recv_cq = rcq;
  a.qp_type = IBV_QPT_UD;
  a.cap.max_send_wr = 8;
  a.cap.max_recv_wr = 8;
  a.cap.max_send_sge = 1;
  a.cap.max_recv_sge = 1;
  ibv_qp* qp = ibv_create_qp(e.pd, &a);
  if (!qp) die("ibv_create_qp (UD)");
  ibv_qp_attr m{};
  m.qp_state = IBV_QPS_INIT;
  m.pkey_index = 0;
  m.port_num = 1;
  m.qkey = kQkey;
  if (ibv_modify_qp(qp, &m, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY)) die("UD to INIT");
  m = {};
  m.qp_state = IBV_QPS_RTR;
  if (ibv_modify_qp(qp, &m, IBV_QP_STATE)) die("UD to RTR");
  m = {};
  m.qp_state = IBV_QPS_RTS;
  m.sq_psn = 0;
  if (ibv_modify_qp(qp, &m, IBV_QP_STATE | IBV_QP_SQ_PSN)) die("UD to RTS");
  return qp;
}

struct Ud {
  ibv_qp* rx;  // its receives complete on the shared CQ
  ibv_qp* tx;
  ibv_ah* ah;
  ibv_cq* tx_cq;
  uint8_t* buf;
  ibv_mr* mr;

  void post_recv(uint64_t wr_id) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(buf), kGrh + kUdLen, mr->lkey};
    ibv_recv_wr wr{};
    ibv_recv_wr* bad = nullptr;
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    if (ibv_post_recv(rx, &wr, &bad)) die("ibv_post_recv (UD)");
  }
  // A signaled UD SEND from tx to rx; its own completion is reaped on tx_cq.
  void send(uint64_t wr_id) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(buf + 4096), kUdLen, mr->lkey};
    ibv_send_wr wr{};
    ibv_send_wr* bad = nullptr;
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.ud.ah = ah;
    wr.wr.ud.remote_qpn = rx->qp_num;
    wr.wr.ud.remote_qkey = kQkey;
    if (ibv_post_send(tx, &wr, &bad)) die("ibv_post_send (UD)");
    std::vector<ibv_wc> own;
    collect(tx_cq, own, 1, 10000);
    if (own.size() != 1 || own[0].status != IBV_WC_SUCCESS) die("the UD SEND did not complete");
  }
};

// "wr_id:OPCODE:STATUS" for each.
std::string show(std::vector<ibv_wc> wcs, bool sorted) {
  if (sorted)
    std::sort(wcs.begin(), wcs.end(), [](const ibv_wc& a, const ibv_wc& b) { return a.wr_id < b.wr_id; });
  std::string s = std::to_string(wcs.size()) + " completions:";
  for (const ibv_wc& wc : wcs) {
    const char* op = wc.status != IBV_WC_SUCCESS      ? "-"
                     : wc.opcode == IBV_WC_RDMA_WRITE ? "WRITE"
                     : wc.opcode == IBV_WC_RECV       ? "RECV"
                                                      : "OTHER";
    s += " " + std::to_string(wc.wr_id) + ":" + op + ":" + status_name(wc.status);
  }
  return s;
}

}  // namespace

int main() {
  Env e = open_env();
  ibv_cq* shared = make_cq(e, 64);
  ibv_cq* rcq = make_cq(e, 16);
  Pair p = make_pair(e, shared, rcq, 4096, 4096);
  fill(p.src, p.src_len, 7);

  Ud ud{};
  ud.tx_cq = make_cq(e, 16);
  ud.rx = make_ud(e, ud.tx_cq, shared);
  ud.tx = make_ud(e, ud.tx_cq, ud.tx_cq);
  ud.buf = alloc(8192);
  ud.mr = reg(e, ud.buf, 8192, IBV_ACCESS_LOCAL_WRITE);
  ibv_ah_attr ah{};
  ah.is_global = 1;
  ah.grh.dgid = e.gid;
  ah.grh.sgid_index = static_cast<uint8_t>(e.gid_index);
  ah.grh.hop_limit = 1;
  ah.port_num = 1;
  ud.ah = ibv_create_ah(e.pd, &ah);
  if (!ud.ah) die("ibv_create_ah");
  watchdog(60, "ud_rc_one_cq did not finish");

  const auto dst = [&](uint32_t off) { return reinterpret_cast<uintptr_t>(p.dst + off); };
  std::vector<ibv_wc> wcs;
  int rc = post_write(p.s, 7, p.src, 64, p.smr->lkey, dst(0), p.dmr->rkey, IBV_SEND_SIGNALED);
  collect(shared, wcs, 1, 10000);
  ud.post_recv(0);
  ud.send(100);
  collect(shared, wcs, 2, 10000);
  collect_extra(shared, wcs, 20);
  out("round 1 (write, then receive): post %d; %s", rc, show(wcs, false).c_str());

  wcs.clear();
  ud.post_recv(0);
  rc = post_write(p.s, 8, p.src + 64, 64, p.smr->lkey, dst(64), p.dmr->rkey, IBV_SEND_SIGNALED);
  ud.send(101);
  collect(shared, wcs, 2, 10000);
  collect_extra(shared, wcs, 20);
  out("round 2 (both in flight): post %d; %s", rc, show(wcs, true).c_str());

  wcs.clear();
  rc = post_write(p.s, 9, p.src + 128, 64, p.smr->lkey, dst(128), p.dmr->rkey, 0);
  ud.post_recv(0);
  ud.send(102);
  collect(shared, wcs, 1, 10000);
  rc |= post_write(p.s, 10, p.src + 192, 64, p.smr->lkey, dst(192), p.dmr->rkey, IBV_SEND_SIGNALED);
  collect(shared, wcs, 2, 10000);
  collect_extra(shared, wcs, 20);
  out("round 3 (unsignaled write, receive, signaled write): post %d; %s", rc, show(wcs, false).c_str());

  out("target %s; rc qp %s/%s; ud qp %s", std::memcmp(p.dst, p.src, 256) == 0 ? "right" : "WRONG",
      qp_state(p.s), qp_state(p.r), qp_state(ud.rx));
  return 0;
}
