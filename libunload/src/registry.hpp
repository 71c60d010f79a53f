// Where the records are found: lock-free tables keyed by the verbs object's address (or, for
// completions, by context and QP number; for local checks, by context and lkey).
#pragma once

#include "memo_epoch.hpp"
#include "records.hpp"
#include "tables.hpp"
#include "tls.hpp"

namespace unload::rt {

// t.find(key) through the thread's memo `last`. The count is read before the probe, so a
// change during it leaves the memo stale, and the next lookup probes again.
template <class V, unsigned kBits>
inline V* find_through(const PtrTable<V, kBits>& t, LastFound<V>& last, uint64_t key) {
  const uint64_t changes = t.changes();
  if (__builtin_expect(last.key == key && last.changes == changes, 1)) return last.val;
  V* v = t.find(key);
  if (v) last = LastFound<V>{key, v, changes};
  return v;
}

// The memo's answer alone, no probe: null when the thread's last lookup was of another key
// or the table changed since (find_through then probes). A memo is made only of a record
// found, and a key made of an object's address is never 0, the empty memo's: so a memo that
// answers answers with a record, and its caller's test of null is the match's alone.
template <class V, unsigned kBits>
[[gnu::always_inline]] inline V* find_memo(const PtrTable<V, kBits>& t, const LastFound<V>& last,
                                           uint64_t key) {
  if (last.key != key || last.changes != t.changes()) return nullptr;
  V* v = last.val;
  if (v == nullptr) __builtin_unreachable();
  return v;
}

extern PtrTable<QpRec> g_qps;            // by ibv_qp*
extern PtrTable<QpRec> g_qps_by_num;     // by qpn_key(context, qp_num)
extern PtrTable<CqRec, 12> g_cqs;        // by ibv_cq*
extern PtrTable<MrRec> g_mrs;            // by lkey_key(context, lkey)
extern PtrTable<ibv_mw> g_mws;           // by mw_key(context, rkey) (nic_only.hpp)
extern std::atomic<uint32_t> g_windows;  // how many g_mws holds: 0, no write looks

// The open contexts' records, each in the first free slot: most programs open one device,
// so context_find looks at the first slot inline and at the rest out of line.
constexpr unsigned kMaxContexts = 64;
extern ContextRec* g_contexts[kMaxContexts];
ContextRec* context_find_rest(const ibv_context* ctx);
inline ContextRec* context_find(const ibv_context* ctx) {
  ContextRec* c = __atomic_load_n(&g_contexts[0], __ATOMIC_ACQUIRE);
  return __builtin_expect(c != nullptr && c->ctx == ctx, 1) ? c : context_find_rest(ctx);
}

// A tracked QP listed on its send CQ and counted in its CQs' holders, and out again
// (objects.cpp).
int sender_attach(QpRec* q);
void sender_detach(QpRec* q);

// The post and poll wrappers' lookups, through the thread's last one (find_through, above).
inline QpRec* qp_find(const ibv_qp* qp) {
  return find_through(g_qps, t_hot.last_qp, key_of(qp));
}
// qp_find's answer when the QP sits in its home slot (find_home): the post's front, which
// leaves every other case to qp_find. Not the memo: a program turning over many QPs misses
// it on each post, and the home slot costs a few instructions more, the same at any count.
[[gnu::always_inline]] inline QpRec* qp_find_front(const ibv_qp* qp) {
  return g_qps.find_home(key_of(qp));
}
inline CqRec* cq_find(const ibv_cq* cq) {
  return find_through(g_cqs, t_hot.last_cq, key_of(cq));
}
// cq_find's memo alone: the poll's front.
inline CqRec* cq_find_memo(const ibv_cq* cq) {
  return find_memo(g_cqs, t_hot.last_cq, key_of(cq));
}

inline uint64_t qpn_key(const ContextRec* c, uint32_t qpn) {
  return (static_cast<uint64_t>(c->id + 1) << 32) | qpn;
}
inline uint64_t lkey_key(const ContextRec* c, uint32_t lkey) {
  return (static_cast<uint64_t>(c->id + 1) << 32) | lkey;
}

// Keeps in *s the region of q's PD that holds sg (whose SGE a route just found valid);
// false, nothing kept, when the table has none.
inline bool source_keep(const QpRec* q, const ibv_sge& sg, SourceRegion* s) {
  s->epoch = memo_epoch();  // before the lookup it vouches for
  const MrRec* m = g_mrs.find(lkey_key(q->c, sg.lkey));
  if (!m || m->pd != q->qp->pd) return false;
  s->lkey = sg.lkey;
  s->lo = m->iova;
  s->hi = m->iova + m->length;
  return true;
}

// Whether sg lies inside the kept region (no overflow on any input); the caller holds the
// epoch s was kept in.
inline bool source_inside(const SourceRegion& s, const ibv_sge& sg) {
  const uint64_t end = sg.addr + sg.length;
  return sg.lkey == s.lkey && sg.addr >= s.lo && end <= s.hi && end >= sg.addr;
}

// Whether sg lies inside the kept region and the memo epoch has not moved since.
inline bool source_holds(const SourceRegion& s, const ibv_sge& sg) {
  return source_inside(s, sg) && memo_epoch() == s.epoch;
}

}  // namespace unload::rt
