// ibv_cq_ex polling (start_poll, next_poll, end_poll and read_*): the provider's completions
// mapped like the merger's, the shim-made ones handed over in their place.
#include "internal.hpp"

namespace unload::rt {

namespace {

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

}  // namespace

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

}  // namespace unload::rt
