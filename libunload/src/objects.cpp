// The object tables and the C API: the contexts, QPs, CQs and memory regions made through the
// shim get a record, and the provider entry points the runtime replaces get its hooks.
#include "internal.hpp"

#include "kmod.hpp"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <new>

namespace unload::rt {

unload_real_verbs g_real;

PtrTable<QpRec> g_qps;        // by ibv_qp*
PtrTable<QpRec> g_qps_by_num; // by (context, qp_num)
PtrTable<CqRec, 12> g_cqs;    // by ibv_cq*
PtrTable<MrRec> g_mrs;        // by (context, lkey)

namespace {

constexpr unsigned kMaxContexts = 64;
ContextRec* g_contexts[kMaxContexts];
std::atomic<uint32_t> g_next_ctx_id{0};
std::mutex g_ctx_mu;

}  // namespace

ContextRec* context_find(const ibv_context* ctx) {
  for (unsigned i = 0; i < kMaxContexts; ++i) {
    ContextRec* c = __atomic_load_n(&g_contexts[i], __ATOMIC_ACQUIRE);
    if (c && c->ctx == ctx) return c;
  }
  return nullptr;
}

namespace {

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
    uint32_t id = 0;
    if (kmod_arena_alloc(kStageArena, &a, &len, &id) == 0) {
      q->stage_mr = g_real.reg_mr(qp->pd, a, len, IBV_ACCESS_LOCAL_WRITE);
      if (q->stage_mr) {
        q->stage_base = static_cast<uint8_t*>(a);
        q->stage_size = static_cast<uint32_t>(len);
        q->stage_arena = id;
      } else {
        munmap(a, len);
        kmod_arena_free(id);
      }
    }
  }
  if (send_ops && q->tracked) {
    ibv_qp_ex* qpx = g_real.qp_to_qp_ex ? g_real.qp_to_qp_ex(qp) : nullptr;
    if (qpx) install_qpx(q, qpx);
  }
  q->scq = q->send_cq ? g_cqs.find(key_of(q->send_cq)) : nullptr;
  int rc = g_qps.insert(key_of(qp), q);
  if (!rc) rc = g_qps_by_num.insert(qpn_key(c, qp->qp_num), q);
  if (rc) { g_qps.remove(key_of(qp)); delete q; return rc; }
  if (CqRec* scq = q->scq)
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
    uint32_t flags = 0, handle = 0;
    if (kmod_reg_qp(qp->context, qp->qp_num, &flags, &handle) == 0) {
      q->peer_flags = flags;
      q->kmod_qp_handle = handle;
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
  // Forgotten by the module first: no direct write can name it after this, its number
  // may be reused once the QP is gone, and the registration holds the device.
  if (q && q->kmod_registered && kmod_unreg_qp(qp->context, q->qp_num) == 0) q->kmod_registered = false;
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
    kmod_arena_free(q->stage_arena);  // uncharged now, not at close
  }
  delete q;
  return rc;
}

static ibv_mr* mr_track(ibv_pd* pd, ibv_mr* mr, void* addr, size_t len, uint64_t iova, int access) {
  if (!mr) return mr;
  ContextRec* c = context_find(pd->context);
  if (!c) return mr;
  auto* m = new (std::nothrow) MrRec{mr, pd, reinterpret_cast<uintptr_t>(addr), iova, len, access, 0};
  if (!m) return mr;
  // Known to the kmod: as the source of direct writes (their lkeys are checked) and, with
  // REMOTE_WRITE, as a target by rkey (iova == address only: the kmod addresses regions
  // by process address).
  if (kmod_present() && iova == m->addr && len)
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

// The kmod forgets the region before the MR changes (no direct write lands in the old
// pages, PD or access once this returns) and learns it again as it is after.
int unload_mr_rereg(ibv_mr* mr, int flags, ibv_pd* pd, void* addr, size_t len, int access) {
  ContextRec* c = context_find(mr->context);
  MrRec* m = c ? g_mrs.find(lkey_key(c, mr->lkey)) : nullptr;
  if (m && m->mr == mr) g_mrs.remove(lkey_key(c, mr->lkey));
  else m = nullptr;
  if (m && m->kmod_handle) { kmod_dereg_region(m->kmod_handle); m->kmod_handle = 0; }
  const int rc = g_real.rereg_mr(mr, flags, pd, addr, len, access);
  if (!m) return rc;
  if (rc == 0) {  // libibverbs updated mr's keys, addr, length and pd
    m->pd = mr->pd;
    if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
      m->addr = reinterpret_cast<uintptr_t>(addr);
      m->iova = m->addr;
      m->length = len;
    }
    if (flags & IBV_REREG_MR_CHANGE_ACCESS) m->access = access;
  }
  if (kmod_present() && m->iova == m->addr && m->length)
    if (kmod_reg_region(mr, m->addr, m->length, m->access, &m->kmod_handle) != 0) m->kmod_handle = 0;
  if (g_mrs.insert(lkey_key(c, mr->lkey), m) != 0) {
    if (m->kmod_handle) kmod_dereg_region(m->kmod_handle);
    delete m;
  }
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
