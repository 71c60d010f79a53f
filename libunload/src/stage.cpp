// unload.stage: the staging arena (anonymous memory, registered once, so charged once to
// RLIMIT_MEMLOCK, by the MR) used as a byte ring; each entry records the ring's tail after
// it, so a completion frees in O(1). An arena is made at its QP's first stage write.
#include "stage.hpp"

#include <sys/mman.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <new>
#include <vector>

#include "memo_epoch.hpp"
#include "parts.hpp"
#include "stats.hpp"
#include "tunables.hpp"

namespace unload::rt {

namespace {

// The rings with an arena, for stage_reclaim. Producers only try the lock (they hold their
// gate, which the reclaim takes under it): a producer that misses it stages nothing now.
std::mutex g_mu;  // guards g_made and every ring's `listed`
std::vector<StageRing*> g_made;
// A registration of the program's failed for want of locked memory: no arena is made again.
std::atomic<bool> g_pressure{false};

void unmake(StageRing& s) {
  if (s.mr) g_real.dereg_mr(s.mr);
  munmap(s.base, s.size);
  s.mr = nullptr;
  s.base = nullptr;
  memo_epoch_move();  // stage_usable() may answer otherwise now
}

// Producer side, with no arena yet.
bool make(StageRing& s) {
  if (!stage_usable(s) || !s.pd) return false;
  std::unique_lock<std::mutex> g(g_mu, std::try_to_lock);
  if (!g.owns_lock()) return false;
  void* a = mmap(nullptr, s.size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (a == MAP_FAILED) return false;
  // A forked child gets none of it: the pages stay the parent's, where the NIC reads them.
  madvise(a, s.size, MADV_DONTFORK);
  // libibverbs' ibv_reg_mr calls ibv_reg_mr_iova2 by its exported name, which is the
  // shim's, and this runs inside ibv_post_send, outside any wrapper's recursion guard: the
  // arena would become a program MR. The real ibv_reg_mr_iova2 calls no exported verb.
  ibv_mr* mr = g_real.reg_mr_iova2 ? g_real.reg_mr_iova2(s.pd, a, s.size, reinterpret_cast<uintptr_t>(a),
                                                         IBV_ACCESS_LOCAL_WRITE)
                                   : g_real.reg_mr(s.pd, a, s.size, IBV_ACCESS_LOCAL_WRITE);
  if (!mr) {
    munmap(a, s.size);
    // Out of locked memory already: leave the rest to the program.
    if (errno == ENOMEM) {
      g_pressure.store(true, std::memory_order_relaxed);
      memo_epoch_move();
    }
    return false;
  }
  if (!s.listed) {
    try {
      g_made.push_back(&s);
    } catch (...) {
      g_real.dereg_mr(mr);
      munmap(a, s.size);
      return false;
    }
    s.listed = true;
  }
  s.base = static_cast<uint8_t*>(a);
  s.mr = mr;
  memo_epoch_move();
  return true;
}

}  // namespace

bool stage_usable(const StageRing& s) {
  return s.base || (s.size && kmod_present() && !g_pressure.load(std::memory_order_relaxed));
}

bool stage_copy(StageRing& s, SqEntry* e, const ibv_sge* sg, uint32_t n, uint32_t len) {
  if (!s.base && !make(s)) return false;
  const uint64_t a = (static_cast<uint64_t>(len) + 63) & ~63ull;
  uint64_t t = s.tail;
  const uint64_t off = t % s.size;
  if (off + a > s.size) t += s.size - off;  // no wrap inside a slot
  if (t + a - s.head.load(std::memory_order_acquire) > s.size) return false;
  uint8_t* dst = s.base + (t % s.size);
  uint32_t done = 0;
  for (uint32_t i = 0; i < n; ++i) {
    std::memcpy(dst + done, reinterpret_cast<const void*>(sg[i].addr), sg[i].length);
    done += sg[i].length;
  }
  s.tail = t + a;
  e->stage_mark = s.tail;
  e->stage_sge = {reinterpret_cast<uintptr_t>(dst), len, s.mr->lkey};
  return true;
}

void stage_close(StageRing& s) {
  std::lock_guard<std::mutex> g(g_mu);
  if (s.listed) {
    for (size_t i = 0; i < g_made.size(); ++i)
      if (g_made[i] == &s) {
        g_made[i] = g_made.back();
        g_made.pop_back();
        break;
      }
    s.listed = false;
  }
  if (s.base) unmake(s);
}

bool stage_reclaim() {
  g_pressure.store(true, std::memory_order_relaxed);
  memo_epoch_move();
  bool any = false;
  std::lock_guard<std::mutex> g(g_mu);
  for (StageRing* s : g_made) {
    GateScope pg(*s->gate);
    // Nothing in flight reads it: every staged request has completed.
    if (s->base && s->head.load(std::memory_order_acquire) == s->tail) {
      unmake(*s);
      any = true;
    }
  }
  return any;
}

void stage_forget_after_fork() {
  // Only the forking thread runs: no lock is held by another. The MRs are the parent's
  // (deregistering them here would deregister them there) and the pages are not mapped.
  new (&g_mu) std::mutex();
  for (StageRing* s : g_made) {
    s->base = nullptr;
    s->mr = nullptr;
    s->listed = false;
  }
  g_made.clear();
  g_pressure.store(false, std::memory_order_relaxed);
  memo_epoch_move();
}

const Part g_stage_part = {
    .qp_track =
        [](QpRec* q) {  // the arena itself is made at the first stage write
          q->sq.stage.size = kStageBytes;
          q->sq.stage.pd = q->qp->pd;
          q->sq.stage.gate = &q->sq.gate;
        },
    .qp_release = [](QpRec* q) { stage_close(q->sq.stage); },
    .reclaim_memlock = stage_reclaim,
    .after_fork = stage_forget_after_fork,
};

}  // namespace unload::rt
