// fence_read: a large RDMA READ into L, then fenced writes whose source is L: the target holds what the READ
// brought (IBV_SEND_FENCE), not L's old bytes.
//
//   sem_fence_read [ROUNDS]
//
// Round r: the responder's region R holds new bytes, the local buffer L (1 MiB) old ones.
// The sender posts a signaled READ of R into L, then two signaled writes with
// IBV_SEND_FENCE whose sources are L's last 64 bytes and L's last 4 KiB (64 B fits every
// CPU path; 4 KiB only stage and direct), to the target T. A write fenced behind a READ
// must read its source only after the READ completed: T must hold R's bytes. Odd rounds
// post the three as one list, even rounds one by one.
#include <cstring>

#include "fixture.hpp"

using namespace sem;

namespace {

constexpr size_t kRead = 1 << 20;
constexpr uint32_t kSmall = 64, kBig = 4096;

const char* verdict(const uint8_t* t, const uint8_t* fresh, const uint8_t* old, size_t n) {
  if (std::memcmp(t, fresh, n) == 0) return "read-data";
  if (std::memcmp(t, old, n) == 0) return "OLD-LOCAL-DATA";
  return "OTHER";
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 4;
  Env e = open_env();
  ibv_cq* cq = make_cq(e, 16);
  ibv_cq* rcq = make_cq(e, 16);
  ibv_qp* s = make_qp(e, cq, rcq);
  ibv_qp* r = make_qp(e, rcq, rcq);
  connect_pair(e, s, r);
  uint8_t* R = alloc(kRead);  // the responder's, read
  uint8_t* L = alloc(kRead);  // the sender's, read into, then written from
  uint8_t* T = alloc(kSmall + kBig);
  ibv_mr* rmr = reg(e, R, kRead, kRemote);
  ibv_mr* lmr = reg(e, L, kRead, IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* tmr = reg(e, T, kSmall + kBig, kRemote);
  watchdog(60, "fence_read did not finish");
  out("fence_read: READ %zu B, then fenced writes of %u B and %u B from the READ's buffer", kRead, kSmall,
      kBig);
  for (int round = 0; round < rounds; ++round) {
    fill(R, kRead, 1000u + static_cast<unsigned>(round));
    fill(L, kRead, 2000u + static_cast<unsigned>(round));
    std::memset(T, 0, kSmall + kBig);
    std::vector<uint8_t> fresh(R, R + kRead), old(L, L + kRead);

    ibv_sge rs{reinterpret_cast<uintptr_t>(L), static_cast<uint32_t>(kRead), lmr->lkey};
    ibv_sge ws{reinterpret_cast<uintptr_t>(L + kRead - kSmall), kSmall, lmr->lkey};
    ibv_sge wb{reinterpret_cast<uintptr_t>(L + kRead - kBig), kBig, lmr->lkey};
    ibv_send_wr rd{}, w1{}, w2{}, *bad = nullptr;
    rd.wr_id = 10u * static_cast<unsigned>(round) + 1;
    rd.opcode = IBV_WR_RDMA_READ;
    rd.sg_list = &rs;
    rd.num_sge = 1;
    rd.send_flags = IBV_SEND_SIGNALED;
    rd.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(R);
    rd.wr.rdma.rkey = rmr->rkey;
    w1.wr_id = 10u * static_cast<unsigned>(round) + 2;
    w1.opcode = IBV_WR_RDMA_WRITE;
    w1.sg_list = &ws;
    w1.num_sge = 1;
    w1.send_flags = IBV_SEND_SIGNALED | IBV_SEND_FENCE;
    w1.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(T);
    w1.wr.rdma.rkey = tmr->rkey;
    w2 = w1;
    w2.wr_id = 10u * static_cast<unsigned>(round) + 3;
    w2.sg_list = &wb;
    w2.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(T + kSmall);
    int rc = 0;
    if (round % 2) {
      rd.next = &w1;
      w1.next = &w2;
      rc = ibv_post_send(s, &rd, &bad);
    } else {
      rc = ibv_post_send(s, &rd, &bad);
      if (!rc) rc = ibv_post_send(s, &w1, &bad);
      if (!rc) rc = ibv_post_send(s, &w2, &bad);
    }
    std::vector<ibv_wc> wcs;
    collect(cq, wcs, rc ? 0 : 3, 20000);
    collect_extra(cq, wcs, 20);
    out("round %d (%s): post_rc %d completions %s", round, round % 2 ? "one list" : "one by one", rc,
        describe(wcs).c_str());
    out("round %d: READ placed %s; %u B write: %s; %u B write: %s", round,
        std::memcmp(L, fresh.data(), kRead) == 0 ? "yes" : "NO", kSmall,
        verdict(T, fresh.data() + kRead - kSmall, old.data() + kRead - kSmall, kSmall), kBig,
        verdict(T + kSmall, fresh.data() + kRead - kBig, old.data() + kRead - kBig, kBig));
  }
  out("qp %s/%s", qp_state(s), qp_state(r));
  return 0;
}
