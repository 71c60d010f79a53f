// order: data-then-flag write pairs on one QP while a thread watches the flag: whenever the flag shows
// step k, the data of step k is in place (a write is visible only after the writes posted before it).
//
//   sem_order [STEPS] [SEED]
//
// Step k (1..STEPS) posts, as one list, a write of k-stamped 64-bit words (8 B to 2 KiB,
// the length from the seed) to the start of the target, then an 8-byte write of k to the
// flag word after it; the flag is signaled every 8th step (and the last). A reader thread
// spins on the flag: each new value f it sees, it checks that the first len(f) words are
// at least f. Printed: the steps, whether the last flag arrived, the violations seen
// (none, or how many), the completions.
#include <atomic>
#include <cstring>
#include <deque>
#include <random>
#include <thread>

#include "fixture.hpp"

using namespace sem;

namespace {

constexpr uint32_t kDepth = 64, kMaxLen = 2048, kWords = kMaxLen / 8;

std::atomic<uint64_t> g_progress{0};
uint64_t progress() {
  return g_progress.load();
}

}  // namespace

int main(int argc, char** argv) {
  const uint64_t steps = argc > 1 ? std::strtoull(argv[1], nullptr, 0) : 3000;
  const uint64_t seed = argc > 2 ? std::strtoull(argv[2], nullptr, 0) : 3;
  Env e = open_env();
  ibv_cq* cq = make_cq(e, 256);
  QpCaps caps;
  caps.send_wr = kDepth;
  Pair p = make_pair(e, cq, cq, size_t{kDepth} * (kWords + 1) * 8, (kWords + 1) * 8, caps);
  auto* src = reinterpret_cast<uint64_t*>(p.src);
  auto* dst = reinterpret_cast<uint64_t*>(p.dst);
  uint64_t* flag = &dst[kWords];
  std::vector<uint32_t> lens(steps + 1);
  std::mt19937_64 rng(seed);
  for (auto& l : lens) l = static_cast<uint32_t>(8 * (rng() % 2 ? 1 + rng() % 8 : 1 + rng() % kWords));
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> violations{0};
  std::thread reader([&] {
    uint64_t last = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      const uint64_t f = __atomic_load_n(flag, __ATOMIC_ACQUIRE);
      if (f == last || f > steps) continue;
      last = f;
      for (uint32_t i = 0; i < lens[f] / 8; ++i)
        if (__atomic_load_n(&dst[i], __ATOMIC_RELAXED) < f) {
          violations++;
          break;
        }
    }
  });
  stall_watchdog(30, "order stalled: no post or completion for 30 s", progress);
  uint64_t posted = 0, completed = 0, bad = 0, completions = 0;
  std::deque<uint64_t> sig;
  auto take = [&] {
    ibv_wc wc;
    const int n = ibv_poll_cq(cq, 1, &wc);
    if (n < 0) die("ibv_poll_cq");
    if (n == 0) return;
    ++completions;
    g_progress++;
    if (wc.status != IBV_WC_SUCCESS || sig.empty() || wc.wr_id != sig.front()) ++bad;
    if (!sig.empty()) sig.pop_front();
    completed = wc.wr_id + 1;
  };
  for (uint64_t k = 1; k <= steps; ++k) {
    while (posted + 2 > completed + kDepth) take();
    uint64_t* d = &src[(k % (kDepth / 2)) * (kWords + 1)];
    for (uint32_t i = 0; i < lens[k] / 8; ++i) d[i] = k;
    d[kWords] = k;
    ibv_sge sd{reinterpret_cast<uintptr_t>(d), lens[k], p.smr->lkey};
    ibv_sge sf{reinterpret_cast<uintptr_t>(&d[kWords]), 8, p.smr->lkey};
    ibv_send_wr wd{}, wf{}, *badwr = nullptr;
    wd.wr_id = posted;
    wd.opcode = IBV_WR_RDMA_WRITE;
    wd.sg_list = &sd;
    wd.num_sge = 1;
    wd.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(dst);
    wd.wr.rdma.rkey = p.dmr->rkey;
    wd.next = &wf;
    wf.wr_id = posted + 1;
    wf.opcode = IBV_WR_RDMA_WRITE;
    wf.sg_list = &sf;
    wf.num_sge = 1;
    wf.send_flags = k % 8 == 0 || k == steps ? IBV_SEND_SIGNALED : 0;
    wf.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(flag);
    wf.wr.rdma.rkey = p.dmr->rkey;
    if (wf.send_flags) sig.push_back(posted + 1);
    if (int rc = ibv_post_send(p.s, &wd, &badwr)) {
      errno = rc;
      die("ibv_post_send");
    }
    posted += 2;
    g_progress++;
  }
  while (!sig.empty()) take();
  const uint64_t end = now_ms() + 5000;
  while (__atomic_load_n(flag, __ATOMIC_ACQUIRE) != steps && now_ms() < end) sleep_ms(1);
  stop = true;
  reader.join();
  stop_watchdogs();
  const uint64_t v = violations.load();
  out("order: %llu data-then-flag steps, last flag %s", static_cast<unsigned long long>(steps),
      __atomic_load_n(flag, __ATOMIC_ACQUIRE) == steps ? "arrived" : "MISSING");
  out("flag seen before its data: %s", v ? ("YES, " + std::to_string(v) + " times").c_str() : "never");
  out("completions: %llu, bad %llu", static_cast<unsigned long long>(completions),
      static_cast<unsigned long long>(bad));
  return 0;
}
