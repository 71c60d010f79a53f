// mt_post: threads posting signaled 64 B writes on one QP (or QPs sharing one CQ), one poller thread; every
// wr_id completes once, in per-thread order, and lands right.
//
//   sem_mt_post THREADS QPS WRITES_PER_THREAD [OUTSTANDING_PER_THREAD [EMPTY_EVERY [cqex]]]
//
// With EMPTY_EVERY, write k of a thread is zero-length when k % EMPTY_EVERY is
// EMPTY_EVERY - 1: no CPU path takes one (nothing to copy), so the NIC carries it between
// CPU writes, and the next CPU write of its QP waits for its completion while the poller
// merges it. With cqex the send CQ is an ibv_cq_ex, polled one completion per
// start_poll/end_poll sequence (rxe in rdma-core 44 needs that).
//
// Thread t posts on QP t % QPS. Every write is signaled; thread t keeps at most
// OUTSTANDING (64) of its own writes outstanding. Write k of thread t carries a pattern of
// (t, k) into its own 64-byte slot of the target. One thread polls the shared send CQ.
// A post that fails stops its thread (counted); a stall (no post and no completion for
// 10 s) is the watchdog's.
#include <sched.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>
#include <thread>

#include "fixture.hpp"

using namespace sem;

namespace {

constexpr uint32_t kLen = 64;

struct Thread {
  std::atomic<uint64_t> done{0};    // completions seen for this thread
  std::atomic<uint64_t> posted{0};  // writes posted successfully
  int post_rc = 0;                  // the first failure's return value
  std::atomic<bool> finished{false};
  std::vector<uint8_t> seen;  // per write: completions seen
  uint64_t out_of_order = 0;
};

std::vector<Thread>* g_threads;
std::atomic<uint64_t> g_completions{0};

std::string progress() {
  uint64_t posted = 0;
  for (auto& t : *g_threads) posted += t.posted.load();
  return "posted " + std::to_string(posted) + " completions " + std::to_string(g_completions.load());
}

uint64_t progress_count() {
  uint64_t n = g_completions.load();
  for (auto& t : *g_threads) n += t.posted.load();
  return n;
}

uint64_t seed_of(size_t t, uint64_t k) {
  return (uint64_t(t) << 32) | k;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s THREADS QPS WRITES_PER_THREAD [OUTSTANDING [EMPTY_EVERY [cqex]]]\n",
                 argv[0]);
    return 2;
  }
  const size_t nthreads = std::strtoul(argv[1], nullptr, 0);
  const size_t nqps = std::strtoul(argv[2], nullptr, 0);
  const uint64_t writes = std::strtoull(argv[3], nullptr, 0);
  const uint64_t outstanding = argc > 4 ? std::strtoull(argv[4], nullptr, 0) : 64;
  const uint64_t empty_every = argc > 5 ? std::strtoull(argv[5], nullptr, 0) : 0;
  auto empty = [&](uint64_t k) { return empty_every && k % empty_every == empty_every - 1; };
  const bool cqex = argc > 6 && std::string(argv[6]) == "cqex";
  if (!nthreads || !nqps || nqps > nthreads || !writes || !outstanding) return 2;

  Env e = open_env();
  const size_t per_qp = (nthreads + nqps - 1) / nqps;
  ibv_cq_ex* scqx = nullptr;
  ibv_cq* scq = nullptr;
  if (cqex) {
    ibv_cq_init_attr_ex ca{};
    ca.cqe = static_cast<uint32_t>(nthreads * outstanding);
    ca.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_QP_NUM;
    scqx = ibv_create_cq_ex(e.ctx, &ca);
    if (!scqx) die("ibv_create_cq_ex");
    scq = ibv_cq_ex_to_cq(scqx);
  } else {
    scq = make_cq(e, static_cast<int>(nthreads * outstanding));
  }
  // At most n completions into wc, as ibv_poll_cq gives them.
  auto poll = [&](int n, ibv_wc* wc) {
    if (!cqex) return ibv_poll_cq(scq, n, wc);
    ibv_poll_cq_attr pa{};
    const int rc = ibv_start_poll(scqx, &pa);
    if (rc == ENOENT) return 0;
    if (rc) return -1;
    wc[0].wr_id = scqx->wr_id;
    wc[0].status = scqx->status;
    ibv_end_poll(scqx);
    return 1;
  };
  ibv_cq* rcq = make_cq(e, 16);
  QpCaps caps;
  caps.send_wr = static_cast<uint32_t>(per_qp * outstanding);
  std::vector<Pair> qps;
  const size_t dst_len = nthreads * writes * kLen;
  for (size_t i = 0; i < nqps; ++i) {
    // The first pair owns the target region; the others write to it with its rkey (one PD).
    qps.push_back(make_pair(e, scq, rcq, nthreads * outstanding * kLen, i == 0 ? dst_len : 4096, caps));
  }
  uint8_t* const dst = qps[0].dst;
  const uint32_t rkey = qps[0].dmr->rkey;

  std::vector<Thread> threads(nthreads);
  g_threads = &threads;
  for (auto& t : threads) t.seen.assign(writes, 0);
  watchdog(300, "mt_post did not finish", progress);
  stall_watchdog(10, "mt_post stalled: no post or completion for 10 s", progress_count, progress);

  std::atomic<uint64_t> unknown{0}, errors{0};
  std::thread poller([&] {
    ibv_wc wc[32];
    for (;;) {
      const int n = poll(32, wc);
      if (n < 0) die("ibv_poll_cq");
      for (int i = 0; i < n; ++i) {
        g_completions++;
        const uint64_t t = wc[i].wr_id >> 32, k = wc[i].wr_id & 0xffffffffu;
        if (t >= nthreads || k >= writes) {
          unknown++;
          continue;
        }
        if (wc[i].status != IBV_WC_SUCCESS) errors++;
        Thread& th = threads[t];
        // A thread's writes are on one QP, posted in order: they complete in order.
        if (k != th.done.load()) th.out_of_order++;
        if (th.seen[k] < 255) th.seen[k]++;
        th.done++;
      }
      if (n == 0) {
        sched_yield();
        bool all = true;
        for (auto& th : threads)
          if (!th.finished.load() || th.done.load() < th.posted.load()) all = false;
        if (all) return;
      }
    }
  });

  std::vector<std::thread> posters;
  for (size_t ti = 0; ti < nthreads; ++ti)
    posters.emplace_back([&, ti] {
      Thread& th = threads[ti];
      Pair& p = qps[ti % nqps];
      uint8_t* slots = p.src + ti * outstanding * kLen;
      for (uint64_t k = 0; k < writes; ++k) {
        while (k >= th.done.load() + outstanding) sched_yield();  // vCPUs are few under TCG
        uint8_t* s = slots + (k % outstanding) * kLen;
        fill(s, kLen, seed_of(ti, k));
        const uint64_t slot = ti * writes + k;
        const int rc = post_write(p.s, seed_of(ti, k), s, empty(k) ? 0 : kLen, p.smr->lkey,
                                  reinterpret_cast<uintptr_t>(dst + slot * kLen), rkey, IBV_SEND_SIGNALED);
        if (rc) {
          th.post_rc = rc;
          break;
        }
        th.posted++;
      }
      th.finished = true;
    });
  for (auto& t : posters) t.join();
  poller.join();
  // The watchdogs read `threads` (g_threads): stopped before it goes. A sample during
  // exit read freed memory and killed the process with SIGBUS, rarely, under the shim,
  // whose exit takes longer.
  stop_watchdogs();

  uint64_t posted = 0, failures = 0, once = 0, missing = 0, dups = 0, disorder = 0, bad_slots = 0;
  std::string rcs;
  for (size_t ti = 0; ti < nthreads; ++ti) {
    Thread& th = threads[ti];
    posted += th.posted.load();
    if (th.post_rc) {
      failures++;
      rcs += std::string(" ") + std::strerror(th.post_rc);
    }
    disorder += th.out_of_order;
    for (uint64_t k = 0; k < writes; ++k) {
      const uint8_t s = th.seen[k];
      if (k < th.posted.load()) {
        if (s == 0) missing++;
        if (s == 1) once++;
      }
      if (s > 1) dups++;
      uint8_t want[kLen] = {};  // an empty write leaves its slot as it was: zero
      if (!empty(k)) fill(want, kLen, seed_of(ti, k));
      const bool posted_k = k < th.posted.load();
      if (posted_k && std::memcmp(dst + (ti * writes + k) * kLen, want, kLen) != 0) bad_slots++;
    }
  }
  out("mt_post: threads %zu qps %zu writes/thread %llu outstanding/thread %llu empty every %llu%s", nthreads,
      nqps, static_cast<unsigned long long>(writes), static_cast<unsigned long long>(outstanding),
      static_cast<unsigned long long>(empty_every), cqex ? ", ibv_cq_ex" : "");
  out("posted %llu post_failures %llu%s", static_cast<unsigned long long>(posted),
      static_cast<unsigned long long>(failures), rcs.c_str());
  out("completions %llu once %llu missing %llu duplicated %llu unknown_wr_id %llu errors %llu out_of_order "
      "%llu",
      static_cast<unsigned long long>(g_completions.load()), static_cast<unsigned long long>(once),
      static_cast<unsigned long long>(missing), static_cast<unsigned long long>(dups),
      static_cast<unsigned long long>(unknown.load()), static_cast<unsigned long long>(errors.load()),
      static_cast<unsigned long long>(disorder));
  out("target: writes whose slot is wrong %llu", static_cast<unsigned long long>(bad_slots));
  out("qp states: %s",
      [&] {
        std::string s;
        for (auto& p : qps) s += std::string(s.empty() ? "" : " ") + qp_state(p.s) + "/" + qp_state(p.r);
        return s;
      }()
          .c_str());
  return 0;
}
