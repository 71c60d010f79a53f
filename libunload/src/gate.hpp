// Mutual exclusion without an atomic read-modify-write in the usual case: a CQ's consumers
// (the merger pops send-queue rings, which take one consumer at a time; verbs lets several
// threads poll one CQ, and a fence polls the send CQ from the posting thread), and a QP's
// posters (the ring and the staging ring take one producer at a time; verbs QPs are
// thread-safe). Most programs poll each CQ and post on each QP from one thread only, so the
// gate is biased towards the first thread that enters (the owner): it enters with two
// plain stores and a load. The first other thread
// that comes (a joiner) turns the gate shared for good, and from then on everybody takes a
// spin lock.
//
// The hand-over is Dekker's protocol with an asymmetric barrier: the owner stores
// `owner_in_` then loads `shared_`; a joiner stores `shared_` then loads `owner_in_`. Each
// side needs a full barrier between its store and its load, and the owner's would cost as
// much as the lock it avoids, so it has only a compiler barrier and the joiner runs
// membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED), which makes every running thread of the
// process execute a full barrier. Then either the joiner sees the owner inside and waits
// for it to leave, or the owner sees the gate shared and takes the lock. Only then is the
// hand-over done (`handed_`): a thread that finds the gate shared but the hand-over not
// done yet must not rely on the lock alone, so it joins as well. Without
// membarrier (an old kernel, or seccomp) every gate is shared from the start.
#pragma once

#include <atomic>
#include <cstdint>

namespace unload::rt {

// Once per process, before the first gate is entered: registers for expedited private membarrier.
// Returns whether the biased fast path may be used.
bool gate_init();

class Gate {
 public:
  // Enters the gate as `me`; returns how to leave it.
  [[gnu::always_inline]] bool enter(uint32_t me) {
    uint32_t o = owner_.load(std::memory_order_relaxed);
    if (__builtin_expect(o == 0, 0) && biased_allowed()) {
      // The first thread claims the gate (once per gate).
      if (owner_.compare_exchange_strong(o, me, std::memory_order_relaxed)) o = me;
    }
    if (o == me && !shared_.load(std::memory_order_relaxed)) {
      owner_in_.store(true, std::memory_order_relaxed);
      std::atomic_signal_fence(std::memory_order_seq_cst);  // the joiner's membarrier does the rest
      if (__builtin_expect(!shared_.load(std::memory_order_acquire), 1)) return kBiased;
      owner_in_.store(false, std::memory_order_release);
    }
    // Until a joiner saw the owner out, the lock does not exclude it: whoever comes first
    // with the hand-over not done joins too (several may, during the hand-over only).
    if (!handed_.load(std::memory_order_acquire)) join();
    lock();
    return kLocked;
  }
  [[gnu::always_inline]] void leave(bool how) {
    if (how == kBiased)
      owner_in_.store(false, std::memory_order_release);
    else
      mu_.clear(std::memory_order_release);
  }
  bool shared() const { return shared_.load(std::memory_order_relaxed); }
  // As enter(), but never waits: false when another thread is inside (or in the hand-over).
  bool try_enter(uint32_t me, bool* how);

  static constexpr bool kBiased = true;
  static constexpr bool kLocked = false;

 private:
  static bool biased_allowed();
  void join();
  void lock() {
    if (__builtin_expect(mu_.test_and_set(std::memory_order_acquire), 0)) lock_contended();
  }
  void lock_contended();

  std::atomic<uint32_t> owner_{0};          // tid of the first thread in; 0 before
  std::atomic<bool> shared_{false};         // a second thread came: everybody locks from now on
  std::atomic<bool> owner_in_{false};       // the owner is inside without the lock
  std::atomic<bool> handed_{false};         // shared, and the owner was seen out after that
  std::atomic_flag mu_ = ATOMIC_FLAG_INIT;  // guards the CQ's consumers once shared
};

}  // namespace unload::rt
