// threads: threads each posting random writes on a QP of their own and polling themselves, with a send CQ
// each or one CQ all share (several pollers on it): every signaled completion arrives once, right, and
// every target is right.
//
//   sem_threads separate|shared [THREADS] [WRITES]
//
// Thread t posts WRITES writes (1 B to 1 KiB, random offsets in its own 256 KiB target),
// every 4th signaled (and its last), at most 32 outstanding, and polls its CQ between
// posts. With a shared CQ a thread may take another thread's completion: a completion is
// attributed by its wr_id (thread << 40 | index) and checked against that QP. Separate
// CQs: each QP's completions must come in post order. Printed per thread: bad completions
// (wrong status, QP, or order), the target.
#include <atomic>
#include <cstring>
#include <random>
#include <thread>

#include "fixture.hpp"

using namespace sem;

namespace {

constexpr uint32_t kDepth = 32, kMaxLen = 1024;

struct T {
  Pair p;
  ibv_cq* cq = nullptr;
  std::vector<uint8_t> shadow;
  std::atomic<uint64_t> completed{0};  // every request below it completed
  std::atomic<uint64_t> next_sig{0};   // separate CQs: the next signaled index due
  std::atomic<uint64_t> bad{0};
};

std::atomic<uint64_t> g_progress{0};
uint64_t progress() {
  return g_progress.load();
}

}  // namespace

int main(int argc, char** argv) {
  const bool shared = argc > 1 && std::string(argv[1]) == "shared";
  const int nthreads = argc > 2 ? std::atoi(argv[2]) : 4;
  const uint64_t writes = argc > 3 ? std::strtoull(argv[3], nullptr, 0) : 1000;
  Env e = open_env();
  ibv_cq* rcq = make_cq(e, 16);
  ibv_cq* scq_shared = shared ? make_cq(e, static_cast<int>(kDepth) * nthreads) : nullptr;
  QpCaps caps;
  caps.send_wr = kDepth;
  std::vector<T> ts(static_cast<size_t>(nthreads));
  for (auto& t : ts) {
    t.cq = shared ? scq_shared : make_cq(e, kDepth);
    t.p = make_pair(e, t.cq, rcq, size_t{kDepth} * kMaxLen, 1 << 18, caps);
    t.shadow.assign(t.p.dst_len, 0);
  }
  auto sig_of = [&](uint64_t k) { return k % 4 == 3 || k + 1 == writes; };
  auto next_sig_after = [&](uint64_t k) {
    for (uint64_t j = k + 1;; ++j)
      if (sig_of(j)) return j;
  };
  std::atomic<uint64_t> stray{0};
  auto poll_cq = [&](ibv_cq* cq) {
    ibv_wc wc[8];
    const int n = ibv_poll_cq(cq, 8, wc);
    if (n < 0) die("ibv_poll_cq");
    for (int i = 0; i < n; ++i) {
      g_progress++;
      const size_t ti = wc[i].wr_id >> 40;
      const uint64_t k = wc[i].wr_id & ((1ull << 40) - 1);
      if (ti >= ts.size()) {
        ++stray;
        continue;
      }
      T& t = ts[ti];
      if (wc[i].status != IBV_WC_SUCCESS || wc[i].qp_num != t.p.s->qp_num || !sig_of(k)) {
        ++t.bad;
        continue;
      }
      // Two pollers of a shared CQ may record one QP's completions out of order: the
      // later one's index wins.
      uint64_t c = t.completed.load();
      while (c < k + 1 && !t.completed.compare_exchange_weak(c, k + 1)) {
      }
      if (!shared) {
        if (k != t.next_sig.load()) ++t.bad;
        t.next_sig.store(next_sig_after(k));
      }
    }
  };
  stall_watchdog(30, "threads stalled: no post or completion for 30 s", progress);
  std::vector<std::thread> th;
  for (int i = 0; i < nthreads; ++i)
    th.emplace_back([&, i] {
      T& t = ts[static_cast<size_t>(i)];
      std::mt19937_64 rng(static_cast<uint64_t>(i) * 7919 + 1);
      t.next_sig.store(next_sig_after(~0ull));
      for (uint64_t k = 0; k < writes; ++k) {
        while (k >= t.completed.load() + kDepth) poll_cq(t.cq);
        uint8_t* s = t.p.src + (k % kDepth) * kMaxLen;
        const RandomWrite w = random_write(rng, 64, kMaxLen, s, t.shadow);
        if (int rc = post_write(t.p.s, (uint64_t(i) << 40) | k, s, w.len, t.p.smr->lkey,
                                reinterpret_cast<uintptr_t>(t.p.dst + w.off), t.p.dmr->rkey,
                                sig_of(k) ? IBV_SEND_SIGNALED : 0)) {
          errno = rc;
          die("ibv_post_send");
        }
        g_progress++;
        poll_cq(t.cq);
      }
      while (t.completed.load() < writes) poll_cq(t.cq);
    });
  for (auto& x : th) x.join();
  stop_watchdogs();
  out("threads: %d threads x %llu writes, %s", nthreads, static_cast<unsigned long long>(writes),
      shared ? "one send CQ shared by all" : "a send CQ each");
  out("completions with a wr_id never posted: %llu", static_cast<unsigned long long>(stray.load()));
  for (size_t i = 0; i < ts.size(); ++i)
    out("thread %zu: bad completions %llu, target %s", i, static_cast<unsigned long long>(ts[i].bad.load()),
        std::memcmp(ts[i].p.dst, ts[i].shadow.data(), ts[i].p.dst_len) == 0 ? "right" : "WRONG");
  return 0;
}
