// The NIC's share of a post: a batch given to the provider, and its counts (nic_post.hpp).
#include "nic_post.hpp"

#include "busy.hpp"
#include "stats.hpp"
#include "tunables.hpp"

#include <atomic>

namespace unload::rt {

int Batch::give(ibv_send_wr** bad) {
  SendQueue& sq = q_->sq;
  sq.ring.publish(start_ + n_);
  busy_raise(q_);
  ibv_send_wr* bad_copy = nullptr;
  const int rc = q_->c->provider.post_send(q_->qp, copies_, &bad_copy);
  if (timed_) stamp_post_calls(q_, start_, start_ + static_cast<uint64_t>(n_));
  int posted = n_;
  if (rc) {
    posted = bad_copy ? static_cast<int>(bad_copy - copies_) : 0;
    if (posted < 0 || posted > n_) posted = 0;
    *bad = origin_[posted];
    rollback_refused(q_, start_ + static_cast<uint64_t>(posted));
    sq.stage.tail =
        posted ? sq.ring.at(start_ + static_cast<uint64_t>(posted) - 1)->stage_mark : stage_start_;
  }
  for (int i = 0; i < posted; ++i) {
    const SqEntry* e = sq.ring.at(start_ + static_cast<uint64_t>(i));
    count_why(why_[i]);  // before its write: both reach the counters page in one batch
    if (e->flags & kWrite) count_writes(static_cast<Path>(e->path), 1, e->length);
  }
  n_ = 0;
  timed_ = false;
  return rc;
}

void stamp_post_calls(QpRec* q, uint64_t from, uint64_t to) {
  const uint64_t end = now_ns();
  for (uint64_t i = from; i < to; ++i) {
    SqEntry* e = q->sq.ring.at(i);
    if (!e->post_ns || end <= e->post_ns) continue;
    const uint64_t took = end - e->post_ns;
    std::atomic_ref<uint32_t>(e->post_call_ns)
        .store(took < UINT32_MAX ? static_cast<uint32_t>(took) : UINT32_MAX, std::memory_order_relaxed);
  }
}

int post_routed(QpRec* q, const ibv_send_wr& w, const Route& rt, Why fallback) {
  Batch b(q);
  ibv_send_wr copy = w;
  copy.next = nullptr;
  ibv_send_wr* bad = nullptr;
  if (!b.add(&copy, rt, fallback)) return ENOMEM;
  return b.flush(&bad);
}

}  // namespace unload::rt
