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

}  // namespace

Path Policy::decide_adaptive(const WriteFeatures& f, const Tunables& t) {
  ++stats_.decisions;
  sampled_ = --sample_countdown_ == 0;
  if (sampled_) sample_countdown_ = kSampleEvery;
  // Every write counts toward hotness, including those only the NIC can take, or the
  // sketch would misjudge how hot a page is.
  const bool hot = hotness_.touch(f.rkey, f.remote_addr >> kTargetPageShift);
  const PathSet eligible = effective_eligible(f, t);
  if (eligible == PathSet(Path::offload)) return Path::offload;

  budget_enforced_ = t.cpu_budget_pct < 100;
  hysteresis_pct_ = static_cast<uint32_t>(clamped_hysteresis_pct(t));
  if (f.now_ns != 0 || !budget_.started()) budget_.refill(f.now_ns, t.cpu_budget_pct);
  const bool cpu_allowed = budget_.allows_cpu(t.cpu_budget_pct);

  WriteClass& wc = class_of(f, hot);
  const Path p = choose(wc, f, t, eligible, cpu_allowed);
  if (is_cpu_path(p) && !cpu_allowed) {
    ++stats_.budget_denials;
    sampled_ = true;  // its wait is what the budget's charges are measured against
    return Path::offload;
  }
  // A write that will not be observed is charged what its path usually costs.
  if (!sampled_ && is_cpu_path(p)) charge_cpu(wc, p, wc.estimate[index_of(p)].settled_ns());
  return p;
}

Path Policy::choose(WriteClass& wc, const WriteFeatures& f, const Tunables& t,
                    PathSet eligible, bool cpu_allowed) {
  // Paths this write may take other than the class's choice: never a direct write that
  // would have to fence behind the QP's NIC requests just to take a sample, never a CPU
  // path the budget forbids.
  PathSet explorable = eligible;
  if (f.nic_outstanding) explorable = explorable.without(Path::unload_direct);
  if (!cpu_allowed) explorable = explorable & PathSet(Path::offload);

  // Warm-up: every path gets a full window of samples before it is compared.
  for (unsigned bits = explorable.bits(); bits != 0; bits &= bits - 1) {
    const unsigned i = static_cast<unsigned>(std::countr_zero(bits));
    if (!wc.estimate[i].warm()) {
      ++stats_.warmups;
      sampled_ = true;
      return static_cast<Path>(i);
    }
  }

  // The cheapest eligible path by settled estimate (unsampled paths cannot compete).
  Path best = Path::offload;
  uint64_t best_ns = UINT64_MAX;
  for (unsigned bits = eligible.bits(); bits != 0; bits &= bits - 1) {
    const unsigned i = static_cast<unsigned>(std::countr_zero(bits));
    const CostEstimate& e = wc.estimate[i];
    if (e.warm() && e.settled_ns() < best_ns) {
      best_ns = e.settled_ns();
      best = static_cast<Path>(i);
    }
  }

  if (!wc.has_chosen) {
    // The first choice has no incumbent to protect: take the cheapest outright.
    wc.chosen = best;
    wc.has_chosen = true;
  } else if (best != wc.chosen && eligible.contains(wc.chosen)) {
    // Switch only for a gain above hysteresis_pct, and, when going direct would have to
    // fence behind NIC requests still in flight on this QP, above the fence too. The
    // fence waits for those requests to complete: about one NIC write of this class,
    // whose cost the offload estimate already tracks.
    const uint64_t chosen_ns = wc.estimate[index_of(wc.chosen)].settled_ns();
    const uint64_t fence_ns =
        needs_fence_after_nic(best) && f.nic_outstanding && !needs_fence_after_nic(wc.chosen)
            ? wc.estimate[index_of(Path::offload)].settled_ns()
            : 0;
    if (best_ns * (100 + clamped_hysteresis_pct(t)) + fence_ns * 100 < chosen_ns * 100) {
      wc.chosen = best;
      wc.trial_left = 0;
      ++stats_.switches;
    }
  }
  // A write the class's choice cannot take (e.g. longer than a cap inside the size class)
  // takes the cheapest path it can, without changing the class's choice.
  const Path chosen = eligible.contains(wc.chosen) ? wc.chosen : best;

  if (wc.trial_left != 0 && wc.trial_path != chosen && explorable.contains(wc.trial_path)) {
    --wc.trial_left;
    ++stats_.trials;
    sampled_ = true;
    return wc.trial_path;
  }

  // Exploration happens at random times but visits the other paths in turn: drawing the
  // path at random too would leave one of three alternatives unsampled for 500 writes
  // about 1% of the time, and a change on it unnoticed that long.
  //
  // A sample of a path that costs r times the chosen one wastes (r - 1) writes' worth, so
  // paths more than twice as dear are sampled at 1/(r - 1) of the rate: exploration then
  // never spends more than 2^-explore_shift of the class's cost (3% by default), where a
  // flat rate would spend 10% when the alternatives are 4x dearer (same-host writes: the
  // NIC crossing PCIe twice against one memcpy). Paths within 2x, the ones a change could
  // plausibly make cheaper, keep the full rate.
  const uint64_t draw = prng_.next();
  if (prng_.one_in_pow2(draw, t.explore_shift)) {
    const PathSet others = explorable.without(chosen);
    if (!others.empty()) {
      const unsigned i = first_path_from(others, (wc.explored_last + 1u) % kPathCount);
      wc.explored_last = static_cast<uint8_t>(i);
      const uint64_t chosen_ns = wc.estimate[index_of(chosen)].settled_ns();
      const uint64_t other_ns = wc.estimate[i].settled_ns();
      const uint64_t coin = draw & 0xFFFF;  // independent of the high bits one_in_pow2 used
      if (other_ns <= 2 * chosen_ns || coin * (other_ns - chosen_ns) < 0x10000 * chosen_ns) {
        ++stats_.explorations;
        sampled_ = true;
        return static_cast<Path>(i);
      }
    }
  }
  return chosen;
}

}  // namespace unload::policy
