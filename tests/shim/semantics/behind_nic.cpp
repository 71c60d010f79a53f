// behind_nic: a write posted while the NIC's writes before it are still in flight lands after them;
// completions in post order.
//
//   sem_behind_nic [BATCHES]
//
// A round is a signaled 4 KiB RDMA WRITE_WITH_IMM (the NIC's on every path) to its own slot
// of the target, then at once a signaled 64 B write of other bytes over the slot's start (a
// CPU path's when one is forced). A batch is 16 rounds posted back to back, then collected.
// Under the shim the WRITE_WITH_IMM reaches the provider as the program built it, with no
// ring entry (a plain write, libunload/src/post.cpp): the 64 B write's fence waits for its
// counted completion, not a marker's. Printed: the rounds, the slots whose start holds the
// 64 B write and whose rest the 4 KiB one, the send completions and the immediates received.
#include <arpa/inet.h>

#include <cstring>
#include <string>

#include "fixture.hpp"

using namespace sem;

namespace {

constexpr uint32_t kRounds = 16, kSlot = 4096, kOver = 64;

uint64_t big_seed(uint64_t batch, uint32_t i) {
  return 2 * (batch * kRounds + i) + 1;
}
uint64_t small_seed(uint64_t batch, uint32_t i) {
  return 2 * (batch * kRounds + i) + 2;
}

}  // namespace

int main(int argc, char** argv) {
  const uint64_t batches = argc > 1 ? std::strtoull(argv[1], nullptr, 0) : 20;
  watchdog(240, "behind_nic");
  Env e = open_env();
  ibv_cq* scq = make_cq(e, 2 * kRounds);
  ibv_cq* rcq = make_cq(e, 2 * kRounds);
  QpCaps caps;
  caps.send_wr = 2 * kRounds;
  caps.recv_wr = 2 * kRounds;
  // The source: each round's two payloads side by side, so no write's bytes change while
  // the NIC may still read them.
  Pair p = make_pair(e, scq, rcq, size_t{kRounds} * (kSlot + kOver), size_t{kRounds} * kSlot, caps);
  uint64_t slots_right = 0, rounds = 0;
  std::string sends = "in order", imms = "in order";
  for (uint64_t b = 0; b < batches; ++b) {
    for (uint32_t i = 0; i < kRounds; ++i) {
      ibv_recv_wr rw{}, *rbad = nullptr;
      rw.wr_id = i;
      if (ibv_post_recv(p.r, &rw, &rbad)) die("ibv_post_recv");
    }
    for (uint32_t i = 0; i < kRounds; ++i) {
      uint8_t* big = p.src + size_t{i} * (kSlot + kOver);
      uint8_t* small = big + kSlot;
      fill(big, kSlot, big_seed(b, i));
      fill(small, kOver, small_seed(b, i));
      const uint64_t raddr = reinterpret_cast<uintptr_t>(p.dst) + size_t{i} * kSlot;
      ibv_sge sg{reinterpret_cast<uintptr_t>(big), kSlot, p.smr->lkey};
      ibv_send_wr w{}, *bad = nullptr;
      w.wr_id = 2 * i;
      w.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
      w.imm_data = htonl(static_cast<uint32_t>(b * kRounds + i));
      w.sg_list = &sg;
      w.num_sge = 1;
      w.send_flags = IBV_SEND_SIGNALED;
      w.wr.rdma.remote_addr = raddr;
      w.wr.rdma.rkey = p.dmr->rkey;
      if (ibv_post_send(p.s, &w, &bad)) die("ibv_post_send (with immediate)");
      if (post_write(p.s, 2 * i + 1, small, kOver, p.smr->lkey, raddr, p.dmr->rkey, IBV_SEND_SIGNALED))
        die("ibv_post_send");
    }
    std::vector<ibv_wc> got, recvs;
    collect(scq, got, 2 * kRounds, 20000);
    collect(rcq, recvs, kRounds, 20000);
    for (size_t k = 0; k < 2 * kRounds && sends == "in order"; ++k)
      if (k >= got.size() || got[k].wr_id != k || got[k].status != IBV_WC_SUCCESS)
        sends = "batch " + std::to_string(b) + ": " + describe(got);
    for (size_t k = 0; k < kRounds && imms == "in order"; ++k)
      if (k >= recvs.size() || recvs[k].status != IBV_WC_SUCCESS || !(recvs[k].wc_flags & IBV_WC_WITH_IMM) ||
          ntohl(recvs[k].imm_data) != b * kRounds + k)
        imms = "batch " + std::to_string(b) + ": " + std::to_string(recvs.size()) + " received, not in order";
    for (uint32_t i = 0; i < kRounds; ++i, ++rounds) {
      const uint8_t* slot = p.dst + size_t{i} * kSlot;
      bool right = true;
      for (uint32_t k = 0; k < kSlot && right; ++k)
        right = slot[k] == (k < kOver ? pattern_byte(small_seed(b, i), k) : pattern_byte(big_seed(b, i), k));
      slots_right += right;
    }
  }
  stop_watchdogs();
  out("rounds: %llu", static_cast<unsigned long long>(rounds));
  out("slots with the later write's bytes on top: %llu", static_cast<unsigned long long>(slots_right));
  out("send completions: %s", sends.c_str());
  out("immediates: %s", imms.c_str());
  out("qp states: %s %s", qp_state(p.s), qp_state(p.r));
  return 0;
}
