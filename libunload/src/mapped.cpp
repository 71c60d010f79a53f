// The mapped engine: mappings per QP and rkey, the peer's mem file, the placement protocol
// of kmod/uapi/unload.h (word, copy, word).
#include "mapped.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <cstring>
#include <mutex>
#include <new>
#include <string>

#include "kmod.hpp"
#include "parts.hpp"
#include "request.hpp"
#include "stats.hpp"
#include "tunables.hpp"
#include "unload.h"

namespace unload::rt {

// One granted mapping, or a refused grant to retry later.
struct MappedTarget {
  uint32_t rkey = 0;
  bool used = false;
  bool granted = false;
  uint32_t retry_in = 0;  // refused: writes to this rkey until the module is asked again
  uint32_t slot = 0;
  uint64_t cookie = 0;
  uint64_t iova = 0, length = 0, page_offset = 0, mmap_length = 0;
  uint32_t busy_slot = 0;
  uint8_t* base = nullptr;
  const uint8_t* busy = nullptr;  // the responder QP's byte, in the view of its busy page
};

// A QP's mappings: a few targets (a program writes to few rkeys per QP), replaced in turn.
struct MappedSet {
  uint32_t session = 0;  // Kmod::session they were granted in
  uint32_t next = 0;
  uint32_t peer_pid = 0;  // learnt from the first refusal for want of the mem file
  MappedTarget t[4];
};

namespace {

// The peers' mem files, by pid: opened once, kept (a pid's file names its process for as
// long as the file is open; a reused pid's stale file is refused and opened again).
std::mutex g_mem_mu;  // guards g_mem
struct MemFile {
  uint32_t pid;
  int fd;  // -1: the kernel refused it (no ptrace rights): never asked again
};
MemFile g_mem[16];
uint32_t g_mem_n = 0;
uint32_t g_mem_next = 0;  // full: the entry to let go next (peers come and go: a server's clients)

int mem_fd(uint32_t pid, bool reopen) {
  std::lock_guard<std::mutex> lock(g_mem_mu);
  MemFile* f = nullptr;
  for (uint32_t i = 0; i < g_mem_n; ++i)
    if (g_mem[i].pid == pid) f = &g_mem[i];
  if (f && !reopen) return f->fd;
  if (!f) {
    if (g_mem_n < std::size(g_mem)) {
      f = &g_mem[g_mem_n++];
    } else {
      f = &g_mem[g_mem_next++ % std::size(g_mem)];
      if (f->fd >= 0) close(f->fd);
    }
    f->pid = pid;
  } else if (f->fd >= 0) {
    close(f->fd);
  }
  f->fd = open(("/proc/" + std::to_string(pid) + "/mem").c_str(), O_RDWR | O_CLOEXEC);
  return f->fd;
}

// Writes to an rkey the module refused to map, before it is asked again.
constexpr uint32_t kRetryAfter = 256;
constexpr size_t kPage = 4096;  // the busy page's view

void unmap_target(MappedTarget& e, bool ours) {
  if (e.granted && ours) {
    kmod_unmap(e.slot, e.cookie);
    munmap(e.base, e.mmap_length);
    munmap(const_cast<uint8_t*>(e.busy) - e.busy_slot, kPage);
  }
  e = MappedTarget{};
}

bool word_valid(const MappedTarget& e) {
  return __atomic_load_n(&g_kmod.status[e.slot], __ATOMIC_ACQUIRE) == e.cookie;
}

// The responder has no NIC request in flight on its QP and none failed (busy.hpp).
bool responder_quiet(const MappedTarget& e) { return __atomic_load_n(e.busy, __ATOMIC_ACQUIRE) == 0; }

// Asks the module for a mapping of rkey's region for q: 0, or -errno.
int grant(QpRec* q, MappedSet* s, MappedTarget& e, uint32_t rkey) {
  unload_map m;
  const int known = s->peer_pid ? mem_fd(s->peer_pid, false) : -1;
  int rc = kmod_map(q->qp_num, q->peer.handle, rkey, known, &m);
  if (rc == -EPERM && m.peer_pid) {  // the peer's mem file: open it (again) and ask once more
    const bool reopen = s->peer_pid == m.peer_pid;
    s->peer_pid = m.peer_pid;
    const int fd = mem_fd(m.peer_pid, reopen);
    if (fd < 0) return -EPERM;
    rc = kmod_map(q->qp_num, q->peer.handle, rkey, fd, &m);
  }
  if (rc) return rc;
  void* base = mmap(nullptr, m.mmap_length, PROT_READ | PROT_WRITE, MAP_SHARED, g_kmod.fd,
                    static_cast<off_t>(m.mmap_offset));
  void* view = m.busy_offset && m.busy_slot < kPage
                   ? mmap(nullptr, kPage, PROT_READ, MAP_SHARED, g_kmod.fd, static_cast<off_t>(m.busy_offset))
                   : MAP_FAILED;
  if (base == MAP_FAILED || view == MAP_FAILED) {
    if (base != MAP_FAILED) munmap(base, m.mmap_length);
    if (view != MAP_FAILED) munmap(view, kPage);
    kmod_unmap(m.slot, m.cookie);
    return -ENOMEM;
  }
  e.granted = true;
  e.slot = m.slot;
  e.cookie = m.cookie;
  e.iova = m.iova;
  e.length = m.length;
  e.page_offset = m.page_offset;
  e.mmap_length = m.mmap_length;
  e.base = static_cast<uint8_t*>(base);
  e.busy_slot = m.busy_slot;
  e.busy = static_cast<const uint8_t*>(view) + m.busy_slot;
  return 0;
}

// The slot of s that holds rkey (at most one does: target_of fills one only for an rkey
// none holds), or -1.
int slot_of(const MappedSet& s, uint32_t rkey) {
  for (uint32_t i = 0; i < std::size(s.t); ++i)
    if (s.t[i].used && s.t[i].rkey == rkey) return static_cast<int>(i);
  return -1;
}

// unmap_target for one of q's: the express lane's memo may name it, and checks no more
// than that it is still armed (place_mapped_at).
void let_go(QpRec* q, MappedTarget& e, bool ours) {
  q->express.disarm();
  unmap_target(e, ours);
}

// The mapping of rkey for q, granted now if need be; nullptr when there is none to use.
MappedTarget* target_of(QpRec* q, uint32_t rkey) {
  MappedSet* s = q->mapped;
  if (s && s->session != g_kmod.session) {  // a parent's: its mappings are not in this child
    for (MappedTarget& e : s->t) let_go(q, e, false);
    s->session = g_kmod.session;
    s->peer_pid = 0;
  }
  if (!s) {
    s = new (std::nothrow) MappedSet;
    if (!s) return nullptr;
    s->session = g_kmod.session;
    q->mapped = s;
  }
  const int slot = slot_of(*s, rkey);
  MappedTarget* e = slot < 0 ? nullptr : &s->t[slot];
  if (e && e->granted && !word_valid(*e)) let_go(q, *e, true);  // revoked: ask again
  if (e && e->used && !e->granted) {
    if (--e->retry_in != 0) return nullptr;
    let_go(q, *e, true);
  }
  if (!e || !e->used) {
    if (!e) {
      e = &s->t[s->next++ % std::size(s->t)];
      let_go(q, *e, true);
    }
    e->used = true;
    e->rkey = rkey;
    if (grant(q, s, *e, rkey) != 0) {
      e->retry_in = kRetryAfter;
      return nullptr;
    }
  }
  return e;
}

}  // namespace

namespace {

// [addr, addr + len) inside e's region as granted, with no overflow on any input; else the
// module judges the write.
[[gnu::always_inline]] inline bool inside(const MappedTarget& e, uint64_t addr, uint64_t len) {
  return len <= e.length && addr >= e.iova && addr - e.iova <= e.length - len;
}

// The mapping still stands for what the responder checks: its word valid (no revocation
// began, which clears the word before it zaps) and the responder quiet (no request of its
// own could move its QP). Read before the copy and again after every store of it.
[[gnu::always_inline]] inline bool target_stands(const MappedTarget& e) {
  return word_valid(e) && responder_quiet(e);
}

[[gnu::always_inline]] inline bool target_stood(const MappedTarget& e) {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return __atomic_load_n(&g_kmod.status[e.slot], __ATOMIC_RELAXED) == e.cookie &&
         __atomic_load_n(e.busy, __ATOMIC_RELAXED) == 0;
}

// place_into for a write of several buffers, or of translated ones: gathered in order,
// the last 8 bytes of the whole write last.
[[gnu::noinline]] bool place_gathered(QpRec* q, MappedTarget* e, const Route& rt, const ibv_sge* sg, uint8_t* dst) {
  const WriteRequest& r = rt.req;
  ibv_sge process_sg[UNLOAD_MAX_IOV];
  if (r.sge_count > UNLOAD_MAX_IOV) return false;
  if (rt.translated) {  // as build_request does: the module reads by process address too
    sges_translate(q, sg, r.sge_count, process_sg);
    sg = process_sg;
  }
  if (!target_stands(*e)) return false;
  if (r.sge_count == 1 || r.user_inline) {  // inline data is one buffer
    copy_tail_last(dst, reinterpret_cast<const uint8_t*>(sg[0].addr), r.length);
    return target_stood(*e);
  }
  uint64_t left = r.length;
  uint64_t body = left < 8 ? 0 : left - 8;
  for (uint32_t i = 0; i < r.sge_count && left; ++i) {
    const auto* src = reinterpret_cast<const uint8_t*>(sg[i].addr);
    const uint64_t n = sg[i].length;
    for (uint64_t off = 0; off < n && left;) {
      if (body) {
        const uint64_t k = std::min(n - off, body);
        std::memcpy(dst, src + off, k);
        dst += k;
        off += k;
        body -= k;
        left -= k;
      } else {
        std::atomic_thread_fence(std::memory_order_release);
        const uint64_t k = std::min(n - off, left);
        std::memcpy(dst, src + off, k);
        dst += k;
        off += k;
        left -= k;
      }
    }
  }
  return target_stood(*e);
}

// place_mapped through mapping `e` of q. One buffer the process reads where the program
// put it (inline data is one) is most writes, and placed here; the rest, place_gathered.
bool place_into(QpRec* q, MappedTarget* e, const Route& rt, const ibv_sge* sg) {
  const WriteRequest& r = rt.req;
  if (!inside(*e, r.remote_addr, r.length)) return false;
  uint8_t* dst = e->base + e->page_offset + (r.remote_addr - e->iova);
  if ((r.sge_count != 1 && !r.user_inline) || rt.translated) [[unlikely]]
    return place_gathered(q, e, rt, sg, dst);
  if (!target_stands(*e)) return false;
  copy_tail_last(dst, reinterpret_cast<const uint8_t*>(sg[0].addr), r.length);
  return target_stood(*e);
}

}  // namespace

bool place_mapped(QpRec* q, const Route& rt, const ibv_sge* sg, uint64_t* copy_ns) {
  MappedTarget* e = target_of(q, rt.req.rkey);
  if (!e) return false;
  if (copy_ns) *copy_ns = now_ns();  // after a grant target_of may have waited for
  return place_into(q, e, rt, sg);
}

int mapped_index_of(const QpRec* q, uint32_t rkey) {
  const MappedSet* s = q->mapped;
  if (!s || s->session != g_kmod.session) return -1;
  const int slot = slot_of(*s, rkey);
  return slot >= 0 && s->t[slot].granted ? slot : -1;
}

bool place_mapped_at(QpRec* q, uint32_t index, uint64_t remote_addr, const void* src, uint32_t len) {
  const MappedTarget& e = q->mapped->t[index % std::size(q->mapped->t)];
  if (!inside(e, remote_addr, len)) return false;
  if (!target_stands(e)) return false;
  copy_tail_last(e.base + e.page_offset + (remote_addr - e.iova), static_cast<const uint8_t*>(src), len);
  return target_stood(e);
}

bool mapped_view_of(const QpRec* q, uint32_t index, uint32_t len, MappedView& v) {
  const MappedTarget& e = q->mapped->t[index % std::size(q->mapped->t)];
  if (len > e.length || !g_kmod.status) return false;
  v.shift = reinterpret_cast<uintptr_t>(e.base) + e.page_offset - e.iova;
  v.lo = e.iova;
  v.span = e.length - len;
  v.word = &g_kmod.status[e.slot];
  v.cookie = e.cookie;
  v.busy = e.busy;
  return true;
}

void mapped_forget(QpRec* q) {
  MappedSet* s = q->mapped;
  if (!s) return;
  const bool ours = s->session == g_kmod.session;
  for (MappedTarget& e : s->t) let_go(q, e, ours);
  delete s;
  q->mapped = nullptr;
}

const Part g_mapped_part = {.qp_release = mapped_forget};

}  // namespace unload::rt
