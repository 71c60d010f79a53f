// Learning: the policies told what each finished write cost (learn.hpp).
#include "learn.hpp"

#include <unistd.h>

#include <algorithm>
#include <new>

namespace unload::rt {

UNLOAD_TLS_HOT constinit thread_local policy::Policy* t_policy = nullptr;

UNLOAD_TLS_HOT constinit thread_local uint64_t t_spin_since = 0;

namespace {

// A thread's policy and its inbox, made together.
struct Learner {
  policy::Policy policy;
  Inbox inbox;
  explicit Learner(uint64_t seed) : policy(seed) {}
};

}  // namespace

UNLOAD_TLS_HOT constinit thread_local Inbox* t_inbox = nullptr;

policy::Policy* thread_policy_slow() {
  auto* l = new (std::nothrow) Learner(static_cast<uint64_t>(gettid()) * 0x9E3779B97F4A7C15ull + 1);
  if (!l) return nullptr;
  t_inbox = &l->inbox;
  t_policy = &l->policy;
  __atomic_store_n(&thread_stats().adaptive, t_policy, __ATOMIC_RELEASE);  // its statistics, at exit
  return t_policy;
}

void learn_inbox(policy::Policy* pol) {
  Inbox& in = *t_inbox;
  InboxSample got[Inbox::kSize];
  if (in.busy.test_and_set(std::memory_order_acquire)) return;  // a poster at it: next time
  const uint32_t n = in.n.load(std::memory_order_relaxed);
  std::copy(in.samples, in.samples + n, got);
  in.n.store(0, std::memory_order_relaxed);
  in.busy.clear(std::memory_order_release);
  for (uint32_t i = 0; i < n; ++i)
    pol->observe(got[i].path, got[i].f, got[i].cost_ns, got[i].cpu_ns, got[i].wait_ns);
}

void learn_after_fork() {
  if (Inbox* in = t_inbox) {
    in->n.store(0, std::memory_order_relaxed);
    in->busy.clear(std::memory_order_relaxed);
  }
}

namespace {

// The policy of this thread, or for a thread that never posts the inbox of the thread that
// sampled q's write, learns one finished write.
void learn(QpRec* q, Path p, uint32_t length, uint32_t sge_count, uint32_t rkey, uint64_t remote_addr,
           uint64_t cost, uint64_t cpu, uint64_t wait) {
  const policy::WriteFeatures f =
      features_of(q, length, sge_count, rkey, remote_addr, policy::PathSet::all());
  if (t_policy) {
    ++thread_stats().samples;
    t_policy->observe(p, f, cost, cpu, wait);
    return;
  }
  Inbox* in = q->learner.load(std::memory_order_acquire);
  if (!in || in->busy.test_and_set(std::memory_order_acquire)) {
    ++thread_stats().samples_dropped;
    return;
  }
  const uint32_t k = in->n.load(std::memory_order_relaxed);
  const bool room = k < Inbox::kSize;
  if (room) {
    in->samples[k] = InboxSample{.path = p, .f = f, .cost_ns = cost, .cpu_ns = cpu, .wait_ns = wait};
    in->n.store(k + 1, std::memory_order_relaxed);
  }
  in->busy.clear(std::memory_order_release);
  ++(room ? thread_stats().samples : thread_stats().samples_dropped);
}

}  // namespace

void observe(QpRec* q, Path p, uint32_t length, uint32_t sge_count, uint32_t rkey, uint64_t remote_addr,
             uint64_t t0, uint64_t post_call_ns) {
  if (!t0) return;
  const uint64_t now = now_ns();
  const uint64_t cost = now - t0;
  // In verbs calls for it: the post, then the poll from the post's return, or from when the
  // spin began if later. Several completions collected by one poll each count the whole
  // spin: a batch's per-write wait is overstated, but only for a program that spends that
  // time polling anyway.
  uint64_t wait = 0;
  if (p == Path::offload) {
    const uint64_t posted = t0 + post_call_ns;
    const uint64_t since = t_spin_since > posted ? t_spin_since : posted;
    wait = post_call_ns + (t_spin_since && now > since ? now - since : 0);
  }
  // The CPU it cost: a direct write's whole time (the copy), an inline or stage write's
  // post (the copy; the rest of its latency is the NIC's, and in a stream its queue: 20 ms
  // behind 128 writes under TCG, which charged to the budget locked direct out for good).
  // A CPU-placed write learnt here rode on a wake-up marker (CarriedSample): its CPU is
  // its copy, the rest the program's wait for the wake.
  if (policy::places_here(p)) ++thread_stats().samples_at_wake;
  const uint64_t cpu = policy::places_here(p) ? (post_call_ns ? post_call_ns : cost)
                       : policy::is_cpu_path(p) ? post_call_ns
                                                : 0;
  learn(q, p, length, sge_count, rkey, remote_addr, cost, cpu, wait);
}

void observe_direct(QpRec* q, Path p, const WriteRequest& r, uint64_t cost_ns) {
  learn(q, p, r.length, r.sge_count, r.rkey, r.remote_addr, cost_ns, cost_ns, 0);
}

void observe_remote(QpRec* q, const WriteRequest& r, uint64_t cost_ns) {
  learn(q, Path::unload_remote, r.length, r.sge_count, r.rkey, r.remote_addr, cost_ns, 0, 0);
}


}  // namespace unload::rt
