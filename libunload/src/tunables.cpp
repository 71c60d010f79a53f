// Tunables from the environment (no kmod) or the control page, and the notice.
#include "tunables.hpp"

#include <time.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>

#include "env_tunables.hpp"
#include "kmod.hpp"
#include "memo_epoch.hpp"
#include "tls.hpp"
#include "unload/policy/resident_set.hpp"
#include "unload/runtime.h"

namespace unload::rt {
namespace {

// Each path's name in UNLOAD_PATH, the statistics file and sysfs (writes_<name>).
Tunables g_tunables = policy::kDefaultTunables;
// A forked child let go of its parent's session and opens its own at its first use.
std::atomic<bool> g_kmod_pending{false};
std::mutex g_kmod_mu;        // guards the child's opening of its session
bool g_mode_forced = false;  // UNLOAD_MODE set: it wins over the control page
uint32_t g_forced_mode = 0;
bool g_path_forced = false;  // UNLOAD_PATH set
Path g_forced_path = Path::offload;
EnvTunables g_env{};  // the UNLOAD_* tunable variables: with the kmod, they narrow the page's
// The environment keeps every write on the NIC (offload_pinned).
bool g_offload_pinned = false;

// The module found or let go of: what a route's memo kept of the stage path moves with it.
void kmod_have(bool have) {
  g_have_kmod.store(have, have ? std::memory_order_release : std::memory_order_relaxed);
  memo_epoch_move();
}

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

UNLOAD_TLS_HOT constinit thread_local Tunables t_tunables;

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
    if (std::strcmp(s, policy::setting_name_of(static_cast<Path>(i))) == 0) {
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


// A forked child's first use of the module: its own session, from now on.
bool kmod_open_pending() {
  std::lock_guard<std::mutex> g(g_kmod_mu);
  if (g_kmod_pending.load(std::memory_order_relaxed)) {
    if (!kmod_open()) kmod_have(true);
    g_kmod_pending.store(false, std::memory_order_relaxed);
  }
  return g_have_kmod.load(std::memory_order_acquire);
}

const Tunables& tunables_slow() {
  if (!g_have_kmod.load(std::memory_order_acquire) &&
      (!g_kmod_pending.load(std::memory_order_relaxed) || !kmod_open_pending()))
    return g_tunables;
  const uint32_t s = kmod_tunables(t_tunables, t_hot.view.seq);
  if (__builtin_expect(s != t_hot.view.seq, 0)) {
    t_hot.view.seq = s;
    t_tunables = env_tunables_narrow(t_tunables, g_env);
    if (g_mode_forced) t_tunables.mode = g_forced_mode;
    t_hot.view.offload = all_offload(t_tunables);
  }
  return t_tunables;
}
extern "C" int unload_mode_offload_pinned(void) {
  return g_offload_pinned;
}

uint32_t tunables_seq() {
  return t_hot.view.seq;
}

bool kmod_present() {
  if (__builtin_expect(g_have_kmod.load(std::memory_order_acquire), 1)) return true;
  return g_kmod_pending.load(std::memory_order_relaxed) && kmod_open_pending();
}

bool mapped_enabled() {
  static const bool on = env_switch_on("UNLOAD_MAPPED");
  return on && g_kmod.status != nullptr;
}

bool forced_path(Path& p) {
  p = g_forced_path;
  return g_path_forced;
}

bool all_offload(const Tunables& t) {
  if (g_path_forced) return !t.enabled || g_forced_path == Path::offload;
  return !t.enabled || t.mode == static_cast<uint32_t>(policy::Mode::offload);
}

bool offload_pinned() {
  return g_offload_pinned;
}

bool offload_now_slow() {
  return all_offload(tunables_slow());
}

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

void tunables_init() {
  g_env = env_tunables_read();
  Tunables t = g_env.values;
  const bool mode_ok = env_mode(t);
  g_tunables = t;
  g_mode_forced = mode_ok;
  g_forced_mode = t.mode;
  g_path_forced = env_path();
  // What all_offload() answers whatever the control page holds: the page can neither raise
  // a process's UNLOAD_ENABLED=0 nor override UNLOAD_MODE or UNLOAD_PATH.
  const bool mode_offload = g_mode_forced && g_forced_mode == static_cast<uint32_t>(policy::Mode::offload);
  g_offload_pinned =
      env_tunables_disable(g_env) || (g_path_forced ? g_forced_path == Path::offload : mode_offload);
  if (const char* why = kmod_open()) {
    kmod_have(false);
    std::fprintf(stderr,
                 "unload: kernel module not available (%s): stage and direct paths off, "
                 "tunables from UNLOAD_* environment\n",
                 why);
  } else {
    kmod_have(true);
    // Once a process: every variable set that the control page's value replaces, named.
    Tunables page;
    kmod_tunables(page, 1);
    env_tunables_notice(page, g_env, stderr);
  }
}

void tunables_after_fork() {
  if (!g_have_kmod.load(std::memory_order_relaxed)) return;
  kmod_leave_inherited();
  kmod_have(false);
  new (&g_kmod_mu) std::mutex();
  g_kmod_pending.store(true, std::memory_order_relaxed);
}

}  // namespace unload::rt
