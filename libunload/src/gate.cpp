#include "gate.hpp"

#include <linux/membarrier.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace unload::rt {

namespace {

std::atomic<bool> g_biased{false};

long membarrier(int cmd) {
  return syscall(__NR_membarrier, cmd, 0, 0);
}

// A gate is held for a few hundred instructions, so a waiter spins; but the holder may be
// off its CPU (more threads than CPUs, a loaded host), and a waiter that spun this long
// gives its CPU away rather than burn the holder's time slice.
constexpr int kSpinsBeforeYield = 128;

void relax(int& spins) {
  if (++spins < kSpinsBeforeYield) {
    __builtin_ia32_pause();
  } else {
    spins = 0;
    sched_yield();
  }
}

}  // namespace

bool gate_init() {
  const long cmds = membarrier(MEMBARRIER_CMD_QUERY);
  const bool ok = cmds > 0 && (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) &&
                  membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
  g_biased.store(ok, std::memory_order_relaxed);  // a forked child inherits it with the mm
  return ok;
}

bool Gate::biased_allowed() {
  return g_biased.load(std::memory_order_relaxed);
}

// The first thread claims the gate (once per gate); a joiner, or the owner of a gate
// turned shared, takes the lock. Until a joiner saw the owner out, the lock does not
// exclude it: whoever comes first with the hand-over not done joins too (several may,
// during the hand-over only).
bool Gate::enter_slow(uint32_t me) {
  uint32_t o = owner_.load(std::memory_order_relaxed);
  if (o == kNobody && me != 0 && biased_allowed() &&
      owner_.compare_exchange_strong(o, me, std::memory_order_relaxed))
    o = me;
  if (o == me && !shared_.load(std::memory_order_relaxed)) {
    owner_in_.store(true, std::memory_order_relaxed);
    std::atomic_signal_fence(std::memory_order_seq_cst);  // the joiner's membarrier does the rest
    if (!shared_.load(std::memory_order_acquire)) return kBiased;
    owner_in_.store(false, std::memory_order_release);
  }
  if (!handed_.load(std::memory_order_acquire)) join();
  lock();
  return kLocked;
}

void Gate::join() {
  shared_.store(true, std::memory_order_seq_cst);
  // Only fails if registration did; then no gate was ever biased (owner_ stays kNobody).
  (void)membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED);
  for (int spins = 0; owner_in_.load(std::memory_order_acquire);) relax(spins);
  handed_.store(true, std::memory_order_release);
}

void Gate::lock_contended() {
  int spins = 0;
  do {
    while (mu_.test(std::memory_order_relaxed)) relax(spins);
  } while (mu_.test_and_set(std::memory_order_acquire));
}

bool Gate::try_enter(uint32_t me, bool* how) {
  uint32_t o = owner_.load(std::memory_order_relaxed);
  if (o == kNobody && me != 0 && biased_allowed() &&
      owner_.compare_exchange_strong(o, me, std::memory_order_relaxed))
    o = me;
  if (o == me && !shared_.load(std::memory_order_relaxed)) {
    owner_in_.store(true, std::memory_order_relaxed);
    std::atomic_signal_fence(std::memory_order_seq_cst);
    if (!shared_.load(std::memory_order_acquire)) {
      *how = kBiased;
      return true;
    }
    owner_in_.store(false, std::memory_order_release);
  }
  // join() without its wait: the owner inside means try again later, the hand-over undone.
  if (!handed_.load(std::memory_order_acquire)) {
    shared_.store(true, std::memory_order_seq_cst);
    (void)membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED);
    if (owner_in_.load(std::memory_order_acquire)) return false;
    handed_.store(true, std::memory_order_release);
  }
  if (mu_.test_and_set(std::memory_order_acquire)) return false;
  *how = kLocked;
  return true;
}

}  // namespace unload::rt
