// The route of a request: classification, eligibility, then the mode, a forced path
// (UNLOAD_PATH) or the thread's policy.
#include "route.hpp"

#include "busy.hpp"
#include "cq_ex.hpp"
#include "kmod.hpp"
#include "mapped.hpp"
#include "nic_only.hpp"
#include "registry.hpp"
#include "stage.hpp"
#include "tls.hpp"
#include "unload.h"

#include <unistd.h>

#include <new>

namespace unload::rt {

using policy::Mode;
using policy::PathSet;

namespace {

UNLOAD_TLS_HOT constinit thread_local policy::Policy* t_policy = nullptr;
// When this thread's current run of empty ibv_poll_cq calls began; 0 when its last poll
// found something. What a completion arrives after of it is time the program spent
// busy-polling for the NIC, which adaptive's CPU budget does not charge (policy.hpp).
UNLOAD_TLS_HOT constinit thread_local uint64_t t_spin_since = 0;

// nullptr only when it cannot be allocated: the caller then takes the NIC.
policy::Policy* thread_policy() {
  if (__builtin_expect(t_policy != nullptr, 1)) return t_policy;
  t_policy = new (std::nothrow) policy::Policy(static_cast<uint64_t>(gettid()) * 0x9E3779B97F4A7C15ull + 1);
  __atomic_store_n(&thread_stats().adaptive, t_policy, __ATOMIC_RELEASE);  // its statistics, at exit
  return t_policy;
}

// Without a clock (now_ns 0): the route reads one only when the policy asks.
policy::WriteFeatures features_of(const QpRec* q, uint32_t length, uint32_t sge_count, uint32_t rkey,
                                  uint64_t remote_addr, PathSet eligible) {
  // Every field named, so no zeroing first: GCC zeroes a value-initialised one with
  // `rep stos`, which TCG runs a word at a time on every write.
  return policy::WriteFeatures{.length = length,
                               .sge_count = sge_count,
                               .rkey = rkey,
                               .remote_addr = remote_addr,
                               .now_ns = 0,
                               .eligible = eligible,
                               .peer_local = q->peer.local,
                               .nic_outstanding = nic_in_flight(q->sq) != 0};
}

// IBV_SEND_FENCE: the write waits for the QP's earlier READs and atomics, so a payload
// copied now (inline, stage) could miss what a READ still brings into the source.
bool fence_blocks_copy(const QpRec* q, const WriteRequest& r) {
  return r.fence && q->sq.last_ordering > q->sq.ring.head();
}

// Within direct_max (the module's cap for both), one channel message and the module's SGEs.
bool remote_size_ok(const WriteRequest& r, const Tunables& t) {
  return r.length != 0 && r.length <= t.direct_max && r.length <= UNLOAD_REMOTE_MAX_LEN &&
         r.sge_count <= UNLOAD_MAX_IOV;
}

}  // namespace

Why sges_why(const QpRec* q, const ibv_sge* sg, uint32_t n, bool* translated) {
  Why why = Why::none;  // region, which the NIC fails, wins over nic_memory, which it takes
  for (uint32_t i = 0; i < n; ++i) {
    if (sg[i].length == 0) continue;
    const MrRec* m = g_mrs.find(lkey_key(q->c, sg[i].lkey));
    if (!m || m->pd != q->qp->pd) return Why::region;
    if (sg[i].addr < m->iova || sg[i].addr + sg[i].length > m->iova + m->length ||
        sg[i].addr + sg[i].length < sg[i].addr)
      return Why::region;
    if (m->nic_only) why = Why::nic_memory;
    if (m->iova != m->addr) *translated = true;
  }
  return why;
}

bool window_rkey(const QpRec* q, uint32_t rkey) {
  return g_windows.load(std::memory_order_relaxed) != 0 &&
         g_mws.find(mw_key(q->qp->context, rkey)) != nullptr;
}

void sges_translate(const QpRec* q, const ibv_sge* sg, uint32_t n, ibv_sge* out) {
  for (uint32_t i = 0; i < n; ++i) {
    out[i] = sg[i];
    if (sg[i].length == 0) continue;
    if (const MrRec* m = g_mrs.find(lkey_key(q->c, sg[i].lkey)))
      out[i].addr = m->addr + (sg[i].addr - m->iova);
  }
}

bool all_offload(const Tunables& t) {
  Path forced;
  if (forced_path(forced)) return !t.enabled || forced == Path::offload;
  return !t.enabled || t.mode == static_cast<uint32_t>(Mode::offload);
}

Why direct_blocker(QpRec* q, const Tunables& t) {
  if (q->qp->qp_type != IBV_QPT_RC) return Why::not_rc;
  if (!t.enabled || t.direct_max == 0) return Why::path_off;
  if (!kmod_present()) return Why::no_module;
  if (t.mode == static_cast<uint32_t>(Mode::offload)) return Why::policy;
  // A registration of an earlier session (the parent's, in a forked child) is not this one's.
  if (!q->peer.registered || q->peer.session != g_kmod.session) return Why::unregistered;
  PeerLink& p = q->peer;
  if (p.flags & UNLOAD_PEER_POISONED)
    return Why::poisoned;  // a request of the pair failed a check: never again
  if (!(p.flags & UNLOAD_PEER_PAIRED)) {
    if (!(p.flags & UNLOAD_PEER_LOCAL)) return Why::remote_peer;
    if (--p.countdown != 0) return Why::unpaired;
    p.backoff = p.backoff < (1u << 16) ? p.backoff * 2 : p.backoff;
    p.countdown = p.backoff;
    uint32_t flags = 0, handle = 0, slot = 0;
    if (kmod_reg_qp(q->qp->context, q->qp_num, &flags, &handle, &slot) == 0) {
      p.flags = flags;
      p.handle = handle;
      busy_attach(q, slot);
    }
    if (p.flags & UNLOAD_PEER_POISONED) return Why::poisoned;
    if (!(p.flags & UNLOAD_PEER_PAIRED)) return Why::unpaired;
  }
  if (q->failed.load(std::memory_order_relaxed)) return Why::qp_error;
  if (q->sq.ring.head() < q->peer.stuck_below) return Why::queue;
  const CqRec* c = q->scq;
  return c && (!c->cqx || cqx_can_synthesise(c)) ? Why::none : Why::cq;
}

namespace {

// Why `r` cannot take `p` here; policy when it could (the mode or the policy chose).
// Only for writes off their preferred path, so its lookups cost nothing on the fast path.
Why why_not(const QpRec* q, const WriteRequest& r, const ibv_sge* sg, Path p, const Tunables& t,
            Why direct_why, bool copy_ok) {
  switch (p) {
    case Path::unload_inline:
      if (t.inline_max == 0) return Why::path_off;
      if (!copy_ok) return Why::fence;
      if (r.length > q->sq.max_inline || r.length > t.inline_max) return Why::size;
      break;
    case Path::unload_stage:
      if (!kmod_present()) return Why::no_module;
      if (t.stage_max == 0) return Why::path_off;
      if (!copy_ok) return Why::fence;
      if (!stage_usable(q->sq.stage)) return Why::no_room;
      if (r.length == 0 || r.length > q->sq.stage.size / 4 || r.length > t.stage_max) return Why::size;
      break;
    case Path::unload_direct:
    case Path::unload_mapped:
      if (r.with_imm) return Why::with_imm;
      if (direct_why != Why::none) return direct_why;
      if (r.length == 0 || r.length > t.direct_max || r.sge_count > UNLOAD_MAX_IOV) return Why::size;
      if (p == Path::unload_mapped && !mapped_enabled()) return Why::path_off;
      break;
    case Path::unload_remote:
      if (r.with_imm) return Why::with_imm;
      if (direct_why != Why::none) return direct_why;
      if (q->peer.on_this_host()) return Why::local_peer;
      if (!remote_size_ok(r, t)) return Why::size;
      break;
    default:
      return Why::none;
  }
  if (r.user_inline) return Why::policy;  // no lkey to judge: the NIC checks none for inline data
  bool translated = false;
  if (r.length != 0)
    if (const Why w = sges_why(q, sg, r.sge_count, &translated); w != Why::none) return w;
  return translated && !policy::places_here(p) && p != Path::unload_remote ? Why::region : Why::policy;
}

// A sample a thread without a policy measured (observe()): this poster's policy learns it.
void learn_boxed(QpRec* q, policy::Policy* pol) {
  SampleBox& b = q->sample;
  const uint32_t s0 = b.seq.load(std::memory_order_acquire);
  uint64_t w[6];
  for (int i = 0; i < 6; ++i) w[i] = b.w[i].load(std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);
  if ((s0 & 1) || b.seq.load(std::memory_order_relaxed) != s0) return;  // being written: next time
  b.learnt = s0;
  const auto p = static_cast<Path>(w[0] & 0xFF);
  const policy::WriteFeatures f =
      features_of(q, static_cast<uint32_t>(w[0] >> 32), static_cast<uint32_t>((w[0] >> 8) & 0xFFFFFF),
                  static_cast<uint32_t>(w[1]), w[2], PathSet::all());
  pol->observe(p, f, w[3], w[5], w[4]);
}

// What adaptive weighed when it kept a write off a path it could take.
Why adaptive_why(policy::Policy::Reason reason) {
  switch (reason) {
    case policy::Policy::Reason::cold:
      return Why::cold;
    case policy::Policy::Reason::exploring:
      return Why::exploring;
    case policy::Policy::Reason::budget:
      return Why::budget;
    case policy::Policy::Reason::cost:
      break;
  }
  return Why::cost;
}

}  // namespace

namespace {

// places_remote, for a caller that has read the forced path already.
bool places_remote(const QpRec* q, bool is_forced, Path forced) {
  return is_forced ? forced == Path::unload_remote : q->peer.registered && !q->peer.on_this_host();
}

}  // namespace

bool places_remote(const QpRec* q) {
  Path forced;
  const bool is_forced = forced_path(forced);
  return places_remote(q, is_forced, forced);
}

namespace {

// The shape of `r` derived in full: what route() knows before the policy chooses.
RouteShape shape_of(QpRec* q, const WriteRequest& r, const ibv_sge* sg, const Tunables& t, Why direct_why,
                    bool is_forced, Path forced) {
  RouteShape s;
  // Forced remote, or a ranking mode's peer on another host: `direct_why` is what keeps
  // the caller from a remote write (remote_blocker); direct is not offered (its peer would
  // be on this host).
  const bool want_remote = places_remote(q, is_forced, forced);
  // A peer here: the mapped path while it is on (UNLOAD_MAPPED), the cheaper by
  // construction; a write the policy gives the module's copy instead says why.
  const bool mapped_on = mapped_enabled();
  s.preferred = is_forced     ? forced
                : want_remote ? Path::unload_remote
                : mapped_on   ? Path::unload_mapped
                              : Path::unload_direct;
  if (s.preferred == Path::offload) return s;
  // A window's binding is the NIC's to check, in the order of the QP's requests.
  if (window_rkey(q, r.rkey)) {
    s.why = Why::window;
    return s;
  }
  // More SGEs than the QP takes: the provider refuses it at post, so must the CPU paths.
  if (r.sge_count > q->sq.max_sge) {
    s.why = Why::size;
    return s;
  }
  const bool copy_ok = !fence_blocks_copy(q, r);
  const bool placeable = direct_why == Why::none && (!want_remote || !q->peer.on_this_host());
  PathContext pc;
  if (r.user_inline) {
    // One buffer the provider would accept inline, read by the module at post time.
    const bool fits = placeable && r.sge_count == 1 && r.length != 0 && r.length <= q->sq.max_inline &&
                      r.length <= UNLOAD_MAX_INLINE;
    pc.direct_available = fits && !want_remote;
    pc.mapped_available = pc.direct_available && mapped_on;
    pc.remote_available = fits && want_remote && remote_size_ok(r, t);
  } else {
    pc.max_inline = copy_ok ? q->sq.max_inline : 0;
    pc.direct_available = placeable && !want_remote && r.length != 0 && r.sge_count <= UNLOAD_MAX_IOV;
    pc.mapped_available = pc.direct_available && mapped_on;
    pc.remote_available = placeable && want_remote && remote_size_ok(r, t);
    // Asked only where the choice may take it: a path forced elsewhere is taken or falls to
    // the NIC whatever staging could do.
    pc.stage_available = (!is_forced || forced == Path::unload_stage) && copy_ok && r.length != 0 &&
                         r.length <= q->sq.stage.size / 4 && stage_usable(q->sq.stage);
    pc.sges_valid =
        (r.length <= pc.max_inline || pc.direct_available || pc.remote_available || pc.stage_available) &&
        sges_valid(q, sg, r.sge_count, &s.translated);
  }
  if (s.translated) {  // the copies read process addresses: only direct and remote translate
    pc.max_inline = 0;
    pc.stage_available = false;
  }
  s.eligible = eligible_paths(r, pc);
  s.direct_available = pc.direct_available;  // mapped is only where direct is
  return s;
}

// A request the memo may stand for: a write of one SGE with no fence (whose copies would
// depend on the QP's READs in flight) and no immediate.
bool memo_shape(const WriteRequest& r) {
  return r.is_write && !r.with_imm && !r.fence && r.sge_count == 1;
}

// Whether the memo's shape is r's: the same kind and length, the same source region (none
// deregistered since), and everything else shape_of() read unchanged: the caller's
// blocker, the tunables, no memory window, the peer, the stage arena. What the memo
// leaves out, shape_of() read only for other shapes or never changes for a QP (its
// inline and SGE caps, its arena's size).
bool memo_holds(const QpRec* q, const RouteMemo& x, const WriteRequest& r, const ibv_sge* sg, Why direct_why) {
  if (!x.armed || !memo_shape(r) || r.length != x.length || r.user_inline != x.inline_data ||
      direct_why != x.direct_why || tunables_seq() != x.tunables_seq ||
      g_windows.load(std::memory_order_relaxed) != 0 || q->peer.registered != x.registered ||
      q->peer.on_this_host() != x.on_this_host)
    return false;
  if (!x.inline_data && !source_holds(x.source, sg[0])) return false;
  return stage_usable(q->sq.stage) == x.stage_ok;
}

// After a full derivation: keeps its shape when r is of a kind the memo stands for, the
// second of its length in a row (so a program whose lengths vary does not pay the keeping
// on every write), with no window and, unless inline, a source region the derivation found.
void memo_keep(QpRec* q, RouteMemo& x, const WriteRequest& r, const ibv_sge* sg, const Tunables& t,
               Why direct_why) {
  x.armed = false;
  if (!memo_shape(r) || x.shape.why != Why::none) return;
  if (r.length != x.seen_length) {
    x.seen_length = r.length;
    return;
  }
  if (g_windows.load(std::memory_order_relaxed) != 0) return;
  x.inline_data = r.user_inline;
  if (!x.inline_data && !source_keep(q, sg[0], &x.source)) return;
  x.stage_ok = stage_usable(q->sq.stage);
  x.registered = q->peer.registered;
  x.on_this_host = q->peer.on_this_host();
  x.direct_why = direct_why;
  x.length = r.length;
  x.tunables_seq = tunables_seq();
  x.why_preferred = why_not(q, r, sg, x.shape.preferred, t, direct_why, true);
  x.armed = true;
}

}  // namespace

Route route(QpRec* q, const WriteRequest& r, const ibv_sge* sg, const Tunables& t, Why direct_why) {
  Route out;
  out.req = r;
  Path forced;
  const bool is_forced = forced_path(forced);
  if (!t.enabled || !r.is_write || (!is_forced && t.mode == static_cast<uint32_t>(Mode::offload))) return out;
  RouteMemo& x = q->route_memo;
  if (!memo_holds(q, x, r, sg, direct_why)) {
    x.shape = shape_of(q, r, sg, t, direct_why, is_forced, forced);
    memo_keep(q, x, r, sg, t, direct_why);
  }
  const RouteShape& s = x.shape;
  out.preferred = s.preferred;
  out.why = s.why;
  out.translated = s.translated;
  if (s.preferred == Path::offload || s.why != Why::none) return out;
  const PathSet eligible = s.eligible;
  out.eligible = eligible;
  const policy::Policy* adaptive_pol = nullptr;  // when adaptive decided: it says why
  if (is_forced) {
    out.path = eligible.contains(forced) ? forced : Path::offload;
  } else if (eligible != PathSet(Path::offload)) {
    if (policy::Policy* pol = thread_policy()) {
      const bool adaptive = t.mode == static_cast<uint32_t>(Mode::adaptive);
      policy::WriteFeatures f = features_of(q, r.length, r.sge_count, r.rkey, r.remote_addr, eligible);
      if (adaptive) adaptive_pol = pol;
      // A settled write is the policy's one branch: no clock, no sample. A sample a
      // completion thread left in the box waits for the next full decision (at most
      // kSteadySampleEvery writes).
      out.reused = adaptive && pol->decide_reused(f, t, out.path);
      if (!out.reused) {
        // Adaptive times only the writes it samples (policy.hpp, kSampleEvery), from the
        // clock its decision read when it asked for one (it does before a periodic
        // sample), else from after the decision: a clock read costs more than a decision
        // under an emulator, and the decision's own tens of ns weigh the same on every path.
        if (q->sample.seq.load(std::memory_order_acquire) != q->sample.learnt) [[unlikely]]
          learn_boxed(q, pol);
        if (adaptive && pol->wants_clock()) f.now_ns = now_ns();
        out.path = adaptive ? pol->decide_unreused(f, t) : pol->decide(f, t);
        if (adaptive && pol->sampled()) out.t0 = f.now_ns ? f.now_ns : now_ns();
      }
    }
  }
  if (out.path != out.preferred) {
    if (r.user_inline && out.path == Path::offload && !s.direct_available)
      out.why = Why::program_inline;
    else
      out.why = x.armed ? x.why_preferred : why_not(q, r, sg, out.preferred, t, direct_why, !fence_blocks_copy(q, r));
    if (out.why == Why::policy && adaptive_pol) out.why = adaptive_why(adaptive_pol->reason());
  }
  return out;
}

bool route_reuses_mapped(QpRec* q, const WriteRequest& r, PathSet eligible, const Tunables& t) {
  ExpressMemo& x = q->express;
  policy::Policy* pol = t_policy;
  // The express lane checked the shape, the tunables' sequence and a quiet send queue
  // against its memo: what the policy compared when it reused this shape's last write.
  // (The peer's locality is the QP's from its move to RTR on.)
  Path vouched;
  if (x.policy == pol && pol && pol->decide_reused_vouched(x.policy_gen, r.remote_addr >> policy::kTargetPageShift, vouched))
    return true;
  Path forced;
  if (forced_path(forced)) return forced == Path::unload_mapped;
  if (!pol || t.mode != static_cast<uint32_t>(Mode::adaptive)) return false;
  if (!pol->decide_reused_as(features_of(q, r.length, r.sge_count, r.rkey, r.remote_addr, eligible), t,
                             Path::unload_mapped))
    return false;
  x.policy = pol;
  x.policy_gen = pol->settled_gen();
  return true;
}

bool route_reuses_nic(QpRec* q, NicLaneMemo& x, const WriteRequest& r, const Tunables& t) {
  policy::Policy* pol = t_policy;
  Path forced;
  if (!pol || forced_path(forced) || t.mode != static_cast<uint32_t>(Mode::adaptive)) return false;
  Path vouched;
  // The generation is set only once a reuse of x.path matched it: the vouched path is x.path.
  if (x.policy == pol && pol->decide_reused_vouched(x.policy_gen, r.remote_addr >> policy::kTargetPageShift, vouched))
    return true;
  if (!pol->decide_reused_as(features_of(q, r.length, r.sge_count, r.rkey, r.remote_addr, x.eligible), t, x.path))
    return false;
  x.policy = pol;
  x.policy_gen = pol->settled_gen();
  return true;
}

Why route_why(const Route& rt, Path taken, Why fallback) {
  if (taken == rt.preferred) return Why::none;
  if (rt.why != Why::none) return rt.why;  // routed elsewhere, for this reason
  return fallback != Why::none ? fallback : Why::no_room;
}

namespace {

// The policy of this thread, or for a thread that never posts the next poster's on `q`,
// learns one finished write.
void learn(QpRec* q, Path p, uint32_t length, uint32_t sge_count, uint32_t rkey, uint64_t remote_addr,
           uint64_t cost, uint64_t cpu, uint64_t wait) {
  ++thread_stats().samples;
  if (t_policy) {
    const policy::WriteFeatures f = features_of(q, length, sge_count, rkey, remote_addr, PathSet::all());
    t_policy->observe(p, f, cost, cpu, wait);
    return;
  }
  // A completion thread that never posts: the next poster's policy learns it.
  SampleBox& b = q->sample;
  const uint32_t s0 = b.seq.load(std::memory_order_relaxed);
  b.seq.store(s0 + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  b.w[0].store(static_cast<uint64_t>(p) | uint64_t{sge_count & 0xFFFFFF} << 8 | uint64_t{length} << 32,
               std::memory_order_relaxed);
  b.w[1].store(rkey, std::memory_order_relaxed);
  b.w[2].store(remote_addr, std::memory_order_relaxed);
  b.w[3].store(cost, std::memory_order_relaxed);
  b.w[4].store(wait, std::memory_order_relaxed);
  b.w[5].store(cpu, std::memory_order_relaxed);
  b.seq.store(s0 + 2, std::memory_order_release);
}

}  // namespace

void observe(QpRec* q, Path p, uint32_t length, uint32_t sge_count, uint32_t rkey, uint64_t remote_addr,
             uint64_t t0, uint64_t post_call_ns) {
  if (!t0) return;
  const uint64_t now = now_ns();
  const uint64_t cost = now - t0;
  // In verbs calls for it: the post, then the poll from the post's return, or from when the
  // spin began if later. Several completions collected by one poll each count the whole
  // spin: a batch's per-write wait is overstated, but only for a program that spends that
  // time polling anyway.
  uint64_t wait = 0;
  if (p == Path::offload) {
    const uint64_t posted = t0 + post_call_ns;
    const uint64_t since = t_spin_since > posted ? t_spin_since : posted;
    wait = post_call_ns + (t_spin_since && now > since ? now - since : 0);
  }
  // The CPU it cost: a direct write's whole time (the copy), an inline or stage write's
  // post (the copy; the rest of its latency is the NIC's, and in a stream its queue: 20 ms
  // behind 128 writes under TCG, which charged to the budget locked direct out for good).
  // A CPU-placed write learnt here rode on a wake-up marker (CarriedSample): its CPU is
  // its copy, the rest the program's wait for the wake.
  if (policy::places_here(p)) ++thread_stats().samples_at_wake;
  const uint64_t cpu = policy::places_here(p) ? (post_call_ns ? post_call_ns : cost)
                       : policy::is_cpu_path(p) ? post_call_ns
                                                : 0;
  learn(q, p, length, sge_count, rkey, remote_addr, cost, cpu, wait);
}

void observe_direct(QpRec* q, Path p, const WriteRequest& r, uint64_t cost_ns) {
  learn(q, p, r.length, r.sge_count, r.rkey, r.remote_addr, cost_ns, cost_ns, 0);
}

void observe_remote(QpRec* q, const WriteRequest& r, uint64_t cost_ns) {
  learn(q, Path::unload_remote, r.length, r.sge_count, r.rkey, r.remote_addr, cost_ns, 0, 0);
}

void note_poll(int got) {
  if (!t_policy) return;
  if (got != 0)
    t_spin_since = 0;
  else if (!t_spin_since)
    t_spin_since = now_ns();
}

}  // namespace unload::rt
