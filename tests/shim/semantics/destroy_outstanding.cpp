// destroy_outstanding: QPs destroyed with completions outstanding on a shared CQ (one before polling starts,
// one while a thread polls); the others keep working: no crash, no wr_id the program did not post, exact
// counts for the live QPs.
//
//   sem_destroy_outstanding
//
// Four pairs send to one CQ. Each posts 32 signaled writes; after a pause (their
// completions wait in the CQ, unpolled) QP 1 is destroyed, then a poller thread starts
// and QP 3 is destroyed under it; QPs 0 and 2 then post 32 more each. Printed: wr_ids
// never posted (a tag of the shim reaching the program), per live QP whether its 64
// completions came once each in order, and per destroyed QP whether what came of it is
// an in-order prefix of its writes (providers may drop a destroyed QP's completions, as
// mlx5 does, or deliver them, as rxe does).
#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>

#include "fixture.hpp"

using namespace sem;

namespace {

constexpr int kQps = 4;
constexpr uint64_t kPerPhase = 32;
constexpr uint32_t kLen = 64;

}  // namespace

int main() {
  Env e = open_env();
  ibv_cq* cq = make_cq(e, kQps * 2 * kPerPhase);
  ibv_cq* rcq = make_cq(e, 16);
  QpCaps caps;
  caps.send_wr = 2 * kPerPhase;
  Pair p[kQps];
  for (auto& x : p) {
    x = make_pair(e, cq, rcq, 2 * kPerPhase * kLen, 2 * kPerPhase * kLen, caps);
    fill(x.src, x.src_len, static_cast<uint64_t>(&x - p) + 11);
  }
  watchdog(60, "destroy_outstanding did not finish");
  auto post = [&](int q, uint64_t k) {
    const int rc =
        post_write(p[q].s, (uint64_t(q) << 32) | k, p[q].src + k * kLen, kLen, p[q].smr->lkey,
                   reinterpret_cast<uintptr_t>(p[q].dst + k * kLen), p[q].dmr->rkey, IBV_SEND_SIGNALED);
    if (rc) {
      errno = rc;
      die("ibv_post_send");
    }
  };
  for (uint64_t k = 0; k < kPerPhase; ++k)
    for (int q = 0; q < kQps; ++q) post(q, k);
  sleep_ms(300);  // their completions reach the CQ; none is polled yet
  const int drc1 = ibv_destroy_qp(p[1].s);

  std::mutex mu;
  std::vector<ibv_wc> seen;
  std::atomic<bool> stop{false};
  std::thread poller([&] {
    ibv_wc wc[8];
    while (!stop.load()) {
      const int n = ibv_poll_cq(cq, 8, wc);
      if (n < 0) die("ibv_poll_cq");
      if (n) {
        std::lock_guard<std::mutex> g(mu);
        seen.insert(seen.end(), wc, wc + n);
      }
    }
  });
  const int drc3 = ibv_destroy_qp(p[3].s);
  for (uint64_t k = kPerPhase; k < 2 * kPerPhase; ++k) {
    post(0, k);
    post(2, k);
  }
  // Until the live QPs' 64 completions each came (or 20 s), then a little more.
  auto live_done = [&] {
    std::lock_guard<std::mutex> g(mu);
    size_t n = 0;
    for (auto& w : seen)
      if ((w.wr_id >> 32) == 0 || (w.wr_id >> 32) == 2) ++n;
    return n >= 2 * 2 * kPerPhase;
  };
  const uint64_t end = now_ms() + 20000;
  while (!live_done() && now_ms() < end) sleep_ms(5);
  sleep_ms(100);
  stop = true;
  poller.join();

  uint64_t unknown = 0, errors = 0;
  std::vector<std::vector<uint64_t>> per(kQps);
  for (auto& w : seen) {
    const uint64_t q = w.wr_id >> 32, k = w.wr_id & 0xffffffffu;
    if (q >= kQps || k >= 2 * kPerPhase || ((q == 1 || q == 3) && k >= kPerPhase)) {
      ++unknown;
      continue;
    }
    if (w.status != IBV_WC_SUCCESS) ++errors;
    per[q].push_back(k);
  }
  out("destroy_outstanding: destroy_qp rc %d (before polling), %d (while polled)", drc1, drc3);
  out("completions with a wr_id never posted %llu; error statuses %llu",
      static_cast<unsigned long long>(unknown), static_cast<unsigned long long>(errors));
  for (int q : {0, 2}) {
    bool exact = per[q].size() == 2 * kPerPhase;
    for (size_t i = 0; exact && i < per[q].size(); ++i) exact = per[q][i] == i;
    const bool data = std::memcmp(p[q].dst, p[q].src, 2 * kPerPhase * kLen) == 0;
    out("qp %d: %s; target %s", q, exact ? "64 completions, once each, in order" : "completions NOT EXACT",
        data ? "right" : "WRONG");
  }
  for (int q : {1, 3}) {
    bool prefix = per[q].size() <= kPerPhase;
    for (size_t i = 0; prefix && i < per[q].size(); ++i) prefix = per[q][i] == i;
    out("qp %d (destroyed %s): its completions seen are an in-order prefix of its writes: %s", q,
        q == 1 ? "before polling" : "while polled", prefix ? "yes" : "NO");
    std::fprintf(stderr, "qp %d: %zu completions seen after its destruction\n", q, per[q].size());
  }
  out("qp states: %s/%s %s/%s", qp_state(p[0].s), qp_state(p[0].r), qp_state(p[2].s), qp_state(p[2].r));
  return 0;
}
