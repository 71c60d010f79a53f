// wr_batches: writes built with the ibv_qp_ex wr_* API in batches of 1-3 per wr_start/wr_complete, some
// batches aborted with wr_abort: completions exact, the target holds exactly the completed batches' bytes
// (an aborted batch places nothing).
//
//   sem_wr_batches [WRITES] [SEED] [noabort]
//
// Random writes (1 B to 512 B, one SGE each), every 4th signaled (and the last), at most
// 60 outstanding; one batch in 16 is aborted (noabort: none) and its writes built again
// in the next. Printed: the writes, the aborted batches, the completions (bad ones), the
// target.
#include <atomic>
#include <cstring>
#include <deque>
#include <random>

#include "fixture.hpp"

using namespace sem;

namespace {

constexpr uint32_t kDepth = 64, kMaxLen = 512;

std::atomic<uint64_t> g_progress{0};
uint64_t progress() {
  return g_progress.load();
}

}  // namespace

int main(int argc, char** argv) {
  const uint64_t total = argc > 1 ? std::strtoull(argv[1], nullptr, 0) : 2000;
  const uint64_t seed = argc > 2 ? std::strtoull(argv[2], nullptr, 0) : 5;
  const bool aborts = !(argc > 3 && std::string(argv[3]) == "noabort");
  Env e = open_env();
  ibv_cq* cq = make_cq(e, 2 * kDepth);
  ibv_qp_init_attr_ex a{};
  a.send_cq = cq;
  a.recv_cq = cq;
  a.qp_type = IBV_QPT_RC;
  a.cap.max_send_wr = kDepth;
  a.cap.max_recv_wr = 16;
  a.cap.max_send_sge = 4;
  a.cap.max_recv_sge = 1;
  a.pd = e.pd;
  a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  a.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_SEND;
  ibv_qp* sender = ibv_create_qp_ex(e.ctx, &a);
  if (!sender) die("ibv_create_qp_ex");
  ibv_qp_ex* qx = ibv_qp_to_qp_ex(sender);
  if (!qx) die("ibv_qp_to_qp_ex");
  QpCaps caps;
  caps.send_wr = kDepth;
  Pair p = make_pair(e, cq, cq, size_t{kDepth} * kMaxLen, 1 << 16, caps, sender);
  std::vector<uint8_t> shadow(p.dst_len, 0);
  stall_watchdog(30, "wr_batches stalled: no post or completion for 30 s", progress);

  std::mt19937_64 rng(seed);
  uint64_t bad = 0, aborted = 0, completed = 0;  // completed: every wr_id below it completed
  std::deque<uint64_t> sig;
  auto drain = [&] {
    ibv_wc wc[16];
    const int n = ibv_poll_cq(cq, 16, wc);
    if (n < 0) die("ibv_poll_cq");
    for (int i = 0; i < n; ++i) {
      g_progress++;
      if (wc[i].status != IBV_WC_SUCCESS || sig.empty() || wc[i].wr_id != sig.front() ||
          wc[i].opcode != IBV_WC_RDMA_WRITE) {
        ++bad;
        if (!sig.empty()) sig.pop_front();
      } else {
        sig.pop_front();
        completed = wc[i].wr_id + 1;
      }
    }
  };
  struct Placed {
    size_t off;
    const uint8_t* from;
    uint32_t len;
  };
  for (uint64_t k = 0; k < total;) {
    const uint64_t b = std::min<uint64_t>(1 + rng() % 3, total - k);
    while (k + b > completed + kDepth - 4) drain();
    const bool abort = rng() % 16 == 0 && aborts;
    std::vector<Placed> placed;
    std::vector<uint64_t> signaled;
    ibv_wr_start(qx);
    for (uint64_t j = k; j < k + b; ++j) {
      const uint32_t len =
          rng() % 2 ? 1 + static_cast<uint32_t>(rng() % 64) : 1 + static_cast<uint32_t>(rng() % kMaxLen);
      const size_t off = rng() % (p.dst_len - len);
      uint8_t* src = p.src + (j % kDepth) * kMaxLen;
      for (uint32_t i = 0; i < len; ++i) src[i] = static_cast<uint8_t>(rng());
      const bool s = j % 4 == 0 || j + 1 == total;
      qx->wr_id = j;
      qx->wr_flags = s ? IBV_SEND_SIGNALED : 0;
      ibv_wr_rdma_write(qx, p.dmr->rkey, reinterpret_cast<uintptr_t>(p.dst + off));
      // One SGE: several are wr_multi_sge's (rxe gets unequal ones wrong itself).
      ibv_wr_set_sge(qx, p.smr->lkey, reinterpret_cast<uintptr_t>(src), len);
      placed.push_back({off, src, len});
      if (s) signaled.push_back(j);
    }
    if (abort) {
      ibv_wr_abort(qx);
      ++aborted;
      continue;  // the same wr_ids again: nothing of this batch was posted
    }
    if (int rc = ibv_wr_complete(qx)) {
      errno = rc;
      die("ibv_wr_complete");
    }
    g_progress++;
    for (const Placed& x : placed) std::memcpy(&shadow[x.off], x.from, x.len);
    sig.insert(sig.end(), signaled.begin(), signaled.end());
    k += b;
  }
  while (!sig.empty()) drain();
  stop_watchdogs();
  std::vector<ibv_wc> extra;
  collect_extra(cq, extra, 100);
  out("wr_batches: %llu writes in batches of 1-3, %llu batches aborted",
      static_cast<unsigned long long>(total), static_cast<unsigned long long>(aborted));
  out("completions: bad %llu, extra %zu", static_cast<unsigned long long>(bad), extra.size());
  out("target %s", std::memcmp(p.dst, shadow.data(), p.dst_len) == 0 ? "right" : "WRONG");
  return 0;
}
