// A process's session: its start, and what a forked child lets go of (session.hpp).
#include "session.hpp"

#include <pthread.h>

#include "ending.hpp"
#include "learn.hpp"
#include "parts.hpp"
#include "signals.hpp"
#include "stats.hpp"
#include "tls.hpp"
#include "tunables.hpp"

namespace unload::rt {

void session_start() {
  tunables_init();
  ending_init();
  signals_init();
  // A forked child starts with no writes of its own: its statistics block (at its exit)
  // must not repeat the parent's counts. Nor does it keep the parent's module session:
  // what it registers and allocates, and its counts, are its own (its session opens at its
  // first use of the module), and its parent's staging arenas are not mapped in it.
  pthread_atfork(nullptr, nullptr, [] {
    tls_after_fork();
    parts_after_fork();
    tunables_after_fork();
    stats_after_fork();
    ending_after_fork();
    learn_after_fork();
  });
}

}  // namespace unload::rt
