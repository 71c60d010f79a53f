// RDMA WRITE latency and bandwidth per size, over a real verbs device, between a forked
// client and server: post-to-completion and ping-pong half round trip (as perftest
// ib_write_lat), streaming bandwidth (as ib_write_bw), two translation-pressure workloads
// (random target pages over a large footprint; the same with a hot set, as the paper's
// hint-based policy assumes), and the floors (CPU copy, syscall, an
// empty submission to the module) the unload.direct path is compared with.
//
// The path is chosen outside: run under the shim with UNLOAD_MODE / UNLOAD_PATH (the
// scripts/bench driver interleaves paths and repetitions); without the shim every write
// is an offload. Own flags, before Google Benchmark's:
//   --device=NAME  --gid=N  --footprint_mib=N  --iters_scale=F  --spin_yield=auto|0|1
//   --target_warmup=N (untimed writes before a random-target workload's, to its own targets)
//   --modes=M1,M2,.. --mode_block=N (the random-target workloads' timed writes in blocks of
//   N, turning through the module's modes; counters per mode: see random_targets)
#include "rc_link.hpp"
#include "unload.h"

#include <arpa/inet.h>
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace ub = unload::bench;
using Clock = std::chrono::steady_clock;

namespace {

constexpr size_t kMaxWrite = 1 << 20;
// Buffer layout on both sides: [0, 1 MiB) the source ("out"), [1 MiB, 2 MiB) the
// ping-pong target ("in"), then the translation-pressure footprint.
constexpr size_t kOut = 0;
constexpr size_t kIn = kMaxWrite;
constexpr size_t kFootprint = 2 * kMaxWrite;

enum class Op : uint32_t { pingpong = 1, stop = 2 };
struct Command {
  Op op;
  uint32_t bytes;
  uint64_t iters;
};

ub::RcLink g_link;
int g_sock = -1;
size_t g_footprint = 64u << 20;
double g_iters_scale = 1.0;
// The random-target workloads' untimed writes (--target_warmup): their own distribution,
// so that a footprint's translations (and adaptive's resident set) reach a steady state.
int64_t g_target_warmup = 40;

// --modes: the module's modes (its sysfs `mode`) the random-target workloads turn through,
// a block of g_mode_block timed writes each (empty: the mode stays as it is). 64: a
// multiple of the 32 writes a thread's counts reach the module in (shim/README.md), so
// that after a warm-up of a multiple of 32 each block's paths are counted in its mode.
std::vector<std::string> g_modes;
int64_t g_mode_block = 64;

// Fewer iterations for big writes: under TCG a 1 MiB write takes milliseconds.
int64_t iters_for(size_t bytes) {
  double n = 4000.0 * 64.0 / (64.0 + static_cast<double>(bytes) / 64.0);
  return std::max<int64_t>(20, static_cast<int64_t>(n * g_iters_scale));
}

double ns_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
}

volatile uint8_t* byte_at(size_t off) {
  return g_link.buf + off;
}

uint8_t load_acquire(size_t off) {
  return __atomic_load_n(g_link.buf + off, __ATOMIC_ACQUIRE);
}

// Spin until the byte at `off` becomes `tag`. With fewer CPUs than spinners plus the
// device's own work (rxe runs in kernel threads), a pure spin starves the device until
// the next scheduler tick; yielding between loads hands it the CPU.
bool g_spin_yield = false;

void spin_until(size_t off, uint8_t tag) {
  while (load_acquire(off) != tag)
    if (g_spin_yield) sched_yield();
}

// Completions are drained as we go so the send queue never fills; the program's own
// completion count must come out exact, so any error completion aborts the run.
struct Drain {
  int outstanding = 0;
  bool ok = true;
  void after_post() {
    ++outstanding;
    ibv_wc wc[16];
    do {
      int n = ibv_poll_cq(g_link.cq, 16, wc);
      if (n < 0) {
        ok = false;
        return;
      }
      for (int i = 0; i < n; i++) ok &= wc[i].status == IBV_WC_SUCCESS;
      outstanding -= n;
    } while (outstanding >= 64);
  }
  void finish() {
    if (outstanding > 0) ok &= ub::poll_n(g_link, outstanding) == 0;
    outstanding = 0;
  }
};

// Writes per path so far, from the module's statistics (all -1 without the module): direct
// from stats/ (the writes the module itself placed), the others from reported/ (what the
// sessions claim; this benchmark's own processes are the only writers), mapped apart (the
// module never sees those). The share each path took shows what the adaptive policy chose.
constexpr int kPathNames = 6;
const char* const kPathName[kPathNames] = {"offload", "inline", "stage", "direct", "mapped", "remote"};

struct PathCounts {
  double n[kPathNames] = {-1, -1, -1, -1, -1, -1};
};

PathCounts path_counts() {
  PathCounts c;
  for (int i = 0; i < kPathNames; i++) {
    std::ifstream f(std::string("/sys/kernel/unload/") + (i == 3 ? "stats" : "reported") + "/writes_" +
                    kPathName[i]);
    double v;
    if (f >> v) c.n[i] = v;
  }
  if (c.n[4] < 0) c.n[4] = 0;  // a module without the mapped path
  if (c.n[5] < 0) c.n[5] = 0;  // or without the remote path
  return c;
}

void report_paths(benchmark::State& state, const PathCounts& before) {
  PathCounts after = path_counts();
  double total = 0;
  for (int i = 0; i < kPathNames; i++) total += after.n[i] - before.n[i];
  if (before.n[0] < 0 || total <= 0) return;
  for (int i = 0; i < kPathNames; i++)
    state.counters[std::string("share_") + kPathName[i]] = (after.n[i] - before.n[i]) / total;
}

// median_ns and p99_ns of `ns` (sorted here), their names ending in `suffix`.
void report_quantiles(benchmark::State& state, std::vector<double>& ns, const std::string& suffix) {
  std::sort(ns.begin(), ns.end());
  state.counters["median_ns" + suffix] = ns[ns.size() / 2];
  state.counters["p99_ns" + suffix] = ns[std::min(ns.size() - 1, ns.size() * 99 / 100)];
}

void report(benchmark::State& state, std::vector<double>& ns, size_t bytes) {
  if (ns.empty()) return;
  report_quantiles(state, ns, "");
  if (bytes) state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes));
}

double g_last_post_ns;  // the last timed write's ibv_post_send alone (timed_write)

// Post one signaled write to the peer's buffer at `remote_off` and wait for its
// completion: one timed iteration of the post-to-completion benchmarks. False (and the
// benchmark skipped) when the write failed.
bool timed_write(benchmark::State& state, std::vector<double>& ns, size_t remote_off, uint32_t bytes,
                 uint64_t wr_id) {
  auto t0 = Clock::now();
  int rc = ub::post_write(g_link, kOut, remote_off, bytes, true, false, wr_id);
  g_last_post_ns = ns_since(t0);
  if (!rc) rc = ub::poll_n(g_link, 1);
  double dt = ns_since(t0);
  if (rc) {
    state.SkipWithError("write failed");
    return false;
  }
  state.SetIterationTime(dt * 1e-9);
  ns.push_back(dt);
  return true;
}

// Untimed writes before the timed ones of each latency benchmark, for a steady state:
// adaptive samples every eligible path of a new write class 8 times before it chooses,
// which at 1 MiB is a whole 20-iteration run. Every variant writes them, so the comparison
// stays fair; how fast adaptive learns is measured by the policy simulator (tests/policy).
constexpr int kWarmupWrites = 40;

// kWarmupWrites untimed post-to-completion writes; false when one failed.
bool warm_up(size_t remote_off, uint32_t bytes) {
  for (int i = 0; i < kWarmupWrites; i++)
    if (ub::post_write(g_link, kOut, remote_off, bytes, true, false, 0) || ub::poll_n(g_link, 1))
      return false;
  return true;
}

// Post-to-completion writes of range(0) bytes, each after `gap` of quiet (0: back to back).
void post_to_completion(benchmark::State& state, std::chrono::milliseconds gap) {
  const auto bytes = static_cast<uint32_t>(state.range(0));
  std::vector<double> ns;
  ns.reserve(static_cast<size_t>(state.max_iterations));
  if (!warm_up(kIn, bytes)) {
    state.SkipWithError("write failed");
    return;
  }
  const PathCounts before = path_counts();
  uint8_t tag = 0;
  for (auto _ : state) {
    if (gap.count()) std::this_thread::sleep_for(gap);
    g_link.buf[kOut + bytes - 1] = ++tag;
    if (!timed_write(state, ns, kIn, bytes, tag)) break;
  }
  report_paths(state, before);
  report(state, ns, bytes);
}

void BM_Write_PostToCompletion(benchmark::State& state) {
  post_to_completion(state, std::chrono::milliseconds(0));
}

// One write after gap_ms of quiet: a program that writes now and then. The module drops
// a sender's kept resolution of its peer after pair_idle_ms unused (docs/sysfs.md), so a
// gap longer than that times a fresh resolution in every direct write.
void BM_Write_Sparse(benchmark::State& state) {
  post_to_completion(state, std::chrono::milliseconds(state.range(1)));
}

// The client's half of ib_write_lat's loop: write, then spin on our own target's last
// byte until the server's reply lands there.
void BM_Write_PingPong(benchmark::State& state) {
  const auto bytes = static_cast<uint32_t>(state.range(0));
  Command c{Op::pingpong, bytes, static_cast<uint64_t>(state.max_iterations + kWarmupWrites)};
  if (ub::sock_send(g_sock, &c, sizeof(c))) {
    state.SkipWithError("server gone");
    return;
  }
  std::vector<double> ns;
  ns.reserve(static_cast<size_t>(state.max_iterations));
  Drain drain;
  uint8_t tag = 0;
  const size_t last = kIn + bytes - 1;
  // One round trip: false when the post failed.
  auto ping = [&] {
    tag = static_cast<uint8_t>(tag % 255 + 1);
    g_link.buf[kOut + bytes - 1] = tag;
    if (ub::post_write(g_link, kOut, kIn, bytes, true, false, tag)) return false;
    drain.after_post();
    spin_until(last, tag);
    return true;
  };
  bool ok = true;
  for (int i = 0; i < kWarmupWrites && ok; i++) ok = ping();
  const PathCounts before = path_counts();
  for (auto _ : state) {
    auto t0 = Clock::now();
    if (!ok || !ping()) {
      state.SkipWithError("post failed");
      break;
    }
    auto rtt = ns_since(t0);
    state.SetIterationTime(rtt * 0.5e-9);
    ns.push_back(rtt * 0.5);
  }
  drain.finish();
  if (!drain.ok) state.SkipWithError("error completion");
  char done = 0;
  ub::sock_recv(g_sock, &done, 1);
  report_paths(state, before);
  report(state, ns, bytes);
}

// ib_write_bw's loop: keep `depth` writes in flight and signal one in kModeration (its
// --cq-mod), so most writes are unsignaled and retired by a later completion. One
// iteration is one run of kModeration writes, timed from a signaled completion to the
// next: median and p99 are per write over runs, in the steady state once the queue is
// full. The passive peer never posts, as in every bandwidth test.
constexpr uint32_t kModeration = 100;

void BM_Write_Bandwidth(benchmark::State& state) {
  const auto bytes = static_cast<uint32_t>(state.range(0));
  const auto depth = static_cast<uint64_t>(state.range(1));
  const uint64_t mod = std::min<uint64_t>(kModeration, depth);
  std::vector<double> ns;
  ns.reserve(static_cast<size_t>(state.max_iterations));
  const PathCounts before = path_counts();
  uint64_t posted = 0;   // writes posted
  uint64_t retired = 0;  // writes a polled signaled completion covers: a multiple of mod
  auto fill = [&] {
    for (; posted - retired < depth; ++posted)
      if (ub::post_write(g_link, kOut, kIn, bytes, (posted + 1) % mod == 0, false, posted)) return false;
    return true;
  };
  auto retire = [&] {
    ibv_wc wc;
    int n;
    while ((n = ibv_poll_cq(g_link.cq, 1, &wc)) == 0) {
    }
    if (n < 0 || wc.status != IBV_WC_SUCCESS) return false;
    retired += mod;
    return true;
  };
  bool ok = fill();
  auto last = Clock::now();
  for (auto _ : state) {
    if (!ok || !(ok = retire() && fill())) {
      state.SkipWithError("write failed");
      break;
    }
    const auto now = Clock::now();
    const double dt = std::chrono::duration<double, std::nano>(now - last).count();
    last = now;
    state.SetIterationTime(dt * 1e-9);
    ns.push_back(dt / static_cast<double>(mod));
  }
  // Leave the queue empty for the next benchmark: the signaled writes still out, then
  // one more signaled write to retire the unsignaled tail.
  while (ok && retired + mod <= posted) ok = retire();
  if (ok && posted > retired)
    ok = ub::post_write(g_link, kOut, kIn, bytes, true, false, posted) == 0 && ub::poll_n(g_link, 1) == 0;
  if (!ok) state.SkipWithError("write failed");
  report_paths(state, before);
  report(state, ns, 0);
  const auto writes = state.iterations() * static_cast<int64_t>(mod);
  state.SetBytesProcessed(writes * bytes);
  state.SetItemsProcessed(writes);  // items_per_second: writes/s
  if (!ns.empty()) {
    const double median = state.counters["median_ns"];
    state.counters["median_writes_per_s"] = 1e9 / median;
    state.counters["median_bytes_per_s"] = 1e9 * bytes / median;
  }
  state.counters["depth"] = static_cast<double>(depth);
  state.counters["moderation"] = static_cast<double>(mod);
}

// An event-driven program (a storage benchmark's RDMA engine, as fio's: rdma_cm aside, a
// completion channel it sleeps on): `depth` signaled writes in flight; it sleeps in
// ibv_get_cq_event, acknowledges the event, arms the CQ again, polls every completion
// there is and posts one write for each completion (wait_completions). What a write costs such a program is
// its post to the moment the program sees its completion, the wake through the channel included, which the
// busy-polling rows never pay. One iteration is `depth` completions seen (one write's post to its wake at
// depth 1): median and p99 are per write.
bool g_cq_armed = false;  // the CQ's arming not consumed by an event yet

// The completions the next wake brings, as the ibv_get_cq_event manual and fio's engine
// wait: sleep for the CQ's event, acknowledge it, arm the CQ again, then poll every
// completion there is (one that came before the arming is polled here; one after it
// fires the next event). The program never polls before it sleeps, so a completion it
// is not woken for is one it never sees. At least 1, or -1 on an error or a failed
// completion. The CQ is armed before the first write (arm_once).
bool arm_once() {
  if (!g_cq_armed && ibv_req_notify_cq(g_link.cq, 0)) return false;
  g_cq_armed = true;
  return true;
}

int wait_completions() {
  ibv_wc wc[16];
  for (;;) {
    ibv_cq* ev_cq = nullptr;
    void* ev_ctx = nullptr;
    if (!arm_once() || ibv_get_cq_event(g_link.channel, &ev_cq, &ev_ctx)) return -1;
    g_cq_armed = false;
    ibv_ack_cq_events(ev_cq, 1);
    if (!arm_once()) return -1;
    int seen = 0, n;
    while ((n = ibv_poll_cq(g_link.cq, 16, wc)) > 0) {
      for (int i = 0; i < n; i++)
        if (wc[i].status != IBV_WC_SUCCESS) return -1;
      seen += n;
    }
    if (n < 0) return -1;
    if (seen) return seen;
  }
}

void BM_Write_Event(benchmark::State& state) {
  const auto bytes = static_cast<uint32_t>(state.range(0));
  const auto depth = static_cast<uint64_t>(state.range(1));
  uint64_t posted = 0, seen = 0;
  if (!arm_once()) {
    state.SkipWithError("ibv_req_notify_cq failed");
    return;
  }
  auto fill = [&] {
    for (; posted - seen < depth; ++posted)
      if (ub::post_write(g_link, kOut, kIn, bytes, true, false, posted)) return false;
    return true;
  };
  // Completions until `want` more were seen, posting as they come: false on an error.
  auto complete = [&](uint64_t want) {
    for (const uint64_t until = seen + want; seen < until;) {
      if (!fill()) return false;
      const int n = wait_completions();
      if (n < 0) return false;
      seen += static_cast<uint64_t>(n);
    }
    return true;
  };
  // A steady state, as the busy-polling rows' warm-up (and the engine's long runs) have.
  bool ok = complete(std::max<uint64_t>(kWarmupWrites, 4 * depth));
  std::vector<double> ns;
  ns.reserve(static_cast<size_t>(state.max_iterations));
  const PathCounts before = path_counts();
  for (auto _ : state) {
    const auto t0 = Clock::now();
    if (!ok || !(ok = complete(depth))) {
      state.SkipWithError("write failed");
      break;
    }
    const double dt = ns_since(t0);
    state.SetIterationTime(dt * 1e-9);
    ns.push_back(dt / static_cast<double>(depth));
  }
  // Leave nothing in flight (the CQ stays armed: the next event row's first wait finds it so).
  while (ok && seen < posted) {
    const int n = wait_completions();
    ok = n > 0;
    if (ok) seen += static_cast<uint64_t>(n);
  }
  if (!ok) state.SkipWithError("write failed");
  report_paths(state, before);
  report(state, ns, 0);
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(depth * bytes));
  if (!ns.empty()) state.counters["median_writes_per_s"] = 1e9 / state.counters["median_ns"];
  state.counters["depth"] = static_cast<double>(depth);
}

// Post-to-completion at random page-aligned offsets over a large target footprint, with
// hot_pct % of the writes on its first kHotPages pages (0: none): on a real NIC the
// target's translation cache misses, on the cold writes only when it holds the hot set;
// rxe has no such cache.
constexpr size_t kHotPages = 16;
constexpr unsigned kHotPct = 90;  // issue 27's hot set: 90 % on 16 pages

constexpr const char* kModeFile = "/sys/kernel/unload/mode";

// The module's mode for every shim on this host (the control page): false if refused.
bool set_mode(const std::string& mode) {
  std::ofstream f(kModeFile);
  return static_cast<bool>(f << mode << '\n' << std::flush);
}

// One mode's share of an interleaved run (--modes): its writes' latencies and the writes
// each path took while it was the mode.
struct ModeArm {
  std::string name;
  std::vector<double> ns;
  std::vector<double> post_ns;  // each write's post call alone
  double paths[kPathNames] = {};
};

// Adds what each path took since `before` to `arm`, and makes `before` now.
void charge_paths(ModeArm& arm, PathCounts& before) {
  const PathCounts now = path_counts();
  for (int i = 0; i < kPathNames; i++) arm.paths[i] += now.n[i] - before.n[i];
  before = now;
}

double median_of(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

// Per mode: median_ns.M, p99_ns.M, mean_ns.M, post_median_ns.M (the post call alone: the
// CPU a write costs its program before the wait, the shim's own part in it) and share_P.M
// for each path P it took.
void report_arms(benchmark::State& state, std::vector<ModeArm>& arms) {
  for (ModeArm& a : arms) {
    if (a.ns.empty()) continue;
    double sum = 0;
    for (double v : a.ns) sum += v;
    report_quantiles(state, a.ns, "." + a.name);
    state.counters["post_median_ns." + a.name] = median_of(a.post_ns);
    state.counters["mean_ns." + a.name] = sum / static_cast<double>(a.ns.size());
    double total = 0;
    for (double n : a.paths) total += n;
    for (int i = 0; total > 0 && i < kPathNames; i++)
      state.counters[std::string("share_") + kPathName[i] + "." + a.name] = a.paths[i] / total;
  }
}

// The random-target workloads. With --modes, the timed writes go in blocks of
// --mode_block, each block under the next mode (the order reversed every other round, so
// that no mode always follows the same one), and each mode's writes are reported apart:
// the modes then share every slow spell of the emulator, which separate runs do not (under
// TCG a run's median moves by half from one run to the next). The warm-up runs under the
// last mode listed, whose steady state the others then share: B's translation cache, and
// the adaptive policy's resident set and estimates, which a mode other than adaptive
// leaves as they are.
void random_targets(benchmark::State& state, unsigned hot_pct) {
  const auto bytes = static_cast<uint32_t>(state.range(0));
  const size_t pages = (g_footprint - bytes) / 4096;
  std::mt19937_64 rng(42);
  const auto next_target = [&] {
    const bool hot = hot_pct != 0 && rng() % 100 < hot_pct;
    return kFootprint + (rng() % (hot ? std::min(kHotPages, pages) : pages)) * 4096;
  };
  std::vector<double> ns;
  ns.reserve(static_cast<size_t>(state.max_iterations));
  std::vector<ModeArm> arms;
  for (const std::string& m : g_modes) arms.push_back(ModeArm{m, {}, {}, {}});
  std::string mode_was;
  if (!arms.empty()) std::getline(std::ifstream(kModeFile) >> std::ws, mode_was);
  if (!arms.empty() && !set_mode(arms.back().name)) {
    state.SkipWithError("cannot set the module's mode (--modes needs root and the module)");
    return;
  }
  for (int64_t i = 0; i < g_target_warmup; i++)
    if (ub::post_write(g_link, kOut, next_target(), bytes, true, false, 0) || ub::poll_n(g_link, 1)) {
      if (!arms.empty()) set_mode(mode_was);
      state.SkipWithError("write failed");
      return;
    }
  PathCounts before = path_counts();
  const PathCounts first = before;
  int64_t i = 0;
  size_t arm = 0;
  for (auto _ : state) {
    if (!arms.empty() && i % g_mode_block == 0) {
      state.PauseTiming();
      if (i != 0) charge_paths(arms[arm], before);
      const auto block = static_cast<size_t>(i / g_mode_block);
      const size_t round = block / arms.size(), k = block % arms.size();
      arm = round % 2 == 0 ? k : arms.size() - 1 - k;
      const bool ok = set_mode(arms[arm].name);
      state.ResumeTiming();
      if (!ok) {
        state.SkipWithError("the module refused a mode");
        break;
      }
    }
    const size_t had = ns.size();
    if (!timed_write(state, ns, next_target(), bytes, 1)) break;
    if (!arms.empty()) {
      arms[arm].ns.push_back(ns[had]);
      arms[arm].post_ns.push_back(g_last_post_ns);
    }
    ++i;
  }
  state.counters["footprint_mib"] = static_cast<double>(g_footprint >> 20);
  state.counters["warmup_writes"] = static_cast<double>(g_target_warmup);
  if (hot_pct != 0) state.counters["hot_pages"] = static_cast<double>(kHotPages);
  report(state, ns, bytes);
  report_paths(state, first);
  if (!arms.empty()) {
    set_mode(mode_was);
    charge_paths(arms[arm], before);
    report_arms(state, arms);
    state.counters["mode_block"] = static_cast<double>(g_mode_block);
  }
}

void BM_Write_RandomTarget(benchmark::State& state) {
  random_targets(state, 0);
}
void BM_Write_HotSet(benchmark::State& state) {
  random_targets(state, kHotPct);
}

// The physical floor of a CPU copy of this size in this environment.
void BM_Floor_Memcpy(benchmark::State& state) {
  const auto bytes = static_cast<size_t>(state.range(0));
  std::vector<double> ns;
  ns.reserve(static_cast<size_t>(state.max_iterations));
  for (auto _ : state) {
    auto t0 = Clock::now();
    memcpy(g_link.buf + kIn, g_link.buf + kOut, bytes);
    benchmark::ClobberMemory();
    auto dt = ns_since(t0);
    state.SetIterationTime(dt * 1e-9);
    ns.push_back(dt);
  }
  report(state, ns, bytes);
}

// The cost of entering and leaving the kernel once, the other half of the direct floor.
void BM_Floor_Syscall(benchmark::State& state) {
  std::vector<double> ns;
  ns.reserve(static_cast<size_t>(state.max_iterations));
  for (auto _ : state) {
    auto t0 = Clock::now();
    benchmark::DoNotOptimize(syscall(SYS_getppid));
    auto dt = ns_since(t0);
    state.SetIterationTime(dt * 1e-9);
    ns.push_back(dt);
  }
  report(state, ns, 0);
}

// An empty submission to the module (UNLOAD_IOC_SUBMIT with no requests): what every
// direct write pays to reach the module before its first check (the syscall, the LSM's
// ioctl hook, the session, the header's copies), on a session of the benchmark's own.
// Skipped without /dev/unload or with a module of another ABI.
void BM_Floor_Submit(benchmark::State& state) {
  const int fd = open(UNLOAD_DEVICE_PATH, O_RDWR | O_CLOEXEC);
  unload_hello hello{};
  hello.abi_version = UNLOAD_ABI_VERSION;
  if (fd < 0 || ioctl(fd, UNLOAD_IOC_HELLO, &hello) != 0) {
    state.SkipWithError(fd < 0 ? "no " UNLOAD_DEVICE_PATH : "the module speaks another ABI");
    if (fd >= 0) close(fd);
    return;
  }
  std::vector<double> ns;
  ns.reserve(static_cast<size_t>(state.max_iterations));
  for (auto _ : state) {
    unload_submit s{};
    auto t0 = Clock::now();
    const int rc = ioctl(fd, UNLOAD_IOC_SUBMIT, &s);
    auto dt = ns_since(t0);
    if (rc != 0) {
      state.SkipWithError("UNLOAD_IOC_SUBMIT failed");
      break;
    }
    state.SetIterationTime(dt * 1e-9);
    ns.push_back(dt);
  }
  close(fd);
  report(state, ns, 0);
}

double p99_of(const std::vector<double>& v) {
  std::vector<double> s(v);
  std::sort(s.begin(), s.end());
  return s.empty() ? 0 : s[std::min(s.size() - 1, s.size() * 99 / 100)];
}

// 8 B, then powers of 4 from 64 B. Iterations() holds for a whole registration, so each
// size is its own registration with its own count.
template <class Fn>
void register_sizes(const char* name, Fn fn, size_t max_bytes) {
  for (size_t s = 8; s <= max_bytes; s = s == 8 ? 64 : s * 4)
    benchmark::RegisterBenchmark(name, fn)
        ->ArgName("bytes")
        ->Arg(static_cast<int64_t>(s))
        ->Iterations(iters_for(s))
        ->UseManualTime()
        ->ComputeStatistics("p99", p99_of);
}

// Runs of kModeration writes: an eighth of the latency benchmarks' iterations, since each
// is a hundred writes (a 1 MiB run is 100 MiB: seconds under TCG), but at least three to
// take a median of.
void register_bandwidth(size_t max_bytes, int64_t depth) {
  for (size_t s = 8; s <= max_bytes; s = s == 8 ? 64 : s * 4)
    benchmark::RegisterBenchmark("BM_Write_Bandwidth", BM_Write_Bandwidth)
        ->ArgNames({"bytes", "depth"})
        ->Args({static_cast<int64_t>(s), depth})
        ->Iterations(std::max<int64_t>(3, iters_for(s) / 8))
        ->UseManualTime()
        ->ComputeStatistics("p99", p99_of);
}

void register_all() {
  register_sizes("BM_Write_PostToCompletion", BM_Write_PostToCompletion, kMaxWrite);
  register_sizes("BM_Write_PingPong", BM_Write_PingPong, kMaxWrite);
  register_bandwidth(kMaxWrite, ub::kMaxSendWr);
  // The event-driven rows: 1 and 16 writes in flight (the storage engine of issue 54).
  for (size_t s = 8; s <= kMaxWrite; s = s == 8 ? 64 : s * 4)
    for (int64_t depth : {1, 16})
      benchmark::RegisterBenchmark("BM_Write_Event", BM_Write_Event)
          ->ArgNames({"bytes", "depth"})
          ->Args({static_cast<int64_t>(s), depth})
          ->Iterations(std::max<int64_t>(3, iters_for(s) / depth))
          ->UseManualTime()
          ->ComputeStatistics("p99", p99_of);
  register_sizes("BM_Write_RandomTarget", BM_Write_RandomTarget, 64 * 1024);
  register_sizes("BM_Write_HotSet", BM_Write_HotSet, 64 * 1024);
  // 1 ms: inside the module's default pair_idle_ms; 20 ms: beyond it. Not in the sweep,
  // a run being mostly sleep: --benchmark_filter=BM_Write_Sparse runs it (docs/perf/README.md).
  for (int64_t gap_ms : {1, 20})
    benchmark::RegisterBenchmark("BM_Write_Sparse", BM_Write_Sparse)
        ->ArgNames({"bytes", "gap_ms"})
        ->Args({8, gap_ms})
        ->Iterations(100)
        ->UseManualTime()
        ->ComputeStatistics("p99", p99_of);
  register_sizes("BM_Floor_Memcpy", BM_Floor_Memcpy, kMaxWrite);
  benchmark::RegisterBenchmark("BM_Floor_Syscall", BM_Floor_Syscall)
      ->UseManualTime()
      ->Iterations(20000)
      ->ComputeStatistics("p99", p99_of);
  benchmark::RegisterBenchmark("BM_Floor_Submit", BM_Floor_Submit)
      ->UseManualTime()
      ->Iterations(20000)
      ->ComputeStatistics("p99", p99_of);
}

std::string read_line(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return s;
}

void add_context() {
  utsname u{};
  uname(&u);
  benchmark::AddCustomContext("kernel", u.release);
  benchmark::AddCustomContext("device", g_link.device_name);
  benchmark::AddCustomContext("gid_index", std::to_string(g_link.gid_index));
  benchmark::AddCustomContext("qp_max_inline", std::to_string(g_link.max_inline));
  benchmark::AddCustomContext("spin_yield", g_spin_yield ? "1" : "0");
  for (const char* env : {"UNLOAD_MODE", "UNLOAD_PATH", "LD_PRELOAD"}) {
    const char* v = getenv(env);
    benchmark::AddCustomContext(env, v ? v : "");
  }
#define UNLOAD_BENCH_TUNABLE(name, min, max, def) #name,
  for (const char* t : {"mode", UNLOAD_TUNABLE_RANGES(UNLOAD_BENCH_TUNABLE)
                                    UNLOAD_MODULE_TUNABLE_RANGES(UNLOAD_BENCH_TUNABLE)}) {
#undef UNLOAD_BENCH_TUNABLE
    std::string v = read_line(std::string("/sys/kernel/unload/") + t);
    benchmark::AddCustomContext(std::string("unload.") + t, v.empty() ? "-" : v);
  }
}

// The server: connect, then answer ping-pong rounds until told to stop.
int serve(const ub::LinkOptions& opt, int sock) {
  std::string err;
  if (int rc = g_link.connect(opt, sock, err); rc) {
    fprintf(stderr, "bench server: %s: %s\n", err.c_str(), strerror(-rc));
    return 1;
  }
  Command c{};
  while (ub::sock_recv(sock, &c, sizeof(c)) == 0 && c.op == Op::pingpong) {
    Drain drain;
    uint8_t tag = 0;
    const size_t last = kIn + c.bytes - 1;
    for (uint64_t i = 0; i < c.iters; i++) {
      tag = static_cast<uint8_t>(tag % 255 + 1);
      spin_until(last, tag);
      g_link.buf[kOut + c.bytes - 1] = tag;
      if (ub::post_write(g_link, kOut, kIn, c.bytes, true, false, tag)) return 1;
      drain.after_post();
    }
    drain.finish();
    // The next round reuses the tags from 1: clear our target's last byte.
    *byte_at(last) = 0;
    char done = drain.ok ? 1 : 0;
    ub::sock_send(sock, &done, 1);
  }
  return 0;
}

// The control socket of a two-host run: the one client accepted on PORT (--serve), or the
// connection to ADDR:PORT (--peer). -1 with the reason printed.
int tcp_accept_one(uint16_t port) {
  int ls = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  if (ls < 0 || setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
      bind(ls, reinterpret_cast<sockaddr*>(&a), sizeof(a)) || listen(ls, 1)) {
    perror("bench: listen");
    if (ls >= 0) close(ls);
    return -1;
  }
  int fd = accept(ls, nullptr, nullptr);
  if (fd < 0) perror("bench: accept");
  close(ls);
  return fd;
}

int tcp_connect(const std::string& addr, uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  if (inet_pton(AF_INET, addr.c_str(), &a.sin_addr) != 1) {
    fprintf(stderr, "bench: --peer wants an IPv4 address, not '%s'\n", addr.c_str());
    return -1;
  }
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a))) {
    perror("bench: connect to --peer");
    if (fd >= 0) close(fd);
    return -1;
  }
  return fd;
}

// "1..65535" into *port; false otherwise.
bool parse_port(const std::string& v, uint16_t* port) {
  char* end = nullptr;
  unsigned long n = strtoul(v.c_str(), &end, 10);
  if (v.empty() || *end || n < 1 || n > 65535) return false;
  *port = static_cast<uint16_t>(n);
  return true;
}

bool take_flag(const char* arg, const char* name, std::string& value) {
  size_t n = strlen(name);
  if (strncmp(arg, name, n) || arg[n] != '=') return false;
  value = arg + n + 1;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  ub::LinkOptions opt;
  std::string spin_yield = "auto";
  std::string peer_addr;
  uint16_t serve_port = 0, peer_port = 0;
  std::vector<char*> rest{argv[0]};
  for (int i = 1; i < argc; i++) {
    std::string v;
    char* end = nullptr;
    if (take_flag(argv[i], "--device", v)) {
      opt.device = v;
    } else if (take_flag(argv[i], "--gid", v)) {
      opt.gid_index = static_cast<int>(strtol(v.c_str(), &end, 10));
      if (v.empty() || *end || opt.gid_index < 0) {
        fprintf(stderr, "bench: --gid wants a GID index, not '%s'\n", v.c_str());
        return 2;
      }
    } else if (take_flag(argv[i], "--footprint_mib", v)) {
      unsigned long mib = strtoul(v.c_str(), &end, 10);
      if (v.empty() || *end || mib < 1 || mib > 4096) {
        fprintf(stderr, "bench: --footprint_mib wants 1..4096, not '%s'\n", v.c_str());
        return 2;
      }
      g_footprint = mib << 20;
    } else if (take_flag(argv[i], "--spin_yield", v)) {
      if (v != "auto" && v != "0" && v != "1") {
        fprintf(stderr, "bench: --spin_yield wants auto, 0 or 1, not '%s'\n", v.c_str());
        return 2;
      }
      spin_yield = v;
    } else if (take_flag(argv[i], "--serve", v)) {
      if (!parse_port(v, &serve_port)) {
        fprintf(stderr, "bench: --serve wants a TCP port, not '%s'\n", v.c_str());
        return 2;
      }
    } else if (take_flag(argv[i], "--peer", v)) {
      size_t colon = v.rfind(':');
      if (colon == std::string::npos || !parse_port(v.substr(colon + 1), &peer_port)) {
        fprintf(stderr, "bench: --peer wants ADDR:PORT, not '%s'\n", v.c_str());
        return 2;
      }
      peer_addr = v.substr(0, colon);
    } else if (take_flag(argv[i], "--iters_scale", v)) {
      g_iters_scale = strtod(v.c_str(), &end);
      if (v.empty() || *end || !(g_iters_scale > 0 && g_iters_scale <= 100)) {
        fprintf(stderr, "bench: --iters_scale wants (0, 100], not '%s'\n", v.c_str());
        return 2;
      }
    } else if (take_flag(argv[i], "--target_warmup", v)) {
      g_target_warmup = strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end || g_target_warmup < 0 || g_target_warmup > 1'000'000) {
        fprintf(stderr, "bench: --target_warmup wants 0..1000000, not '%s'\n", v.c_str());
        return 2;
      }
    } else if (take_flag(argv[i], "--modes", v)) {
      g_modes.clear();
      for (size_t at = 0; at <= v.size();) {
        const size_t comma = std::min(v.find(',', at), v.size());
        const std::string m = v.substr(at, comma - at);
        if (m != "offload" && m != "unload" && m != "threshold" && m != "adaptive") {
          fprintf(stderr,
                  "bench: --modes wants offload, unload, threshold or adaptive, comma-separated, not '%s'\n",
                  v.c_str());
          return 2;
        }
        g_modes.push_back(m);
        at = comma + 1;
      }
    } else if (take_flag(argv[i], "--mode_block", v)) {
      g_mode_block = strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end || g_mode_block < 1 || g_mode_block > 1'000'000) {
        fprintf(stderr, "bench: --mode_block wants 1..1000000, not '%s'\n", v.c_str());
        return 2;
      }
    } else {
      rest.push_back(argv[i]);
    }
  }
  opt.buffer_bytes = kFootprint + g_footprint;
  // Two spinning processes and the device need more than 2 CPUs to spin freely.
  g_spin_yield = spin_yield == "1" || (spin_yield == "auto" && sysconf(_SC_NPROCESSORS_ONLN) < 4);

  if (serve_port && peer_port) {
    fprintf(stderr, "bench: --serve and --peer are the two ends: give one\n");
    return 2;
  }
  if (serve_port) {
    int fd = tcp_accept_one(serve_port);
    if (fd < 0) return 1;
    int rc = serve(opt, fd);
    close(fd);
    return rc;
  }
  pid_t server = -1;
  if (peer_port) {
    g_sock = tcp_connect(peer_addr, peer_port);
    if (g_sock < 0) return 1;
  } else {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) {
      perror("bench: socketpair");
      return 1;
    }
    server = fork();
    if (server < 0) {
      perror("bench: fork");
      return 1;
    }
    if (server == 0) {
      close(sv[0]);
      _exit(serve(opt, sv[1]));
    }
    close(sv[1]);
    g_sock = sv[0];
  }

  std::string err;
  int rc = g_link.connect(opt, g_sock, err);
  if (rc) {
    fprintf(stderr, "bench: %s: %s\n", err.c_str(), strerror(-rc));
    close(g_sock);
    if (server > 0) waitpid(server, nullptr, 0);
    return 1;
  }
  if (g_link.peer.length < opt.buffer_bytes) {
    fprintf(stderr, "bench: the peer's buffer is %llu bytes, ours %zu: give both --footprint_mib=%zu\n",
            static_cast<unsigned long long>(g_link.peer.length), opt.buffer_bytes, g_footprint >> 20);
    close(g_sock);
    if (server > 0) waitpid(server, nullptr, 0);
    return 1;
  }
  int bargc = static_cast<int>(rest.size());
  benchmark::Initialize(&bargc, rest.data());
  register_all();
  add_context();
  benchmark::AddCustomContext("peer", peer_port ? peer_addr : "forked");
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();

  Command stop{Op::stop, 0, 0};
  ub::sock_send(g_sock, &stop, sizeof(stop));
  char eof;
  // The server's exit (its end closing) before ours: its MR is gone before the next run.
  while (peer_port && ub::sock_recv(g_sock, &eof, 1) == 0) {
  }
  close(g_sock);
  if (server < 0) return 0;
  int status = 0;
  waitpid(server, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
