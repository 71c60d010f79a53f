// Statistics: each thread's counts, the reasons writes left their preferred path, and
// their sums for the statistics file (ending.cpp) and the module's counters page.
#pragma once

#include <atomic>
#include <cstdint>

#include "kmod.hpp"
#include "tls.hpp"
#include "unload.h"
#include "unload/policy.hpp"
#include "why.hpp"

namespace unload::rt {

using policy::Path;

// Per-thread counters, summed at exit (no shared cache line on the fast path). The
// counters page of the kmod session gets what this thread counted since its last batch,
// every kKmodBatch writes (and the rest at exit): an atomic add to a page every thread
// shares, per write, is what the post path would otherwise pay. A batch is the difference
// from `sent_*`, which only the batch writes.
struct ThreadStats {
  uint64_t writes[policy::kPathCount];
  uint64_t bytes[policy::kPathCount];
  uint64_t fences;
  uint64_t express;  // of writes[mapped], the ones the express lane took (express.hpp)
  uint64_t nic_lane;  // writes the NIC lane took (nic_lane.hpp)
  uint64_t nic_settled;  // writes passed straight through on a QP settled on the NIC (post.cpp)
  uint64_t cq_through;   // times a CQ's polls went back to passing through (poll.cpp)
  uint64_t why_not[UNLOAD_WHY_COUNT];
  uint64_t unsent;  // writes counted since the last batch
  uint32_t why_unsent;       // the why_not entries that moved since the last batch, a bit each
  std::atomic_flag sending;  // a batch is being made (its thread's, or the exit's)
  uint64_t sent_writes[policy::kPathCount];  // what the counters page has of writes...
  uint64_t sent_bytes[policy::kPathCount];
  uint64_t sent_why_not[UNLOAD_WHY_COUNT];
  uint64_t samples;                // timed writes the policies learnt (observe())
  uint64_t samples_at_wake;        // ... of them, CPU-placed ones learnt at their wake-up marker
  uint64_t samples_dropped;        // merged by another thread, its poster's inbox full (learn.hpp)
  const policy::Policy* adaptive;  // this thread's policy, once it has one
  ThreadStats* next;
};
constexpr uint64_t kKmodBatch = 32;

// This thread's block, made at its first count. Inline, as count_writes: every write counts.
ThreadStats& thread_stats_first();
inline ThreadStats& thread_stats() {
  return __builtin_expect(t_hot.stats != nullptr, 1) ? *t_hot.stats : thread_stats_first();
}
// Adds what s has not yet added to the counters page (its own thread).
void count_flush(ThreadStats& s);

// Counts a write in this thread's statistics and, with the kmod, in the session's
// counters page, batched (the module counts direct writes itself).
inline void count_writes(Path p, uint64_t n, uint64_t bytes) {
  ThreadStats& s = thread_stats();
  const unsigned i = policy::index_of(p);
  s.writes[i] += n;
  s.bytes[i] += bytes;
  if ((s.unsent += n) >= kKmodBatch) count_flush(s);
}
// A write the mapped path placed (`express`: through the express lane): count_writes, and
// the express lane's count.
inline void count_mapped_into(ThreadStats& s, uint64_t bytes, bool express) {
  const unsigned i = policy::index_of(Path::unload_mapped);
  ++s.writes[i];
  s.bytes[i] += bytes;
  s.express += express;
  ++s.unsent;
}
inline void count_mapped_write(uint64_t bytes, bool express) {
  ThreadStats& s = thread_stats();
  count_mapped_into(s, bytes, express);
  if (s.unsent >= kKmodBatch) count_flush(s);
}
// Whether this thread's next count would call out (make its block, or flush the batch).
inline bool count_calls_out() {
  return t_hot.stats == nullptr || t_hot.stats->unsent + 1 >= kKmodBatch;
}
// count_mapped_write of an express write for a caller that found !count_calls_out().
inline void count_express_write_plainly(uint64_t bytes) {
  count_mapped_into(*t_hot.stats, bytes, true);
}

// Counts one fence (a wait before a direct write) here and in the counters page.
void count_fence();


// Counts n writes that left their preferred path, for reason `w` (none counts nothing),
// here and (batched with the writes) in the counters page. Inline: most writes count one.
inline void count_why(Why w, uint64_t n = 1) {
  const unsigned i = static_cast<unsigned>(w);
  if (i >= UNLOAD_WHY_COUNT) return;
  ThreadStats& s = thread_stats();
  s.why_not[i] += n;
  // Sent with the next batch of writes, which looks only at the entries marked. Atomic:
  // the exit's batch may take the marks meanwhile (a mark it took again sends nothing).
  __atomic_store_n(&s.why_unsent, __atomic_load_n(&s.why_unsent, __ATOMIC_RELAXED) | 1u << i,
                   __ATOMIC_RELAXED);
}
static_assert(UNLOAD_WHY_COUNT <= 32, "why_unsent has a bit for each reason");

// Counts n writes that a QP settled on the NIC passed straight through (post.cpp,
// post_settled) on path p, for reason `w`: count_why and count_writes in one look at the
// thread's block.
inline void count_settled(Path p, Why w, uint64_t n, uint64_t bytes) {
  ThreadStats& s = thread_stats();
  s.nic_settled += n;
  if (const unsigned k = static_cast<unsigned>(w); k < UNLOAD_WHY_COUNT) {
    s.why_not[k] += n;
    __atomic_store_n(&s.why_unsent, __atomic_load_n(&s.why_unsent, __ATOMIC_RELAXED) | 1u << k,
                     __ATOMIC_RELAXED);
  }
  const unsigned i = policy::index_of(p);
  s.writes[i] += n;
  s.bytes[i] += bytes;
  if ((s.unsent += n) >= kKmodBatch) count_flush(s);
}

// What adaptive did, in the statistics file: one list, which stats_totals() sums over the
// threads' policies and the file's block differences and writes. Decisions first: a block
// has these lines only when it has decisions.
struct AdaptiveCount {
  const char* name;
  uint64_t policy::PolicyStats::*field;
};
inline constexpr AdaptiveCount kAdaptiveCounts[] = {
    {"adaptive_decisions", &policy::PolicyStats::decisions},
    {"adaptive_reused", &policy::PolicyStats::reused},
    {"adaptive_warmups", &policy::PolicyStats::warmups},
    {"adaptive_explorations", &policy::PolicyStats::explorations},
    {"adaptive_draws", &policy::PolicyStats::draws},
    {"adaptive_trials", &policy::PolicyStats::trials},
    {"adaptive_switches", &policy::PolicyStats::switches},
    {"adaptive_budget_denials", &policy::PolicyStats::budget_denials},
};
constexpr unsigned kAdaptiveCountN = sizeof kAdaptiveCounts / sizeof kAdaptiveCounts[0];

struct Totals {
  uint64_t writes[policy::kPathCount];
  uint64_t bytes[policy::kPathCount];
  uint64_t fences;
  uint64_t express;
  uint64_t nic_lane;
  uint64_t nic_settled;
  uint64_t cq_through;
  uint64_t why_not[UNLOAD_WHY_COUNT];
  uint64_t samples;
  uint64_t samples_at_wake;
  uint64_t samples_dropped;
  uint64_t adaptive[kAdaptiveCountN];  // every thread's policy's, summed (kAdaptiveCounts)
};
Totals stats_totals();
// Adds every thread's counts not yet on the counters page to it (with the kmod; at a
// process's end: ending.cpp).
void kmod_flush_all();
// Path i's name in UNLOAD_PATH, the statistics file and sysfs (writes_<name>).
const char* path_name(unsigned i);

// In a forked child: the parent's counts let go of (its block at exit holds its own).
void stats_after_fork();

}  // namespace unload::rt
