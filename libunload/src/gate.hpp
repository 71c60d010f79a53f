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
  // Enters the gate as `me`; returns how to leave it. Inline only the owner's way in: the
  // rest, out of line, keeps the registers of every poll and post that enters a gate.
  [[gnu::always_inline]] bool enter(uint32_t me) { return try_enter_biased(me) ? kBiased : enter_slow(me); }
  // The owner's way in alone: false, the gate not entered, for anybody else or once shared.
  // Its caller leaves with leave(kBiased). `me` may be 0, a thread whose id is not yet known
  // (t_hot.tid): no gate's owner is 0, so it is refused, and its caller needs no test of its own.
  // `shared_` is looked at once, after the store: an owner that finds the gate shared only
  // raised `owner_in_` for a moment, which a joiner waits out as any other time inside.
  [[gnu::always_inline]] bool try_enter_biased(uint32_t me) {
    if (__builtin_expect(owner_.load(std::memory_order_relaxed) != me, 0)) return false;
    owner_in_.store(true, std::memory_order_relaxed);
    std::atomic_signal_fence(std::memory_order_seq_cst);  // the joiner's membarrier does the rest
    if (__builtin_expect(!shared_.load(std::memory_order_acquire), 1)) return true;
    owner_in_.store(false, std::memory_order_release);
    return false;
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
  bool enter_slow(uint32_t me);
  void join();
  void lock() {
    if (__builtin_expect(mu_.test_and_set(std::memory_order_acquire), 0)) lock_contended();
  }
  void lock_contended();

  // No thread's id: gettid() is below pid_max (at most 2^22), and 0 is no thread's either.
  static constexpr uint32_t kNobody = ~uint32_t{0};
  std::atomic<uint32_t> owner_{kNobody};    // tid of the first thread in; kNobody before
  std::atomic<bool> shared_{false};         // a second thread came: everybody locks from now on
  std::atomic<bool> owner_in_{false};       // the owner is inside without the lock
  std::atomic<bool> handed_{false};         // shared, and the owner was seen out after that
  std::atomic_flag mu_ = ATOMIC_FLAG_INIT;  // guards the CQ's consumers once shared
};

}  // namespace unload::rt
