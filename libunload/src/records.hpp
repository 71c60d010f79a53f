// The runtime's private records of the verbs objects a program made through the shim, one
// struct per concern (docs/design.md, "Records"). The provider owns the verbs objects; a
// record is found through the lock-free tables in registry.hpp.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>
#include <mutex>

#include "gate.hpp"
#include "sq_ring.hpp"
#include "tables.hpp"
#include "tls.hpp"
#include "unload.h"
#include "unload/policy.hpp"
#include "unload/runtime.h"
#include "wc_queue.hpp"
#include "why.hpp"

namespace unload::rt {

using policy::Path;

extern unload_real_verbs g_real;

struct ContextRec {
  ibv_context* ctx;
  uint32_t id;                   // small and unique: keys the per-context tables
  unload_provider_ops provider;  // the provider's entry points the shim replaced
  // The provider drops a QP's completions from its CQs at destroy and at RESET (mlx5 does,
  // rxe does not): the shim drops its own queued ones for that QP alike.
  bool purges_cqes = false;
  // The program made a DEVX object: its QPs made from now on are not tracked (direct_verbs.hpp).
  std::atomic<bool> dv{false};
};

// unload.stage: a QP's staging arena, made at its first stage write (stage.hpp) and
// registered once on the QP's PD, used as a byte ring that completions free in order. The
// producer (the post gate's holder) owns `tail`, `base`, `mr` and `pd`; the consumer (the
// send CQ's gate holder) moves `head`.
struct StageRing {
  uint8_t* base = nullptr;  // nullptr: not made yet, or given back (stage_reclaim)
  ibv_mr* mr = nullptr;
  ibv_pd* pd = nullptr;  // where the arena is registered when it is made
  Gate* gate = nullptr;  // the send queue's: held to give the arena back
  uint32_t size = 0;     // the arena's size, made or not (0: the QP never stages)
  bool listed = false;   // in stage.cpp's list of made arenas
  uint64_t tail = 0;
  std::atomic<uint64_t> head{0};
};

// The send queue as the shim sees it. Verbs QPs are thread-safe: every poster enters
// `gate` (biased to the first poster, so a single-threaded program pays no atomic), which
// makes the ring, the stage ring's tail and `last_ordering` single-producer.
struct SendQueue {
  Gate gate;  // guards the producer side of everything below
  SqRing ring;
  StageRing stage;
  uint32_t max_inline = 0;  // the QP's real inline and SGE caps: what the provider accepts
  uint32_t max_sge = 0;
  uint32_t max_wr = 0;  // the send queue's depth as the program knows it
  bool sig_all = false;
  // Requests were posted around the ring (all_offload, or settled on the NIC), or polls
  // passed this QP's completions through (cq_hold): some may still be in flight, or an
  // error unseen, and no completion of the ring would say. The next fence posts a marker.
  std::atomic<bool> untracked{false};
  // In offload mode, a post passes straight to the provider (post.cpp, post_passing): its
  // requests go around the ring with `untracked` already set, the busy byte already raised
  // (it stays so while `untracked` is), no remote write in flight and no inline limit of the
  // shim's to hold. Set under the gate by an offload post; cleared under it by every tracked
  // post (mark_tracked) and before `untracked` is.
  std::atomic<bool> passing{false};
  // In the default mode, a QP the NIC lane took a write of when its thread's lane had taken
  // kSettledAfter writes in a row (post.cpp, post_settled):
  // its posts of signaled requests pass straight to the provider, inside the gate, around
  // the ring (`untracked` set when it settles, so a CPU-path write's fence posts a marker
  // for them), the policy consulted once in kSettledConsultEvery posts of a thread. Set
  // under the gate; cleared with `passing`. `settled_why`: the reason the lane counted for
  // its writes; `settled_path`: the lane's path, offload or inline (its lone writes from
  // the lane's source posted inline).
  std::atomic<bool> settled{false};
  Why settled_why = Why::none;
  Path settled_path = Path::offload;
  // Plain requests (post.cpp): signaled writes settled on the NIC, and signaled sends,
  // READs and atomics, posted as the program built them, with no ring entry. The poster
  // counts them, the merger their completions (and any other completion of the QP without
  // a tag that is not a receive's: done runs ahead of posted only past requests around the
  // ring, or a failure, and a marker's wait resyncs it). The fence waits for done to reach
  // posted.
  std::atomic<uint64_t> plain_posted{0};
  std::atomic<uint64_t> plain_done{0};
  uint64_t plain_ordering = 0;  // plain_posted after the newest plain READ or atomic
  uint64_t last_ordering = 0;  // ring seq + 1 of the newest READ or atomic
  uint64_t last_completing = 0;  // ring seq of the newest entry that yields a completion
  // kHeld: counted in the send CQ's `holders` (cq_hold), from its first tracked request
  // until it settles; the high half: the CQ's through_epoch when it last held nothing
  // (cq_release). One word, since a poller in the CQ's gate lets a settled QP's CQ go too
  // (poll.cpp, settled_let_go): whoever clears kHeld does, once. Set by the post gate.
  std::atomic<uint64_t> hold{0};
};

inline constexpr uint64_t kHeld = 1;

// Whether q's send CQ is held for it: a hint outside the CQ's gate (a poller may let it go).
[[gnu::always_inline]] inline bool cq_held(const SendQueue& sq) {
  return (sq.hold.load(std::memory_order_relaxed) & kHeld) != 0;
}

// Plain writes of q whose completions the merger has not passed yet.
[[gnu::always_inline]] inline uint64_t plain_in_flight(const SendQueue& sq) {
  const auto d = static_cast<int64_t>(sq.plain_posted.load(std::memory_order_relaxed) -
                                      sq.plain_done.load(std::memory_order_acquire));
  return d > 0 ? static_cast<uint64_t>(d) : 0;
}
inline bool plain_idle(const SendQueue& sq) {
  return plain_in_flight(sq) == 0;
}
// A plain READ or atomic may still be in flight: a fenced copy waits (route.cpp).
inline bool plain_ordering_pending(const SendQueue& sq) {
  return sq.plain_done.load(std::memory_order_acquire) < sq.plain_ordering;
}
// Every NIC request of q in flight that a completion will report: the ring's and the plain ones.
[[gnu::always_inline]] inline uint64_t nic_in_flight(const SendQueue& sq) {
  return sq.ring.in_flight() + plain_in_flight(sq);
}
// No NIC request in flight, counted or posted around the ring: a CPU-path write needs no fence.
[[gnu::always_inline]] inline bool send_queue_quiet(const SendQueue& sq) {
  return nic_in_flight(sq) == 0 && !sq.untracked.load(std::memory_order_relaxed);
}

// The direct path's view of the QP's connection (the kmod's UNLOAD_IOC_REG_QP), and what
// keeps it from trying where it cannot succeed. Producer side (post gate) only, except
// `failed`, which the merger sets.
struct PeerLink {
  bool registered = false;  // with the kmod (at RTS)
  uint32_t session = 0;     // ... by this session of the process's (Kmod::session)
  uint32_t handle = 0;      // the registration's handle: names the QP in direct requests
  bool local = false;       // destination GID is one of this host's
  // The remote path: the AV's port and destination GID (the module's channel goes there),
  // and what a probe of the channel said (0 not asked since the last registration, 1 up,
  // 2 none: the peer host runs no module or does not answer, 3 this host's module has no
  // channel key), with the module's count of channels come up when it was asked
  // (kmod_channels_up): a "none" or "no key" is stale once it moved.
  uint8_t port = 0;
  uint8_t channel = 0;
  uint64_t channels_seen = 0;
  ibv_gid dgid{};
  uint32_t flags = 0;       // UNLOAD_PEER_*
  uint32_t countdown = 0;   // writes until the pairing is asked for again
  uint32_t backoff = 0;
  uint32_t dest_qp_num = 0;
  uint64_t stuck_below = 0;  // a fence gave up: no direct until the ring's head passes this
  uint32_t last_rkey = 0;    // the newest direct write's target: a valid marker target
  uint64_t last_addr = 0;
  bool has_last = false;
  // Its byte in the busy page (busy.hpp): session << 32 | (slot + 1); 0 none. Read by
  // pollers too.
  std::atomic<uint64_t> busy{0};

  // The peer QP is on this host (the AV or the module says so): direct's, never remote's.
  bool on_this_host() const { return local || (flags & UNLOAD_PEER_LOCAL); }
};

// The region a memo's source SGE lay in when a route found it valid (its PD, bounds and
// CPU access): an SGE inside it is valid as found while the memo epoch has not moved (no
// region deregistered or re-registered since). source_keep and source_holds, registry.hpp.
struct SourceRegion {
  uint32_t lkey = 0;
  uint64_t epoch = 0;  // memo_epoch() when kept
  uint64_t lo = 0, hi = 0;
};

// Where the express lane copies a write of its memo's length (mapped.cpp fills it from
// the mapping the memo names; letting go of that mapping disarms the memo first).
struct MappedView {
  uintptr_t shift = 0;             // the mapping's address of remote address 0 (mod 2^64)
  uint64_t lo = 0;                 // the region's first remote address
  uint64_t span = 0;               // its length less the memo's: the last start allowed is lo + span
  const uint64_t* word = nullptr;  // the mapping's validity word, and its value while valid
  uint64_t cookie = 0;
  const uint8_t* busy = nullptr;  // the responder QP's busy byte
};

// The express lane's memo (express.hpp): a write shape the full route sent direct through
// a mapping, with what that answer depended on. Post gate. What it depended on beyond the
// QP (the stage arena, windows, the module, the source region) is the memo epoch's; what
// of the QP's peer link it depended on (registered, paired and not poisoned, on this host,
// no fence given up on) disarms it where that changes (a modify, an unpairing, a fence).
struct ExpressMemo {
  // Read by the post's front outside the gate (post.cpp): relaxed, the lane itself
  // looks again inside.
  std::atomic<bool> armed{false};
  bool inline_data = false;  // IBV_SEND_INLINE: no source region to check
  bool plain = false;        // 8 to 16 bytes: a copy with no call (express_take_plainly)
  uint8_t target = 0;        // the mapping's place in the QP's MappedSet
  // Where what the lane no longer checks changes: the full path arms it again.
  void disarm() { armed.store(false, std::memory_order_relaxed); }
  uint32_t length = 0;
  uint32_t rkey = 0;
  uint32_t tunables_seq = 0;
  uint32_t flags = 0;  // a write's flags but SIGNALED and SOLICITED: INLINE or none
  uint64_t epoch = 0;  // memo_epoch() when armed
  // The SGE's length and lkey as one word (express.cpp, lane_holds), the lkey masked off
  // when inline; where its address may start: src_lo up to src_lo + src_span, the source
  // region less the length (anywhere when inline).
  uint64_t sge_key = 0, sge_mask = 0;
  uint64_t src_lo = 0, src_span = 0;
  policy::PathSet eligible;
  // The adaptive policy whose settled decision a write of this shape was last reused
  // from, and that decision's generation (Policy::settled_gen(); 0: none): while both
  // hold, the next write of the shape needs only its target page compared.
  const policy::Policy* policy = nullptr;
  uint64_t policy_gen = 0;
  MappedView view;
  ibv_wc wc{};  // a placed write's completion but its wr_id
};

// The NIC lane's memo (nic_lane.hpp): the plain write the full path last gave the NIC by
// the adaptive policy's settled decision, with what that route read.
struct NicLaneMemo {
  bool armed = false;
  bool inline_data = false;      // IBV_SEND_INLINE: no source region to check
  bool stage_ok = false;         // stage_usable() then
  bool registered = false;       // the peer link's, then
  bool on_this_host = false;
  bool nic_outstanding = false;  // a NIC request of the QP was in flight (the policy's feature)
  Path path = Path::offload;     // offload or inline
  Path preferred = Path::offload;
  Why why = Why::none;         // route_why's input: why `path` is not `preferred`
  Why direct_why = Why::none;  // what kept the CPU paths off then (post.cpp, list_direct_why)
  uint32_t length = 0;
  uint32_t rkey = 0;
  uint32_t tunables_seq = 0;
  SourceRegion source;  // not inline
  policy::PathSet eligible;
  // As the express lane's: the policy and generation a write of the shape was last
  // reused at (0: none yet).
  const policy::Policy* policy = nullptr;
  uint64_t policy_gen = 0;
};

// What route() derives of a write before the policy's choice (route.cpp).
struct RouteShape {
  Path preferred = Path::offload;  // what the mode wants: direct or remote, or the forced path
  Why why = Why::none;             // not none: the NIC takes it before any choice (a window, its SGEs)
  policy::PathSet eligible = Path::offload;
  bool translated = false;        // an SGE names an iova other than its address
  bool direct_available = false;  // the direct path could take it
};

// The route's memo (route.cpp): the shape of a one-SGE write without a fence that route()
// derived in full, kept with what the derivation depended on, so that the next request of
// that shape is not derived again. Post gate.
struct RouteMemo {
  bool armed = false;
  bool inline_data = false;  // IBV_SEND_INLINE: no source region to check
  bool stage_ok = false;     // stage_usable() then
  bool registered = false;   // the QP's peer registered then (places_remote)
  bool on_this_host = false;  // ... on this host
  Why direct_why = Why::none;      // the caller's, which the shape depended on
  Why why_preferred = Why::none;   // why_not() for the preferred path
  uint32_t length = 0;
  uint32_t seen_length = 0;  // the length last derived: a shape is kept the second time in a row
  uint32_t tunables_seq = 0;
  SourceRegion source;  // not inline
  RouteShape shape;
};

struct CqRec;

struct QpRec {
  ibv_qp* qp;
  ContextRec* c;
  ibv_cq* send_cq;  // kept: the QP is gone when its record is freed
  ibv_cq* recv_cq;
  CqRec* scq;  // the send CQ's record (nullptr: not made through the shim)
  uint32_t qp_num;
  bool tracked;  // RC/UC: requests go through the ring
  // The state the program last moved the QP to (ibv_modify_qp): a hidden marker goes only
  // on a QP whose send queue will complete it.
  std::atomic<uint8_t> state{IBV_QPS_RESET};
  // The capacities the provider would report for the program's own request: at create,
  // and by ibv_query_qp (attr, init_attr).
  ibv_qp_cap shown{};
  ibv_qp_cap shown_query{};
  ibv_qp_cap shown_query_init{};
  bool roomy = false;  // made with more room than asked: ibv_query_qp says shown_query*
  // A completion of this send queue failed, or the program moved the QP to ERR: the NIC
  // flushes what follows, so nothing may be placed by the CPU until a reset.
  std::atomic<bool> failed{false};
  // Modifies of this QP under way that narrow what it takes as a responder (objects.cpp):
  // its busy byte stays up meanwhile (busy.hpp), so no peer writes through a mapping.
  std::atomic<uint32_t> narrowing{0};
  // The status of a hidden request that failed first, for the program's next flushed
  // completion of this QP (merge_entry). Consumer side: the send CQ's gate.
  ibv_wc_status carried = IBV_WC_SUCCESS;
  SendQueue sq;
  CqRec* rcq_held = nullptr;  // its receive CQ, when another than its send CQ: held for its life
  PeerLink peer;
  // The inbox of the thread whose policy last sampled one of its writes (learn.hpp): where
  // a thread without a policy of its own that merges the sample leaves it.
  std::atomic<struct Inbox*> learner{nullptr};
  struct QpxState* qpx = nullptr;  // the wr_* API's state (ibv_qp_ex QPs only)
  struct MappedSet* mapped = nullptr;  // the mapped engine's targets (mapped.cpp), post gate
  // Its remote writes in flight without waiting (remote_ring.cpp): set by its poster at the
  // first, read by anyone (a modify or destroy settles them first).
  std::atomic<struct RemoteQueue*> rq{nullptr};
  ExpressMemo express;
  NicLaneMemo nic_lane;
  RouteMemo route_memo;
};

// The QPs whose send CQ a CQ is, for completions that do not name their QP (some providers
// read the QP number of an ibv_cq_ex completion as 0). Copy-on-write: readers (inside the
// CQ's gate) load `list`; writers (under `mu`) publish a new array and keep the old ones to
// the CQ's end, since a reader may still be walking one.
struct SendQpList {
  struct Array {
    uint32_t n;
    Array* older;
    QpRec* qps[1];
  };
  std::atomic<Array*> list{nullptr};
  std::mutex mu;  // guards writers of `list` and the chain of old arrays
  int add(QpRec* q);
  void remove(QpRec* q);
  ~SendQpList();
};

// Hidden completions a CQ may have outstanding: half of the 32 entries the shim adds to
// every CQ (kCqRoom, objects.cpp), the rest being for markers.
constexpr int32_t kHiddenPerCq = 16;

struct CqRec {
  ibv_cq* cq;
  ibv_cq_ex* cqx;         // non-null for ibv_create_cq_ex CQs
  uint64_t wc_flags = 0;  // ... and what the program asked it for
  ContextRec* c;
  // Completions ready but not yet handed over: the direct path's (pushed by the posting
  // thread) and those the program's array had no room for.
  WcQueue pending;
  // Serialises the CQ's consumers: the rings have one consumer at a time, and a fence
  // polls from the posting thread while the program may poll from another.
  Gate gate;
  SendQpList send_qps;
  // A request of the shim's (a ring entry, a marker, a direct write's completion) may
  // reach this CQ: set once, before the first such request; until then polling passes the
  // provider's completions through.
  std::atomic<bool> tracked{false};
  // The program armed the CQ (not solicited-only) and no wake-up marker was posted since.
  std::atomic<bool> armed{false};
  // Completions the shim may still ask for on unsignaled requests (kHidden, direct.hpp):
  // taken at post, given back when merged, so they stay within the CQ room the shim added.
  std::atomic<int32_t> hidden_room{kHiddenPerCq};
  struct CqxState* cqx_state = nullptr;  // the ibv_cq_ex poll sequence (cqx CQs only)
  // The merger's last QP by number (g_qps_by_num, tables.hpp): a CQ's completions mostly
  // come from one QP in a row. Its consumer's, inside the gate.
  LastFound<QpRec> last_by_num;
  // Reached through vendor direct verbs: no QP on it is tracked (direct_verbs.hpp).
  std::atomic<bool> dv{false};
  // The QPs whose completions here need the merger: each send QP on it from its first
  // tracked request until it settles on the NIC (SendQueue::holds), and each tracked QP
  // whose receive CQ it is and whose send CQ is another. At 0, with nothing queued, polls
  // pass through again (poll.cpp, cq_go_through), and `through_epoch` moves first.
  std::atomic<uint32_t> holders{0};
  std::atomic<uint32_t> through_epoch{0};
};

struct MrRec {
  ibv_mr* mr;
  ibv_pd* pd;
  uint64_t addr;  // the process's virtual address
  uint64_t iova;  // the address requests use
  uint64_t length;
  int access;             // IBV_ACCESS_* it was registered with
  uint64_t kmod_handle;   // registered with the kmod as a direct-write target (0: not)
  bool nic_only = false;  // never a CPU path's source (nic_only.hpp)
};

inline uint64_t key_of(const void* p) {
  return reinterpret_cast<uintptr_t>(p);
}

// Whether a signaled write of q may go to the NIC as a plain write (post.cpp) as far as the
// QP goes: nothing around the ring and a ring whose newest entry reports its own
// completion (so every entry retires through the ring's completions), a send CQ the shim
// polls through the merger that counts plain completions (not an extended one).
inline bool plain_clear(const QpRec* q) {
  return q->scq && !q->scq->cqx && !q->sq.untracked.load(std::memory_order_relaxed) &&
         (q->sq.ring.in_flight() == 0 || q->sq.ring.last_signaled());
}

// q's completions on its send CQ need the merger: counted before the CQ's `tracked` is
// looked at (mark_tracked), so that a poller that clears `tracked` either sees the count
// on its second look or has its clear seen there (poll.cpp, cq_go_through). Polls that
// passed through while q held nothing may have passed a receive's error of q unmerged (its
// `failed` unset): its next CPU-path write's fence posts a marker, which would find it.
// Counted before kHeld is set, uncounted if another set it first, so that `holders` is
// never below the QPs with kHeld set: a poller holding q again (poll.cpp, settled_let_go)
// that finds kHeld just set by q's post must not see the CQ held by no one and pass q's
// writes in flight through unmerged. By the post gate, or by that poller in c's gate.
inline void cq_hold(QpRec* q) {
  SendQueue& sq = q->sq;
  if (cq_held(sq)) return;
  CqRec* c = q->scq;
  c->holders.fetch_add(1, std::memory_order_seq_cst);
  const uint64_t was = sq.hold.fetch_or(kHeld, std::memory_order_seq_cst);
  if (was & kHeld) {
    c->holders.fetch_sub(1, std::memory_order_release);
    return;
  }
  if (c->through_epoch.load(std::memory_order_seq_cst) != static_cast<uint32_t>(was >> 32) &&
      !sq.untracked.load(std::memory_order_relaxed))
    sq.untracked.store(true, std::memory_order_relaxed);
}
// q's completions need the merger no more (settled, or leaving the CQ's list): true when
// this call let the CQ go, false when it was not held (or another let it go first).
inline bool cq_release(QpRec* q) {
  CqRec* c = q->scq;
  const uint64_t free = uint64_t{c->through_epoch.load(std::memory_order_relaxed)} << 32;
  uint64_t h = q->sq.hold.load(std::memory_order_relaxed);
  do {
    if (!(h & kHeld)) return false;
  } while (!q->sq.hold.compare_exchange_weak(h, free, std::memory_order_seq_cst, std::memory_order_relaxed));
  c->holders.fetch_sub(1, std::memory_order_release);
  return true;
}

// A settled QP's send CQ is held for it no more once its ring is empty: only a tracked
// post adds to the ring, and it holds the CQ first (mark_tracked). Post gate.
inline void settled_release(QpRec* q) {
  if (q->sq.ring.in_flight() == 0) cq_release(q);
}

// The QP is settled no more. A poller may be letting its CQ go meanwhile (poll.cpp,
// settled_let_go): the hold's read-modify-write after the clear makes the clear seen by a
// let-go ordered after it, which holds the CQ again, and a let-go ordered before it seen
// by the post's own look at the hold (cq_hold), which counts it again. Post gate.
inline void unsettle(SendQueue& sq) {
  sq.settled.store(false, std::memory_order_relaxed);
  sq.hold.fetch_or(0, std::memory_order_seq_cst);
}

// What `passing` or `settled` stood on is about to change (a tracked post, `untracked` cleared).
inline void passing_end(QpRec* q) {
  if (q->sq.passing.load(std::memory_order_relaxed)) q->sq.passing.store(false, std::memory_order_relaxed);
  if (q->sq.settled.load(std::memory_order_relaxed)) unsettle(q->sq);
}

// Before a tracked request of q: its send CQ goes through the merger from now on (relaxed
// would do against the completion: the provider releases the request after it, and the
// poller acquires the completion before it looks; seq_cst against a poller's clear,
// cq_hold), and q's posts stop passing straight through.
[[gnu::noinline]] inline void mark_tracked_work(QpRec* q) {
  passing_end(q);
  if (!q->scq) return;
  cq_hold(q);
  if (!q->scq->tracked.load(std::memory_order_seq_cst))
    q->scq->tracked.store(true, std::memory_order_seq_cst);
}
// Its usual case inline, the same loads in the same order finding nothing to do: a post on
// a QP already tracked (the express lane's every write) calls nothing.
[[gnu::always_inline]] inline void mark_tracked(QpRec* q) {
  const SendQueue& sq = q->sq;
  if (__builtin_expect(!sq.passing.load(std::memory_order_relaxed) &&
                           !sq.settled.load(std::memory_order_relaxed) && q->scq && cq_held(sq) &&
                           q->scq->tracked.load(std::memory_order_seq_cst),
                       1))
    return;
  mark_tracked_work(q);
}

// Whether q's NIC write may be one the lane gives as built: plain (plain_clear), or, on a
// QP whose requests go around the ring (`untracked`: settled on the NIC), around it too,
// behind a ring whose entries retire through their own completions or a marker's.
inline bool lane_clear(const QpRec* q) {
  if (!q->sq.untracked.load(std::memory_order_relaxed)) return plain_clear(q);
  return q->scq && !q->scq->cqx && (q->sq.ring.in_flight() == 0 || q->sq.ring.last_signaled());
}

// The policy's feature: a NIC request of q may be in flight (counted, or around the ring).
inline bool nic_outstanding(const SendQueue& sq) {
  return nic_in_flight(sq) != 0 || sq.untracked.load(std::memory_order_relaxed);
}

// Scope of a gate: entered for the object's lifetime.
class GateScope {
 public:
  explicit GateScope(Gate& g) : g_(g), how_(g.enter(this_tid())) {}
  ~GateScope() { g_.leave(how_); }
  GateScope(const GateScope&) = delete;
  GateScope& operator=(const GateScope&) = delete;

 private:
  Gate& g_;
  bool how_;
};

}  // namespace unload::rt
