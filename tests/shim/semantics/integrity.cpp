// integrity: random writes (1 B to 4 KiB, some over two SGEs) on 4 QPs sharing one send CQ sized exactly,
// selectively signaled; every completion exact and in order, every target byte right.
//
//   sem_integrity [WRITES] [SEED]
//
// Each write goes to a random QP, a random offset of its 1 MiB target, with a random length
// (half up to 256 B, half up to 4 KiB: every path applies to some); a quarter scatter their
// source over two SGEs. A request is signaled one time in four, and at least every 31st on
// its QP, so a QP has at most 64 requests outstanding and the send CQ (4 x 64) can never
// overflow if the shim adds nothing of its own to it. A final signaled zero-length write per
// QP drains it. Printed: the counts the seed decides, then whether the completions were
// exact (each signaled request once, in post order, SUCCESS) and each target right.
#include <atomic>
#include <cstring>
#include <deque>
#include <random>

#include "fixture.hpp"

using namespace sem;

namespace {

constexpr int kQps = 4;
constexpr uint32_t kDepth = 64;
constexpr uint32_t kMaxLen = 4096;
constexpr size_t kTarget = 1 << 20;

std::atomic<uint64_t> g_progress{0};
uint64_t progress() {
  return g_progress.load();
}

struct Q {
  Pair p;
  std::vector<uint8_t> shadow = std::vector<uint8_t>(kTarget, 0);
  uint64_t posted = 0, completed = 0;  // completed: every request below it is done
  std::deque<uint64_t> signaled;       // signaled request indices in post order
  uint32_t unsignaled_run = 0;
};

}  // namespace

int main(int argc, char** argv) {
  const long writes = argc > 1 ? std::atol(argv[1]) : 5000;
  const uint64_t seed = argc > 2 ? std::strtoull(argv[2], nullptr, 0) : 7;
  Env e = open_env();
  ibv_cq* scq = make_cq(e, kQps * kDepth);
  ibv_cq* rcq = make_cq(e, 16);
  QpCaps caps;
  caps.send_wr = kDepth;
  std::vector<Q> q(kQps);
  for (auto& x : q) x.p = make_pair(e, scq, rcq, size_t{kDepth} * kMaxLen, kTarget, caps);
  stall_watchdog(30, "integrity stalled: no post or completion for 30 s", progress);

  long bad = 0, disorder = 0, completions = 0, signaled_total = 0, two_sge = 0;
  auto poll = [&](bool block) {
    ibv_wc wc[16];
    for (;;) {
      const int n = ibv_poll_cq(scq, 16, wc);
      if (n < 0) die("ibv_poll_cq");
      for (int i = 0; i < n; ++i) {
        ++completions;
        g_progress++;
        const uint64_t qi = wc[i].wr_id >> 40, k = wc[i].wr_id & ((1ull << 40) - 1);
        if (qi >= kQps || wc[i].qp_num != q[qi].p.s->qp_num) {
          ++bad;
          continue;
        }
        Q& x = q[qi];
        if (wc[i].status != IBV_WC_SUCCESS || wc[i].opcode != IBV_WC_RDMA_WRITE) ++bad;
        if (x.signaled.empty() || x.signaled.front() != k) {
          ++disorder;
          continue;
        }
        x.signaled.pop_front();
        x.completed = k + 1;
      }
      if (n > 0 || !block) return;
    }
  };
  auto post = [&](Q& x, ibv_sge* sg, int nsge, size_t off, bool sig) {
    ibv_send_wr wr{}, *badwr = nullptr;
    wr.wr_id = (uint64_t(&x - q.data()) << 40) | x.posted;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.sg_list = sg;
    wr.num_sge = nsge;
    wr.send_flags = sig ? IBV_SEND_SIGNALED : 0;
    wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(x.p.dst + off);
    wr.wr.rdma.rkey = x.p.dmr->rkey;
    if (sig) {
      x.signaled.push_back(x.posted);
      ++signaled_total;
    }
    if (int rc = ibv_post_send(x.p.s, &wr, &badwr)) {
      errno = rc;
      die("ibv_post_send");
    }
    x.posted++;
    g_progress++;
  };

  std::mt19937_64 rng(seed);
  for (long w = 0; w < writes; ++w) {
    Q& x = q[rng() % kQps];
    const uint64_t k = x.posted;
    // The send queue slot (and the source slot) of request k - kDepth must be free.
    while (k >= x.completed + kDepth) poll(true);
    uint8_t* s = x.p.src + (k % kDepth) * kMaxLen;
    const auto [len, off] = random_write(rng, 256, kMaxLen, s, x.shadow);
    const bool sig = rng() % 4 == 0 || x.unsignaled_run >= kDepth / 2 - 1;
    x.unsignaled_run = sig ? 0 : x.unsignaled_run + 1;
    ibv_sge sg[2];
    int nsge = 1;
    sg[0] = {reinterpret_cast<uintptr_t>(s), len, x.p.smr->lkey};
    if (len > 1 && rng() % 4 == 0) {
      sg[0].length = len / 2;
      sg[1] = {reinterpret_cast<uintptr_t>(s + len / 2), len - len / 2, x.p.smr->lkey};
      nsge = 2;
      ++two_sge;
    }
    post(x, sg, nsge, off, sig);
    poll(false);
  }
  for (auto& x : q) {
    while (x.posted >= x.completed + kDepth) poll(true);
    post(x, nullptr, 0, 0, true);
  }
  for (auto& x : q)
    while (!x.signaled.empty()) poll(true);
  stop_watchdogs();
  std::vector<ibv_wc> extra;
  collect_extra(scq, extra, 100);

  out("integrity: %d QPs on one send CQ of %u, %ld writes (%ld over two SGEs), %ld signaled (with the "
      "final zero-length ones)",
      kQps, kQps * kDepth, writes, two_sge, signaled_total);
  out("completions: %s, bad %ld, out of order %ld, extra %zu",
      completions == signaled_total ? "one per signaled request" : "NOT one per signaled request", bad,
      disorder, extra.size());
  for (int i = 0; i < kQps; ++i)
    out("qp %d: target %s", i, std::memcmp(q[i].p.dst, q[i].shadow.data(), kTarget) == 0 ? "right" : "WRONG");
  return 0;
}
