// ibv_post_send (ops.post_send): every request gets a ring entry and a path; a write going
// direct leaves the list, the rest goes to the provider.
#include "internal.hpp"

namespace unload::rt {

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

namespace {

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

// Every write to the NIC as built (all_offload): the provider gets the program's list
// untouched, with no ring entries. Its completions carry the program's wr_ids, which the
// merger passes through (they are no tags of the ring), in the provider's order. A later
// direct write is ordered behind these requests by the marker the fence posts when
// `untracked` is set.
int post_send_untracked(QpRec* q, ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
  q->untracked = true;
  const int rc = q->c->post_send(qp, wr, bad);
  for (const ibv_send_wr* w = wr; w && !(rc && w == *bad); w = w->next) {
    if (w->opcode != IBV_WR_RDMA_WRITE && w->opcode != IBV_WR_RDMA_WRITE_WITH_IMM) continue;
    uint64_t len = 0;
    for (int i = 0; i < w->num_sge; ++i) len += w->sg_list[i].length;
    count_writes(Path::offload, 1, len);
  }
  return rc;
}

}  // namespace

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

int hook_post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
  QpRec* q = g_qps.find(key_of(qp));
  if (__builtin_expect(!q || !q->tracked, 0)) {
    ContextRec* c = q ? q->c : context_find(qp->context);
    return c->post_send(qp, wr, bad);
  }
  const Tunables& t = tunables();
  if (all_offload(t)) return post_send_untracked(q, qp, wr, bad);
  mark_tracked(q);
  if (direct_possible(q, t) && (!wr->next || list_locally_valid(q, wr))) return post_send_mixed(q, qp, wr, bad, t);
  return post_send_nic(q, qp, wr, bad);
}

}  // namespace unload::rt
