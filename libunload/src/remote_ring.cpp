// Remote writes that do not wait: the ring, each QP's entries, their verdicts (remote_ring.hpp).
#include "remote_ring.hpp"

#include "kmod.hpp"
#include "learn.hpp"
#include "nic_post.hpp"
#include "parts.hpp"
#include "registry.hpp"
#include "stats.hpp"
#include "tunables.hpp"
#include "unload.h"

#include <linux/io_uring.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <vector>

namespace unload::rt {

// Writes submitted and not retired, or waiting for the NIC: polls look at the ring only then.
std::atomic<uint64_t> g_remote_outstanding{0};
namespace {

// The module answered UNLOAD_URING_REMOTE with -ENOTTY (one from before it): the
// synchronous submission from then on.
std::atomic<bool> g_remote_ring_unknown{false};

constexpr uint32_t kDepth = 128;       // a QP's writes in flight (a power of two): perftest's depth
constexpr uint32_t kSgeCopy = 4;       // SGEs an entry keeps for the NIC
constexpr uint32_t kInlineCopy = 256;  // inline bytes an entry keeps for the NIC
constexpr unsigned kRingEntries = 128;
constexpr unsigned kRingCqEntries = 4096;  // verdicts past it wait in the kernel (NODROP)
static_assert(kDepth <= 128 && (kDepth & (kDepth - 1)) == 0);

// One write in flight: the module's request (read at submission), the program's request
// on copies of its SGEs and inline bytes (the NIC's, should the module not place it), its
// completion's cell, its verdict.
struct RemoteEntry {
  unload_direct_req req;
  unload_iov iov[kSgeCopy];
  ibv_sge sge[kSgeCopy];
  uint8_t inl[kInlineCopy];
  ibv_send_wr wr;
  Route rt;
  uint64_t ticket;
  int result;
  bool done;
};

}  // namespace

// A QP's writes in flight, oldest first. Aligned so a CQE's user_data is the queue's address
// with the entry's index in its low bits.
struct alignas(128) RemoteQueue {
  QpRec* q = nullptr;
  RemoteEntry e[kDepth];
  uint64_t head = 0;                   // the oldest entry not retired (g_ring.mu)
  uint64_t tail = 0;                   // the next entry (g_ring.mu, by the QP's poster)
  uint32_t epoch = 1;                  // the module's (uapi/unload.h): the post gate's
  bool failed = false;                 // an entry from head on was not placed (g_ring.mu)
  std::atomic<bool> needs_nic{false};  // failed, for readers without the mutex
  bool listed = false;                 // in g_ring.failing (g_ring.mu)
  std::atomic<uint32_t> busy{0};       // tail - head, for readers without the mutex
};

namespace {

// The process's ring to its module session. mu guards the ring's submission and completion
// sides, every queue's head, tail and failure, and the lists; it is never held across a
// wait or a call into the provider but the reposts' (remote_settle).
struct Ring {
  std::mutex mu;
  int fd = -1;
  uint32_t session = 0;  // g_kmod.session the ring was made for
  unsigned sq_entries = 0;
  unsigned *sq_head = nullptr, *sq_tail = nullptr, *sq_mask = nullptr, *sq_array = nullptr,
           *sq_flags = nullptr;
  io_uring_sqe* sqes = nullptr;
  unsigned *cq_head = nullptr, *cq_tail = nullptr, *cq_mask = nullptr;
  io_uring_cqe* cqes = nullptr;
  void* sq_map = nullptr;
  size_t sq_len = 0;
  void* cq_map = nullptr;
  size_t cq_len = 0;
  size_t sqes_len = 0;
  std::vector<RemoteQueue*> queues;   // every queue
  std::vector<RemoteQueue*> failing;  // queues with writes the NIC must take
};
Ring g_ring;

int uring_submit(unsigned n) {
  const long r = syscall(__NR_io_uring_enter, g_ring.fd, n, 0, 0u, nullptr, 0);
  return r < 0 ? -errno : static_cast<int>(r);
}

// Waits for a CQE, at most a millisecond: another thread may reap the one awaited first.
int uring_wait() {
  __kernel_timespec ts{0, 1'000'000};
  io_uring_getevents_arg arg{};
  arg.ts = reinterpret_cast<uintptr_t>(&ts);
  const long r = syscall(__NR_io_uring_enter, g_ring.fd, 0, 1, IORING_ENTER_GETEVENTS | IORING_ENTER_EXT_ARG,
                         &arg, sizeof arg);
  return r < 0 && errno != ETIME ? -errno : 0;
}

void ring_unmap() {
  if (g_ring.sqes) munmap(g_ring.sqes, g_ring.sqes_len);
  if (g_ring.cq_map && g_ring.cq_map != g_ring.sq_map) munmap(g_ring.cq_map, g_ring.cq_len);
  if (g_ring.sq_map) munmap(g_ring.sq_map, g_ring.sq_len);
  g_ring.sqes = nullptr;
  g_ring.sq_map = g_ring.cq_map = nullptr;
}

template <typename T>
T* at(void* base, uint32_t off) {
  return reinterpret_cast<T*>(static_cast<char*>(base) + off);
}

// The ring, made at the first remote write of this session. 0 or -errno. g_ring.mu held.
int ring_ready() {
  if (g_ring.fd >= 0 && g_ring.session == g_kmod.session) return 0;
  io_uring_params p{};
  p.flags = IORING_SETUP_CQSIZE;
  p.cq_entries = kRingCqEntries;
  const long fd = syscall(__NR_io_uring_setup, kRingEntries, &p);
  if (fd < 0) return -errno;
  g_ring.fd = static_cast<int>(fd);
  // Without NODROP a full CQ would drop a verdict, and with it a write's completion; the
  // waits need a timeout (EXT_ARG).
  if (!(p.features & IORING_FEAT_NODROP) || !(p.features & IORING_FEAT_EXT_ARG)) {
    close(g_ring.fd);
    g_ring.fd = -1;
    return -EOPNOTSUPP;
  }
  g_ring.sq_len = p.sq_off.array + p.sq_entries * sizeof(unsigned);
  g_ring.cq_len = p.cq_off.cqes + p.cq_entries * sizeof(io_uring_cqe);
  const bool single = p.features & IORING_FEAT_SINGLE_MMAP;
  if (single) g_ring.sq_len = g_ring.cq_len = std::max(g_ring.sq_len, g_ring.cq_len);
  g_ring.sqes_len = p.sq_entries * sizeof(io_uring_sqe);
  const int prot = PROT_READ | PROT_WRITE, flags = MAP_SHARED | MAP_POPULATE;
  void* sq = mmap(nullptr, g_ring.sq_len, prot, flags, g_ring.fd, IORING_OFF_SQ_RING);
  void* cq = single || sq == MAP_FAILED
                 ? sq
                 : mmap(nullptr, g_ring.cq_len, prot, flags, g_ring.fd, IORING_OFF_CQ_RING);
  void* sqes = sq == MAP_FAILED || cq == MAP_FAILED
                   ? MAP_FAILED
                   : mmap(nullptr, g_ring.sqes_len, prot, flags, g_ring.fd, IORING_OFF_SQES);
  g_ring.sq_map = sq == MAP_FAILED ? nullptr : sq;
  g_ring.cq_map = cq == MAP_FAILED ? nullptr : cq;
  g_ring.sqes = sqes == MAP_FAILED ? nullptr : static_cast<io_uring_sqe*>(sqes);
  if (!g_ring.sqes) {
    const int err = errno;
    ring_unmap();
    close(g_ring.fd);
    g_ring.fd = -1;
    return -err;
  }
  // A forked child gets none of it (remote_ring_leave_inherited closes its copy of the fd).
  madvise(g_ring.sq_map, g_ring.sq_len, MADV_DONTFORK);
  if (!single) madvise(g_ring.cq_map, g_ring.cq_len, MADV_DONTFORK);
  madvise(g_ring.sqes, g_ring.sqes_len, MADV_DONTFORK);
  g_ring.sq_entries = p.sq_entries;
  g_ring.sq_head = at<unsigned>(sq, p.sq_off.head);
  g_ring.sq_tail = at<unsigned>(sq, p.sq_off.tail);
  g_ring.sq_mask = at<unsigned>(sq, p.sq_off.ring_mask);
  g_ring.sq_array = at<unsigned>(sq, p.sq_off.array);
  g_ring.sq_flags = at<unsigned>(sq, p.sq_off.flags);
  g_ring.cq_head = at<unsigned>(cq, p.cq_off.head);
  g_ring.cq_tail = at<unsigned>(cq, p.cq_off.tail);
  g_ring.cq_mask = at<unsigned>(cq, p.cq_off.ring_mask);
  g_ring.cqes = at<io_uring_cqe>(cq, p.cq_off.cqes);
  g_ring.session = g_kmod.session;
  return 0;
}

bool all_done(const RemoteQueue* rq) {
  for (uint64_t i = rq->head; i != rq->tail; ++i)
    if (!rq->e[i % kDepth].done) return false;
  return true;
}

void list_failing(RemoteQueue* rq) {
  rq->failed = true;
  rq->needs_nic.store(true, std::memory_order_release);
  if (!rq->listed) {
    g_ring.failing.push_back(rq);
    rq->listed = true;
  }
}

void unlist(std::vector<RemoteQueue*>& v, RemoteQueue* rq) {
  v.erase(std::remove(v.begin(), v.end(), rq), v.end());
}

// A placed write: counted, learnt, its completion in its cell (or the cell void).
void retire_placed(QpRec* q, RemoteEntry& e) {
  const WriteRequest& r = e.rt.req;
  count_writes(Path::unload_remote, 1, r.length);
  if (e.rt.t0) observe_remote(q, r, now_ns() - e.rt.t0);
  if (!r.signaled) {
    q->scq->pending.cancel(e.ticket);
    return;
  }
  ibv_wc wc{};
  wc.wr_id = e.wr.wr_id;
  wc.status = IBV_WC_SUCCESS;
  wc.opcode = IBV_WC_RDMA_WRITE;
  wc.qp_num = q->qp_num;
  wc.byte_len = r.length;
  q->scq->pending.fill(e.ticket, wc);
}

// Retires rq's entries in order while their verdicts are in: placed ones complete; the
// first not placed stops it, and it and those behind it wait for the NIC. g_ring.mu held.
void advance(RemoteQueue* rq) {
  QpRec* q = rq->q;
  while (!rq->failed && rq->head != rq->tail) {
    RemoteEntry& e = rq->e[rq->head % kDepth];
    if (!e.done) break;
    if (e.result == 0) {
      retire_placed(q, e);
      g_remote_outstanding.fetch_sub(1, std::memory_order_relaxed);
    } else if (e.result == -ECOMM) {
      // Maybe placed: never sent again; the QP goes to ERR and the rest flush at the NIC.
      count_writes(Path::unload_remote, 1, e.rt.req.length);
      fail_unanswered(q, e.wr.wr_id, e.ticket);
      g_remote_outstanding.fetch_sub(1, std::memory_order_relaxed);
      ++rq->head;
      list_failing(rq);
      break;
    } else {
      if (e.result == -ENOTTY) g_remote_ring_unknown.store(true, std::memory_order_relaxed);
      list_failing(rq);
      break;
    }
    ++rq->head;
  }
  rq->busy.store(static_cast<uint32_t>(rq->tail - rq->head), std::memory_order_release);
}

// Takes in every verdict the ring holds, and those the kernel keeps past a full CQ (which
// only an enter moves into it). g_ring.mu held.
void reap() {
  if (__atomic_load_n(g_ring.sq_flags, __ATOMIC_ACQUIRE) & IORING_SQ_CQ_OVERFLOW)
    (void)syscall(__NR_io_uring_enter, g_ring.fd, 0, 0, IORING_ENTER_GETEVENTS, nullptr, 0);
  unsigned head = *g_ring.cq_head;
  const unsigned tail = __atomic_load_n(g_ring.cq_tail, __ATOMIC_ACQUIRE);
  for (; head != tail; ++head) {
    const io_uring_cqe& cqe = g_ring.cqes[head & *g_ring.cq_mask];
    auto* rq = reinterpret_cast<RemoteQueue*>(cqe.user_data & ~uint64_t{kDepth - 1});
    RemoteEntry& e = rq->e[cqe.user_data & (kDepth - 1)];
    e.result = cqe.res;
    e.done = true;
    advance(rq);
  }
  __atomic_store_n(g_ring.cq_head, head, __ATOMIC_RELEASE);
}

RemoteQueue* queue_of(QpRec* q) {
  if (RemoteQueue* rq = q->rq.load(std::memory_order_relaxed)) return rq;
  auto* rq = new (std::nothrow) RemoteQueue;
  if (!rq) return nullptr;
  rq->q = q;
  g_ring.queues.push_back(rq);
  q->rq.store(rq, std::memory_order_release);
  return rq;
}

// The program's request, on the entry's own copies, for the NIC should the module not
// place it.
void keep_for_nic(RemoteEntry& e, const DirectWrite& w) {
  const WriteRequest& r = w.rt.req;
  ibv_send_wr& x = e.wr;
  x = ibv_send_wr{};
  x.wr_id = w.wr_id;
  x.opcode = IBV_WR_RDMA_WRITE;
  unsigned flags = 0;
  if (r.signaled) flags |= IBV_SEND_SIGNALED;
  if (r.fence) flags |= IBV_SEND_FENCE;
  if (r.user_inline) flags |= IBV_SEND_INLINE;
  x.send_flags = flags;
  x.wr.rdma.remote_addr = r.remote_addr;
  x.wr.rdma.rkey = r.rkey;
  x.num_sge = static_cast<int>(r.sge_count);
  x.sg_list = e.sge;
  for (uint32_t i = 0; i < r.sge_count; ++i) e.sge[i] = w.sg[i];
  if (r.user_inline) {  // the NIC reads inline bytes at post: the ones the module read
    std::memcpy(e.inl, reinterpret_cast<const void*>(w.sg[0].addr), r.length);
    e.sge[0] = ibv_sge{reinterpret_cast<uintptr_t>(e.inl), r.length, 0};
  }
}

[[noreturn]] void ring_broken(int err) {
  std::fprintf(stderr, "unload: the remote writes' io_uring failed (%s): writes would be lost\n",
               std::strerror(-err));
  std::abort();
}

}  // namespace

// The module may have placed it (-ECOMM), so it is never sent again: the QP is moved to ERR
// through the provider, and the requests after it, given to the NIC, flush as they would there.
void fail_unanswered(QpRec* q, uint64_t wr_id, uint64_t ticket) {
  ibv_wc wc{};
  wc.wr_id = wr_id;
  wc.status = IBV_WC_RETRY_EXC_ERR;
  wc.opcode = IBV_WC_RDMA_WRITE;
  wc.qp_num = q->qp_num;
  q->scq->pending.fill(ticket, wc);
  q->failed.store(true, std::memory_order_release);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  if (g_real.modify_qp(q->qp, &a, IBV_QP_STATE) == 0) q->state.store(IBV_QPS_ERR, std::memory_order_release);
}

bool remote_async_fits(const QpRec* q, const DirectWrite& w) {
  static const bool on = env_switch_on("UNLOAD_REMOTE_ASYNC");
  const WriteRequest& r = w.rt.req;
  if (!on || g_remote_ring_unknown.load(std::memory_order_relaxed) || q->scq->cq->channel ||
      r.sge_count > kSgeCopy)
    return false;
  return !r.user_inline || (r.sge_count == 1 && r.length <= kInlineCopy);
}

int submit_remote_async(QpRec* q, const DirectWrite* w, int n, Why* why) {
  std::lock_guard<std::mutex> lock(g_ring.mu);
  if (ring_ready() != 0) {
    *why = Why::no_module;
    return 0;
  }
  RemoteQueue* rq = queue_of(q);
  if (!rq) {
    *why = Why::no_room;
    return 0;
  }
  CqRec* c = q->scq;
  unsigned sq_tail = *g_ring.sq_tail;
  const unsigned sq_head = __atomic_load_n(g_ring.sq_head, __ATOMIC_ACQUIRE);
  int m = 0;
  for (; m < n; ++m) {
    if (rq->tail - rq->head == kDepth || sq_tail - sq_head == g_ring.sq_entries) {
      *why = Why::queue;
      break;
    }
    const uint32_t idx = static_cast<uint32_t>(rq->tail % kDepth);
    RemoteEntry& e = rq->e[idx];
    if (!build_request(q, w[m], e.req, e.iov)) {
      *why = Why::refused;
      break;
    }
    // A cell for every write, signaled or not: an unanswered one completes in error.
    if (!c->pending.claim(e.ticket)) {
      *why = Why::no_room;
      break;
    }
    keep_for_nic(e, w[m]);
    e.rt = w[m].rt;
    e.done = false;
    e.result = 0;
    const unsigned slot = sq_tail & *g_ring.sq_mask;
    io_uring_sqe* sqe = &g_ring.sqes[slot];
    std::memset(sqe, 0, sizeof *sqe);
    sqe->opcode = IORING_OP_URING_CMD;
    sqe->fd = g_kmod.fd;
    sqe->cmd_op = UNLOAD_URING_REMOTE;
    sqe->user_data = reinterpret_cast<uintptr_t>(rq) | idx;
    const unload_uring_remote cmd{reinterpret_cast<uintptr_t>(&e.req), rq->epoch, 0};
    std::memcpy(sqe->cmd, &cmd, sizeof cmd);
    g_ring.sq_array[slot] = slot;
    ++sq_tail;
    ++rq->tail;
  }
  if (!m) return 0;
  g_remote_outstanding.fetch_add(static_cast<uint64_t>(m), std::memory_order_relaxed);
  rq->busy.store(static_cast<uint32_t>(rq->tail - rq->head), std::memory_order_release);
  __atomic_store_n(g_ring.sq_tail, sq_tail, __ATOMIC_RELEASE);
  // The module reads each request at issue, inside this call: the entries stay ours.
  for (unsigned left = static_cast<unsigned>(m); left;) {
    const int r = uring_submit(left);
    if (r > 0) {
      left -= static_cast<unsigned>(r);
    } else if (r == -EINTR || r == -EAGAIN || r == -EBUSY) {
      reap();  // a full CQ holds the submission back until it is read
    } else {
      ring_broken(r ? r : -EIO);
    }
  }
  return m;
}

uint32_t remote_in_flight(const QpRec* q) {
  const RemoteQueue* rq = q->rq.load(std::memory_order_acquire);
  return rq ? rq->busy.load(std::memory_order_acquire) : 0;
}

bool remote_failed(const QpRec* q) {
  const RemoteQueue* rq = q->rq.load(std::memory_order_acquire);
  return rq && rq->needs_nic.load(std::memory_order_acquire);
}

void remote_settle(QpRec* q) {
  RemoteQueue* rq = q->rq.load(std::memory_order_acquire);
  if (!rq) return;
  std::vector<RemoteEntry*> to_nic;
  {
    std::unique_lock<std::mutex> lock(g_ring.mu);
    for (;;) {
      reap();
      if (all_done(rq)) break;
      // Verdicts come in bounded time (the module's ack timeout): waited for unlocked,
      // so other QPs' posts and polls go on.
      lock.unlock();
      const int r = uring_wait();
      if (r < 0 && r != -EINTR && r != -EAGAIN && r != -EBUSY) ring_broken(r);
      lock.lock();
    }
    if (!rq->failed) return;
    for (uint64_t i = rq->head; i != rq->tail; ++i) {
      RemoteEntry& e = rq->e[i % kDepth];
      q->scq->pending.cancel(e.ticket);  // the NIC completes it now
      to_nic.push_back(&e);
    }
    // The entries stay untouched until the next submission, which takes this gate.
    g_remote_outstanding.fetch_sub(to_nic.size(), std::memory_order_relaxed);
    rq->head = rq->tail;
    rq->failed = false;
    rq->needs_nic.store(false, std::memory_order_release);
    rq->listed = false;
    unlist(g_ring.failing, rq);
    rq->busy.store(0, std::memory_order_release);
    ++rq->epoch;
  }
  // In order, as the program posted them; the first one's fate is the NIC's to say, and the
  // rest follow it (flushed, if it failed). post_routed's batch finds nothing pending.
  bool first = true;
  for (RemoteEntry* e : to_nic) {
    Route rt = e->rt;
    rt.path = Path::offload;
    const int rc = post_routed(q, e->wr, rt, first ? Why::refused : Why::qp_error);
    first = false;
    if (rc == 0) continue;
    // The send queue had room for it when the program posted it (list_fits counts these
    // writes): a refusal now would lose it, so it completes as flushed.
    ibv_wc wc{};
    wc.wr_id = e->wr.wr_id;
    wc.status = IBV_WC_WR_FLUSH_ERR;
    wc.opcode = IBV_WC_RDMA_WRITE;
    wc.qp_num = q->qp_num;
    q->failed.store(true, std::memory_order_release);
    if (!q->scq->pending.push(wc)) std::fprintf(stderr, "unload: a remote write's completion was lost\n");
  }
}

[[gnu::noinline]] void remote_progress_slow() {  // inlined, its frame would weigh on every poll
  std::unique_lock<std::mutex> lock(g_ring.mu, std::try_to_lock);
  if (!lock.owns_lock() || g_ring.fd < 0) return;
  reap();
  // A failed QP's writes wait for the NIC, and the program may only be polling for them:
  // given to it here when the QP's post gate is free (never waited for under a CQ's gate).
  for (RemoteQueue* rq : g_ring.failing) {
    if (!all_done(rq)) continue;
    QpRec* q = rq->q;
    bool how;
    if (!q->sq.gate.try_enter(this_tid(), &how)) continue;
    lock.unlock();  // the QP's gate keeps it and its queue (destroy settles under it)
    remote_settle(q);
    q->sq.gate.leave(how);
    return;
  }
}

void remote_release(QpRec* q) {
  RemoteQueue* rq = q->rq.load(std::memory_order_acquire);
  if (!rq) return;
  std::lock_guard<std::mutex> lock(g_ring.mu);
  unlist(g_ring.queues, rq);
  unlist(g_ring.failing, rq);
  q->rq.store(nullptr, std::memory_order_release);
  delete rq;
}

void remote_ring_leave_inherited() {
  new (&g_ring.mu) std::mutex();  // another thread of the parent's may have held it
  // The parent's writes are the parent's: none of them completes here.
  for (RemoteQueue* rq : g_ring.queues) {
    rq->head = rq->tail;
    rq->failed = false;
    rq->needs_nic.store(false, std::memory_order_relaxed);
    rq->listed = false;
    rq->busy.store(0, std::memory_order_relaxed);
  }
  g_ring.failing.clear();
  g_remote_outstanding.store(0, std::memory_order_relaxed);
  if (g_ring.fd >= 0) close(g_ring.fd);  // its mappings were not inherited (MADV_DONTFORK)
  g_ring.fd = -1;
  g_ring.sqes = nullptr;
  g_ring.sq_map = g_ring.cq_map = nullptr;
}

const Part g_remote_ring_part = {
    .qp_settle =
        [](QpRec* q) {
          if (!remote_pending(q)) return;
          GateScope g(q->sq.gate);
          remote_settle(q);
        },
    .qp_release = remote_release,
    .after_fork = remote_ring_leave_inherited,
};

}  // namespace unload::rt
