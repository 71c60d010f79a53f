// Learning: the policies told what each finished write cost (learn.hpp).
#include "learn.hpp"

#include <unistd.h>

#include <new>

namespace unload::rt {

UNLOAD_TLS_HOT constinit thread_local policy::Policy* t_policy = nullptr;

UNLOAD_TLS_HOT constinit thread_local uint64_t t_spin_since = 0;

policy::Policy* thread_policy_slow() {
  t_policy = new (std::nothrow) policy::Policy(static_cast<uint64_t>(gettid()) * 0x9E3779B97F4A7C15ull + 1);
  __atomic_store_n(&thread_stats().adaptive, t_policy, __ATOMIC_RELEASE);  // its statistics, at exit
  return t_policy;
}

void learn_boxed(QpRec* q, policy::Policy* pol) {
  SampleBox& b = q->sample;
  const uint32_t s0 = b.seq.load(std::memory_order_acquire);
  uint64_t w[6];
  for (int i = 0; i < 6; ++i) w[i] = b.w[i].load(std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);
  if ((s0 & 1) || b.seq.load(std::memory_order_relaxed) != s0) return;  // being written: next time
  b.learnt = s0;
  const auto p = static_cast<Path>(w[0] & 0xFF);
  const policy::WriteFeatures f =
      features_of(q, static_cast<uint32_t>(w[0] >> 32), static_cast<uint32_t>((w[0] >> 8) & 0xFFFFFF),
                  static_cast<uint32_t>(w[1]), w[2], policy::PathSet::all());
  pol->observe(p, f, w[3], w[5], w[4]);
}

namespace {

// The policy of this thread, or for a thread that never posts the next poster's on `q`,
// learns one finished write.
void learn(QpRec* q, Path p, uint32_t length, uint32_t sge_count, uint32_t rkey, uint64_t remote_addr,
           uint64_t cost, uint64_t cpu, uint64_t wait) {
  ++thread_stats().samples;
  if (t_policy) {
    const policy::WriteFeatures f = features_of(q, length, sge_count, rkey, remote_addr, policy::PathSet::all());
    t_policy->observe(p, f, cost, cpu, wait);
    return;
  }
  // A completion thread that never posts: the next poster's policy learns it.
  SampleBox& b = q->sample;
  const uint32_t s0 = b.seq.load(std::memory_order_relaxed);
  b.seq.store(s0 + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  b.w[0].store(static_cast<uint64_t>(p) | uint64_t{sge_count & 0xFFFFFF} << 8 | uint64_t{length} << 32,
               std::memory_order_relaxed);
  b.w[1].store(rkey, std::memory_order_relaxed);
  b.w[2].store(remote_addr, std::memory_order_relaxed);
  b.w[3].store(cost, std::memory_order_relaxed);
  b.w[4].store(wait, std::memory_order_relaxed);
  b.w[5].store(cpu, std::memory_order_relaxed);
  b.seq.store(s0 + 2, std::memory_order_release);
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
