// Tunables from the environment (no kmod) or the control page, the notice, statistics.
#include "config.hpp"

#include <pthread.h>
#include <time.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <mutex>
#include <new>

#include "ending.hpp"
#include "env_tunables.hpp"
#include "kmod.hpp"
#include "remote_ring.hpp"
#include "signals.hpp"
#include "stage.hpp"
#include "tls.hpp"
#include "unload/policy/resident_set.hpp"
#include "unload/runtime.h"

namespace unload::rt {
namespace {

// Each path's name in UNLOAD_PATH, the statistics file and sysfs (writes_<name>).
constexpr const char* kPathFileNames[] = {"offload", "inline", "stage", "direct", "remote", "mapped"};
static_assert(std::size(kPathFileNames) == policy::kPathCount);

Tunables g_tunables = policy::kDefaultTunables;
// A forked child let go of its parent's session and opens its own at its first use.
std::atomic<bool> g_kmod_pending{false};
std::mutex g_kmod_mu;        // guards the child's opening of its session
bool g_mode_forced = false;  // UNLOAD_MODE set: it wins over the control page
uint32_t g_forced_mode = 0;
bool g_path_forced = false;  // UNLOAD_PATH set
Path g_forced_path = Path::offload;
std::atomic<ThreadStats*> g_stats_list{nullptr};
EnvTunables g_env{};  // the UNLOAD_* tunable variables: with the kmod, they narrow the page's

bool parse_mode(const char* s, uint32_t& out) {
  static const char* const names[] = {"offload", "unload", "threshold", "adaptive"};
  for (uint32_t i = 0; i < 4; ++i)
    if (std::strcmp(s, names[i]) == 0) {
      out = i;
      return true;
    }
  return false;
}

}  // namespace

// Published with release once g_kmod is whole (a forked child opens its session later).
std::atomic<bool> g_have_kmod{false};
UNLOAD_TLS_HOT thread_local Tunables t_tunables;
UNLOAD_TLS_HOT thread_local uint32_t t_seq = 1;  // odd: never a stable control-page sequence
UNLOAD_TLS_HOT constinit thread_local ThreadStats* t_stats = nullptr;

bool env_switch_on(const char* var) {
  const char* v = std::getenv(var);
  if (!v || std::strcmp(v, "1") == 0) return true;
  if (std::strcmp(v, "0") == 0) return false;
  std::fprintf(stderr, "unload: %s=\"%s\" is not 0 or 1; keeping 1\n", var, v);
  return true;
}

namespace {

bool env_mode(Tunables& t) {
  const char* s = std::getenv("UNLOAD_MODE");
  if (!s) return false;
  uint32_t m;
  if (!parse_mode(s, m)) {
    std::fprintf(stderr,
                 "unload: UNLOAD_MODE=\"%s\" is not one of offload, unload, threshold, adaptive; "
                 "keeping %s\n",
                 s,
                 t.mode == 0   ? "offload"
                 : t.mode == 1 ? "unload"
                 : t.mode == 2 ? "threshold"
                               : "adaptive");
    return false;
  }
  t.mode = m;
  return true;
}

bool env_path() {
  const char* s = std::getenv("UNLOAD_PATH");
  if (!s) return false;
  for (unsigned i = 0; i < policy::kPathCount; ++i)
    if (std::strcmp(s, kPathFileNames[i]) == 0) {
      g_forced_path = static_cast<Path>(i);
      return true;
    }
  std::fprintf(stderr,
               "unload: UNLOAD_PATH=\"%s\" is not one of offload, inline, stage, direct, mapped, remote; "
               "ignored\n",
               s);
  return false;
}

}  // namespace

ThreadStats& thread_stats_first() {
  auto* s = static_cast<ThreadStats*>(std::calloc(1, sizeof(ThreadStats)));
  if (!s) {
    // No memory for this thread's block: it counts into one shared by every such thread
    // (its adds may race; statistics only, never the writes themselves).
    static ThreadStats shared_block;
    static std::once_flag listed;
    std::call_once(listed, [] {
      ThreadStats* h = g_stats_list.load(std::memory_order_relaxed);
      do shared_block.next = h;
      while (!g_stats_list.compare_exchange_weak(h, &shared_block, std::memory_order_release,
                                                 std::memory_order_relaxed));
    });
    t_stats = &shared_block;
    return shared_block;
  }
  ThreadStats* head = g_stats_list.load(std::memory_order_relaxed);
  do s->next = head;
  while (!g_stats_list.compare_exchange_weak(head, s, std::memory_order_release, std::memory_order_relaxed));
  t_stats = s;
  return *s;
}

namespace {

// Adds what `s` has not yet added to the counters page. Its own thread, or at exit.
void kmod_flush(ThreadStats& s) {
  for (unsigned i = 0; i < policy::kPathCount; ++i) {
    const uint64_t w = __atomic_exchange_n(&s.kmod_writes[i], 0, __ATOMIC_RELAXED);
    const uint64_t b = __atomic_exchange_n(&s.kmod_bytes[i], 0, __ATOMIC_RELAXED);
    if (w || b) kmod_count(static_cast<Path>(i), w, b);
  }
  for (unsigned i = 0; i < UNLOAD_WHY_COUNT; ++i)
    if (const uint64_t n = __atomic_exchange_n(&s.kmod_why_not[i], 0, __ATOMIC_RELAXED)) kmod_count_why(i, n);
  s.kmod_unsent = 0;
}

}  // namespace

void kmod_flush_all() {
  if (g_have_kmod.load(std::memory_order_acquire))
    for (ThreadStats* s = g_stats_list.load(std::memory_order_acquire); s; s = s->next) kmod_flush(*s);
}

const char* path_name(unsigned i) {
  return i < policy::kPathCount ? kPathFileNames[i] : "none";
}

void count_flush(ThreadStats& s) {
  kmod_flush(s);
}

void count_mapped_write(uint64_t bytes, bool express) {
  ThreadStats& s = thread_stats();
  const unsigned i = policy::index_of(Path::unload_mapped);
  ++s.writes[i];
  s.bytes[i] += bytes;
  s.express += express;
  if (!g_have_kmod.load(std::memory_order_relaxed)) return;
  ++s.kmod_writes[i];
  s.kmod_bytes[i] += bytes;
  if (++s.kmod_unsent >= kKmodBatch) kmod_flush(s);
}

const char* why_name(Why w) {
  static const char* const names[UNLOAD_WHY_COUNT] = {
      "not_rc",    "program_inline", "path_off", "no_module",  "remote_peer", "unregistered", "unpaired",
      "poisoned",  "qp_error",       "cq",       "queue",      "fence",       "size",         "region",
      "no_room",   "refused",        "policy",   "with_imm",   "nic_memory",  "window",       "cold",
      "exploring", "budget",         "cost",     "local_peer", "no_channel",   "no_key",       "no_mapping"};
  const unsigned i = static_cast<unsigned>(w);
  return i < UNLOAD_WHY_COUNT ? names[i] : "none";
}

void count_why(Why w, uint64_t n) {
  const unsigned i = static_cast<unsigned>(w);
  if (i >= UNLOAD_WHY_COUNT) return;
  ThreadStats& s = thread_stats();
  s.why_not[i] += n;
  if (g_have_kmod.load(std::memory_order_relaxed))
    s.kmod_why_not[i] += n;  // sent with this thread's next batch of writes
}

void count_fence() {
  thread_stats().fences++;
  if (g_have_kmod.load(std::memory_order_relaxed)) kmod_count_fence();
}

Totals stats_totals() {
  Totals t{};
  for (ThreadStats* s = g_stats_list.load(std::memory_order_acquire); s; s = s->next) {
    for (unsigned i = 0; i < policy::kPathCount; ++i) {
      t.writes[i] += __atomic_load_n(&s->writes[i], __ATOMIC_RELAXED);
      t.bytes[i] += __atomic_load_n(&s->bytes[i], __ATOMIC_RELAXED);
    }
    t.fences += __atomic_load_n(&s->fences, __ATOMIC_RELAXED);
    t.express += __atomic_load_n(&s->express, __ATOMIC_RELAXED);
    t.nic_lane += __atomic_load_n(&s->nic_lane, __ATOMIC_RELAXED);
    for (unsigned i = 0; i < UNLOAD_WHY_COUNT; ++i)
      t.why_not[i] += __atomic_load_n(&s->why_not[i], __ATOMIC_RELAXED);
    t.samples += __atomic_load_n(&s->samples, __ATOMIC_RELAXED);
    t.samples_at_wake += __atomic_load_n(&s->samples_at_wake, __ATOMIC_RELAXED);
    // Another thread's policy, read as its counters are: relaxed, each field whole.
    if (const policy::Policy* p = __atomic_load_n(&s->adaptive, __ATOMIC_ACQUIRE)) {
      const policy::PolicyStats& a = p->stats();
      for (unsigned i = 0; i < kAdaptiveCountN; ++i)
        t.adaptive[i] += __atomic_load_n(&(a.*kAdaptiveCounts[i].field), __ATOMIC_RELAXED);
    }
  }
  return t;
}

// A forked child's first use of the module: its own session, from now on.
bool kmod_open_pending() {
  std::lock_guard<std::mutex> g(g_kmod_mu);
  if (g_kmod_pending.load(std::memory_order_relaxed)) {
    if (!kmod_open()) g_have_kmod.store(true, std::memory_order_release);
    g_kmod_pending.store(false, std::memory_order_relaxed);
  }
  return g_have_kmod.load(std::memory_order_acquire);
}

const Tunables& tunables_slow() {
  if (!g_have_kmod.load(std::memory_order_acquire) &&
      (!g_kmod_pending.load(std::memory_order_relaxed) || !kmod_open_pending()))
    return g_tunables;
  const uint32_t s = kmod_tunables(t_tunables, t_seq);
  if (__builtin_expect(s != t_seq, 0)) {
    t_seq = s;
    t_tunables = env_tunables_narrow(t_tunables, g_env);
    if (g_mode_forced) t_tunables.mode = g_forced_mode;
  }
  return t_tunables;
}
uint32_t tunables_seq() {
  return t_seq;
}

bool kmod_present() {
  if (__builtin_expect(g_have_kmod.load(std::memory_order_acquire), 1)) return true;
  return g_kmod_pending.load(std::memory_order_relaxed) && kmod_open_pending();
}

bool forced_path(Path& p) {
  p = g_forced_path;
  return g_path_forced;
}

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

void config_init() {
  g_env = env_tunables_read();
  Tunables t = g_env.values;
  const bool mode_ok = env_mode(t);
  g_tunables = t;
  g_mode_forced = mode_ok;
  g_forced_mode = t.mode;
  g_path_forced = env_path();
  if (const char* why = kmod_open()) {
    g_have_kmod.store(false, std::memory_order_relaxed);
    std::fprintf(stderr,
                 "unload: kernel module not available (%s): stage and direct paths off, "
                 "tunables from UNLOAD_* environment\n",
                 why);
  } else {
    g_have_kmod.store(true, std::memory_order_release);
    // Once a process: every variable set that the control page's value replaces, named.
    Tunables page;
    kmod_tunables(page, 1);
    env_tunables_notice(page, g_env, stderr);
  }
  ending_init();
  signals_init();
  // A forked child starts with no writes of its own: its statistics block (at its exit)
  // must not repeat the parent's counts. Nor does it keep the parent's module session:
  // what it registers and allocates, and its counts, are its own (its session opens at its
  // first use of the module), and its parent's staging arenas are not mapped in it.
  pthread_atfork(nullptr, nullptr, [] {
    stage_forget_after_fork();
    remote_ring_leave_inherited();
    if (g_have_kmod.load(std::memory_order_relaxed)) {
      kmod_leave_inherited();
      g_have_kmod.store(false, std::memory_order_relaxed);
      new (&g_kmod_mu) std::mutex();
      g_kmod_pending.store(true, std::memory_order_relaxed);
    }
    for (ThreadStats* s = g_stats_list.load(std::memory_order_acquire); s; s = s->next) {
      std::memset(s->writes, 0, sizeof s->writes);
      std::memset(s->bytes, 0, sizeof s->bytes);
      s->fences = 0;
      s->express = 0;
      s->nic_lane = 0;
      std::memset(s->why_not, 0, sizeof s->why_not);
      std::memset(s->kmod_why_not, 0, sizeof s->kmod_why_not);
      std::memset(s->kmod_writes, 0, sizeof s->kmod_writes);
      std::memset(s->kmod_bytes, 0, sizeof s->kmod_bytes);
      s->kmod_unsent = 0;
      s->samples = 0;
      s->samples_at_wake = 0;
      if (s != t_stats) s->adaptive = nullptr;  // a thread of the parent's: no decisions here
    }
    ending_after_fork();
  });
}

}  // namespace unload::rt
