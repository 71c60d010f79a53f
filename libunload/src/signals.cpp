// A handler in place of SIG_DFL for SIGHUP, SIGINT and SIGTERM, hidden from the program.
// Installed with libc's own sigaction (the shim hands it over: the name resolves to the
// shim's wrapper here). Only these three: the signals that end a process from outside
// (kill, timeout, a terminal), whose default leaves no core; a fault's (SIGSEGV, SIGBUS)
// core would be taken inside the handler, from a process whose memory may be what failed.
#include "signals.hpp"

#include <signal.h>

#include <atomic>
#include <cerrno>

#include "unload/runtime.h"

namespace unload::rt {
namespace {

constexpr int kWatched[] = {SIGHUP, SIGINT, SIGTERM};

unload_sigaction_fn g_real = nullptr;
// Per signal: ours is installed, and the disposition the program set (SIG_DFL, with the
// flags and mask libc reported for it), which is what the program is shown.
std::atomic<bool> g_ours[NSIG];
struct sigaction g_view[NSIG];

// The statistics block, then the default action: SA_RESETHAND put SIG_DFL back as the
// handler began, and the signal, raised again, is delivered as soon as it returns (it is
// blocked in the handler), so the process dies of it, with the status SIG_DFL gives.
void on_signal(int sig) {
  const int saved = errno;
  unload_stats_flush();
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  g_real(sig, &dfl, nullptr);  // a second handler's SA_RESETHAND did this; a chained call did not
  raise(sig);
  errno = saved;
}

// Ours in place of SIG_DFL; the SIG_DFL libc reported is kept as the program's view.
void install(int sig) {
  struct sigaction cur {};
  if (g_real(sig, nullptr, &cur) || cur.sa_handler != SIG_DFL || (cur.sa_flags & SA_SIGINFO)) return;
  struct sigaction mine {};
  mine.sa_handler = on_signal;
  mine.sa_flags = SA_RESETHAND | SA_RESTART;
  sigemptyset(&mine.sa_mask);
  g_view[sig] = cur;
  if (g_real(sig, &mine, nullptr) == 0) g_ours[sig].store(true, std::memory_order_release);
}

// After the program set `sig` (ours installed until then): SIG_DFL keeps ours, with the
// program's SIG_DFL as libc now reports it for the view; anything else is the program's.
void after_set(int sig, bool to_default) {
  if (!to_default) {
    g_ours[sig].store(false, std::memory_order_release);
    return;
  }
  g_ours[sig].store(false, std::memory_order_relaxed);
  install(sig);
}

bool ours(int sig) {
  return sig > 0 && sig < NSIG && g_ours[sig].load(std::memory_order_acquire);
}

}  // namespace

void signals_init() {
  if (!g_real) return;
  for (int s : kWatched) install(s);
}

}  // namespace unload::rt

using namespace unload::rt;

extern "C" void unload_sig_set_real(unload_sigaction_fn real) {
  g_real = real;
}

extern "C" int unload_sig_action(int sig, const struct sigaction* act, struct sigaction* oact,
                                 unload_sigaction_fn real) {
  if (!ours(sig)) return real(sig, act, oact);
  const struct sigaction old = g_view[sig];
  if (act) {
    if (const int r = g_real(sig, act, nullptr)) return r;
    after_set(sig, act->sa_handler == SIG_DFL && !(act->sa_flags & SA_SIGINFO));
  }
  if (oact) *oact = old;
  return 0;
}

extern "C" __sighandler_t unload_sig_replace(int sig, __sighandler_t h, __sighandler_t (*real)(int, __sighandler_t)) {
  if (!ours(sig)) return real(sig, h);
  const __sighandler_t old = g_view[sig].sa_handler;
  const __sighandler_t prev = real(sig, h);
  if (prev == SIG_ERR) return prev;
  if (h == SIG_HOLD) return prev == SIG_HOLD ? SIG_HOLD : old;  // sigset's: the mask only
  after_set(sig, h == SIG_DFL);
  return prev == SIG_HOLD ? SIG_HOLD : old;
}

extern "C" int unload_sig_interrupt(int sig, int flag, int (*real)(int, int)) {
  const int r = real(sig, flag);  // on ours, if installed: it changes SA_RESTART alone
  if (r == 0 && ours(sig)) {
    if (flag)
      g_view[sig].sa_flags &= ~SA_RESTART;
    else
      g_view[sig].sa_flags |= SA_RESTART;
  }
  return r;
}
