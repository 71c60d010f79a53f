// Statistics: each thread's block, the counters page's batches, the sums (stats.hpp).
#include "stats.hpp"

#include <cstdlib>
#include <cstring>
#include <mutex>

namespace unload::rt {
namespace {

// Every thread's block, newest first; a block is never freed (a thread's counts outlive it).
std::atomic<ThreadStats*> g_stats_list{nullptr};

}  // namespace

ThreadStats& thread_stats_first() {
  auto* s = static_cast<ThreadStats*>(std::calloc(1, sizeof(ThreadStats)));
  if (!s) {
    // No memory for this thread's block: it counts into one shared by every such thread
    // (its adds may race; statistics only, never the writes themselves).
    static ThreadStats shared_block;
    static std::once_flag listed;
    std::call_once(listed, [] {
      ThreadStats* h = g_stats_list.load(std::memory_order_relaxed);
      do shared_block.next = h;
      while (!g_stats_list.compare_exchange_weak(h, &shared_block, std::memory_order_release,
                                                 std::memory_order_relaxed));
    });
    t_hot.stats = &shared_block;
    return shared_block;
  }
  ThreadStats* head = g_stats_list.load(std::memory_order_relaxed);
  do s->next = head;
  while (!g_stats_list.compare_exchange_weak(head, s, std::memory_order_release, std::memory_order_relaxed));
  t_hot.stats = s;
  return *s;
}

namespace {

// Adds what `s` counted since its last batch to the counters page: its own thread, or at
// exit (one at a time: `sending`). The module counts direct writes itself.
void kmod_flush(ThreadStats& s) {
  s.unsent = 0;
  if (!g_have_kmod.load(std::memory_order_acquire) || s.sending.test_and_set(std::memory_order_acquire)) return;
  for (unsigned i = 0; i < policy::kPathCount; ++i) {
    if (i == policy::index_of(Path::unload_direct)) continue;
    const uint64_t w = __atomic_load_n(&s.writes[i], __ATOMIC_RELAXED) - s.sent_writes[i];
    const uint64_t b = __atomic_load_n(&s.bytes[i], __ATOMIC_RELAXED) - s.sent_bytes[i];
    if (!w && !b) continue;
    kmod_count(static_cast<Path>(i), w, b);
    s.sent_writes[i] += w;
    s.sent_bytes[i] += b;
  }
  for (uint32_t m = __atomic_exchange_n(&s.why_unsent, 0, __ATOMIC_RELAXED); m; m &= m - 1) {
    const unsigned i = static_cast<unsigned>(__builtin_ctz(m));
    if (const uint64_t n = __atomic_load_n(&s.why_not[i], __ATOMIC_RELAXED) - s.sent_why_not[i]) {
      kmod_count_why(i, n);
      s.sent_why_not[i] += n;
    }
  }
  s.sending.clear(std::memory_order_release);
}

}  // namespace

void kmod_flush_all() {
  if (g_have_kmod.load(std::memory_order_acquire))
    for (ThreadStats* s = g_stats_list.load(std::memory_order_acquire); s; s = s->next) kmod_flush(*s);
}

const char* path_name(unsigned i) {
  return i < policy::kPathCount ? policy::setting_name_of(static_cast<Path>(i)) : "none";
}

void count_flush(ThreadStats& s) {
  kmod_flush(s);
}

void count_fence() {
  thread_stats().fences++;
  if (g_have_kmod.load(std::memory_order_relaxed)) kmod_count_fence();
}

Totals stats_totals() {
  Totals t{};
  for (ThreadStats* s = g_stats_list.load(std::memory_order_acquire); s; s = s->next) {
    for (unsigned i = 0; i < policy::kPathCount; ++i) {
      t.writes[i] += __atomic_load_n(&s->writes[i], __ATOMIC_RELAXED);
      t.bytes[i] += __atomic_load_n(&s->bytes[i], __ATOMIC_RELAXED);
    }
    t.fences += __atomic_load_n(&s->fences, __ATOMIC_RELAXED);
    t.express += __atomic_load_n(&s->express, __ATOMIC_RELAXED);
    t.nic_lane += __atomic_load_n(&s->nic_lane, __ATOMIC_RELAXED);
    t.nic_settled += __atomic_load_n(&s->nic_settled, __ATOMIC_RELAXED);
    t.cq_through += __atomic_load_n(&s->cq_through, __ATOMIC_RELAXED);
    for (unsigned i = 0; i < UNLOAD_WHY_COUNT; ++i)
      t.why_not[i] += __atomic_load_n(&s->why_not[i], __ATOMIC_RELAXED);
    t.samples += __atomic_load_n(&s->samples, __ATOMIC_RELAXED);
    t.samples_at_wake += __atomic_load_n(&s->samples_at_wake, __ATOMIC_RELAXED);
    t.samples_dropped += __atomic_load_n(&s->samples_dropped, __ATOMIC_RELAXED);
    // Another thread's policy, read as its counters are: relaxed, each field whole.
    if (const policy::Policy* p = __atomic_load_n(&s->adaptive, __ATOMIC_ACQUIRE)) {
      const policy::PolicyStats& a = p->stats();
      for (unsigned i = 0; i < kAdaptiveCountN; ++i)
        t.adaptive[i] += __atomic_load_n(&(a.*kAdaptiveCounts[i].field), __ATOMIC_RELAXED);
    }
  }
  return t;
}

void stats_after_fork() {
  for (ThreadStats* s = g_stats_list.load(std::memory_order_acquire); s; s = s->next) {
    std::memset(s->writes, 0, sizeof s->writes);
    std::memset(s->bytes, 0, sizeof s->bytes);
    s->fences = 0;
    s->express = 0;
    s->nic_lane = 0;
    s->nic_settled = 0;
    s->cq_through = 0;
    std::memset(s->why_not, 0, sizeof s->why_not);
    std::memset(s->sent_why_not, 0, sizeof s->sent_why_not);
    std::memset(s->sent_writes, 0, sizeof s->sent_writes);
    std::memset(s->sent_bytes, 0, sizeof s->sent_bytes);
    s->why_unsent = 0;
    s->unsent = 0;
    s->sending.clear();
    s->samples = 0;
    s->samples_at_wake = 0;
    s->samples_dropped = 0;
    if (s != t_hot.stats) s->adaptive = nullptr;  // a thread of the parent's: no decisions here
  }
}

}  // namespace unload::rt
