// The NIC's share of a post: requests the NIC carries (as built, inline or staged) handed
// to the provider as copies whose wr_ids are their ring entries' tags (docs/design.md,
// "A write's walk").
#pragma once

#include "hidden.hpp"
#include "request.hpp"
#include "stage.hpp"

namespace unload::rt {

// Requests handed to the provider per call: copies live on the stack, so a longer list goes
// in several calls, which is what the provider's own failure semantics allow (it stops at
// the first request it refuses, having posted the ones before).
constexpr int kChunk = 32;

// Copies of the program's requests for the provider, with their ring entries. The caller
// places the QP's remote writes in flight first (remote_settle_if_pending): a NIC write
// may not pass them.
class Batch {
 public:
  explicit Batch(QpRec* q) : q_(q) {}

  bool full() const { return n_ == kChunk; }
  bool empty() const { return n_ == 0; }

  // Adds `w` on its routed path (`fallback`: why a direct route did not run). false when
  // the ring is full (the send queue is too).
  bool add(ibv_send_wr* w, const Route& rt, Why fallback = Why::none) {
    SendQueue& sq = q_->sq;
    if (n_ == 0) {
      // A fence's marker may have taken entries since the last flush.
      start_ = sq.ring.tail();
      stage_start_ = sq.stage.tail;
    }
    SqEntry* e = sq.ring.reserve(start_ + static_cast<uint64_t>(n_));
    if (!e) return false;
    const WriteRequest& r = rt.req;
    ibv_send_wr& c = copies_[n_];
    c = *w;
    c.next = nullptr;
    Path p = rt.path;
    if (p == Path::unload_stage && !stage_copy(sq.stage, e, w->sg_list, r.sge_count, r.length))
      p = Path::offload;
    if (p == Path::unload_stage) {
      c.sg_list = &e->stage_sge;
      c.num_sge = 1;
    } else {
      e->stage_mark = sq.stage.tail;
    }
    if (p == Path::unload_inline) c.send_flags |= IBV_SEND_INLINE;
    why_[n_] = route_why(rt, p, fallback);
    e->user_wr_id = w->wr_id;
    e->post_ns = rt.t0;
    e->post_call_ns = 0;
    timed_ |= rt.t0 != 0;
    e->remote_addr = r.remote_addr;
    e->length = r.length;
    e->rkey = r.rkey;
    e->sge_count = static_cast<uint16_t>(r.sge_count);
    e->path = static_cast<uint8_t>(p);
    const bool ordering = is_ordering(w->opcode);
    // An unsignaled request may carry a completion the program never sees (direct.hpp).
    const bool hidden = !r.signaled && take_hidden_signal(q_, e->seq, rt.t0 != 0);
    if (hidden) c.send_flags |= IBV_SEND_SIGNALED;
    if (r.signaled || hidden) note_completing(q_, e->seq);
    e->flags = static_cast<uint8_t>((r.signaled ? kSignaled : 0) | (hidden ? kHidden : 0) |
                                    (r.is_write ? kWrite : 0) | (ordering ? kOrdering : 0));
    if (ordering) sq.last_ordering = e->seq + 1;  // a fenced write later in this list sees it
    c.wr_id = sq.ring.tag_of(e);
    if (n_) copies_[n_ - 1].next = &c;
    origin_[n_++] = w;
    return true;
  }

  // Gives the copies to the provider. 0, or its errno with *bad the program's request it
  // refused (the ones before it were posted); the refused ones' entries are forgotten.
  // Inline: a direct write flushes an empty batch twice, and the call was a tenth of its
  // instructions in the shim.
  int flush(ibv_send_wr** bad) { return n_ ? give(bad) : 0; }

 private:
  [[gnu::noinline]] int give(ibv_send_wr** bad);

  QpRec* q_;
  uint64_t start_ = 0;        // ring tail when the first copy was added
  uint64_t stage_start_ = 0;  // stage tail then
  int n_ = 0;
  bool timed_ = false;  // a request carries a policy timestamp (adaptive)
  ibv_send_wr copies_[kChunk];
  ibv_send_wr* origin_[kChunk];
  Why why_[kChunk];  // counted once posted
};

// Adaptive: how long each timed request of ring positions [from, to) took to post, its
// policy decision to the provider's return, where a software NIC (rxe) does the NIC's work
// on this thread; observe() counts it as time the program spent on the NIC path (its CPU
// budget waives it). A poller on another thread may merge an entry before it is stamped,
// and then counts no post time: the value is advisory, hence relaxed. The entries cannot
// be reused meanwhile: that takes a poster, and this thread holds the post gate.
void stamp_post_calls(QpRec* q, uint64_t from, uint64_t to);

// Inside q's post gate: posts the lone request w on the path already routed, as a batch of
// its own (`fallback`: why a CPU route did not run). 0 or a positive errno, like the
// provider. The caller settled the QP's remote writes.
int post_routed(QpRec* q, const ibv_send_wr& w, const Route& rt, Why fallback);

}  // namespace unload::rt
