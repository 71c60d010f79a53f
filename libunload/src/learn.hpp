// Learning: what adaptive's policies are told of the writes that finished (docs/design.md,
// "Adaptive"). Fed by the completion paths; read by the route, which asks the policy.
#pragma once

#include "classify.hpp"
#include "records.hpp"
#include "stats.hpp"
#include "tls.hpp"
#include "tunables.hpp"

namespace unload::rt {

// This thread's policy; nullptr before its first routed write.
UNLOAD_TLS_HOT extern constinit thread_local policy::Policy* t_policy;

// Samples of writes this thread's policy decided that a thread without a policy merged (a
// program's completion thread), waiting for this thread's next decision to learn them
// (learn_inbox), as its own poll's are learnt at once. Else a QP's sample waited for that
// QP's next post, at 1024 QPs a round of the others, and its class stayed in warm-up that
// long (1,037 warm-up decisions where the posting thread polling makes 23). A sample that
// finds the inbox full, or another thread at it, is dropped and counted: the policy learns
// a little later. Kept for the process's life, as the policy is: a QP may still name it.
struct InboxSample {
  Path path;
  policy::WriteFeatures f;
  uint64_t cost_ns, cpu_ns, wait_ns;
};
struct Inbox {
  static constexpr uint32_t kSize = 32;
  std::atomic<uint32_t> n{0};  // how many are in it: changed under busy, looked at without
  std::atomic_flag busy;       // guards samples; only ever tried, never waited on
  InboxSample samples[kSize];
};
UNLOAD_TLS_HOT extern constinit thread_local Inbox* t_inbox;  // this thread's, with t_policy

// The thread's policy, made at its first call; nullptr only when it cannot be allocated:
// the caller then takes the NIC.
policy::Policy* thread_policy_slow();
inline policy::Policy* thread_policy() {
  if (__builtin_expect(t_policy != nullptr, 1)) return t_policy;
  return thread_policy_slow();
}

// What the policy weighs of a write on q, without a clock (now_ns 0): the route reads one
// only when the policy asks.
inline policy::WriteFeatures features_of(const QpRec* q, uint32_t length, uint32_t sge_count, uint32_t rkey,
                                         uint64_t remote_addr, policy::PathSet eligible) {
  // Every field named, so no zeroing first: GCC zeroes a value-initialised one with
  // `rep stos`, which TCG runs a word at a time on every write.
  return policy::WriteFeatures{.length = length,
                               .sge_count = sge_count,
                               .rkey = rkey,
                               .remote_addr = remote_addr,
                               .now_ns = 0,
                               .eligible = eligible,
                               .peer_local = q->peer.local,
                               .nic_outstanding = nic_outstanding(q->sq)};
}

// Whether samples wait in this thread's inbox (t_policy set: so is t_inbox).
[[gnu::always_inline]] inline bool inbox_waiting() {
  return t_inbox->n.load(std::memory_order_relaxed) != 0;
}
// This thread's policy pol learns what waits in its inbox.
void learn_inbox(policy::Policy* pol);
// In a forked child: the forking thread's inbox emptied and open (another thread of the
// parent's may have been at it). The inboxes of the parent's other threads have no owner
// here; a QP that names one names its own thread's at its next sample.
void learn_after_fork();
// q's next sample, merged by a thread without a policy, goes to this thread's inbox.
inline void learner_is_me(QpRec* q) {
  if (q->learner.load(std::memory_order_relaxed) != t_inbox)
    q->learner.store(t_inbox, std::memory_order_release);
}

// Adaptive mode: the policy of this thread (or, for a thread that never posts, the inbox of
// the thread that sampled q's write) learns the cost of a path that finished, and
// for an offloaded write how long this thread spent on it in verbs calls: its post
// (`post_call_ns` of its `t0 .. completion`: a software NIC such as rxe does the NIC's work
// inside post_send, on the caller's CPU) and its busy-poll for the completion.
void observe(QpRec* q, Path p, uint32_t length, uint32_t sge_count, uint32_t rkey, uint64_t remote_addr,
             uint64_t t0, uint64_t post_call_ns = 0);
// As observe(), for a direct or mapped write (`p`) whose cost the caller measured (its
// share of a submission of several), all of it CPU time.
void observe_direct(QpRec* q, Path p, const WriteRequest& r, uint64_t cost_ns);
// As observe_direct, for a remote write: its post to its verdict, none of it this host's
// CPU (the program runs on, or sleeps, while the peer's module places it), so the CPU
// budget is not charged.
void observe_remote(QpRec* q, const WriteRequest& r, uint64_t cost_ns);

// When this thread's current run of empty ibv_poll_cq calls began; 0 when its last poll
// found something. What a completion arrives after of it is time the program spent
// busy-polling for the NIC, which adaptive's CPU budget does not charge (policy.hpp).
UNLOAD_TLS_HOT extern constinit thread_local uint64_t t_spin_since;

// What the program's ibv_poll_cq returned (after the merge): a run of empty polls is a
// wait for the NIC, which observe() reports to the policy. Inline: every poll tells it. A
// completion thread without a policy of its own keeps it too: its samples go to the
// poster's inbox with the spin, or a NIC write's wait read as its post alone and the
// budget charged inline's copy in full.
inline void note_poll(int got) {
  if (got != 0)
    t_spin_since = 0;
  else if (!t_spin_since)
    t_spin_since = now_ns();
}

}  // namespace unload::rt
