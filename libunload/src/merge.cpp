// The completion merger.
#include "merge.hpp"

#include "busy.hpp"
#include "hidden.hpp"
#include "learn.hpp"
#include "registry.hpp"
#include "stage.hpp"

#include <atomic>

namespace unload::rt {

SqEntry* tagged_entry(CqRec* c, uint32_t qpn, uint64_t wr_id, QpRec** q) {
  if (QpRec* by_num = find_through(g_qps_by_num, c->last_by_num, qpn_key(c->c, qpn))) {
    *q = by_num;
    return by_num->sq.ring.entry_of_tag(wr_id);
  }
  // No QP of that number in this context: the provider did not give the number.
  const SendQpList::Array* a = c->send_qps.list.load(std::memory_order_acquire);
  for (uint32_t i = 0; a && i < a->n; ++i)
    if (SqEntry* e = a->qps[i]->sq.ring.entry_of_tag(wr_id)) {
      *q = a->qps[i];
      return e;
    }
  return nullptr;
}

bool merge_entry(QpRec* q, SqEntry* e, ibv_wc_status* st, uint64_t* wr_id) {
  const ibv_wc_status status = *st;
  stage_release(q->sq.stage, *e);
  if ((e->flags & (kHidden | kMarker)) == kHidden && q->scq)
    q->scq->hidden_room.fetch_add(1, std::memory_order_relaxed);  // direct.hpp, take_hidden_signal
  if (status == IBV_WC_SUCCESS) {
    if (e->post_ns)
      observe(q, static_cast<Path>(e->path), e->length, e->sge_count, e->rkey, e->remote_addr, e->post_ns,
              std::atomic_ref<uint32_t>(e->post_call_ns).load(std::memory_order_relaxed));
  } else if (!q->failed.load(std::memory_order_relaxed)) {
    q->failed.store(true, std::memory_order_release);
  }
  *wr_id = e->user_wr_id;
  const bool visible = !((e->flags & kMarker) || ((e->flags & kHidden) && status == IBV_WC_SUCCESS));
  if (!visible && status != IBV_WC_SUCCESS && status != IBV_WC_WR_FLUSH_ERR) {
    q->carried = status;
  } else if (visible && status == IBV_WC_WR_FLUSH_ERR && q->carried != IBV_WC_SUCCESS) {
    *st = q->carried;
    q->carried = IBV_WC_SUCCESS;
  }
  return visible;
}

namespace {

// n completions of tracked QP q that name no entry were handed over (or queued): its plain
// count grows, and its busy byte may drop. An atomic add: a receive's error may be merged
// on the QP's receive CQ, under another gate.
void plain_completed(QpRec* q, uint64_t n) {
  q->sq.plain_done.fetch_add(n, std::memory_order_release);
  busy_settle(q);
}

// A completion of tracked QP q that names no entry: a plain request's (post.cpp), a
// receive's error, or one of a request posted around the ring. Any error means the QP went to
// ERR (RC and UC), as a failed entry's does; an error's opcode is undefined, so it counts
// as done whatever it completed.
void merge_untagged(QpRec* q, const ibv_wc& wc) {
  const bool error = wc.status != IBV_WC_SUCCESS;
  if (error && !q->failed.load(std::memory_order_relaxed)) q->failed.store(true, std::memory_order_release);
  plain_completed(q, 1);
}

}  // namespace

void merge_wc(CqRec* c, Emitter& em, ibv_wc& wc) {
  // A receive that succeeded is the program's as it is, and nothing of a send queue's
  // (a receive's error may be a flushed QP's: the lookup below sees it).
  if (wc.status == IBV_WC_SUCCESS && (wc.opcode & IBV_WC_RECV)) {
    em.emit(wc);
    return;
  }
  QpRec* q = nullptr;
  SqEntry* e = tagged_entry(c, wc.qp_num, wc.wr_id, &q);
  if (!e) {
    em.emit(wc);
    if (q && q->tracked) merge_untagged(q, wc);  // after the emit, as a retire is (below)
    return;
  }
  if (merge_entry(q, e, &wc.status, &wc.wr_id)) em.emit(wc);
  // Only now: a direct write of q's fence waits for this retire, then queues its completion
  // on the CQ. Retired before the emit, this one could be queued behind it (mt_post, 4 QPs
  // with empty writes on the NIC between direct ones: 273 of 1600 out of order).
  q->sq.ring.retire_through(e);
  busy_settle(q);
  if (q->sq.settled.load(std::memory_order_relaxed) && q->sq.ring.in_flight() == 0) [[unlikely]]
    em.drained = q;
}

// Looked at after the poll: a request whose completion is at hand published its ring entry,
// or claimed its pending cell, before the provider took it, so a ring or queue seen empty
// now held nothing of the shim's ahead of these completions. An error takes the merger's
// way: it records the failure and may carry a hidden request's cause.
bool merge_quiet(CqRec* c, const ibv_wc* wc, int r) {
  if (!c->pending.idle()) return false;
  QpRec* q = nullptr;  // the one QP whose send completions these are
  uint64_t sends = 0;
  for (int i = 0; i < r; ++i) {
    if (wc[i].status != IBV_WC_SUCCESS) return false;
    if (wc[i].opcode & IBV_WC_RECV) continue;
    if (!q) {
      q = find_through(g_qps_by_num, c->last_by_num, qpn_key(c->c, wc[i].qp_num));
      if (!q || q->sq.ring.in_flight() != 0) return false;
    } else if (wc[i].qp_num != q->qp_num) {
      return false;
    }
    ++sends;
  }
  if (sends && q->tracked) plain_completed(q, sends);  // as merge_untagged counts them
  return true;
}

int poll_provider_into_pending(CqRec* c) {
  ibv_wc wc[16];
  const uint32_t room = c->pending.room();
  const int want = room < 16 ? static_cast<int>(room) : 16;
  if (want <= 0) return 0;
  const int r = c->c->provider.poll_cq(c->cq, want, wc);
  Emitter em{c, nullptr, 0, 0, 0};
  for (int i = 0; i < r; ++i) merge_wc(c, em, wc[i]);
  return r < 0 ? 0 : r;
}

}  // namespace unload::rt
