// The express lane: the memo, its checks, and the write placed through the mapping.
#include "express.hpp"

#include <bit>
#include <cstddef>
#include <cstring>

#include "direct.hpp"
#include "kmod.hpp"
#include "mapped.hpp"
#include "registry.hpp"
#include "stats.hpp"
#include "tunables.hpp"

namespace unload::rt {

namespace {

// What direct_blocker, the list's checks and the fence found for q and may have changed
// without disarming the memo: the session (a forked child's is another), no failure,
// nothing in flight or posted around the ring (so no fence to wait and room in the queue).
[[gnu::always_inline]] inline bool direct_clear(const QpRec* q) {
  return q->peer.session == g_kmod.session && !q->failed.load(std::memory_order_acquire) &&
         send_queue_quiet(q->sq);
}

// Whether `w` is the memo's shape (lane_write_shape, its length, rkey and INLINE flag),
// from the memo's source region, while nothing else the memo depended on changed. The
// SGE count and the opcode, and an SGE's length and lkey, lie side by side: a word each.
[[gnu::always_inline]] inline bool lane_holds(const QpRec* q, const ExpressMemo& x, const ibv_send_wr& w) {
  static_assert(std::endian::native == std::endian::little);
  static_assert(offsetof(ibv_send_wr, opcode) == offsetof(ibv_send_wr, num_sge) + 4);
  static_assert(offsetof(ibv_sge, lkey) == offsetof(ibv_sge, length) + 4);
  constexpr uint64_t kOneSgeWrite = 1 | uint64_t{IBV_WR_RDMA_WRITE} << 32;
  uint64_t shape;
  std::memcpy(&shape, &w.num_sge, sizeof shape);
  if (w.next || shape != kOneSgeWrite ||
      (w.send_flags & ~(IBV_SEND_SIGNALED | IBV_SEND_SOLICITED)) != x.flags || w.wr.rdma.rkey != x.rkey)
    return false;
  const ibv_sge& sg = w.sg_list[0];
  uint64_t sge;
  std::memcpy(&sge, &sg.length, sizeof sge);
  if (((sge ^ x.sge_key) & x.sge_mask) != 0 || sg.addr - x.src_lo > x.src_span) return false;
  return memo_epoch() == x.epoch && tunables_seq() == x.tunables_seq && direct_clear(q);
}

}  // namespace

void express_arm(QpRec* q, const ibv_send_wr& w, const Route& rt) {
  ExpressMemo& x = q->express;
  x.armed.store(false, std::memory_order_relaxed);
  if (!lane_write_shape(w) || rt.path != Path::unload_mapped || rt.preferred != Path::unload_mapped ||
      rt.translated || g_windows.load(std::memory_order_relaxed) != 0)
    return;
  const int target = mapped_index_of(q, rt.req.rkey);
  if (target < 0) return;
  x.epoch = memo_epoch();  // before what it vouches for is looked at again (the module's words)
  if (!mapped_view_of(q, static_cast<uint32_t>(target), rt.req.length, x.view)) return;
  x.inline_data = rt.req.user_inline;
  x.flags = x.inline_data ? IBV_SEND_INLINE : 0;
  x.sge_key = rt.req.length;
  x.sge_mask = UINT32_MAX;
  x.src_lo = 0;
  x.src_span = UINT64_MAX;
  if (!x.inline_data) {
    SourceRegion s;
    if (!source_keep(q, w.sg_list[0], &s) || s.hi - s.lo < rt.req.length) return;
    x.sge_key |= uint64_t{s.lkey} << 32;
    x.sge_mask = UINT64_MAX;
    x.src_lo = s.lo;
    x.src_span = s.hi - s.lo - rt.req.length;
  }
  x.plain = rt.req.length >= kShortMin && rt.req.length <= kShortMax;
  x.target = static_cast<uint8_t>(target);
  x.length = rt.req.length;
  x.rkey = rt.req.rkey;
  x.tunables_seq = tunables_seq();
  x.eligible = rt.eligible;
  x.policy_gen = 0;  // another shape, perhaps: vouched for once reused again
  x.wc = placed_write_wc(0, x.length, q->qp_num);  // a write of this shape's, but its wr_id
  x.armed.store(true, std::memory_order_relaxed);
}

namespace {

// The memo's write to `remote_addr` as classify() would describe it.
WriteRequest lane_request(const ExpressMemo& x, uint64_t remote_addr, bool signaled) {
  return one_sge_write(x.inline_data, signaled, x.length, x.rkey, remote_addr);
}

// A completion queued while q's CQ may be armed: the marker's target is this write's.
[[gnu::noinline, gnu::cold]] void lane_wake(QpRec* q, const ExpressMemo& x, uint64_t remote_addr) {
  wake_armed(q, lane_request(x, remote_addr, true), nullptr);
}

// place_mapped_one for a reused decision's write, from the memo: its view, its count, its
// completion from the template, nothing timed. kPlain: as express_take_plainly found it,
// calling nothing (a short copy, a count that flushes nothing), and `wake` for a
// completion queued on an armed CQ, which the caller's express_wake wakes.
template <bool kPlain>
[[gnu::always_inline]] inline Express lane_place(QpRec* q, const ExpressMemo& x, const ibv_send_wr& w,
                                                 bool signaled) {
  CqRec* c = q->scq;
  const uint64_t addr = w.wr.rdma.remote_addr;
  uint64_t ticket = 0;
  // The completion's cell first: a full queue sends the write on to the module's copy.
  if (signaled && !c->pending.claim(ticket)) return Express::refused;
  if (!place_mapped_view<kPlain>(x.view, addr, reinterpret_cast<const void*>(w.sg_list[0].addr), x.length)) {
    if (signaled) c->pending.cancel(ticket);
    return Express::refused;
  }
  if constexpr (kPlain)
    count_express_write_plainly(x.length);
  else
    count_mapped_write(x.length, true);
  q->peer.last_rkey = x.rkey;
  q->peer.last_addr = addr;
  q->peer.has_last = true;
  if (!signaled) return Express::placed;
  ibv_wc& wc = c->pending.cell(ticket);
  copy_wc(wc, x.wc);
  wc.wr_id = w.wr_id;
  c->pending.publish(ticket);
  if (c->cq->channel) {  // else never armed (wake_after_queueing)
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (c->armed.load(std::memory_order_relaxed)) {
      if constexpr (kPlain)
        return Express::wake;
      else
        lane_wake(q, x, addr);
    }
  }
  return Express::placed;
}

}  // namespace

Express express_take_plainly(QpRec* q, const ibv_send_wr& w) {
  const ExpressMemo& x = q->express;
  if (!x.armed.load(std::memory_order_relaxed) || !lane_holds(q, x, w)) return Express::declined;
  if (!x.plain || count_calls_out() || !route_reuses_mapped_plainly(q, w.wr.rdma.remote_addr))
    return Express::held;
  return lane_place<true>(q, x, w, wr_signaled(q, w));
}

Express express_take(QpRec* q, const ibv_send_wr& w, const Tunables& t) {
  const ExpressMemo& x = q->express;
  if (!x.armed.load(std::memory_order_relaxed) || !lane_holds(q, x, w)) return Express::declined;
  return express_take_held(q, w, t);
}

Express express_take_held(QpRec* q, const ibv_send_wr& w, const Tunables& t) {
  // Not the reused decision (a sample is due, an observe ended the reuse, or a mode that
  // decides each write): express_route decides it.
  if (!route_reuses_mapped(q, w.wr.rdma.remote_addr, q->express.eligible, t)) return Express::decide;
  return lane_place<false>(q, q->express, w, wr_signaled(q, w));
}

void express_wake(QpRec* q, const ibv_send_wr& w) {
  lane_wake(q, q->express, w.wr.rdma.remote_addr);
}

bool express_route(QpRec* q, const ibv_send_wr& w, const Tunables& t, Express e, Route* rt) {
  const ExpressMemo& x = q->express;
  if (e == Express::refused) {  // the full path goes on as from route()
    rt->req = lane_request(x, w.wr.rdma.remote_addr, wr_signaled(q, w));
    rt->path = Path::unload_mapped;
    rt->preferred = Path::unload_mapped;
    rt->eligible = x.eligible;
    return false;
  }
  // Decided as the full path would, with nothing blocking direct (lane_holds) and from
  // route()'s own memo. Another path (the module's copy by cost, an exploration): the full
  // post takes it, and a translated source, which the memo's region rules out, the
  // gathering engine.
  *rt = route(q, w, t, Why::none);
  if (rt->path != Path::unload_mapped || rt->translated) return false;
  return place_mapped_one(q, w.sg_list, w.wr_id, *rt, x.target);
}

}  // namespace unload::rt
