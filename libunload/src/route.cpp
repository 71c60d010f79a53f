// The route of a request: classification, eligibility, then the mode, a forced path
// (UNLOAD_PATH) or the thread's policy.
#include "route.hpp"

#include "kmod.hpp"
#include "learn.hpp"
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


// IBV_SEND_FENCE: the write waits for the QP's earlier READs and atomics, so a payload
// copied now (inline, stage) could miss what a READ still brings into the source.
bool fence_blocks_copy(const QpRec* q, const WriteRequest& r) {
  return r.fence && (q->sq.last_ordering > q->sq.ring.head() || plain_ordering_pending(q->sq));
}

// Within direct_max (the module's cap for both), one channel message and the module's SGEs.
bool remote_size_ok(const WriteRequest& r, const Tunables& t) {
  return r.length != 0 && r.length <= t.direct_max && r.length <= UNLOAD_REMOTE_MAX_LEN &&
         r.sge_count <= UNLOAD_MAX_IOV;
}

}  // namespace

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
      out.adaptive = adaptive;
      // Samples a completion thread merged are learnt first, as this thread's own poll's
      // would have been (an observe ends a reuse). A settled write is then the policy's one
      // branch: no clock, no sample.
      if (inbox_waiting()) [[unlikely]]
        learn_inbox(pol);
      out.reused = adaptive && pol->decide_reused(f, t, out.path);
      if (!out.reused) {
        // Adaptive times only the writes it samples (policy.hpp, kSampleEvery), from the
        // clock its decision read when it asked for one (it does before a periodic
        // sample), else from after the decision: a clock read costs more than a decision
        // under an emulator, and the decision's own tens of ns weigh the same on every path.
        if (adaptive && pol->wants_clock()) f.now_ns = now_ns();
        out.path = adaptive ? pol->decide_unreused(f, t) : pol->decide(f, t);
        if (adaptive && pol->sampled()) {
          out.t0 = f.now_ns ? f.now_ns : now_ns();
          learner_is_me(q);
        }
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

bool route_reuses_mapped_plainly(const QpRec* q, uint64_t remote_addr) {
  const ExpressMemo& x = q->express;
  policy::Policy* pol = t_policy;
  if (x.policy == pol && pol)
    return pol->decide_reused_vouched_plainly(x.policy_gen, remote_addr >> policy::kTargetPageShift);
  Path forced;
  return forced_path(forced) && forced == Path::unload_mapped;
}

bool route_reuses_mapped(QpRec* q, uint64_t remote_addr, PathSet eligible, const Tunables& t) {
  ExpressMemo& x = q->express;
  policy::Policy* pol = t_policy;
  // The express lane checked the shape, the tunables' sequence and a quiet send queue
  // against its memo: what the policy compared when it reused this shape's last write.
  // (The peer's locality is the QP's from its move to RTR on.)
  // Another page of such a write: decided there (as decide_reused_or_elsewhere_as() below
  // would) with nothing compared but the page, the generation standing for the rest.
  Path vouched;
  if (x.policy == pol && pol &&
      (pol->decide_reused_vouched(x.policy_gen, remote_addr >> policy::kTargetPageShift, vouched) ||
       (!inbox_waiting() && pol->decide_elsewhere_vouched(x.policy_gen, x.rkey, remote_addr))))
    return true;
  Path forced;
  if (forced_path(forced)) return forced == Path::unload_mapped;
  if (!pol || t.mode != static_cast<uint32_t>(Mode::adaptive)) return false;
  const policy::WriteFeatures f = features_of(q, x.length, 1, x.rkey, remote_addr, eligible);
  // Another target (another page, or a QP of many, each writing its own region, after
  // another's write): decided as route() decides it when that is certainly mapped, as
  // route_reuses_nic does. Else every write of a program's many QPs took the route.
  if (!pol->decide_reused_or_elsewhere_as(f, t, Path::unload_mapped, !inbox_waiting())) return false;
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
  const policy::WriteFeatures f = features_of(q, r.length, r.sge_count, r.rkey, r.remote_addr, x.eligible);
  // Another target page: decided as route() decides it, when that is certainly x.path (a
  // sample a completion thread left in the inbox is route()'s to learn first).
  if (!pol->decide_reused_or_elsewhere_as(f, t, x.path, !inbox_waiting())) return false;
  x.policy = pol;
  x.policy_gen = pol->settled_gen();
  return true;
}

}  // namespace unload::rt
