// The lifecycles of the objects made through the shim: their records, from creation to
// destruction, and the C API the shim's wrappers call (unload/runtime.h).
#include "busy.hpp"
#include "caps.hpp"
#include "cq_ex.hpp"
#include "hidden.hpp"
#include "kmod.hpp"
#include "merge.hpp"
#include "nic_only.hpp"
#include "parts.hpp"
#include "registry.hpp"
#include "session.hpp"
#include "stats.hpp"
#include "tunables.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

namespace unload::rt {

unload_real_verbs g_real;

PtrTable<QpRec> g_qps;
PtrTable<QpRec> g_qps_by_num;
PtrTable<CqRec, 12> g_cqs;
PtrTable<MrRec> g_mrs;
PtrTable<ibv_mw> g_mws;
std::atomic<uint32_t> g_windows{0};

ContextRec* g_contexts[kMaxContexts];

namespace {

std::atomic<uint32_t> g_next_ctx_id{0};
std::mutex g_ctx_mu;  // guards writers of g_contexts

// Room the shim asks for beyond the program's, for the requests it adds itself (a fence
// marker and a wake-up marker per QP at most; the CQ's covers several QPs' markers).
constexpr uint32_t kSqRoom = 2;
constexpr int kCqRoom = 32;

}  // namespace

ContextRec* context_find_rest(const ibv_context* ctx) {
  for (unsigned i = 1; i < kMaxContexts; ++i) {
    ContextRec* c = __atomic_load_n(&g_contexts[i], __ATOMIC_ACQUIRE);
    if (c && c->ctx == ctx) return c;
  }
  return nullptr;
}

// ---------------------------------------------------------------- send-QP lists

int SendQpList::add(QpRec* q) {
  std::lock_guard<std::mutex> g(mu);
  Array* old = list.load(std::memory_order_relaxed);
  const uint32_t n = old ? old->n : 0;
  auto* a = static_cast<Array*>(std::malloc(sizeof(Array) + n * sizeof(QpRec*)));
  if (!a) return -ENOMEM;
  a->n = n + 1;
  a->older = old;
  for (uint32_t i = 0; i < n; ++i) a->qps[i] = old->qps[i];
  a->qps[n] = q;
  list.store(a, std::memory_order_release);
  return 0;
}

void SendQpList::remove(QpRec* q) {
  std::lock_guard<std::mutex> g(mu);
  Array* old = list.load(std::memory_order_relaxed);
  uint32_t at = 0;
  while (old && at < old->n && old->qps[at] != q) ++at;
  if (!old || at == old->n) return;  // not listed (an untracked QP)
  auto* a = static_cast<Array*>(std::malloc(sizeof(Array) + old->n * sizeof(QpRec*)));
  if (!a) {  // cannot shrink: blank the entry in place (readers skip nothing: keep a QP that is alive)
    old->qps[at] = old->qps[old->n - 1];
    old->n--;
    return;
  }
  a->n = 0;
  a->older = old;
  for (uint32_t i = 0; i < old->n; ++i)
    if (old->qps[i] != q) a->qps[a->n++] = old->qps[i];
  list.store(a, std::memory_order_release);
}

// A tracked QP q listed on its send CQ (held from its first tracked request), and counted
// on its receive CQ, when another, for its life: its errors are merged there.
// 0 or -ENOMEM, nothing changed.
int sender_attach(QpRec* q) {
  if (const int rc = q->scq->send_qps.add(q)) return rc;
  CqRec* rcq = q->recv_cq ? g_cqs.find(key_of(q->recv_cq)) : nullptr;
  const uint64_t held = q->sq.hold.load(std::memory_order_relaxed) & kHeld;
  q->sq.hold.store(uint64_t{q->scq->through_epoch.load(std::memory_order_relaxed)} << 32 | held,
                   std::memory_order_relaxed);
  if (rcq && rcq != q->scq && !q->rcq_held) {
    q->rcq_held = rcq;
    rcq->holders.fetch_add(1, std::memory_order_seq_cst);
  }
  return 0;
}

// Off its send CQ's list, and its receive CQ no longer held for it. Its send CQ is
// still held (cq_release, once its completions there are mapped).
void sender_detach(QpRec* q) {
  q->scq->send_qps.remove(q);
  if (CqRec* r = std::exchange(q->rcq_held, nullptr)) r->holders.fetch_sub(1, std::memory_order_release);
}

SendQpList::~SendQpList() {
  for (Array* a = list.load(std::memory_order_relaxed); a;) {
    Array* older = a->older;
    std::free(a);
    a = older;
  }
}

namespace {

// ---------------------------------------------------------------- QPs

void qp_free(QpRec* q) {
  parts_qp_release(q);
  delete q;
}

// cap: the QP's real capacities; shown: what the provider answers the program's request;
// roomy: the QP was made with more than that (ibv_query_qp then says `shown`).
int qp_register(ContextRec* c, ibv_qp* qp, const ibv_qp_cap& cap, const CapsShown& shown, bool roomy,
                bool sq_sig_all) {
  auto* q = new (std::nothrow) QpRec();
  if (!q) return -ENOMEM;
  q->qp = qp;
  q->c = c;
  q->send_cq = qp->send_cq;
  q->recv_cq = qp->recv_cq;
  q->qp_num = qp->qp_num;
  q->shown = shown.created;
  q->shown_query = shown.queried;
  q->shown_query_init = shown.queried_init;
  q->roomy = roomy;
  q->sq.max_inline = cap.max_inline_data;
  // What the CPU paths may fill: the real queue less the markers' room.
  q->sq.max_wr = cap.max_send_wr > kSqRoom ? cap.max_send_wr - kSqRoom : cap.max_send_wr;
  q->sq.max_sge = cap.max_send_sge;
  q->sq.sig_all = sq_sig_all;
  q->scq = q->send_cq ? g_cqs.find(key_of(q->send_cq)) : nullptr;
  // Tracked only when every CQ its completions reach is recorded: a tag reaching a CQ the
  // shim does not poll (its table full, or made past the shim) would come back to the
  // program as a wr_id and never retire.
  // An extended send CQ must also be able to hand over the completions the shim keeps for
  // it (a timestamp CQ cannot: its QPs are the NIC's alone).
  // Neither may have been reached through vendor direct verbs, nor the context (DEVX).
  const CqRec* rcq = q->recv_cq ? g_cqs.find(key_of(q->recv_cq)) : nullptr;
  const bool cqs_recorded = q->scq && (!q->scq->cqx || cqx_flags_synthesisable(q->scq->wc_flags)) &&
                            (!q->recv_cq || rcq) && !q->scq->dv.load() && !(rcq && rcq->dv.load()) &&
                            !c->dv.load();
  q->tracked = (qp->qp_type == IBV_QPT_RC || qp->qp_type == IBV_QPT_UC) && cqs_recorded;
  if (q->tracked && q->sq.ring.init(cap.max_send_wr * 2 + 64) != 0) {
    delete q;
    return -ENOMEM;
  }
  if (q->tracked) parts_qp_track(q);
  int rc = g_qps.insert(key_of(qp), q);
  if (!rc) rc = g_qps_by_num.insert(qpn_key(c, qp->qp_num), q);
  if (!rc && q->tracked) rc = sender_attach(q);
  if (rc) {
    g_qps.remove_if(key_of(qp), q);
    g_qps_by_num.remove_if(qpn_key(c, qp->qp_num), q);
    qp_free(q);  // never used: its QP passes through
    return rc;
  }
  return 0;
}

// The program's request with the room the shim needs: the markers' slots, and the inline
// cap the inline path wants. From the request, not the provider's answer to it: a provider
// that rounds the depth up (rxe on 6.12: 8 -> 15) rounds ours alike, so a list too long for
// the program's queue is cut where the provider would cut it without the shim.
template <class Attr>
void ask_room(Attr* attr, const ibv_qp_cap& asked) {
  attr->cap = asked;
  attr->cap.max_send_wr += kSqRoom;
  const Tunables& t = tunables();
  if (t.inline_max > asked.max_inline_data) attr->cap.max_inline_data = t.inline_max;
}

// The provider's answers for QP `qp`, made with the program's request: `created` at create,
// and what ibv_query_qp says of it.
CapsShown query_caps(ibv_qp* qp, const ibv_qp_cap& created) {
  CapsShown s;
  s.created = s.queried = s.queried_init = created;
  ibv_qp_attr a{};
  ibv_qp_init_attr ia{};
  if (g_real.query_qp && g_real.query_qp(qp, &a, IBV_QP_CAP, &ia) == 0) {
    s.queried = a.cap;
    s.queried_init = ia.cap;
  }
  return s;
}

// What decides the provider's answer to `attr` (caps.hpp).
template <class Attr>
CapsAsk caps_ask(const ContextRec* c, const Attr* attr) {
  CapsAsk k;
  k.ctx_id = c->id;
  k.qp_type = attr->qp_type;
  k.cap = attr->cap;
  k.sig_all = attr->sq_sig_all;
  if constexpr (std::is_same_v<Attr, ibv_qp_init_attr_ex>) {
    k.comp_mask = attr->comp_mask;
    k.send_ops = attr->send_ops_flags;
    k.create_flags = attr->create_flags;
  }
  return k;
}

// Creates a QP with the shim's room, tells the program the capacities the provider gives
// its own request (learnt once per distinct request: a QP made with exactly it, destroyed
// again), and records the QP (a QP that cannot be recorded passes through). Without room
// to be had (the device's limits), the program's own request is used.
template <class Attr, class Create>
ibv_qp* create_recorded(ContextRec* c, Attr* attr, Create&& create) {
  const bool rc_uc = attr->qp_type == IBV_QPT_RC || attr->qp_type == IBV_QPT_UC;
  if (!c || !rc_uc || !tunables().enabled || offload_pinned()) {
    ibv_qp* qp = create();
    if (qp && c)
      (void)qp_register(c, qp, attr->cap, CapsShown{attr->cap, attr->cap, attr->cap}, false,
                        attr->sq_sig_all);
    return qp;
  }
  const ibv_qp_cap asked = attr->cap;
  const CapsAsk k = caps_ask(c, attr);
  CapsShown shown;
  ibv_qp* plain = nullptr;  // made with the program's request, when its answer was not known
  if (!caps_lookup(k, &shown)) {
    plain = create();
    if (!plain) return nullptr;  // refused as without the shim
    shown = query_caps(plain, attr->cap);
    caps_remember(k, shown);
  }
  ask_room(attr, asked);
  ibv_qp* qp = create();
  ibv_qp_cap real = attr->cap;
  if (qp && plain) g_real.destroy_qp(plain);
  bool roomy = true;
  if (!qp) {
    attr->cap = asked;
    qp = plain ? plain : create();
    real = attr->cap;
    roomy = false;
  }
  attr->cap = shown.created;
  if (!qp) {
    attr->cap = asked;
    return nullptr;
  }
  (void)qp_register(c, qp, real, shown, roomy, attr->sq_sig_all);
  return qp;
}

// Maps what the provider holds of the CQ's completions now (into the pending queue, in
// order) so that none of them carries a tag once a ring is gone or cleared. Inside its gate.
void drain_provider(CqRec* c) {
  if (!c->tracked.load(std::memory_order_acquire)) return;
  while (poll_provider_into_pending(c) > 0) {
  }
}

// QP `q` was destroyed or reset: a provider that purges its completions from the CQ had
// them in the drain just made; they go, as do the direct writes' the shim queued. Inside
// the CQ's gate.
void purge_qp_completions(CqRec* c, const QpRec* q) {
  if (q->c->purges_cqes) c->pending.purge_qp(q->qp_num);
}

}  // namespace

namespace {

CqRec* cq_register(ContextRec* c, ibv_cq* cq, ibv_cq_ex* cqx, uint64_t wc_flags) {
  auto* r = new (std::nothrow) CqRec();
  if (!r) return nullptr;
  r->cq = cq;
  r->cqx = cqx;
  r->wc_flags = wc_flags;
  r->c = c;
  if (r->pending.init(static_cast<uint32_t>(cq->cqe) * 2 + 64) != 0 || g_cqs.insert(key_of(cq), r) != 0) {
    delete r;
    return nullptr;
  }
  return r;
}

// A registration of the program's, which the shim's staging arenas must not keep from
// fitting its RLIMIT_MEMLOCK: on ENOMEM they go back and it is tried again.
template <class Reg>
ibv_mr* with_memlock(Reg&& reg) {
  ibv_mr* mr = reg();
  if (!mr && errno == ENOMEM && parts_reclaim_memlock()) mr = reg();
  return mr;
}

void cq_free(CqRec* r) {
  parts_cq_release(r);
  delete r;
}

// Does the change make a responder NIC refuse writes it takes now: the QP leaves RTR and RTS,
// or loses REMOTE_WRITE?
bool narrows_responder(const ibv_qp_attr* attr, int mask) {
  const bool leaves =
      (mask & IBV_QP_STATE) && attr->qp_state != IBV_QPS_RTR && attr->qp_state != IBV_QPS_RTS;
  const bool drops = (mask & IBV_QP_ACCESS_FLAGS) && !(attr->qp_access_flags & IBV_ACCESS_REMOTE_WRITE);
  return leaves || drops;
}

// A narrowing modify of q, from before the real one to the end of the wrapper: the module
// revokes every mapping naming q and raises its busy byte first (a registration again, or
// QP_CHANGED from a forked child), and the byte stays up (busy_now) until the registration
// after the change has revoked any mapping granted meanwhile. So no peer's mapped write
// lands once the provider has changed the QP, as none would through its NIC.
class NarrowingScope {
 public:
  NarrowingScope(QpRec* q, ibv_qp* qp, const ibv_qp_attr* attr, int mask) {
    if (!q || !q->peer.registered || !kmod_present() || !narrows_responder(attr, mask)) return;
    q_ = q;
    q->narrowing.fetch_add(1, std::memory_order_seq_cst);
    if (q->peer.session != g_kmod.session) {
      kmod_qp_changed(qp->context, qp->qp_num);
      return;
    }
    uint32_t flags = 0, handle = 0, slot = 0;
    if (kmod_reg_qp(qp->context, qp->qp_num, &flags, &handle, &slot) == 0) busy_attach(q, slot);
  }
  ~NarrowingScope() {
    if (!q_) return;
    q_->narrowing.fetch_sub(1, std::memory_order_seq_cst);
    busy_settle(q_);  // down again when nothing else keeps it up
  }
  NarrowingScope(const NarrowingScope&) = delete;
  NarrowingScope& operator=(const NarrowingScope&) = delete;

 private:
  QpRec* q_ = nullptr;
};

}  // namespace

}  // namespace unload::rt

using namespace unload::rt;

// ---------------------------------------------------------------- the C API

extern "C" {

void unload_runtime_init(const unload_real_verbs* real) {
  g_real = *real;
  session_start();
  gate_init();
}

ibv_context* unload_context_open(ibv_device* dev) {
  ibv_context* ctx = g_real.open_device(dev);
  if (!ctx) return nullptr;
  auto* c = new (std::nothrow) ContextRec();
  if (!c) return ctx;  // not interposed: pure pass-through
  c->ctx = ctx;
  c->id = g_next_ctx_id.fetch_add(1);
  // mlx5 drops a QP's CQEs at destroy and RESET (mlx5_cq_clean); rxe keeps them.
  c->purges_cqes = std::strncmp(dev->name, "mlx5", 4) == 0;
  {
    std::lock_guard<std::mutex> g(g_ctx_mu);
    unsigned i = 0;
    while (i < kMaxContexts && g_contexts[i]) ++i;
    if (i == kMaxContexts) {
      delete c;
      return ctx;
    }
    __atomic_store_n(&g_contexts[i], c, __ATOMIC_RELEASE);
  }
  return ctx;
}

unload_provider_ops* unload_context_provider(ibv_context* ctx) {
  ContextRec* c = context_find(ctx);
  return c ? &c->provider : nullptr;
}

// The shim has put the provider's entry points back before this.
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
  const int rc = g_real.close_device(ctx);
  delete c;
  return rc;
}

ibv_qp* unload_qp_create(ibv_pd* pd, ibv_qp_init_attr* attr) {
  ContextRec* c = context_find(pd->context);
  return create_recorded(c, attr, [&] { return g_real.create_qp(pd, attr); });
}

// ops.create_qp_ex (ibv_create_qp_ex, and ibv_create_qp through librdmacm).
ibv_qp* unload_qp_create_ex(ibv_context* ctx, ibv_qp_init_attr_ex* attr) {
  ContextRec* c = context_find(ctx);
  return create_recorded(c, attr, [&] { return c->provider.create_qp_ex(ctx, attr); });
}

// The capacities as the program was told them at create, not the room the shim took.
int unload_qp_query(ibv_qp* qp, ibv_qp_attr* attr, int mask, ibv_qp_init_attr* init) {
  const int rc = g_real.query_qp(qp, attr, mask, init);
  const QpRec* q = rc ? nullptr : g_qps.find(key_of(qp));
  if (!q || !q->roomy) return rc;
  if (attr) attr->cap = q->shown_query;
  if (init) init->cap = q->shown_query_init;
  return rc;
}

int unload_qp_modify(ibv_qp* qp, ibv_qp_attr* attr, int mask) {
  QpRec* const found = g_qps.find(key_of(qp));
  parts_qp_settle(found);  // as if they executed before the change
  const NarrowingScope narrowing(found, qp, attr, mask);
  const int rc = g_real.modify_qp(qp, attr, mask);
  if (rc) return rc;
  QpRec* q = g_qps.find(key_of(qp));
  if (!q) return rc;
  // The peer link may change below (its host, the registration, the pairing's flags): the
  // express lane's memo, which checks none of them again, goes until the full path arms it.
  q->express.disarm();
  if (mask & IBV_QP_DEST_QPN) q->peer.dest_qp_num = attr->dest_qp_num;
  // Before the registration below: whether the busy byte is kept (busy.hpp) depends on it.
  if ((mask & IBV_QP_AV) && attr->ah_attr.is_global && g_real.query_gid) {
    // Local peer: the destination GID is one of this host's (first GIDs of the port).
    bool local = false;
    for (int i = 0; i < 16 && !local; ++i) {
      ibv_gid gid;
      if (g_real.query_gid(qp->context, attr->ah_attr.port_num, i, &gid)) break;
      local = std::memcmp(&gid, &attr->ah_attr.grh.dgid, sizeof gid) == 0;
    }
    q->peer.local = local;
    q->peer.port = attr->ah_attr.port_num;
    q->peer.dgid = attr->ah_attr.grh.dgid;
  }
  if (mask & IBV_QP_STATE) q->state.store(static_cast<uint8_t>(attr->qp_state), std::memory_order_release);
  if ((mask & IBV_QP_STATE) && attr->qp_state == IBV_QPS_ERR)
    q->failed.store(true, std::memory_order_release);
  // A parent's QP modified in its forked child: the registration is the parent's, which the
  // child cannot renew, so it tells the module, which makes the parent's see the change.
  if (q->peer.registered && kmod_present() && q->peer.session != g_kmod.session)
    kmod_qp_changed(qp->context, qp->qp_num);
  // Any change of a registered QP (its state, its access flags, ...): registered again,
  // the module revokes every mapping that names it, so a peer's mapped writes end before
  // this call returns, as a NIC's acceptance would. A move to RTR or RTS registers below.
  const bool to_rtr_rts =
      (mask & IBV_QP_STATE) && (attr->qp_state == IBV_QPS_RTR || attr->qp_state == IBV_QPS_RTS);
  if (!to_rtr_rts && q->peer.registered && q->peer.session == g_kmod.session) {
    uint32_t flags = 0, handle = 0, slot = 0;
    if (kmod_reg_qp(qp->context, qp->qp_num, &flags, &handle, &slot) == 0) busy_attach(q, slot);
  }
  if ((mask & IBV_QP_STATE) && attr->qp_state == IBV_QPS_RESET && q->tracked) {
    // The provider discarded the send queue: its completions that were made are mapped
    // now, the rest will never come.
    GateScope pg(q->sq.gate);
    if (q->scq) {
      GateScope cg(q->scq->gate);
      drain_provider(q->scq);
      purge_qp_completions(q->scq, q);
      release_hidden(q, q->sq.ring.head());
      q->sq.ring.clear();
    } else {
      q->sq.ring.clear();
    }
    q->sq.stage.head.store(q->sq.stage.tail, std::memory_order_release);
    passing_end(q);
    q->sq.untracked.store(false, std::memory_order_relaxed);
    q->sq.plain_done.store(q->sq.plain_posted.load(std::memory_order_relaxed), std::memory_order_release);
    q->peer.stuck_below = 0;
    q->peer.has_last = false;  // no marker target until the next direct write
    q->carried = IBV_WC_SUCCESS;
    q->failed.store(false, std::memory_order_release);
  }
  // Registered from RTR, where it can receive: a QP that only ever receives writes (the
  // passive side of every bandwidth test) is a direct target too. Again at RTS, whose
  // report is fresher.
  if ((mask & IBV_QP_STATE) && (attr->qp_state == IBV_QPS_RTR || attr->qp_state == IBV_QPS_RTS) &&
      kmod_present() && qp->qp_type == IBV_QPT_RC && q->tracked) {
    uint32_t flags = 0, handle = 0, slot = 0;
    if (kmod_reg_qp(qp->context, qp->qp_num, &flags, &handle, &slot) == 0) {
      GateScope pg(q->sq.gate);
      q->peer.flags = flags;  // first: busy_attach keeps the byte only for a peer here
      busy_attach(q, slot);
      q->peer.handle = handle;
      q->peer.registered = true;
      q->peer.session = g_kmod.session;
      // Ask again at the first write (the peer often reaches RTS just after us), then
      // after 32, 64, ... writes.
      q->peer.countdown = 1;
      q->peer.backoff = 16;
      q->peer.channel = 0;  // the remote path probes its channel again
    }
  }
  return rc;
}

// The record goes only once no poller can hold it: what the provider made of its
// completions is mapped first (no tag reaches the program), then it leaves the tables and
// the CQs' gates are passed once (a poller that found it before has left).
int unload_qp_destroy(ibv_qp* qp) {
  QpRec* q = g_qps.find(key_of(qp));
  parts_qp_settle(q);  // none is left in the module's queue for a QP that is gone
  // Forgotten by the module first: no direct write can name it after this, its number
  // may be reused once the QP is gone, and the registration holds the device.
  if (q) busy_detach(q);
  if (q && q->peer.registered && q->peer.session == g_kmod.session &&
      kmod_unreg_qp(qp->context, q->qp_num) == 0)
    q->peer.registered = false;
  // Out of its CQ's list before the QP goes: a wake-up (ibv_req_notify_cq on another
  // thread) walks the list under its lock and posts a marker on a QP of it.
  if (q && q->tracked) sender_detach(q);
  const int rc = g_real.destroy_qp(qp);
  if (rc && q && q->tracked && sender_attach(q) != 0) q->tracked = false;  // still there
  if (rc || !q) return rc;
  g_qps.remove_if(key_of(qp), q);
  if (CqRec* scq = q->scq) {
    // The drain finds the QP by number (ibv_poll_cq gives it).
    GateScope g(scq->gate);
    drain_provider(scq);
    purge_qp_completions(scq, q);
    release_hidden(q, q->sq.ring.head());
    g_qps_by_num.remove_if(qpn_key(q->c, q->qp_num), q);
    // Only now, its tagged completions mapped: a poll that found the CQ unheld before
    // would have passed them through.
    if (q->tracked) cq_release(q);
  } else {
    g_qps_by_num.remove_if(qpn_key(q->c, q->qp_num), q);
  }
  if (CqRec* rcq = q->recv_cq ? g_cqs.find(key_of(q->recv_cq)) : nullptr) {
    if (rcq != q->scq) {
      GateScope g(rcq->gate);
    }
  }
  qp_free(q);
  return rc;
}

namespace {

ibv_mr* mr_track(ibv_pd* pd, ibv_mr* mr, void* addr, size_t len, uint64_t iova, int access,
                 bool dmabuf = false) {
  if (!mr) return mr;
  ContextRec* c = context_find(pd->context);
  if (!c) return mr;
  auto* m = new (std::nothrow) MrRec{mr, pd, reinterpret_cast<uintptr_t>(addr), iova, len, access, 0};
  if (!m) return mr;
  m->nic_only = mr_nic_only(access, dmabuf);
  // Known to the kmod: as the source of direct writes (their lkeys are checked) and, with
  // REMOTE_WRITE, as a target by rkey, addressed by iova as the NIC does. Memory the module
  // cannot pin is the CPU's to touch no more than the module's.
  if (kmod_present() && len && !m->nic_only)
    if (const int err = kmod_reg_region(mr, m->addr, iova, len, access, &m->kmod_handle); err != 0) {
      m->kmod_handle = 0;
      m->nic_only = pin_refusal_nic_only(err);
    }
  if (g_mrs.insert(lkey_key(c, mr->lkey), m) != 0) {
    if (m->kmod_handle) kmod_dereg_region(m->kmod_handle);
    delete m;
  }
  return mr;
}

// Takes the MR's record out: no lookup finds it, no direct write lands in it after this.
MrRec* mr_untrack(ibv_mr* mr) {
  ContextRec* c = context_find(mr->context);
  MrRec* m = c ? g_mrs.find(lkey_key(c, mr->lkey)) : nullptr;
  memo_epoch_move();  // before the record goes: a memo that names it holds no more
  if (!m || m->mr != mr || !g_mrs.remove_if(lkey_key(c, mr->lkey), m)) return nullptr;
  if (m->kmod_handle) {
    kmod_dereg_region(m->kmod_handle);
    m->kmod_handle = 0;
  }
  return m;
}

}  // namespace

ibv_mr* unload_mr_reg(ibv_pd* pd, void* addr, size_t len, int access) {
  ibv_mr* mr = with_memlock([&] { return g_real.reg_mr(pd, addr, len, access); });
  return mr_track(pd, mr, addr, len, reinterpret_cast<uintptr_t>(addr), access);
}

ibv_mr* unload_mr_reg_iova2(ibv_pd* pd, void* addr, size_t len, uint64_t iova, unsigned int access) {
  ibv_mr* mr = with_memlock([&] { return g_real.reg_mr_iova2(pd, addr, len, iova, access); });
  return mr_track(pd, mr, addr, len, iova, static_cast<int>(access));
}

ibv_mr* unload_mr_reg_dmabuf(ibv_pd* pd, uint64_t offset, size_t len, uint64_t iova, int fd, int access) {
  if (!g_real.reg_dmabuf_mr) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  ibv_mr* mr = g_real.reg_dmabuf_mr(pd, offset, len, iova, fd, access);
  return mr_track(pd, mr, nullptr, len, iova, access, true);
}

ibv_mw* unload_mw_alloc(ibv_pd* pd, ibv_mw_type type) {
  ContextRec* c = context_find(pd->context);
  ibv_mw* mw = c && c->provider.alloc_mw ? c->provider.alloc_mw(pd, type) : nullptr;
  if (mw && g_mws.insert(mw_key(mw->context, mw->rkey), mw) == 0) {
    g_windows.fetch_add(1, std::memory_order_relaxed);
    memo_epoch_move();  // the express lane's memo was kept with none
  }
  return mw;
}

int unload_mw_dealloc(ibv_mw* mw) {
  ContextRec* c = context_find(mw->context);
  if (!c || !c->provider.dealloc_mw) return EOPNOTSUPP;
  const uint64_t key = mw_key(mw->context, mw->rkey);
  // Out first: the window's index may be reused by the next one the moment it is freed.
  const bool was = g_mws.remove_if(key, mw);
  const int rc = c->provider.dealloc_mw(mw);
  if (rc && was && g_mws.insert(key, mw) == 0) return rc;  // still there: still recorded
  if (was) {
    g_windows.fetch_sub(1, std::memory_order_relaxed);
    memo_epoch_move();
  }
  return rc;
}

// A rereg changes the PD, the translation or the access in place: the record and the
// kmod's region are dropped before it and made anew from what it left.
int unload_mr_rereg(ibv_mr* mr, int flags, ibv_pd* pd, void* addr, size_t len, int access) {
  MrRec* m = mr_untrack(mr);
  const int rc = g_real.rereg_mr ? g_real.rereg_mr(mr, flags, pd, addr, len, access) : EOPNOTSUPP;
  if (m) {
    // Failed: the MR may be in an undefined state (ibv_rereg_mr(3)); it is tracked for the
    // local checks no more, so it takes the NIC, which judges it.
    if (rc == 0) {
      ibv_pd* npd = (flags & IBV_REREG_MR_CHANGE_PD) ? pd : m->pd;
      void* naddr = (flags & IBV_REREG_MR_CHANGE_TRANSLATION) ? addr : reinterpret_cast<void*>(m->addr);
      const size_t nlen = (flags & IBV_REREG_MR_CHANGE_TRANSLATION) ? len : m->length;
      const int nacc = (flags & IBV_REREG_MR_CHANGE_ACCESS) ? access : m->access;
      const uint64_t iova =
          (flags & IBV_REREG_MR_CHANGE_TRANSLATION) ? reinterpret_cast<uintptr_t>(addr) : m->iova;
      mr_track(npd, mr, naddr, nlen, iova, nacc);
    }
    delete m;
  }
  return rc;
}

int unload_mr_dereg(ibv_mr* mr) {
  MrRec* m = mr_untrack(mr);
  const int rc = g_real.dereg_mr(mr);
  if (rc && m) {  // still registered: tracked again (without the kmod's region)
    ContextRec* c = context_find(mr->context);
    if (c && g_mrs.insert(lkey_key(c, mr->lkey), m) == 0) return rc;
  }
  delete m;
  return rc;
}

ibv_cq* unload_cq_create(ibv_context* ctx, int cqe, void* cq_context, ibv_comp_channel* ch, int vec) {
  ibv_cq* cq = g_real.create_cq(ctx, cqe + kCqRoom, cq_context, ch, vec);
  if (!cq) cq = g_real.create_cq(ctx, cqe, cq_context, ch, vec);
  if (!cq) return cq;
  if (ContextRec* c = context_find(ctx)) cq_register(c, cq, nullptr, 0);
  return cq;
}

// ops.create_cq_ex.
ibv_cq_ex* unload_cq_create_ex(ibv_context* ctx, ibv_cq_init_attr_ex* attr) {
  ContextRec* c = context_find(ctx);
  const uint32_t asked = attr->cqe;
  attr->cqe = asked + kCqRoom;
  ibv_cq_ex* cqx = c->provider.create_cq_ex(ctx, attr);
  attr->cqe = asked;
  if (!cqx) cqx = c->provider.create_cq_ex(ctx, attr);
  if (!cqx) return nullptr;
  cq_register(c, ibv_cq_ex_to_cq(cqx), cqx, attr->wc_flags);
  return cqx;
}

int unload_cq_destroy(ibv_cq* cq) {
  CqRec* r = g_cqs.find(key_of(cq));
  const int rc = g_real.destroy_cq(cq);
  if (rc || !r) return rc;
  g_cqs.remove_if(key_of(cq), r);
  cq_free(r);
  return rc;
}

// The pending queue grows with the CQ, with its producers (the posting threads of the CQ's
// QPs) and its consumer (the gate) held off.
int unload_cq_resize(ibv_cq* cq, int cqe) {
  if (!g_real.resize_cq) return EOPNOTSUPP;
  int rc = g_real.resize_cq(cq, cqe + kCqRoom);
  if (rc) rc = g_real.resize_cq(cq, cqe);
  CqRec* r = g_cqs.find(key_of(cq));
  if (rc || !r) return rc;
  const uint32_t want = static_cast<uint32_t>(cq->cqe) * 2 + 64;
  if (want <= r->pending.capacity()) return 0;
  std::lock_guard<std::mutex> keep(r->send_qps.mu);
  const SendQpList::Array* a = r->send_qps.list.load(std::memory_order_relaxed);
  std::vector<bool> how;
  for (uint32_t i = 0; a && i < a->n; ++i) how.push_back(a->qps[i]->sq.gate.enter(this_tid()));
  {
    GateScope g(r->gate);
    if (r->pending.grow(want) != 0) rc = ENOMEM;
  }
  for (uint32_t i = 0; a && i < a->n; ++i) a->qps[i]->sq.gate.leave(how[i]);
  return rc;
}

int unload_cq_get_event(ibv_comp_channel* ch, ibv_cq** cq, void** cq_context) {
  return g_real.get_cq_event(ch, cq, cq_context);
}

}  // extern "C"
