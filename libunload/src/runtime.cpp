// The runtime: object tables, the hooks that replace provider function pointers, the
// executors of the offload and inline paths, and the completion merger.
#include "runtime.hpp"

#include "kmod.hpp"
#include "unload.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>

namespace unload::rt {

unload_real_verbs g_real;

namespace {

using policy::Mode;
using policy::PathSet;

constexpr unsigned kMaxContexts = 64;
ContextRec* g_contexts[kMaxContexts];
std::atomic<uint32_t> g_next_ctx_id{0};
std::mutex g_ctx_mu;

PtrTable<QpRec> g_qps;        // by ibv_qp*
PtrTable<QpRec> g_qps_by_num; // by (context, qp_num)
PtrTable<CqRec, 12> g_cqs;    // by ibv_cq*
PtrTable<MrRec> g_mrs;        // by (context, lkey)

thread_local policy::Policy* t_policy = nullptr;

uint64_t key_of(const void* p) { return reinterpret_cast<uintptr_t>(p); }

ContextRec* context_find(const ibv_context* ctx) {
  for (unsigned i = 0; i < kMaxContexts; ++i) {
    ContextRec* c = __atomic_load_n(&g_contexts[i], __ATOMIC_ACQUIRE);
    if (c && c->ctx == ctx) return c;
  }
  return nullptr;
}

policy::Policy& thread_policy() {
  if (__builtin_expect(t_policy != nullptr, 1)) return *t_policy;
  t_policy = new (std::nothrow) policy::Policy(static_cast<uint64_t>(gettid()) * 0x9E3779B97F4A7C15ull + 1);
  if (!t_policy) std::abort();
  return *t_policy;
}

// ---------------------------------------------------------------- path choice

// Do the request's SGEs lie inside regions registered through the shim on the QP's PD,
// with iova == address (the provider's inline copy reads process addresses)?
bool sges_valid(const QpRec* q, const ibv_sge* sg, uint32_t n) {
  for (uint32_t i = 0; i < n; ++i) {
    if (sg[i].length == 0) continue;
    const MrRec* m = g_mrs.find(lkey_key(q->c, sg[i].lkey));
    if (!m || m->pd != q->qp->pd || m->iova != m->addr) return false;
    if (sg[i].addr < m->iova || sg[i].addr + sg[i].length > m->iova + m->length ||
        sg[i].addr + sg[i].length < sg[i].addr)
      return false;
  }
  return true;
}

policy::WriteFeatures features_of(const QpRec* q, const WriteRequest& r, PathSet eligible, bool adaptive) {
  policy::WriteFeatures f{};
  f.length = r.length;
  f.sge_count = r.sge_count;
  f.rkey = r.rkey;
  f.remote_addr = r.remote_addr;
  f.now_ns = adaptive ? now_ns() : 0;
  f.eligible = eligible;
  f.peer_local = q->peer_local;
  f.nic_outstanding = q->ring.nic_outstanding() != 0;
  return f;
}

// The path of one write. offload when the shim is off or the mode says so, without
// looking at anything else.
Path choose_path(const QpRec* q, const WriteRequest& r, const ibv_sge* sg, const Tunables& t,
                 SqEntry* e, bool direct_ok = false) {
  Path forced;
  const bool is_forced = forced_path(forced);
  if (!t.enabled || (!is_forced && t.mode == static_cast<uint32_t>(Mode::offload)) ||
      !r.is_write || r.user_inline)
    return Path::offload;
  PathContext pc;
  pc.max_inline = q->max_inline;
  pc.direct_available = direct_ok && r.length != 0 && r.sge_count <= UNLOAD_MAX_IOV;
  pc.stage_available = q->stage_base && r.length != 0 && r.length <= q->stage_size / 4;
  pc.sges_valid = (r.length <= q->max_inline || pc.direct_available || pc.stage_available) &&
                  sges_valid(q, sg, r.sge_count);
  const PathSet eligible = eligible_paths(r, pc);
  if (eligible == PathSet(Path::offload)) return Path::offload;
  if (is_forced) return eligible.contains(forced) ? forced : Path::offload;
  const bool adaptive = t.mode == static_cast<uint32_t>(Mode::adaptive);
  const policy::WriteFeatures f = features_of(q, r, eligible, adaptive);
  const Path p = thread_policy().decide(f, t);
  if (adaptive && e) e->post_ns = f.now_ns;
  return p;
}

void fill_entry(SqEntry* e, const WriteRequest& r, uint64_t user_wr_id) {
  e->user_wr_id = user_wr_id;
  e->post_ns = 0;
  e->remote_addr = r.remote_addr;
  e->length = r.length;
  e->rkey = r.rkey;
  e->byte_len = 0;
  e->sge_count = static_cast<uint16_t>(r.sge_count);
  e->path = 0;
  e->flags = static_cast<uint8_t>((r.signaled ? kSignaled : 0) | (r.is_write ? kWrite : 0));
  e->opcode = 0;
  e->status = 0;
}

// ---------------------------------------------------------------- stage (kmod)

// Copies the payload into the QP's staging ring; false when there is no room now.
bool stage_copy(QpRec* q, SqEntry* e, const ibv_sge* sg, uint32_t n, uint32_t len) {
  const uint64_t a = (static_cast<uint64_t>(len) + 63) & ~63ull;
  uint64_t t = q->stage_tail;
  const uint64_t off = t % q->stage_size;
  if (off + a > q->stage_size) t += q->stage_size - off;  // no wrap inside a slot
  if (t + a - q->stage_head.load(std::memory_order_acquire) > q->stage_size) return false;
  uint8_t* dst = q->stage_base + (t % q->stage_size);
  uint32_t done = 0;
  for (uint32_t i = 0; i < n; ++i) {
    std::memcpy(dst + done, reinterpret_cast<const void*>(sg[i].addr), sg[i].length);
    done += sg[i].length;
  }
  q->stage_tail = t + a;
  e->stage_slot_valid = 1;
  e->stage_end = t + a;
  e->stage_sge = {reinterpret_cast<uintptr_t>(dst), len, q->stage_mr->lkey};
  return true;
}

void stage_release(QpRec* q, const SqEntry& e) {
  if (e.stage_slot_valid) q->stage_head.store(e.stage_end, std::memory_order_release);
}

// ---------------------------------------------------------------- poll (ops.poll_cq)

// Hands completions to the program's array while there is room and nothing is queued
// before them; queues the rest on the CQ, in order.
struct Emitter {
  CqRec* cq;
  ibv_wc* out;
  int n;
  int o;
  int limit;  // positions below limit are free to write
  void emit(const ibv_wc& wc) {
    if (o < limit && o < n && cq->pending.empty()) {
      out[o++] = wc;
      return;
    }
    if (!cq->pending.push(wc)) std::abort();  // cannot happen: bounded by the CQ's own size
  }
};

struct PollSink {
  Emitter* em;
  QpRec* q;
  void retired(SqEntry& e) { stage_release(q, e); }
  void nic(SqEntry& e, ibv_wc& wc) {
    stage_release(q, e);
    wc.wr_id = e.user_wr_id;
    if (e.post_ns && wc.status == IBV_WC_SUCCESS && t_policy) {
      WriteRequest r;
      r.length = e.length;
      r.sge_count = e.sge_count;
      r.rkey = e.rkey;
      r.remote_addr = e.remote_addr;
      const policy::WriteFeatures f = features_of(q, r, PathSet::all(), false);
      t_policy->observe(static_cast<Path>(e.path), f, now_ns() - e.post_ns);
    }
    if ((e.flags & kMarker) || ((e.flags & kHidden) && wc.status == IBV_WC_SUCCESS)) return;
    em->emit(wc);
  }
  void cpu(SqEntry& e) {
    if ((e.flags & kSignaled) || e.status != IBV_WC_SUCCESS) em->emit(synth_wc(e, q->qp_num));
  }
};

// Maps one NIC completion (in place) and emits what follows from it.
void merge_one(CqRec* c, Emitter& em, ibv_wc& wc) {
  QpRec* q = g_qps_by_num.find(qpn_key(c->c, wc.qp_num));
  SqEntry* e = q ? q->ring.entry_of_tag(wc.wr_id) : nullptr;
  if (!e) { em.emit(wc); return; }
  PollSink sink{&em, q};
  q->ring.on_nic_completion(e, wc, sink);
}

// ---------------------------------------------------------------- direct (kmod)

// Whether writes on this QP may go direct at all: a peer the kmod paired, and a send CQ
// that can hand over completions the shim makes. Ordering behind the QP's NIC requests is the
// fence's business (fence_before_direct), wake-ups on a completion channel the marker's
// (wake_channel).
bool direct_possible(QpRec* q, const Tunables& t) {
  if (!kmod_present() || !t.enabled || t.direct_max == 0 || !q->kmod_registered) return false;
  if (t.mode == static_cast<uint32_t>(Mode::offload)) return false;
  if (!(q->peer_flags & UNLOAD_PEER_PAIRED)) {
    // A local peer may register later (its process is still connecting): ask again,
    // less and less often.
    if (!(q->peer_flags & UNLOAD_PEER_LOCAL) || --q->reg_countdown != 0) return false;
    q->reg_backoff = q->reg_backoff < (1u << 16) ? q->reg_backoff * 2 : q->reg_backoff;
    q->reg_countdown = q->reg_backoff;
    uint32_t flags = 0;
    if (kmod_reg_qp(q->qp->context, q->qp_num, &flags) == 0) q->peer_flags = flags;
    if (!(q->peer_flags & UNLOAD_PEER_PAIRED)) return false;
  }
  const ibv_cq* scq = q->qp->send_cq;
  if (!scq) return false;
  const CqRec* c = g_cqs.find(key_of(scq));
  return c && (!c->cqx || c->cqx_direct);
}

// Posts the shim's own signaled zero-length RDMA WRITE on the QP (to a target the
// program's next write names, so it is valid whatever the responder checks). It places
// nothing and consumes nothing at the peer; its completion is never shown. 0 or -errno.
int post_marker(QpRec* q, uint32_t rkey, uint64_t remote_addr) {
  const uint64_t tail = q->ring.tail();
  SqEntry* e = q->ring.reserve(tail);
  if (!e) return -ENOMEM;
  WriteRequest r;
  r.signaled = true;
  fill_entry(e, r, 0);
  e->flags = kHidden | kMarker;
  ibv_send_wr w{}, *bad = nullptr;
  w.wr_id = q->ring.tag_of(e);
  w.opcode = IBV_WR_RDMA_WRITE;
  w.send_flags = IBV_SEND_SIGNALED;
  w.wr.rdma.rkey = rkey;
  w.wr.rdma.remote_addr = remote_addr;
  q->ring.publish(tail + 1, 1);
  const int rc = q->c->post_send(q->qp, &w, &bad);
  if (rc) q->ring.rollback(tail, 1);
  return rc ? -rc : 0;
}

// One round of the fence's wait: polls the send CQ itself, through its gate (a program
// thread polling it at the same time makes the same progress). Every completion met goes
// through the merger into the CQ's pending queue, in order, for the program's next poll.
void fence_poll(CqRec* c) {
  const bool how = c->gate.enter(this_tid());
  ibv_wc wc[16];
  const int r = c->c->poll_cq(c->cq, 16, wc);
  Emitter em{c, nullptr, 0, 0, 0};
  for (int i = 0; i < r; ++i) merge_one(c, em, wc[i]);
  c->gate.leave(how);
}

// DESIGN.md 3, "Ordering": a direct write is placed only after every earlier request of
// its QP executed at the responder. RC completes a QP's requests in order, and a request's
// completion means the responder executed it (the ACK comes after placement; reads and
// atomics completed too), so it suffices that every ring entry of the QP completed. When
// the newest one is unsignaled no completion would say so: a marker is posted behind it.
// Then the CQ is polled until the ring is empty. IBV_SEND_FENCE asks for less than this
// (earlier reads and atomics only), so a direct write always honours it. 0 when the write
// may go direct now; -errno when not (no room for the marker): the caller sends it to the
// NIC, which orders it by itself.
//
// An ibv_cq_ex send CQ is not polled here: what the fence met would have to be handed over
// later with every field the program asked for, timestamps included. A write behind
// requests still in flight on such a QP goes to the NIC.
int fence_before_direct(QpRec* q, const WriteRequest& r) {
  if (q->ring.in_flight() == 0) return 0;
  CqRec* c = g_cqs.find(key_of(q->qp->send_cq));
  if (c->cqx) return -EBUSY;
  if (!q->ring.last_signaled())
    if (int rc = post_marker(q, r.rkey, r.remote_addr)) return rc;
  while (q->ring.in_flight() != 0) fence_poll(c);
  count_fence();
  return 0;
}

// A shim-made completion was queued on `c`: when the program armed the CQ's completion
// channel, make the real CQ event fire with a marker on the QP, whose completion the
// merger hides. Protocol with hook_req_notify_cq (a Dekker pair): the program arms, then
// (fence) polls, which drains the pending queue; we queue, then (fence) look at `armed`.
// Either its poll sees our completion or we see it armed; a marker per arming suffices
// because an arming fires one event at most.
void wake_channel(QpRec* q, CqRec* c, const WriteRequest& r) {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (!c->armed.load(std::memory_order_relaxed) || !c->armed.exchange(false)) return;
  // After the fence of this write the send queue is empty, so the marker has room.
  if (post_marker(q, r.rkey, r.remote_addr) != 0) c->armed.store(true);
}

// Runs one write on the direct path. 0 when placed (its completion queued if signaled),
// else non-zero: the caller sends it to the NIC, which reports whatever error it finds.
int run_direct(QpRec* q, const ibv_send_wr* w, const WriteRequest& r, uint64_t t0) {
  const int rc = kmod_direct(q->qp_num, r.rkey, r.remote_addr, w->sg_list, r.sge_count, r.length);
  if (rc != 0) return rc;
  count_writes(Path::unload_direct, 1, r.length);
  if (t0 && t_policy) {  // adaptive: the write is complete now, fence included
    const policy::WriteFeatures f = features_of(q, r, PathSet::all(), false);
    t_policy->observe(Path::unload_direct, f, now_ns() - t0);
  }
  if (r.signaled) {
    ibv_wc wc{};
    wc.wr_id = w->wr_id;
    wc.status = IBV_WC_SUCCESS;
    wc.opcode = IBV_WC_RDMA_WRITE;
    wc.qp_num = q->qp_num;
    wc.byte_len = r.length;
    CqRec* c = g_cqs.find(key_of(q->qp->send_cq));
    // The queue holds twice the CQ's size; more would be an overrun of the CQ anyway.
    if (!c->pending.push(wc)) std::abort();
    if (c->cq->channel) wake_channel(q, c, r);
  }
  return 0;
}

// ---------------------------------------------------------------- post (ops.post_send)

int post_send_nic(QpRec* q, ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad);

// Whether the policy sends this request direct; `t0` gets the decision's time (adaptive).
bool wants_direct(QpRec* q, const ibv_send_wr* w, const Tunables& t, WriteRequest& r, uint64_t& t0) {
  r = classify(*w, q->sq_sig_all);
  if (!r.is_write || r.with_imm || r.user_inline) return false;
  SqEntry probe;
  probe.post_ns = 0;
  if (choose_path(q, r, w->sg_list, t, &probe, true) != Path::unload_direct) return false;
  t0 = probe.post_ns;
  return true;
}

// A list where some writes may go direct: the NIC segments between them are posted as
// they are, each direct write after its fence, all in list order.
int post_send_mixed(QpRec* q, ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad, const Tunables& t) {
  ibv_send_wr* seg = wr;      // first request of the NIC segment not posted yet
  ibv_send_wr* last = nullptr;  // the segment's last request so far
  for (ibv_send_wr* w = wr; w;) {
    ibv_send_wr* const next = w->next;
    WriteRequest r;
    uint64_t t0 = 0;
    if (wants_direct(q, w, t, r, t0)) {
      if (last) {  // the NIC requests before it go first
        last->next = nullptr;
        const int rc = post_send_nic(q, qp, seg, bad);
        last->next = w;
        if (rc) return rc;
      }
      if (fence_before_direct(q, r) == 0 && run_direct(q, w, r, t0) == 0) {
        seg = next;
        last = nullptr;
        w = next;
        continue;
      }
      seg = w;  // refused: the NIC takes it (and reports what it finds)
    }
    last = w;
    w = next;
  }
  return last ? post_send_nic(q, qp, seg, bad) : 0;
}

// Whether every request of a list passes the local checks (its SGEs in regions of the QP's
// PD). A request failing them moves the QP to error at the NIC, which flushes the earlier
// requests of the list still in flight: a write placed direct ahead of it could not be
// flushed, so such a list goes to the NIC whole (DESIGN.md 3, "Errors").
bool list_locally_valid(const QpRec* q, const ibv_send_wr* wr) {
  for (const ibv_send_wr* w = wr; w; w = w->next)
    if (w->num_sge > 0 && !(w->send_flags & IBV_SEND_INLINE) &&
        !sges_valid(q, w->sg_list, static_cast<uint32_t>(w->num_sge)))
      return false;
  return true;
}

int hook_post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
  QpRec* q = g_qps.find(key_of(qp));
  if (__builtin_expect(!q || !q->tracked, 0)) {
    ContextRec* c = q ? q->c : context_find(qp->context);
    return c->post_send(qp, wr, bad);
  }
  const Tunables& t = tunables();
  if (direct_possible(q, t) && (!wr->next || list_locally_valid(q, wr))) return post_send_mixed(q, qp, wr, bad, t);
  return post_send_nic(q, qp, wr, bad);
}

int post_send_nic(QpRec* q, ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
  const Tunables& t = tunables();
  const uint64_t start = q->ring.tail();
  const uint64_t stage_start = q->stage_tail;
  uint64_t tail = start;
  // Saved send_flags of the requests we changed, in post order (only the inline path
  // changes them; the wr_id of every request is swapped for its entry's tag).
  ibv_send_wr* cut = nullptr;  // the first request that found the ring full
  ibv_send_wr* prev = nullptr;
  for (ibv_send_wr* w = wr; w; prev = w, w = w->next) {
    SqEntry* e = q->ring.reserve(tail);
    if (!e) { cut = w; break; }
    const WriteRequest r = classify(*w, q->sq_sig_all);
    fill_entry(e, r, w->wr_id);
    e->saved_flags = w->send_flags;
    Path p = choose_path(q, r, w->sg_list, t, e);
    e->saved_sg = w->sg_list;
    e->saved_nsge = w->num_sge;
    if (p == Path::unload_stage) {
      if (stage_copy(q, e, w->sg_list, r.sge_count, r.length)) {
        w->sg_list = &e->stage_sge;
        w->num_sge = 1;
      } else {
        p = Path::offload;
      }
    }
    e->path = static_cast<uint8_t>(p);
    if (p == Path::unload_inline) w->send_flags |= IBV_SEND_INLINE;
    w->wr_id = q->ring.tag_of(e);
    ++tail;
  }
  if (cut) {
    if (!prev) { *bad = wr; return ENOMEM; }
    prev->next = nullptr;
  }
  const uint64_t n = tail - start;
  q->ring.publish(tail, n);
  int rc = q->c->post_send(qp, wr, bad);
  if (cut) {
    prev->next = cut;
    if (!rc) { rc = ENOMEM; *bad = cut; }
  }
  // Give the program its requests back, count what was posted, forget what was not.
  uint64_t seq = start;
  uint64_t posted = n;
  bool failed = false;
  for (ibv_send_wr* w = wr; w && seq != tail; w = w->next, ++seq) {
    SqEntry* e = q->ring.at(seq);
    if (rc && w == *bad && !failed) { failed = true; posted = seq - start; }
    w->wr_id = e->user_wr_id;
    w->send_flags = e->saved_flags;
    w->sg_list = e->saved_sg;
    w->num_sge = e->saved_nsge;
    if (!failed && (e->flags & kWrite)) count_writes(static_cast<Path>(e->path), 1, e->length);
  }
  if (posted != n) {
    // Staging bytes of the requests not posted go back too.
    uint64_t st = stage_start;
    for (uint64_t i = start; i != start + posted; ++i)
      if (q->ring.at(i)->stage_slot_valid) st = q->ring.at(i)->stage_end;
    q->stage_tail = st;
    q->ring.rollback(start + posted, n - posted);
  }
  return rc;
}

// Polling is serialised per CQ by its gate (see poll_gate.hpp: free for the usual single
// poller): the merger pops send-queue rings, which have one consumer at a time, and several
// threads may poll one CQ, or a fence poll it from the posting thread.
int poll_merge(CqRec* c, ibv_cq* cq, int n, ibv_wc* wc);
int hook_poll_cq(ibv_cq* cq, int n, ibv_wc* wc) {
  CqRec* c = g_cqs.find(key_of(cq));
  if (__builtin_expect(!c, 0)) return context_find(cq->context)->poll_cq(cq, n, wc);
  const bool how = c->gate.enter(this_tid());
  const int got = poll_merge(c, cq, n, wc);
  c->gate.leave(how);
  return got;
}

int poll_merge(CqRec* c, ibv_cq* cq, int n, ibv_wc* wc) {
  int got = c->pending.pop(wc, n);
  while (got < n) {
    const int r = c->c->poll_cq(cq, n - got, wc + got);
    if (r < 0) return got ? got : r;
    if (r == 0) break;
    Emitter em{c, wc, n, got, got};
    for (int i = got; i < got + r; ++i) {
      ibv_wc cur = wc[i];
      em.limit = i + 1;
      merge_one(c, em, cur);
    }
    const int before = got;
    got = em.o;
    if (!c->pending.empty()) {  // order put some behind queued ones: hand those over first
      got += c->pending.pop(wc + got, n - got);
      break;
    }
    if (r < n - before) break;  // polled everything there was
  }
  return got;
}

// ibv_req_notify_cq (ops.req_notify_cq). `armed` is set only once the provider armed the
// CQ, so a marker posted after wake_channel saw it produces a CQE the arming covers; the
// fence pairs with wake_channel's (see there) before the program's next poll.
int hook_req_notify_cq(ibv_cq* cq, int solicited_only) {
  CqRec* c = g_cqs.find(key_of(cq));
  if (__builtin_expect(!c, 0)) return context_find(cq->context)->req_notify_cq(cq, solicited_only);
  const int rc = c->c->req_notify_cq(cq, solicited_only);
  // Solicited-only: send completions fire no event without the shim either.
  if (rc == 0 && !solicited_only) c->armed.store(true, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return rc;
}

// ---------------------------------------------------------------- ibv_cq_ex polling

// The QP whose ring issued `tag`: by the completion's QP number, else among the QPs that
// send to this CQ (some providers read the QP number back as 0, e.g. rxe in rdma-core 44).
QpRec* cqx_qp_of(CqRec* c, ibv_cq_ex* cq, uint64_t tag, SqEntry** e) {
  if (QpRec* q = g_qps_by_num.find(qpn_key(c->c, c->orig.read_qp_num(cq))))
    if ((*e = q->ring.entry_of_tag(tag))) return q;
  for (auto& slot : c->send_qps)
    if (QpRec* q = slot.load(std::memory_order_acquire))
      if ((*e = q->ring.entry_of_tag(tag))) return q;
  return nullptr;
}

// Maps the provider's current completion in place. Returns false when it is a completion
// the shim asked for itself and the program must not see.
bool map_current(CqRec* c, ibv_cq_ex* cq) {
  SqEntry* e = nullptr;
  QpRec* q = cqx_qp_of(c, cq, cq->wr_id, &e);
  if (!q) return true;
  struct Sink {
    QpRec* q;
    bool visible = true;
    void retired(SqEntry& x) { stage_release(q, x); }
    void nic(SqEntry& x, ibv_wc& wc) {
      stage_release(q, x);
      visible = !((x.flags & kMarker) || ((x.flags & kHidden) && wc.status == IBV_WC_SUCCESS));
    }
    void cpu(SqEntry&) {}  // CPU-executed requests never wait in a ring (see fence_before_direct)
  } sink{q};
  ibv_wc wc{};
  wc.status = cq->status;
  const uint64_t user = e->user_wr_id;
  q->ring.on_nic_completion(e, wc, sink);
  cq->wr_id = user;
  return sink.visible;
}

// Makes the next completion the shim made the current one, if there is one.
bool cqx_take_synth(CqRec* c, ibv_cq_ex* cq) {
  if (!c->cqx_direct || c->pending.pop(&c->cur, 1) == 0) return false;
  c->synth = true;
  cq->wr_id = c->cur.wr_id;
  cq->status = c->cur.status;
  return true;
}

// Steps the provider to its next completion the program may see: 0, or ENOENT (or the
// provider's error).
int cqx_provider_next(CqRec* c, ibv_cq_ex* cq) {
  c->synth = false;
  int rc;
  if (!c->provider_open) {
    rc = c->orig.start_poll(cq, &c->attr);
    if (rc) return rc;
    c->provider_open = true;
  } else {
    rc = c->orig.next_poll(cq);
  }
  while (rc == 0 && !map_current(c, cq)) rc = c->orig.next_poll(cq);
  return rc;
}

// A poll sequence runs inside the CQ's gate, from start_poll to end_poll (or to a
// start_poll that found nothing). The shim's completions go first: they were ready before
// whatever the provider has now (a direct write's earlier requests had all completed).
int hook_start_poll(ibv_cq_ex* cq, ibv_poll_cq_attr* attr) {
  CqRec* c = g_cqs.find(key_of(cq));
  c->gate_how = c->gate.enter(this_tid());
  c->attr = *attr;
  c->provider_open = false;
  if (cqx_take_synth(c, cq)) return 0;
  const int rc = cqx_provider_next(c, cq);
  if (rc == 0) return 0;
  if (c->provider_open) c->orig.end_poll(cq);  // every completion it had was the shim's own
  c->provider_open = false;
  c->gate.leave(c->gate_how);
  return rc;
}

int hook_next_poll(ibv_cq_ex* cq) {
  CqRec* c = g_cqs.find(key_of(cq));
  if (cqx_take_synth(c, cq)) return 0;
  return cqx_provider_next(c, cq);
}

void hook_end_poll(ibv_cq_ex* cq) {
  CqRec* c = g_cqs.find(key_of(cq));
  if (c->provider_open) c->orig.end_poll(cq);
  c->provider_open = false;
  c->synth = false;
  c->gate.leave(c->gate_how);
}

// The read_* entry points: from the shim's completion while one is current. A direct
// write's completion has what a NIC's RDMA WRITE completion has; the receive-side fields
// are undefined for it, and 0 here.
#define UNLOAD_CQX_READ(type, name, synth_value)                        \
  type hook_##name(ibv_cq_ex* cq) {                                     \
    CqRec* c = g_cqs.find(key_of(cq));                                  \
    return c->synth ? static_cast<type>(synth_value) : c->orig.name(cq); \
  }
UNLOAD_CQX_READ(ibv_wc_opcode, read_opcode, c->cur.opcode)
UNLOAD_CQX_READ(uint32_t, read_vendor_err, c->cur.vendor_err)
UNLOAD_CQX_READ(uint32_t, read_byte_len, c->cur.byte_len)
UNLOAD_CQX_READ(__be32, read_imm_data, 0)
UNLOAD_CQX_READ(uint32_t, read_qp_num, c->cur.qp_num)
UNLOAD_CQX_READ(uint32_t, read_src_qp, 0)
UNLOAD_CQX_READ(unsigned int, read_wc_flags, 0)
UNLOAD_CQX_READ(uint32_t, read_slid, 0)
UNLOAD_CQX_READ(uint8_t, read_sl, 0)
UNLOAD_CQX_READ(uint8_t, read_dlid_path_bits, 0)
#undef UNLOAD_CQX_READ

// The fields a shim-made completion can answer; a CQ asking for more (timestamps, VLAN,
// flow tag, tag matching) keeps every write on the NIC.
constexpr uint64_t kCqxSynthFlags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM |
                                    IBV_WC_EX_WITH_SRC_QP | IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL |
                                    IBV_WC_EX_WITH_DLID_PATH_BITS;

void cqx_hooks_install(CqRec* r, ibv_cq_ex* cqx, uint64_t wc_flags) {
  r->orig = *cqx;
  r->wc_flags = wc_flags;
  if (!cqx->start_poll || !cqx->next_poll || !cqx->end_poll || !cqx->read_qp_num) return;
  cqx->start_poll = hook_start_poll;
  cqx->next_poll = hook_next_poll;
  cqx->end_poll = hook_end_poll;
  // Every read_* the provider has must be ours before a completion of ours can be current.
  bool all = true;
#define SET(name) if (cqx->name) cqx->name = hook_##name; else all = false
  SET(read_opcode); SET(read_vendor_err); SET(read_byte_len); SET(read_qp_num);
  SET(read_wc_flags);
#undef SET
#define SET_IF(name) if (cqx->name) cqx->name = hook_##name
  SET_IF(read_imm_data); SET_IF(read_src_qp); SET_IF(read_slid); SET_IF(read_sl);
  SET_IF(read_dlid_path_bits);
#undef SET_IF
  r->cqx_direct = all && (wc_flags & ~kCqxSynthFlags) == 0;
}

// ---------------------------------------------------------------- ibv_qp_ex (wr_* API)

// Hooks are installed only on QPs with a record, and the record lives until destroy.
QpRec* qpx_rec(ibv_qp_ex* qpx) {
  QpRec* q = g_qps.find(key_of(&qpx->qp_base));
  if (__builtin_expect(!q, 0)) std::abort();
  return q;
}

// Starts an entry for the request the program is building; swaps its wr_id for the tag
// around the provider's call.
template <class F>
SqEntry* qpx_request(QpRec* q, ibv_qp_ex* qpx, bool is_write, F&& call) {
  SqEntry* e = q->ring.reserve(q->x_tail);
  if (!e) {  // ring full: so is the send queue; the provider will refuse the batch
    call();
    return nullptr;
  }
  WriteRequest r;
  r.is_write = is_write;
  r.signaled = q->sq_sig_all || (qpx->wr_flags & IBV_SEND_SIGNALED);
  fill_entry(e, r, qpx->wr_id);
  const uint64_t user = qpx->wr_id;
  qpx->wr_id = q->ring.tag_of(e);
  call();
  qpx->wr_id = user;
  q->ring.publish(++q->x_tail, 1);
  q->x_nic++;
  return e;
}

#define UNLOAD_QPX_PASS(name, params, args)                          \
  void hook_##name params {                                          \
    QpRec* q = qpx_rec(qp);                                          \
    q->x_write = nullptr;                                            \
    qpx_request(q, qp, false, [&] { q->orig.name args; });           \
  }
UNLOAD_QPX_PASS(wr_atomic_cmp_swp, (ibv_qp_ex* qp, uint32_t rkey, uint64_t addr, uint64_t cmp, uint64_t swp), (qp, rkey, addr, cmp, swp))
UNLOAD_QPX_PASS(wr_atomic_fetch_add, (ibv_qp_ex* qp, uint32_t rkey, uint64_t addr, uint64_t add), (qp, rkey, addr, add))
UNLOAD_QPX_PASS(wr_bind_mw, (ibv_qp_ex* qp, ibv_mw* mw, uint32_t rkey, const ibv_mw_bind_info* info), (qp, mw, rkey, info))
UNLOAD_QPX_PASS(wr_local_inv, (ibv_qp_ex* qp, uint32_t rkey), (qp, rkey))
UNLOAD_QPX_PASS(wr_rdma_read, (ibv_qp_ex* qp, uint32_t rkey, uint64_t addr), (qp, rkey, addr))
UNLOAD_QPX_PASS(wr_send, (ibv_qp_ex* qp), (qp))
UNLOAD_QPX_PASS(wr_send_imm, (ibv_qp_ex* qp, __be32 imm), (qp, imm))
UNLOAD_QPX_PASS(wr_send_inv, (ibv_qp_ex* qp, uint32_t rkey), (qp, rkey))
UNLOAD_QPX_PASS(wr_send_tso, (ibv_qp_ex* qp, void* hdr, uint16_t hdr_sz, uint16_t mss), (qp, hdr, hdr_sz, mss))
UNLOAD_QPX_PASS(wr_atomic_write, (ibv_qp_ex* qp, uint32_t rkey, uint64_t addr, const void* op), (qp, rkey, addr, op))
#undef UNLOAD_QPX_PASS

void hook_wr_rdma_write(ibv_qp_ex* qp, uint32_t rkey, uint64_t addr) {
  QpRec* q = qpx_rec(qp);
  SqEntry* e = qpx_request(q, qp, true, [&] { q->orig.wr_rdma_write(qp, rkey, addr); });
  if (e) { e->rkey = rkey; e->remote_addr = addr; }
  q->x_write = e;
}

void hook_wr_rdma_write_imm(ibv_qp_ex* qp, uint32_t rkey, uint64_t addr, __be32 imm) {
  QpRec* q = qpx_rec(qp);
  SqEntry* e = qpx_request(q, qp, true, [&] { q->orig.wr_rdma_write_imm(qp, rkey, addr, imm); });
  if (e) { e->rkey = rkey; e->remote_addr = addr; }
  q->x_write = e;
}

// The payload of the pending write: pick its path now that its length is known.
Path qpx_payload(QpRec* q, const ibv_sge* sg, uint32_t n, bool user_inline) {
  SqEntry* e = q->x_write;
  q->x_write = nullptr;
  if (!e) return Path::offload;
  WriteRequest r;
  r.is_write = true;
  r.user_inline = user_inline;
  r.signaled = e->flags & kSignaled;
  r.sge_count = n;
  uint64_t len = 0;
  for (uint32_t i = 0; i < n; ++i) len += sg[i].length;
  r.length = len > UINT32_MAX ? UINT32_MAX : static_cast<uint32_t>(len);
  r.rkey = e->rkey;
  r.remote_addr = e->remote_addr;
  e->length = r.length;
  e->sge_count = static_cast<uint16_t>(n);
  Path p = choose_path(q, r, sg, tunables(), e);
  if (p == Path::unload_stage && !stage_copy(q, e, sg, n, r.length)) p = Path::offload;
  e->path = static_cast<uint8_t>(p);
  q->x_writes[policy::index_of(p)]++;
  q->x_bytes[policy::index_of(p)] += r.length;
  return p;
}

void hook_wr_set_sge(ibv_qp_ex* qp, uint32_t lkey, uint64_t addr, uint32_t length) {
  QpRec* q = qpx_rec(qp);
  const ibv_sge sge{addr, length, lkey};
  SqEntry* e = q->x_write;
  const Path p = qpx_payload(q, &sge, 1, false);
  if (p == Path::unload_inline) {
    q->orig.wr_set_inline_data(qp, reinterpret_cast<void*>(addr), length);
  } else if (p == Path::unload_stage) {
    q->orig.wr_set_sge(qp, e->stage_sge.lkey, e->stage_sge.addr, length);
  } else {
    q->orig.wr_set_sge(qp, lkey, addr, length);
  }
}

void hook_wr_set_sge_list(ibv_qp_ex* qp, size_t n, const ibv_sge* sg) {
  QpRec* q = qpx_rec(qp);
  constexpr size_t kMax = 16;
  SqEntry* e = q->x_write;
  const Path p = n <= kMax ? qpx_payload(q, sg, static_cast<uint32_t>(n), false) : Path::offload;
  if (p == Path::unload_inline) {
    ibv_data_buf bufs[kMax];
    for (size_t i = 0; i < n; ++i) bufs[i] = {reinterpret_cast<void*>(sg[i].addr), sg[i].length};
    q->orig.wr_set_inline_data_list(qp, n, bufs);
    return;
  }
  if (p == Path::unload_stage) {
    q->orig.wr_set_sge(qp, e->stage_sge.lkey, e->stage_sge.addr, e->stage_sge.length);
    return;
  }
  if (n > kMax) q->x_write = nullptr;  // too scattered for the CPU paths: offload
  q->orig.wr_set_sge_list(qp, n, sg);
}

void hook_wr_set_inline_data(ibv_qp_ex* qp, void* addr, size_t length) {
  QpRec* q = qpx_rec(qp);
  const ibv_sge sge{reinterpret_cast<uintptr_t>(addr), static_cast<uint32_t>(length), 0};
  qpx_payload(q, &sge, 1, true);
  q->orig.wr_set_inline_data(qp, addr, length);
}

void hook_wr_set_inline_data_list(ibv_qp_ex* qp, size_t n, const ibv_data_buf* bufs) {
  QpRec* q = qpx_rec(qp);
  uint64_t len = 0;
  for (size_t i = 0; i < n; ++i) len += bufs[i].length;
  const ibv_sge sge{0, static_cast<uint32_t>(len), 0};
  qpx_payload(q, &sge, 1, true);
  q->orig.wr_set_inline_data_list(qp, n, bufs);
}

void qpx_reset_batch(QpRec* q) {
  q->x_write = nullptr;
  for (unsigned i = 0; i < policy::kPathCount; ++i) q->x_writes[i] = q->x_bytes[i] = 0;
  q->x_nic = 0;
}

void hook_wr_start(ibv_qp_ex* qp) {
  QpRec* q = qpx_rec(qp);
  q->x_start = q->x_tail = q->ring.tail();
  q->x_stage_start = q->stage_tail;
  qpx_reset_batch(q);
  q->orig.wr_start(qp);
}

int hook_wr_complete(ibv_qp_ex* qp) {
  QpRec* q = qpx_rec(qp);
  const int rc = q->orig.wr_complete(qp);
  if (rc) {
    q->ring.rollback(q->x_start, q->x_nic);
    q->stage_tail = q->x_stage_start;
  } else {
    for (unsigned i = 0; i < policy::kPathCount; ++i)
      if (q->x_writes[i]) count_writes(static_cast<Path>(i), q->x_writes[i], q->x_bytes[i]);
  }
  qpx_reset_batch(q);
  return rc;
}

void hook_wr_abort(ibv_qp_ex* qp) {
  QpRec* q = qpx_rec(qp);
  q->orig.wr_abort(qp);
  q->ring.rollback(q->x_start, q->x_nic);
  q->stage_tail = q->x_stage_start;
  qpx_reset_batch(q);
}

void install_qpx(QpRec* q, ibv_qp_ex* qpx) {
  q->qpx = qpx;
  q->orig = *qpx;
#define SET(name) if (qpx->name) qpx->name = hook_##name
  SET(wr_atomic_cmp_swp); SET(wr_atomic_fetch_add); SET(wr_bind_mw); SET(wr_local_inv);
  SET(wr_rdma_read); SET(wr_rdma_write); SET(wr_rdma_write_imm); SET(wr_send);
  SET(wr_send_imm); SET(wr_send_inv); SET(wr_send_tso); SET(wr_atomic_write);
  SET(wr_set_sge); SET(wr_set_sge_list); SET(wr_set_inline_data); SET(wr_set_inline_data_list);
  SET(wr_start); SET(wr_complete); SET(wr_abort);
#undef SET
}

// ---------------------------------------------------------------- QP creation

constexpr size_t kStageArena = 256 * 1024;

int qp_register(ContextRec* c, ibv_qp* qp, const ibv_qp_cap& cap, bool sq_sig_all, bool send_ops) {
  auto* q = new (std::nothrow) QpRec();
  if (!q) return -ENOMEM;
  q->qp = qp;
  q->c = c;
  q->send_cq = qp->send_cq;
  q->qp_num = qp->qp_num;
  q->max_inline = cap.max_inline_data;
  q->sq_sig_all = sq_sig_all;
  q->tracked = qp->qp_type == IBV_QPT_RC || qp->qp_type == IBV_QPT_UC;
  if (q->tracked && q->ring.init(cap.max_send_wr * 2 + 64) != 0) { delete q; return -ENOMEM; }
  if (q->tracked && kmod_present()) {
    // The staging arena: pinned kernel memory, registered once on the QP's PD.
    void* a = nullptr;
    size_t len = 0;
    if (kmod_arena_alloc(kStageArena, &a, &len) == 0) {
      q->stage_mr = g_real.reg_mr(qp->pd, a, len, IBV_ACCESS_LOCAL_WRITE);
      if (q->stage_mr) {
        q->stage_base = static_cast<uint8_t*>(a);
        q->stage_size = static_cast<uint32_t>(len);
      } else {
        munmap(a, len);
      }
    }
  }
  if (send_ops && q->tracked) {
    ibv_qp_ex* qpx = g_real.qp_to_qp_ex ? g_real.qp_to_qp_ex(qp) : nullptr;
    if (qpx) install_qpx(q, qpx);
  }
  int rc = g_qps.insert(key_of(qp), q);
  if (!rc) rc = g_qps_by_num.insert(qpn_key(c, qp->qp_num), q);
  if (rc) { g_qps.remove(key_of(qp)); delete q; return rc; }
  if (CqRec* scq = q->send_cq ? g_cqs.find(key_of(q->send_cq)) : nullptr)
    for (auto& slot : scq->send_qps) {
      QpRec* none = nullptr;
      if (slot.compare_exchange_strong(none, q, std::memory_order_release)) break;
    }
  return 0;
}

// Asks for the larger inline cap the inline path wants, within the device's limits:
// the provider refuses what it cannot do, and then the program's own request is used.
template <class Create, class Attr>
ibv_qp* create_with_inline(Create&& create, Attr* attr) {
  const uint32_t asked = attr->cap.max_inline_data;
  const Tunables& t = tunables();
  const bool want = t.enabled && t.inline_max > asked &&
                    (attr->qp_type == IBV_QPT_RC || attr->qp_type == IBV_QPT_UC);
  if (want) {
    const ibv_qp_cap saved = attr->cap;
    attr->cap.max_inline_data = t.inline_max;
    if (ibv_qp* qp = create()) return qp;
    attr->cap = saved;
  }
  return create();
}

}  // namespace

// The hooks of ibv_create_qp_ex / ibv_create_cq_ex (verbs_context entries).
ibv_qp* hook_create_qp_ex(ibv_context* ctx, ibv_qp_init_attr_ex* attr) {
  ContextRec* c = context_find(ctx);
  const uint32_t asked = attr->cap.max_inline_data;
  ibv_qp* qp = create_with_inline([&] { return c->create_qp_ex(ctx, attr); }, attr);
  if (!qp) return nullptr;
  const ibv_qp_cap real_cap = attr->cap;
  if (attr->cap.max_inline_data > asked) attr->cap.max_inline_data = asked;
  const bool send_ops = attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  if (int rc = qp_register(c, qp, real_cap, attr->sq_sig_all, send_ops)) {
    (void)rc;  // untracked: pass-through
  }
  return qp;
}

void free_cq_rec(CqRec* r) { delete r; }

CqRec* cq_register(ContextRec* c, ibv_cq* cq, ibv_cq_ex* cqx, int cqe) {
  auto* r = new (std::nothrow) CqRec();
  if (!r) return nullptr;
  r->cq = cq;
  r->cqx = cqx;
  r->c = c;
  if (r->pending.init(static_cast<uint32_t>(cqe) * 2 + 64) != 0 || g_cqs.insert(key_of(cq), r) != 0) {
    free_cq_rec(r);
    return nullptr;
  }
  return r;
}

ibv_cq_ex* hook_create_cq_ex(ibv_context* ctx, ibv_cq_init_attr_ex* attr) {
  ContextRec* c = context_find(ctx);
  ibv_cq_ex* cqx = c->create_cq_ex(ctx, attr);
  if (!cqx) return nullptr;
  ibv_cq* cq = ibv_cq_ex_to_cq(cqx);
  if (CqRec* r = cq_register(c, cq, cqx, static_cast<int>(attr->cqe))) cqx_hooks_install(r, cqx, attr->wc_flags);
  return cqx;
}

}  // namespace unload::rt

using namespace unload::rt;

// ---------------------------------------------------------------- the C API

extern "C" {

void unload_runtime_init(const unload_real_verbs* real) {
  g_real = *real;
  config_init();
  poll_gate_init();
}

ibv_context* unload_context_open(ibv_device* dev) {
  ibv_context* ctx = g_real.open_device(dev);
  if (!ctx) return nullptr;
  auto* c = new (std::nothrow) ContextRec();
  if (!c) return ctx;  // not interposed: pure pass-through
  c->ctx = ctx;
  c->id = g_next_ctx_id.fetch_add(1);
  c->post_send = ctx->ops.post_send;
  c->poll_cq = ctx->ops.poll_cq;
  c->req_notify_cq = ctx->ops.req_notify_cq;
  verbs_context* v = verbs_get_ctx(ctx);
  {
    std::lock_guard<std::mutex> g(g_ctx_mu);
    unsigned i = 0;
    while (i < kMaxContexts && g_contexts[i]) ++i;
    if (i == kMaxContexts) { delete c; return ctx; }
    __atomic_store_n(&g_contexts[i], c, __ATOMIC_RELEASE);
  }
  ctx->ops.post_send = hook_post_send;
  ctx->ops.poll_cq = hook_poll_cq;
  if (c->req_notify_cq) ctx->ops.req_notify_cq = hook_req_notify_cq;
  if (v && v->sz >= sizeof(*v) - offsetof(verbs_context, create_qp_ex) && v->create_qp_ex) {
    c->create_qp_ex = v->create_qp_ex;
    v->create_qp_ex = hook_create_qp_ex;
  }
  if (v && v->sz >= sizeof(*v) - offsetof(verbs_context, create_cq_ex) && v->create_cq_ex) {
    c->create_cq_ex = v->create_cq_ex;
    v->create_cq_ex = hook_create_cq_ex;
  }
  return ctx;
}

int unload_context_close(ibv_context* ctx) {
  ContextRec* c = nullptr;
  {
    std::lock_guard<std::mutex> g(g_ctx_mu);
    for (unsigned i = 0; i < kMaxContexts; ++i)
      if (g_contexts[i] && g_contexts[i]->ctx == ctx) {
        c = g_contexts[i];
        __atomic_store_n(&g_contexts[i], nullptr, __ATOMIC_RELEASE);
        break;
      }
  }
  if (c) {
    ctx->ops.post_send = c->post_send;
    ctx->ops.poll_cq = c->poll_cq;
    ctx->ops.req_notify_cq = c->req_notify_cq;
    if (verbs_context* v = verbs_get_ctx(ctx)) {
      if (c->create_qp_ex) v->create_qp_ex = c->create_qp_ex;
      if (c->create_cq_ex) v->create_cq_ex = c->create_cq_ex;
    }
  }
  const int rc = g_real.close_device(ctx);
  delete c;
  return rc;
}

ibv_qp* unload_qp_create(ibv_pd* pd, ibv_qp_init_attr* attr) {
  ContextRec* c = context_find(pd->context);
  if (!c) return g_real.create_qp(pd, attr);
  const uint32_t asked = attr->cap.max_inline_data;
  ibv_qp* qp = create_with_inline([&] { return g_real.create_qp(pd, attr); }, attr);
  if (!qp) return nullptr;
  const ibv_qp_cap real_cap = attr->cap;
  if (attr->cap.max_inline_data > asked) attr->cap.max_inline_data = asked;
  (void)qp_register(c, qp, real_cap, attr->sq_sig_all, false);
  return qp;
}

int unload_qp_modify(ibv_qp* qp, ibv_qp_attr* attr, int mask) {
  const int rc = g_real.modify_qp(qp, attr, mask);
  if (rc) return rc;
  QpRec* q = g_qps.find(reinterpret_cast<uintptr_t>(qp));
  if (!q) return rc;
  if (mask & IBV_QP_DEST_QPN) q->dest_qp_num = attr->dest_qp_num;
  if ((mask & IBV_QP_STATE) && attr->qp_state == IBV_QPS_RTS && kmod_present() &&
      qp->qp_type == IBV_QPT_RC && q->tracked) {
    uint32_t flags = 0;
    if (kmod_reg_qp(qp->context, qp->qp_num, &flags) == 0) {
      q->peer_flags = flags;
      q->kmod_registered = true;
      // Ask again at the first write (the peer often reaches RTS just after us), then
      // after 32, 64, ... writes.
      q->reg_countdown = 1;
      q->reg_backoff = 16;
    }
  }
  if ((mask & IBV_QP_AV) && attr->ah_attr.is_global && g_real.query_gid) {
    // Local peer: the destination GID is one of this host's (first GIDs of the port).
    bool local = false;
    for (int i = 0; i < 16 && !local; ++i) {
      ibv_gid gid;
      if (g_real.query_gid(qp->context, attr->ah_attr.port_num, i, &gid)) break;
      local = std::memcmp(&gid, &attr->ah_attr.grh.dgid, sizeof gid) == 0;
    }
    q->peer_local = local;
  }
  return rc;
}

int unload_qp_destroy(ibv_qp* qp) {
  QpRec* q = g_qps.find(reinterpret_cast<uintptr_t>(qp));
  const int rc = g_real.destroy_qp(qp);
  if (rc || !q) return rc;
  g_qps.remove(reinterpret_cast<uintptr_t>(qp));
  g_qps_by_num.remove(qpn_key(q->c, q->qp_num));
  if (CqRec* scq = g_cqs.find(key_of(q->send_cq)))
    for (auto& slot : scq->send_qps) {
      QpRec* me = q;
      if (slot.compare_exchange_strong(me, nullptr, std::memory_order_release)) break;
    }
  if (q->stage_mr) {
    g_real.dereg_mr(q->stage_mr);
    munmap(q->stage_base, q->stage_size);
  }
  delete q;
  return rc;
}

static ibv_mr* mr_track(ibv_pd* pd, ibv_mr* mr, void* addr, size_t len, uint64_t iova, int access) {
  if (!mr) return mr;
  ContextRec* c = context_find(pd->context);
  if (!c) return mr;
  auto* m = new (std::nothrow) MrRec{mr, pd, reinterpret_cast<uintptr_t>(addr), iova, len, 0};
  if (!m) return mr;
  // A target of direct writes: the kmod places into it by rkey (iova == address only:
  // the kmod addresses regions by process address).
  if (kmod_present() && (access & IBV_ACCESS_REMOTE_WRITE) && iova == m->addr && len)
    if (kmod_reg_region(mr, m->addr, len, access, &m->kmod_handle) != 0) m->kmod_handle = 0;
  if (g_mrs.insert(lkey_key(c, mr->lkey), m) != 0) {
    if (m->kmod_handle) kmod_dereg_region(m->kmod_handle);
    delete m;
  }
  return mr;
}

ibv_mr* unload_mr_reg(ibv_pd* pd, void* addr, size_t len, int access) {
  ibv_mr* mr = g_real.reg_mr(pd, addr, len, access);
  return mr_track(pd, mr, addr, len, reinterpret_cast<uintptr_t>(addr), access);
}

ibv_mr* unload_mr_reg_iova2(ibv_pd* pd, void* addr, size_t len, uint64_t iova, unsigned int access) {
  ibv_mr* mr = g_real.reg_mr_iova2(pd, addr, len, iova, access);
  return mr_track(pd, mr, addr, len, iova, static_cast<int>(access));
}

int unload_mr_dereg(ibv_mr* mr) {
  ContextRec* c = context_find(mr->context);
  MrRec* m = c ? g_mrs.find(lkey_key(c, mr->lkey)) : nullptr;
  if (m && m->mr == mr) g_mrs.remove(lkey_key(c, mr->lkey));
  else m = nullptr;
  // No new direct write can find the region once the kmod forgot it.
  if (m && m->kmod_handle) { kmod_dereg_region(m->kmod_handle); m->kmod_handle = 0; }
  const int rc = g_real.dereg_mr(mr);
  if (rc && m) g_mrs.insert(lkey_key(c, m->mr->lkey), m);
  else delete m;
  return rc;
}

ibv_cq* unload_cq_create(ibv_context* ctx, int cqe, void* cq_context, ibv_comp_channel* ch, int vec) {
  ibv_cq* cq = g_real.create_cq(ctx, cqe, cq_context, ch, vec);
  if (!cq) return cq;
  if (ContextRec* c = context_find(ctx)) cq_register(c, cq, nullptr, cqe);
  return cq;
}

int unload_cq_destroy(ibv_cq* cq) {
  CqRec* r = g_cqs.find(reinterpret_cast<uintptr_t>(cq));
  const int rc = g_real.destroy_cq(cq);
  if (rc || !r) return rc;
  g_cqs.remove(reinterpret_cast<uintptr_t>(cq));
  free_cq_rec(r);
  return rc;
}

int unload_cq_get_event(ibv_comp_channel* ch, ibv_cq** cq, void** cq_context) {
  return g_real.get_cq_event(ch, cq, cq_context);
}

}  // extern "C"
