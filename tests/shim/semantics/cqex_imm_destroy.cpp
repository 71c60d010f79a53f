// cqex_imm_destroy: an ibv_cq_ex's receive completion with an immediate, taken from the provider when another
// QP of the CQ is destroyed, still reads every field (imm_data, wc_flags, byte_len, src_qp, slid, sl).
//
//   sem_cqex_imm_destroy [ts]
//
// One ibv_cq_ex is the send CQ of sender A and the receive CQ of responder B. A writes
// (so the CQ carries the shim's requests), its completion polled. B's peer writes with an
// immediate (B posted a receive); once the peer's completion says B received it, A is
// destroyed (under the shim, this drains the CQ), then the CQ is polled and every field
// printed. `ts`: the CQ also asks for completion timestamps (skipped where the provider
// has none); the completion must still arrive.
#include <arpa/inet.h>

#include <cstring>

#include "fixture.hpp"

using namespace sem;

int main(int argc, char** argv) {
  const bool ts = argc > 1 && std::strcmp(argv[1], "ts") == 0;
  Env e = open_env();
  watchdog(60, "cqex_imm_destroy did not finish");
  ibv_cq_init_attr_ex ca{};
  ca.cqe = 64;
  ca.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_SRC_QP |
                IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL;
  if (ts) ca.wc_flags |= IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
  ibv_cq_ex* cqx = ibv_create_cq_ex(e.ctx, &ca);
  if (!cqx && ts) skip("the provider makes no CQ with completion timestamps");
  if (!cqx) die("ibv_create_cq_ex");
  ibv_cq* cq = ibv_cq_ex_to_cq(cqx);
  ibv_cq* other = make_cq(e, 64);

  // A: sender on the extended CQ.
  Pair a = make_pair(e, cq, other, 4096, 4096);
  // B: its responder receives on the extended CQ; its peer sends from `other`.
  ibv_qp* b = make_qp(e, other, cq);
  uint8_t* psrc = alloc(4096);
  ibv_mr* pmr = reg(e, psrc, 4096, IBV_ACCESS_LOCAL_WRITE);
  ibv_qp* peer = make_qp(e, other, other);
  connect_pair(e, peer, b);
  uint8_t* bdst = alloc(4096);
  ibv_mr* bmr = reg(e, bdst, 4096, kRemote);

  auto poll_all = [&](const char* what, int want) {
    int got = 0;
    const uint64_t end = now_ms() + 5000;
    while (got < want && now_ms() < end) {
      ibv_poll_cq_attr pa{};
      int rc = ibv_start_poll(cqx, &pa);
      if (rc == ENOENT) continue;
      if (rc) die("ibv_start_poll");
      do {
        ++got;
        const unsigned flags = ibv_wc_read_wc_flags(cqx);
        const bool src_is_peer = ibv_wc_read_src_qp(cqx) == peer->qp_num;
        out("%s: wr_id %llu %s opcode %d byte_len %u qp %s imm %s 0x%x src_qp %s slid %u sl %u%s", what,
            static_cast<unsigned long long>(cqx->wr_id), status_name(cqx->status), ibv_wc_read_opcode(cqx),
            ibv_wc_read_byte_len(cqx),
            ibv_wc_read_qp_num(cqx) == b->qp_num     ? "B"
            : ibv_wc_read_qp_num(cqx) == a.s->qp_num ? "A"
                                                     : "?",
            (flags & IBV_WC_WITH_IMM) ? "flagged" : "unflagged", ntohl(ibv_wc_read_imm_data(cqx)),
            src_is_peer ? "peer" : "other", ibv_wc_read_slid(cqx), ibv_wc_read_sl(cqx),
            ts ? (ibv_wc_read_completion_ts(cqx) ? " ts set" : " ts 0") : "");
      } while (got < want && ibv_next_poll(cqx) == 0);
      ibv_end_poll(cqx);
    }
    if (got < want) out("%s: %d of %d completions within 5 s", what, got, want);
  };

  fill(a.src, 256, 1);
  if (post_write(a.s, 11, a.src, 256, a.smr->lkey, reinterpret_cast<uintptr_t>(a.dst), a.dmr->rkey,
                 IBV_SEND_SIGNALED))
    die("ibv_post_send A");
  poll_all("A's write", 1);

  ibv_recv_wr rw{}, *rbad = nullptr;
  rw.wr_id = 22;
  if (ibv_post_recv(b, &rw, &rbad)) die("ibv_post_recv");
  fill(psrc, 128, 2);
  ibv_sge sg{reinterpret_cast<uintptr_t>(psrc), 128, pmr->lkey};
  ibv_send_wr w{}, *bad = nullptr;
  w.wr_id = 33;
  w.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  w.sg_list = &sg;
  w.num_sge = 1;
  w.send_flags = IBV_SEND_SIGNALED;
  w.imm_data = htonl(0xabc123u);
  w.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(bdst);
  w.wr.rdma.rkey = bmr->rkey;
  if (ibv_post_send(peer, &w, &bad)) die("ibv_post_send peer");
  std::vector<ibv_wc> pw;
  collect(other, pw, 1, 5000);
  out("peer's write with immediate: %s", describe(pw).c_str());

  if (ibv_destroy_qp(a.s)) die("ibv_destroy_qp A");
  out("A destroyed");
  poll_all("B's receive", 1);
  out("target %s", std::memcmp(bdst, psrc, 128) == 0 ? "right" : "WRONG");
  return 0;
}
