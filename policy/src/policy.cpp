// Mode dispatch, observation and introspection; the adaptive choice is in adaptive.cpp.
#include "unload/policy.hpp"

#include <bit>

namespace unload::policy {

Policy::Policy(uint64_t seed, Reuse reuse) : reuse_(reuse), prng_(seed) {}

Path Policy::decide_full(const WriteFeatures& f, const Tunables& t) {
  sampled_ = true;
  if (t.enabled == 0 || mode_of(t) != Mode::adaptive) settled_.live = parked_.live = steady_ = false;
  if (t.enabled == 0) return Path::offload;
  switch (mode_of(t)) {
    case Mode::offload:
      return Path::offload;
    case Mode::unload:
      budget_enforced_ = false;
      return cheapest_cpu_path(effective_eligible(f, t));
    case Mode::threshold:
      budget_enforced_ = false;
      return f.length <= t.threshold_bytes ? cheapest_cpu_path(effective_eligible(f, t)) : Path::offload;
    case Mode::adaptive:
      return decide_adaptive(f, t);
  }
  return Path::offload;
}

void Policy::observe(Path path, const WriteFeatures& f, uint64_t cost_ns, uint64_t cpu_ns,
                     uint64_t nic_wait_ns) {
  end_run();  // a sample may move the countdowns (learn) or the choice
  learn(path, f, cost_ns, cpu_ns, nic_wait_ns);
  // Most samples confirm the choice: the reuse goes on unless this one moved it, from the
  // next write on (it was the next whole decision's to arm, a full route at the runtime),
  // and so do the vouchers of it (settled_gen()).
  if (settled_.live) settled_.live = settled_still_holds(settled_);
  if (!settled_.live) ++settled_gen_;
  if (parked_.live) parked_.live = settled_still_holds(parked_);
  arm_reuse();
}

void Policy::learn(Path path, const WriteFeatures& f, uint64_t cost_ns, uint64_t cpu_ns,
                   uint64_t nic_wait_ns) {
  pay_touches();
  WriteClass& wc = class_of(f, is_hot(f));
  // The wait matters only to a capped budget: uncapped, skip the cost of estimating it.
  if (path == Path::offload && budget_enforced_) wc.nic_wait.add(nic_wait_ns);
  charge_cpu(wc, path, cpu_ns);
  if (charges_budget(path) && cost_ns != 0) {
    const unsigned share = cpu_ns >= cost_ns ? kShareOne : static_cast<unsigned>(cpu_ns * kShareOne / cost_ns);
    uint16_t& s = wc.cpu_share[index_of(path)];
    s = static_cast<uint16_t>(s + (static_cast<int>(share) - static_cast<int>(s)) / 8);
  }
  CostEstimate& e = wc.estimate[index_of(path)];
  if (wc.warming[index_of(path)] != 0) --wc.warming[index_of(path)];
  const uint32_t settled_before = e.settled_ns();
  e.add(cost_ns);
  if (!e.warm() && e.samples() >= CostEstimate::kProbe) {
    uint64_t floor_ns = 0;
    cheapest_warm(wc, PathSet::all().without(path), floor_ns);
    if (floor_ns != UINT64_MAX && e.least_ns() >= kDearProbe * floor_ns) e.complete_from_probe();
  }
  if (!wc.has_chosen) return;
  if (path == wc.chosen) {
    // A sample of the chosen path far from its estimate may be a change: the next writes
    // are sampled until the window confirms or forgets it, so a change is followed as fast
    // as when every write was observed, and an outlier costs one more sample.
    const uint64_t diff = cost_ns > settled_before ? cost_ns - settled_before : settled_before - cost_ns;
    if (diff * 100 > uint64_t{settled_before} * CostEstimate::kChangePct) sample_countdown_ = 1;
    return;
  }

  // A sample of another path that beats the chosen path's estimate by the hysteresis
  // margin buys that path a trial (decide() sends it the next few writes of this class),
  // so one lucky exploration is quickly confirmed or refuted instead of waiting 8 more
  // explorations. Under noise alone a worse path's sample rarely clears the margin and a
  // trial ends at its first sample that does not, so trials cost little; a gain too small
  // to switch for never starts one.
  const uint64_t chosen_ns = wc.estimate[index_of(wc.chosen)].settled_ns();
  // Going direct behind NIC requests also pays the fence (switches_to): a trial that could
  // not end in a switch would only cost.
  const uint64_t fence_ns = needs_fence_after_nic(path) && f.nic_outstanding && !needs_fence_after_nic(wc.chosen)
                                ? wc.estimate[index_of(Path::offload)].settled_ns()
                                : 0;
  const uint64_t sample_ns = (cost_ns < UINT32_MAX ? cost_ns : UINT32_MAX) + fence_ns;
  const bool promising = sample_ns * (100 + uint64_t{hysteresis_pct_}) < chosen_ns * 100;
  if (promising) {
    if (wc.trial_path != path || wc.trial_left == 0) {
      wc.trial_path = path;
      wc.trial_left = kTrialWrites;
    }
  } else if (wc.trial_path == path) {
    wc.trial_left = 0;
  }
}

// Only a capped decision charges: CPU time spent in unload or threshold mode is not a
// debt adaptive mode should repay when an administrator switches to it. What the program
// would have spent polling for the NIC instead is not charged at all. The runtime measures
// wall time, so a write preempted for milliseconds looks like milliseconds of copying;
// charged in full, one would empty the budget for hundreds of writes. A write is charged at
// most twice its path's settled cost: the rest is not CPU. Before the path has an estimate,
// its warm-up's samples together at most one burst: its first writes pay what later ones
// do not (the pair's resolution, first touches), and ib_write_bw's first 64 KiB direct
// writes on 6.12 cost 2-2.6 ms, 80 times their settled cost. Charged whole, they kept
// direct out of the stream's first 140 writes; charged a burst each, 8 of them still did
// now and then (6.12, -l 8).
void Policy::charge_cpu(WriteClass& wc, Path path, uint64_t cpu_ns) {
  if (!budget_enforced_ || cpu_ns == 0) return;
  uint64_t waived = 0;
  const uint64_t charged = charge_of(wc, path, cpu_ns, waived);
  stats_.budget_waived_ns += waived;
  stats_.budget_charged_ns += charged;
  if (charged != 0) {
    budget_.charge(charged);
    parked_.live = false;  // it was steady with the budget as it was
  }
}

// cpu_ns of a write of `path` in `wc`, capped as above, split into what the class's wait
// waives (*waived_ns) and what the budget is charged (returned).
uint64_t Policy::charge_of(const WriteClass& wc, Path path, uint64_t cpu_ns, uint64_t& waived_ns) const {
  const CostEstimate& e = wc.estimate[index_of(path)];
  const uint64_t most = e.warm() ? 2 * uint64_t{e.settled_ns()} : budget_.burst_tokens_ns() / CostEstimate::kWindow;
  if (cpu_ns > most) cpu_ns = most;
  const uint64_t wait_ns = wc.nic_wait.settled_ns();
  waived_ns = cpu_ns < wait_ns ? cpu_ns : wait_ns;
  return cpu_ns - waived_ns;
}

unsigned Policy::class_index(const WriteFeatures& f, bool hot) {
  unsigned size_class = static_cast<unsigned>(std::bit_width(f.length));
  if (size_class >= kSizeClasses) size_class = kSizeClasses - 1;
  const unsigned local = f.peer_local ? 1 : 0;
  const unsigned scattered = f.sge_count > 1 ? 1 : 0;
  return ((local * 2 + (hot ? 1 : 0)) * 2 + scattered) * kSizeClasses + size_class;
}

bool Policy::is_hot(const WriteFeatures& f) const {
  pay_touches();
  const uint64_t key = HotnessSketch::key_of(f.rkey, f.remote_addr >> kTargetPageShift);
  return resident_on(f.peer_local)
             ? resident_.contains(key)
             : hotness_.count(HotnessSketch::slots_of_key(key)) >= HotnessSketch::kHotCount;
}

const CostEstimate& Policy::nic_wait(const WriteFeatures& f) const {
  return class_of(f, is_hot(f)).nic_wait;
}

Path Policy::chosen_path(const WriteFeatures& f) const {
  return class_of(f, is_hot(f)).chosen;
}

const CostEstimate& Policy::estimate(const WriteFeatures& f, Path p) const {
  return class_of(f, is_hot(f)).estimate[index_of(p)];
}

}  // namespace unload::policy
