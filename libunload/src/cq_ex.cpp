// ibv_cq_ex polling. A poll sequence runs inside the CQ's gate, from start_poll to end_poll
// (or to a start_poll that found nothing).
#include "cq_ex.hpp"

#include "busy.hpp"
#include "merge.hpp"
#include "parts.hpp"
#include "registry.hpp"

#include <new>

namespace unload::rt {

struct CqxState {
  ibv_cq_ex orig;      // the provider's table
  uint64_t wc_flags;   // what the program asked ibv_create_cq_ex for
  bool pass;           // this sequence is the provider's alone (nothing of the shim's here)
  bool synth;          // the current completion is `cur`, made by the shim
  bool provider_open;  // the provider's start_poll succeeded; its end_poll is due
  bool gate_how;
  ibv_poll_cq_attr attr;
  ibv_wc cur;
};

namespace {

CqRec* cqx_rec(ibv_cq_ex* cq) {
  return g_cqs.find(key_of(ibv_cq_ex_to_cq(cq)));
}

// Maps the provider's current completion in place. false when the program must not see it.
// *q and *e get the ring entry it tagged (nullptr when none), which the caller retires once
// the completion is where the program will find it.
bool map_current(CqRec* c, CqxState* s, ibv_cq_ex* cq, QpRec** q, SqEntry** e) {
  // Without IBV_WC_EX_WITH_QP_NUM the provider may not say: the CQ's QPs are searched.
  const uint32_t qpn = s->orig.read_qp_num ? s->orig.read_qp_num(cq) : 0;
  *e = tagged_entry(c, qpn, cq->wr_id, q);
  if (!*e) return true;
  uint64_t wr_id;
  ibv_wc_status status = cq->status;
  const bool visible = merge_entry(*q, *e, &status, &wr_id);
  cq->status = status;
  cq->wr_id = wr_id;
  return visible;
}

// The provider's current completion as an ibv_wc, to queue: the fields the program asked for
// (only those an ibv_wc has, or the CQ's QPs are untracked). An error completion has no more
// than a legacy one: wr_id, status, vendor_err, qp_num.
ibv_wc current_as_wc(const CqxState* s, ibv_cq_ex* cq) {
  ibv_wc wc{};
  wc.wr_id = cq->wr_id;
  wc.status = cq->status;
  wc.vendor_err = s->orig.read_vendor_err(cq);
  const uint64_t f = s->wc_flags;
  if (f & IBV_WC_EX_WITH_QP_NUM) wc.qp_num = s->orig.read_qp_num(cq);
  if (wc.status != IBV_WC_SUCCESS) return wc;
  wc.opcode = s->orig.read_opcode(cq);
  wc.wc_flags = s->orig.read_wc_flags(cq);
  if (f & IBV_WC_EX_WITH_BYTE_LEN) wc.byte_len = s->orig.read_byte_len(cq);
  if (f & IBV_WC_EX_WITH_IMM) wc.imm_data = s->orig.read_imm_data(cq);
  if (f & IBV_WC_EX_WITH_SRC_QP) wc.src_qp = s->orig.read_src_qp(cq);
  if (f & IBV_WC_EX_WITH_SLID) wc.slid = static_cast<uint16_t>(s->orig.read_slid(cq));
  if (f & IBV_WC_EX_WITH_SL) wc.sl = s->orig.read_sl(cq);
  if (f & IBV_WC_EX_WITH_DLID_PATH_BITS) wc.dlid_path_bits = s->orig.read_dlid_path_bits(cq);
  return wc;
}

// Makes the next completion the shim made the current one, if there is one.
bool take_synth(CqRec* c, CqxState* s, ibv_cq_ex* cq) {
  if (!cqx_can_synthesise(c) || c->pending.pop(&s->cur, 1) == 0) return false;
  s->synth = true;
  cq->wr_id = s->cur.wr_id;
  cq->status = s->cur.status;
  return true;
}

// A cell of the queue is being filled: the provider's next completion may belong behind the
// ones queued after it (WcQueue::idle), so none is current now; the program polls again.
bool held_up(CqRec* c) {
  return cqx_can_synthesise(c) && !c->pending.idle();
}

// Steps the provider past its current completion, which the shim consumed (its own, or one
// it queued): end_poll then start_poll, never next_poll. rxe in rdma-core 44 moves its
// consumer index and unlocks at a next_poll that finds nothing, and again at the end_poll
// due after it, which loses the next completion; a program meets that with its own
// next_poll alone, as without the shim. 0, or ENOENT (the provider's sequence ended).
int skip_current(CqxState* s, ibv_cq_ex* cq) {
  s->orig.end_poll(cq);
  s->provider_open = false;
  const int rc = s->orig.start_poll(cq, &s->attr);
  if (rc == 0) s->provider_open = true;
  return rc;
}

// From the provider's current completion on (rc 0: there is one): steps past those the
// program must not see. One the program may see goes behind the shim's queued completions
// when any is queued or being queued, as poll.cpp's Emitter does: held_up looked before the
// provider was polled, and a direct write of its QP may have claimed a cell since. 0 with
// a completion current, or ENOENT (or the provider's error).
int settle(CqRec* c, CqxState* s, ibv_cq_ex* cq, int rc) {
  for (; rc == 0; rc = skip_current(s, cq)) {
    QpRec* q = nullptr;
    SqEntry* e = nullptr;
    const bool visible = map_current(c, s, cq, &q, &e);
    const bool behind = visible && held_up(c) && c->pending.push(current_as_wc(s, cq));
    if (e) {
      q->sq.ring.retire_through(e);  // the program reads it now, or finds it queued
      busy_settle(q);
    }
    if (behind) return take_synth(c, s, cq) ? 0 : ENOENT;
    if (visible) return 0;
  }
  return rc;
}

// Steps the provider to its next completion the program may see: 0, or ENOENT (or the
// provider's error).
int provider_next(CqRec* c, CqxState* s, ibv_cq_ex* cq) {
  s->synth = false;
  int rc;
  if (!s->provider_open) {
    rc = s->orig.start_poll(cq, &s->attr);
    if (rc) return rc;
    s->provider_open = true;
  } else {
    rc = s->orig.next_poll(cq);
  }
  return settle(c, s, cq, rc);
}

}  // namespace

// The engine entry points the shim installs in the CQ's table (unload/runtime.h).

// A pass-through sequence whose CQ became tracked meanwhile (a request of the shim's was
// posted after start_poll looked): the provider's current completion may be a tag, so the
// rest of the sequence merges. 0, or the provider's ENOENT (its end_poll then done).
static int pass_checked(CqRec* c, CqxState* s, ibv_cq_ex* cq) {
  if (!c->tracked.load(std::memory_order_acquire)) return 0;
  s->pass = false;
  const int rc = settle(c, s, cq, 0);
  if (rc && s->provider_open) {
    s->orig.end_poll(cq);
    s->provider_open = false;
  }
  return rc;
}

// The shim's completions go first: they were ready before whatever the provider has now
// (a direct write's earlier requests had all completed).
extern "C" int unload_cqx_start_poll(ibv_cq_ex* cq, ibv_poll_cq_attr* attr) {
  CqRec* c = cqx_rec(cq);
  CqxState* s = c->cqx_state;
  s->gate_how = c->gate.enter(this_tid());
  s->attr = *attr;
  s->provider_open = false;
  s->synth = false;
  s->pass = !c->tracked.load(std::memory_order_acquire);
  if (s->pass) {
    int rc = s->orig.start_poll(cq, attr);
    if (rc == 0) {
      s->provider_open = true;
      rc = pass_checked(c, s, cq);
    }
    if (rc) c->gate.leave(s->gate_how);
    return rc;
  }
  if (take_synth(c, s, cq)) return 0;
  const int rc = held_up(c) ? ENOENT : provider_next(c, s, cq);
  if (rc == 0) return 0;
  if (s->provider_open) s->orig.end_poll(cq);  // what it had was the shim's own, or is queued
  s->provider_open = false;
  c->gate.leave(s->gate_how);
  return rc;
}

extern "C" int unload_cqx_next_poll(ibv_cq_ex* cq) {
  CqRec* c = cqx_rec(cq);
  CqxState* s = c->cqx_state;
  if (s->pass) {
    const int rc = s->orig.next_poll(cq);
    return rc ? rc : pass_checked(c, s, cq);
  }
  if (take_synth(c, s, cq)) return 0;
  return held_up(c) ? ENOENT : provider_next(c, s, cq);
}

extern "C" void unload_cqx_end_poll(ibv_cq_ex* cq) {
  CqRec* c = cqx_rec(cq);
  CqxState* s = c->cqx_state;
  if (s->pass) {
    s->orig.end_poll(cq);
  } else {
    if (s->provider_open) s->orig.end_poll(cq);
    s->provider_open = false;
    s->synth = false;
  }
  c->gate.leave(s->gate_how);
}

// The read_* entry points: from the shim's completion while one is current. It is a direct
// write's (what a NIC's RDMA WRITE completion has; the receive-side fields 0, as the NIC's
// are undefined there) or one the shim took from the provider with ibv_poll_cq at a
// destroy or RESET (every field a legacy completion has, kept).
#define UNLOAD_CQX_READ(type, name, synth_value)                         \
  extern "C" type unload_cqx_##name(ibv_cq_ex* cq) {                     \
    const CqxState* s = cqx_rec(cq)->cqx_state;                          \
    return s->synth ? static_cast<type>(synth_value) : s->orig.name(cq); \
  }
UNLOAD_CQX_READ(ibv_wc_opcode, read_opcode, s->cur.opcode)
UNLOAD_CQX_READ(uint32_t, read_vendor_err, s->cur.vendor_err)
UNLOAD_CQX_READ(uint32_t, read_byte_len, s->cur.byte_len)
UNLOAD_CQX_READ(__be32, read_imm_data, s->cur.imm_data)
UNLOAD_CQX_READ(uint32_t, read_qp_num, s->cur.qp_num)
UNLOAD_CQX_READ(uint32_t, read_src_qp, s->cur.src_qp)
UNLOAD_CQX_READ(unsigned int, read_wc_flags, s->cur.wc_flags)
UNLOAD_CQX_READ(uint32_t, read_slid, s->cur.slid)
UNLOAD_CQX_READ(uint8_t, read_sl, s->cur.sl)
UNLOAD_CQX_READ(uint8_t, read_dlid_path_bits, s->cur.dlid_path_bits)
#undef UNLOAD_CQX_READ

// The fields a shim-made completion can answer (those an ibv_wc has); a CQ asking for more
// (timestamps, VLAN, flow tag, tag matching) keeps its QPs untracked (objects.cpp).
constexpr uint64_t kSynthFlags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM |
                                 IBV_WC_EX_WITH_SRC_QP | IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL |
                                 IBV_WC_EX_WITH_DLID_PATH_BITS;

bool cqx_flags_synthesisable(uint64_t wc_flags) {
  return (wc_flags & ~kSynthFlags) == 0;
}

// A completion of the shim's can be current only when the program asked for no field the
// shim cannot fill: every read_* the program may call is then the shim's (it replaced all
// the provider has, and the provider has those the program asked for).
bool cqx_can_synthesise(const CqRec* c) {
  const CqxState* s = c->cqx_state;
  return s && s->orig.start_poll && cqx_flags_synthesisable(s->wc_flags);
}

// The shim saves the CQ's own table here, then installs the unload_cqx_* entry points
// (all of start/next/end_poll and every read_* the provider has, or none).
extern "C" ibv_cq_ex* unload_cqx_provider(ibv_cq_ex* cqx) {
  CqRec* r = g_cqs.find(key_of(ibv_cq_ex_to_cq(cqx)));
  if (!r || !r->cqx) return nullptr;
  if (!r->cqx_state) {
    r->cqx_state = new (std::nothrow) CqxState{};
    if (!r->cqx_state) return nullptr;
    r->cqx_state->wc_flags = r->wc_flags;
  }
  return &r->cqx_state->orig;
}

void cqx_release(CqRec* r) {
  delete r->cqx_state;
  r->cqx_state = nullptr;
}

const Part g_cqx_part = {.cq_release = cqx_release};

}  // namespace unload::rt
