// Adaptive mode: per write class, keep a chosen path, leave it only for a clear and
// fence-aware gain, and keep sampling the others.
#include <bit>

#include "unload/policy.hpp"

namespace unload::policy {
namespace {

// Sysfs should reject absurd values; clamping here too keeps the arithmetic below in 64 bits.
uint64_t clamped_hysteresis_pct(const Tunables& t) {
  return t.hysteresis_pct < 1000 ? t.hysteresis_pct : 1000;
}

// The first path of `set` at or after position `from`, cyclically; `set` is not empty.
unsigned first_path_from(PathSet set, unsigned from) {
  const unsigned bits = set.bits();
  const unsigned rotated = ((bits >> from) | (bits << (kPathCount - from))) & PathSet::all().bits();
  return (from + static_cast<unsigned>(std::countr_zero(rotated))) % kPathCount;
}

// The paths adaptive weighs for a write of a class with this hotness. The target-page
// hint: a hot page's translation stays in the target NIC's cache, so the NIC places its
// writes as cheaply as the target's CPU would (the origin paper keeps heavy hitters on the
// NIC); remote is for the cold ones. Stage only where inline cannot go: both copy on the
// CPU and leave the NIC the send, but stage copies into an arena the NIC must still read
// and free, so where both fit it is inline with more work (TCG's noise let adaptive drift
// to it for 9-40 % of a 64 B stream's writes between two hosts).
PathSet class_eligible(const WriteFeatures& f, const Tunables& t, bool hot) {
  PathSet e = effective_eligible(f, t);
  if (e.contains(Path::unload_inline)) e = e.without(Path::unload_stage);
  return hot ? e.without(Path::unload_remote) : e;
}

}  // namespace

Path Policy::decide_adaptive(const WriteFeatures& f, const Tunables& t) {
  ++stats_.decisions;
  sampled_ = --sample_countdown_ == 0;
  if (sampled_) sample_countdown_ = steady_ ? steady_every_ : kSampleEvery;
  // Every write counts toward hotness, including those only the NIC can take, or the
  // sketch would misjudge how hot a page is.
  pay_touches();
  resident_.configure(t.target_xlate_pages);  // a change of the tunable is a full decision
  return decide_in_class(
      f, t, touch_target(f.peer_local, HotnessSketch::key_of(f.rkey, f.remote_addr >> kTargetPageShift)));
}

Path Policy::decide_in_class(const WriteFeatures& f, const Tunables& t, bool hot) {
  // The settled decision of the other hotness is parked; one of this hotness is replaced.
  if (settled_.live && settled_.hot != hot && reuse_ == Reuse::on) parked_ = settled_;
  settled_.live = false;
  steady_ = false;
  reason_ = Reason::cost;
  const PathSet eligible = class_eligible(f, t, hot);
  if (eligible == PathSet(Path::offload)) {
    steady_ = true;
    steady_every_ = kSteadySampleEvery;
    if (reuse_ == Reuse::on) settle(f, t, hot, false, Path::offload, 0, 0, steady_every_);
    return Path::offload;
  }

  budget_enforced_ = t.cpu_budget_pct < 100;
  hysteresis_pct_ = static_cast<uint32_t>(clamped_hysteresis_pct(t));
  if (f.now_ns != 0 || !budget_.started()) budget_.refill(f.now_ns, t.cpu_budget_pct);
  const bool cpu_allowed = budget_.allows_cpu(t.cpu_budget_pct);

  WriteClass& wc = class_of(f, hot);
  bool settled = false;
  const Path p = choose(wc, f, t, eligible, cpu_allowed, settled);
  if (charges_budget(p) && !cpu_allowed) {
    ++stats_.budget_denials;
    reason_ = Reason::budget;
    sampled_ = true;  // its wait is what the budget's charges are measured against
    return Path::offload;
  }
  // A write that will not be observed is charged what its path usually costs the CPU.
  const uint64_t usual_ns = usual_cpu_ns(wc, p);
  if (!sampled_ && usual_ns != 0) charge_cpu(wc, p, usual_ns);

  // Steady: what a reuse of this decision would be, so Reuse::off samples as Reuse::on does.
  if (!settled) return p;
  uint64_t waived_ns = 0, charged_ns = 0;
  settled_charge(wc, p, budget_enforced_, waived_ns, charged_ns);
  steady_ = true;
  steady_every_ = sample_every_of(wc, p, eligible, charged_ns);
  if (reuse_ == Reuse::on) settle(f, t, hot, true, p, waived_ns, charged_ns, steady_every_);
  return p;
}

// How many writes apart a steady decision for `p` samples: one that draws on a capped
// budget (`charged_ns`) as an unsteady one, every kSampleEvery (its samples' measured CPU
// keeps the budget's share: at 32 a 10 % budget let 11.1 % through, sim_cpu_budget_test);
// else steady_every().
uint16_t Policy::sample_every_of(const WriteClass& wc, Path p, PathSet eligible, uint64_t charged_ns) {
  return charged_ns != 0 ? kSampleEvery : steady_every(wc, p, eligible);
}

// How many writes apart a steady decision for `p` samples (kWideSampleEvery): the
// steady interval times how many times cheaper p is than the next-cheapest warm path.
uint16_t Policy::steady_every(const WriteClass& wc, Path p, PathSet eligible) {
  const uint64_t mine = wc.estimate[index_of(p)].settled_ns();
  uint64_t next = UINT64_MAX;
  const PathSet others = eligible.without(p);
  uint64_t ns = 0;
  for (unsigned bits = others.bits(); bits != 0; bits &= bits - 1) {
    const CostEstimate& e = wc.estimate[std::countr_zero(bits)];
    if (e.warm() && (ns = e.settled_ns()) < next) next = ns;
  }
  if (mine == 0 || next == UINT64_MAX) return kSteadySampleEvery;
  const uint64_t times = next / mine;
  return times <= 1 ? kSteadySampleEvery
                    : static_cast<uint16_t>(times < kWideSampleEvery / kSteadySampleEvery ? kSteadySampleEvery * times
                                                                                           : kWideSampleEvery);
}

// The cheapest eligible path by settled estimate (unsampled paths cannot compete), and
// its estimate in `ns`.
Path Policy::cheapest_warm(const WriteClass& wc, PathSet eligible, uint64_t& ns) {
  Path best = Path::offload;
  ns = UINT64_MAX;
  for (unsigned bits = eligible.bits(); bits != 0; bits &= bits - 1) {
    const unsigned i = static_cast<unsigned>(std::countr_zero(bits));
    const CostEstimate& e = wc.estimate[i];
    if (e.warm() && e.settled_ns() < ns) {
      ns = e.settled_ns();
      best = static_cast<Path>(i);
    }
  }
  return best;
}

// Whether a class with a choice leaves it for `best`: only for a gain above
// hysteresis_pct, and, when going direct would have to fence behind NIC requests still in
// flight on this QP, above the fence too. The fence waits for those requests to complete:
// about one NIC write of this class, whose cost the offload estimate already tracks.
bool Policy::switches_to(const WriteClass& wc, Path best, uint64_t best_ns, PathSet eligible,
                         bool nic_outstanding, const Tunables& t) {
  if (best == wc.chosen || !eligible.contains(wc.chosen)) return false;
  const uint64_t chosen_ns = wc.estimate[index_of(wc.chosen)].settled_ns();
  const uint64_t fence_ns =
      needs_fence_after_nic(best) && nic_outstanding && !needs_fence_after_nic(wc.chosen)
          ? wc.estimate[index_of(Path::offload)].settled_ns()
          : 0;
  return best_ns * (100 + clamped_hysteresis_pct(t)) + fence_ns * 100 < chosen_ns * 100;
}

// After observe() changed a class's estimates, a trial or the budget: whether the next
// write that settled_matches() would still get the settled path from a full decision.
// The warm-up is over for good (estimates stay warm) and exploration is counted down by
// the reuse itself; what may have moved is the best path, the switch test, a trial and
// the budget's charge.
bool Policy::settled_still_holds(Settled& s) {
  if (!s.explores) return true;  // only the NIC was eligible: no estimate was consulted
  const Tunables& t = s.t;
  if (!budget_.allows_cpu(t.cpu_budget_pct)) return false;
  // Its class's paths as settle() found them: rebuilt from the length and eligible set
  // alone they lost the peer's locality, and with it mapped, so no sample of a class
  // settled on mapped kept its reuse.
  const PathSet eligible = s.explorable;
  const PathSet explorable = eligible;
  const WriteClass& wc = *s.cls;
  uint64_t best_ns = 0;
  const Path best = cheapest_warm(wc, eligible, best_ns);
  if (switches_to(wc, best, best_ns, eligible, s.nic_outstanding, t)) return false;
  const Path chosen = eligible.contains(wc.chosen) ? wc.chosen : best;
  if (chosen != s.path) return false;
  if (trial_due(wc, chosen, explorable)) return false;
  if (explore_thinning(wc, s.nic_outstanding, chosen, explorable.without(chosen), t.explore_shift) !=
      s.explore_thin)
    return false;  // its draws would be drawn anew
  uint64_t waived_ns = 0, charged_ns = 0;
  settled_charge(wc, chosen, t.cpu_budget_pct < 100, waived_ns, charged_ns);
  if (sample_every_of(wc, chosen, eligible, charged_ns) != s.sample_every)
    return false;  // a full decision samples anew
  s.waived_ns = waived_ns;
  s.charged_ns = charged_ns;
  return true;
}

// Whether the class's trial takes this write instead of `chosen`.
bool Policy::trial_due(const WriteClass& wc, Path chosen, PathSet explorable) {
  return wc.trial_left != 0 && wc.trial_path != chosen && explorable.contains(wc.trial_path);
}

// What each unsampled write of a settled decision for `p` adds to budget_waived_ns and
// charges a capped budget, as charge_cpu() splits its usual CPU time. A decision that
// draws on the budget is reused while the balance stays positive (arm_reuse()), and a
// settled one that finds it spent makes way for a whole decision (settled_budget_spent()):
// a whole decision for every such write cost a program that computes between its writes,
// or rping's inline writes (their charge the noise between two equal posts), about two
// thousand instructions a write.
void Policy::settled_charge(const WriteClass& wc, Path p, bool budget_capped, uint64_t& waived_ns,
                            uint64_t& charged_ns) const {
  const uint64_t usual_ns = usual_cpu_ns(wc, p);
  waived_ns = charged_ns = 0;
  if (!budget_capped || usual_ns == 0) return;
  charged_ns = charge_of(wc, p, usual_ns, waived_ns);
}

void Policy::settle(const WriteFeatures& f, const Tunables& t, bool hot, bool explores, Path p,
                    uint64_t waived_ns, uint64_t charged_ns, uint16_t sample_every) {
  Settled& s = settled_;
  s.t = t;
  s.page = f.remote_addr >> kTargetPageShift;
  s.length = f.length;
  s.sge_count = f.sge_count;
  s.rkey = f.rkey;
  s.eligible = f.eligible;
  s.explorable = class_eligible(f, t, hot);
  s.peer_local = f.peer_local;
  s.nic_outstanding = f.nic_outstanding;
  retarget(f, hot, HotnessSketch::key_of(f.rkey, s.page));
  s.cls = &class_of(f, hot);
  s.explores = explores;
  s.explore_thin = explores ? explore_thin_ : 0;
  s.path = p;
  s.waived_ns = waived_ns;
  s.charged_ns = charged_ns;
  s.sample_every = sample_every;
  s.live = true;
}

// The settled decision's target becomes f's (its sketch key `key`), whose page the sketch
// just judged `hot`.
// Its touches may be deferred while the answer cannot change: by the sketch, up to its
// count's next step or halving; in the resident set, while the page is a member (only
// another page's touch can evict it), never while it is not (a touch may let it join).
void Policy::retarget(const WriteFeatures& f, bool hot, uint64_t key) {
  Settled& s = settled_;
  s.page = f.remote_addr >> kTargetPageShift;
  s.rkey = f.rkey;
  s.key = key;
  s.slots = HotnessSketch::slots_of_key(s.key);
  s.hot = hot;
  const bool steady =
      resident_on(f.peer_local) ? hot : (hotness_.count(s.slots) + 1 >= HotnessSketch::kHotCount) == hot;
  s.touches_left = steady ? hotness_.steady_touches(s.slots) : 0;
}

Path Policy::decide_settled_elsewhere(const WriteFeatures& f, const Tunables& t) {
  ++stats_.decisions;
  sampled_ = --sample_countdown_ == 0;
  if (sampled_) sample_countdown_ = settled_.sample_every;  // as decide_settled()
  pay_touches();
  const uint64_t key = HotnessSketch::key_of(f.rkey, f.remote_addr >> kTargetPageShift);
  const bool hot = touch_target(f.peer_local, key);
  if (hot != settled_.hot && !unpark(f, t, hot)) [[unlikely]]
    return decide_in_class(f, t, hot);
  if (settled_.explores && (explore_left_ == 1 || draws_elsewise(settled_))) [[unlikely]]
    return decide_in_class(f, t, hot);
  if (settled_budget_spent(f.now_ns, t)) [[unlikely]]
    return decide_in_class(f, t, hot);
  if (settled_.explores) {
    --explore_left_;
    if (f.now_ns != 0) budget_.refill(f.now_ns, t.cpu_budget_pct);
  }
  if (!sampled_) count_unsampled_settled();
  ++stats_.reused;
  retarget(f, hot, key);
  return settled_.path;
}

// decide_unreused() for a write decide_elsewhere_as() found certain to keep the settled
// path (its sketch key `key`): the same steps in the same order, each made once, and
// those its checks ruled out left out. No sample is due (wants_clock() was false, so the
// countdown is above 1), the page keeps the settled hotness (the touch answers as count()
// foresaw), and nothing is drawn, charged or asked of a resident set. The runtime's lanes
// take every write to another page of a random-target stream so: through decide_unreused()
// it compared the tunables again and touched the sketch's slots twice.
void Policy::settle_elsewhere(const WriteFeatures& f, const Tunables& t, uint64_t key) {
  Settled& s = settled_;
  reuse_left_ = 0;  // end_run(): the run's reuses were counted (pay_run())
  run_armed_ = 0;
  const bool voucher_holds = f.rkey == s.rkey;  // and all beside the target, as checked
  ++stats_.decisions;
  --sample_countdown_;
  sampled_ = false;
  hotness_.touch(HotnessSketch::slots_of_key(key));
  if (s.explores) {
    --explore_left_;
    if (f.now_ns != 0) budget_.refill(f.now_ns, t.cpu_budget_pct);
  }
  stats_.budget_waived_ns += s.waived_ns;  // count_unsampled_settled(): no charge
  ++stats_.reused;
  retarget(f, s.hot, key);
  if (!voucher_holds) ++settled_gen_;
  arm_reuse();
}

// A write of the hotness `hot` the settled decision does not have: the parked decision
// becomes the settled one (and the settled one parked) when it is of that hotness and saw
// f's features and these tunables. What else it depended on is kept true while it is
// parked: observe() checks it as it checks the settled one, a decision's charge on the
// budget ends it (charge_cpu), and exploration's countdown is the caller's to check.
bool Policy::unpark(const WriteFeatures& f, const Tunables& t, bool hot) {
  if (!parked_.live || parked_.hot != hot || differs_beside_target(parked_, f, t) != 0) return false;
  std::swap(settled_, parked_);
  steady_every_ = settled_.sample_every;  // what a full decision of its class would have set
  return true;
}

// Exploration's draw, once per decision that reaches it: true with probability
// 2^-explore_shift. Drawn as the gap to the next success (geometric), so the decisions in
// between cost a decrement and a settled decision can be reused up to the next one. Each
// draw's coin (explore_outcome()) is drawn with its gap, ahead: a reuse can then tell
// whether the draw will explore anything and, when not, go on across it (pass_draw()).
//
// A draw thinned by `thin` (explore_thinning()) is one 2^-thin as likely: a class of
// another thinning than the countdown was drawn for draws its countdown anew, which the
// draws' independence allows (a geometric gap has no memory).
bool Policy::explore_due(uint32_t explore_shift, unsigned thin, uint16_t& coin) {
  if (explore_shift != explore_base_) [[unlikely]] {
    explore_base_ = explore_shift;
    for (unsigned i = 0; i <= kMaxThin; ++i)
      explore_gaps_[i] = GeometricGap(explore_shift == 0 || explore_shift + i >= 64 ? 0 : explore_shift + i);
    explore_thin_ = kNoThin;
  }
  if (thin != explore_thin_) [[unlikely]] {
    explore_thin_ = static_cast<uint8_t>(thin);
    next_draw();
  }
  if (--explore_left_ != 0) return false;
  ++stats_.draws;
  coin = explore_coin_;
  next_draw();
  return true;
}

void Policy::next_draw() {
  explore_left_ = explore_gaps_[explore_thin_].draw(prng_.next());
  explore_coin_ = static_cast<uint16_t>(prng_.next() & 0xFFFF);
}

Path Policy::choose(WriteClass& wc, const WriteFeatures& f, const Tunables& t, PathSet eligible,
                    bool cpu_allowed, bool& settled) {
  // Paths this write may take other than the class's choice: never a CPU path the budget
  // forbids. A direct write behind the QP's NIC requests may: its fence is bounded and
  // sees their progress (the runtime's hidden completions), and in a stream (ib_write_bw)
  // or behind a READ (rping) NIC requests are nearly always outstanding, so excluding it
  // left direct unsampled for good. What such a sample costs is weighed below.
  PathSet explorable = eligible;
  if (!cpu_allowed) explorable = explorable & (PathSet(Path::offload) | PathSet(Path::unload_remote));

  // Warm-up: every path gets a full window of samples before it is compared. Mapped and
  // direct first: the cheapest by construction, and at a stream's start the ring is still empty,
  // so its samples fence behind nothing.
  // A path with a window's worth of samples in flight waits for them: meanwhile the
  // cheapest warm path takes the write, or, with none warm, the warm-up goes on. Once a
  // path is warm, the others first send a probe (kProbe samples) and wait for it: a path
  // the probe finds kDearProbe times dearer is warm from it (learn()).
  bool waiting = false;
  uint64_t floor_ns = 0;
  bool floor_known = false;
  const auto warm_up = [&](unsigned i) {
    const CostEstimate& e = wc.estimate[i];
    if (e.warm()) return false;
    if (!floor_known) {
      cheapest_warm(wc, explorable, floor_ns);
      floor_known = true;
    }
    const bool probing = floor_ns != UINT64_MAX && e.samples() < CostEstimate::kProbe;
    if (wc.warming[i] >= (probing ? CostEstimate::kProbe - e.samples() : CostEstimate::kWindow)) {
      waiting = true;
      return false;
    }
    ++wc.warming[i];
    ++stats_.warmups;
    reason_ = Reason::cold;
    sampled_ = true;
    return true;
  };
  for (const Path here : {Path::unload_mapped, Path::unload_direct})
    if (explorable.contains(here) && warm_up(index_of(here))) return here;
  for (unsigned bits = explorable.bits(); bits != 0; bits &= bits - 1) {
    const unsigned i = static_cast<unsigned>(std::countr_zero(bits));
    if (warm_up(i)) return static_cast<Path>(i);
  }
  if (waiting) {
    if (++wc.warm_waits >= kWarmWaits) {  // the samples were lost: warm up again
      wc.warm_waits = 0;
      for (uint8_t& n : wc.warming) n = 0;
    }
    reason_ = Reason::cold;
    uint64_t ns = 0;
    const Path warm = cheapest_warm(wc, explorable, ns);
    if (ns != UINT64_MAX) return warm;
    const unsigned i = static_cast<unsigned>(std::countr_zero(explorable.bits()));  // offload
    ++stats_.warmups;
    sampled_ = true;
    return static_cast<Path>(i);
  }

  uint64_t best_ns = 0;
  const Path best = cheapest_warm(wc, eligible, best_ns);
  if (!wc.has_chosen) {
    // The first choice has no incumbent to protect: take the cheapest outright.
    wc.chosen = best;
    wc.has_chosen = true;
  } else if (switches_to(wc, best, best_ns, eligible, f.nic_outstanding, t)) {
    wc.chosen = best;
    wc.trial_left = 0;
    ++stats_.switches;
  }
  // A write the class's choice cannot take (e.g. longer than a cap inside the size class)
  // takes the cheapest path it can, without changing the class's choice.
  const Path chosen = eligible.contains(wc.chosen) ? wc.chosen : best;

  if (trial_due(wc, chosen, explorable)) {
    --wc.trial_left;
    ++stats_.trials;
    reason_ = Reason::exploring;
    sampled_ = true;
    return wc.trial_path;
  }

  // Exploration happens at random times but visits the other paths in turn: drawing the
  // path at random too would leave one of three alternatives unsampled for 500 writes
  // about 1% of the time, and a change on it unnoticed that long.
  //
  // A sample of a path r times as dear as the chosen one wastes (r - 1) writes. Paths
  // within 2x keep the full rate: a 2x change could make them the cheaper one. A dearer
  // path cannot win from a 2x change, so its visits are thinned to cost about one write
  // (1/(r - 1)), a CPU path's a quarter of one (1/(4(r - 1))); offload's stay at one
  // because they also refresh the NIC wait the CPU budget waives (sim_nic_wait_test).
  // The fence a sample crosses counts in its cost, about one NIC write of the class.
  if (const Path explored = explore_from(wc, f, t, explorable, chosen); explored != chosen) return explored;
  // Steady only with every path explorable: a choice the budget kept from a CPU path's
  // warm-up, trial or exploration is another once it refills, which no reuse would see.
  settled = explorable == eligible;
  return chosen;
}

// Exploration's draw for a class whose choice is `chosen`: the path explored, or chosen.
Path Policy::explore_from(WriteClass& wc, const WriteFeatures& f, const Tunables& t, PathSet explorable,
                          Path chosen) {
  uint16_t coin = 0;
  const PathSet others = explorable.without(chosen);
  const unsigned thin = explore_thinning(wc, f.nic_outstanding, chosen, others, t.explore_shift);
  if (!explore_due(t.explore_shift, thin, coin)) return chosen;
  if (others.empty()) return chosen;
  const unsigned i = first_path_from(others, (wc.explored_last + 1u) % kPathCount);
  wc.explored_last = static_cast<uint8_t>(i);
  if (!explore_outcome(wc, f.nic_outstanding, chosen, static_cast<Path>(i), coin, thin)) return chosen;
  ++stats_.explorations;
  reason_ = Reason::exploring;
  sampled_ = true;
  return static_cast<Path>(i);
}

// What a visit of `other` costs against the chosen path, fence included, and how much its
// visits are thinned (choose()).
uint64_t Policy::explored_ns(const WriteClass& wc, bool nic_outstanding, Path chosen, Path other) {
  const bool crosses = needs_fence_after_nic(other) ? nic_outstanding && !needs_fence_after_nic(chosen)
                                                    : needs_fence_after_nic(chosen);
  return wc.estimate[index_of(other)].settled_ns() +
         (crosses ? wc.estimate[index_of(Path::offload)].settled_ns() : 0);
}

// Whether a draw whose turn is `other` explores it: always within 2x of the chosen path,
// past that only on the coin's thinned odds (choose()), times 2^thin for draws that many
// times rarer (explore_thinning()).
bool Policy::explore_outcome(const WriteClass& wc, bool nic_outstanding, Path chosen, Path other,
                             uint16_t coin, unsigned thin) {
  const uint64_t chosen_ns = wc.estimate[index_of(chosen)].settled_ns();
  const uint64_t other_ns = explored_ns(wc, nic_outstanding, chosen, other);
  const uint64_t thinning = other == Path::offload ? 1 : 4;
  return !(other_ns > 2 * chosen_ns &&
           thinning * coin * (other_ns - chosen_ns) >= (uint64_t{0x10000} << thin) * chosen_ns);
}

// How many times rarer than 2^-explore_shift exploration's draws can be for a class whose
// choice is `chosen`, as a power of two: where every other path is far dearer, a draw
// explores its turn only on thinned odds, at most p = 1 / (thinning * (other / chosen - 1)).
// Drawing at 2^-thin the rate, with the odds 2^thin times p (2^thin <= 1 / p for every
// other path), visits each path as often and passes 2^thin times fewer draws: in an 8 B
// stream settled on mapped, a pass every 33 writes cost the runtime's lane a full walk.
// 0 with a path within 2x, or with exploration off (shift 0).
unsigned Policy::explore_thinning(const WriteClass& wc, bool nic_outstanding, Path chosen, PathSet others,
                                  uint32_t explore_shift) {
  if (explore_shift == 0 || others.empty()) return 0;
  const uint64_t chosen_ns = wc.estimate[index_of(chosen)].settled_ns();
  unsigned thin = explore_shift + kMaxThin < 64 ? kMaxThin : 63 - explore_shift;
  for (unsigned bits = others.bits(); bits != 0 && thin != 0; bits &= bits - 1) {
    const Path other = static_cast<Path>(std::countr_zero(bits));
    const uint64_t other_ns = explored_ns(wc, nic_outstanding, chosen, other);
    if (other_ns <= 2 * chosen_ns) return 0;
    if (chosen_ns == 0) continue;  // never explored (explore_outcome)
    // floor(log2(1 / odds)) without a division (an emulator's is a call): the widths'
    // difference, or one less where chosen_ns shifted by it passes the dividend.
    const uint64_t dividend = (other == Path::offload ? 1 : 4) * (other_ns - chosen_ns);
    unsigned fits = static_cast<unsigned>(std::bit_width(dividend) - std::bit_width(chosen_ns));
    if ((chosen_ns << fits) > dividend) --fits;
    if (fits < thin) thin = fits;
  }
  return thin;
}

// The path the settled decision's next draw explores, or its own path when that draw
// explores nothing: what the draw will find, as nothing the reuse leaves alone changes it.
Path Policy::settled_draw_explores() const {
  const Settled& s = settled_;
  const PathSet others = s.explorable.without(s.path);
  if (others.empty()) return s.path;
  const WriteClass& wc = *s.cls;
  const unsigned i = first_path_from(others, (wc.explored_last + 1u) % kPathCount);
  return explore_outcome(wc, s.nic_outstanding, s.path, static_cast<Path>(i), explore_coin_, s.explore_thin)
             ? static_cast<Path>(i)
             : s.path;
}

// A reused decision at exploration's draw, which arm_reuse() or the last pass found
// explores nothing: the draw's own changes (its turn, the next draw), as explore_from()
// makes them; and the reuse stops short of the next draw if that one explores.
void Policy::pass_draw() {
  pay_run();  // the run's countdowns as at this reuse: exploration's is at its draw
  ++stats_.draws;
  const Settled& s = settled_;
  WriteClass& wc = classes_[static_cast<size_t>(s.cls - classes_)];
  const PathSet others = s.explorable.without(s.path);
  if (!others.empty())
    wc.explored_last = static_cast<uint8_t>(first_path_from(others, (wc.explored_last + 1u) % kPathCount));
  next_draw();
  if (explore_left_ <= reuse_left_ && settled_draw_explores() != s.path) {
    const uint32_t cut = reuse_left_ - static_cast<uint32_t>(explore_left_ - 1);
    reuse_left_ -= cut;
    run_armed_ -= cut;
  }
  mark_run();
}

// A settled write at exploration's draw: the draw alone, and the settled decision goes on
// when it explores nothing, as a full decision would have kept it (settled_still_holds()
// kept everything else it read true). For a path far cheaper than the others the coin
// nearly always says so, and the full decision at every draw was one write in 17 of an
// 8 B stream, about 900 instructions each.
Path Policy::decide_settled_draw(const WriteFeatures& f, const Tunables& t) {
  pay_touches();
  const bool hot = touch_target(settled_.peer_local, settled_.key);
  if (f.now_ns != 0) budget_.refill(f.now_ns, t.cpu_budget_pct);
  if (hot != settled_.hot || !budget_.allows_cpu(t.cpu_budget_pct)) return decide_in_class(f, t, hot);
  WriteClass& wc = classes_[static_cast<size_t>(settled_.cls - classes_)];
  reason_ = Reason::cost;
  const Path p = explore_from(wc, f, t, class_eligible(f, t, hot), settled_.path);
  if (p != settled_.path) {  // what decide_in_class does to the settled decision first
    settled_.live = false;
    steady_ = false;
    return p;
  }
  if (!sampled_) count_unsampled_settled();
  ++stats_.reused;
  retarget(f, hot, settled_.key);
  return p;
}

}  // namespace unload::policy
