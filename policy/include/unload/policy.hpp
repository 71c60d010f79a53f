// unload's per-write decision engine: which path an RDMA WRITE takes (docs/design.md, section 6).
//
// A pure library: no verbs, no syscalls, no clock reads, no allocation after
// construction, no exceptions. The runtime calls decide() before posting each WRITE and
// observe() when it knows what the write cost.
//
// Thread-safety: a Policy is single-threaded. The runtime keeps one per thread that posts
// writes (thread_local); decide() and observe() take no locks and must not run
// concurrently on one instance. What each instance learns is therefore per thread, and so
// is the CPU budget: each thread may spend cpu_budget_pct of its own wall time copying.
// Give each instance its own seed (e.g. the thread id) so threads explore independently.
//
// Size: about 376 KiB of tables held by value (write classes and the hotness sketch, 56;
// the resident set, 320, untouched until target_xlate_pages is set); allocate it once per
// thread, not on the stack of a hot function.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "unload/policy/cost_estimate.hpp"
#include "unload/policy/cpu_budget.hpp"
#include "unload/policy/geometric.hpp"
#include "unload/policy/hotness_sketch.hpp"
#include "unload/policy/path.hpp"
#include "unload/policy/prng.hpp"
#include "unload/policy/resident_set.hpp"
#include "unload/policy/tunables.hpp"
#include "unload/policy/write_features.hpp"

namespace unload::policy {

// What the policy did, for sysfs-style statistics and for tests.
struct PolicyStats {
  uint64_t decisions = 0;          // adaptive decisions
  uint64_t reused = 0;             // ... that reused the settled decision before them
  uint64_t warmups = 0;            // ... taken to fill a path's first estimate
  uint64_t explorations = 0;       // ... sent to a non-chosen path at random
  uint64_t draws = 0;              // ... at an exploration's draw, whether it explored or not
  uint64_t trials = 0;             // ... sent to a path whose last sample looked better
  uint64_t switches = 0;           // changes of a write class's chosen path
  uint64_t budget_denials = 0;     // CPU paths turned into offload by the CPU budget
  uint64_t budget_charged_ns = 0;  // CPU time charged to the budget, beyond the NIC wait
  uint64_t budget_waived_ns = 0;   // CPU time not charged: the program would have waited
};

// The paths the tunables' length caps allow for this write, plus offload, which is always
// eligible. Direct, mapped and remote share direct_max (the module's cap for its
// placements); remote is never eligible for a peer on this host, mapped never for one on
// another.
PathSet effective_eligible(const WriteFeatures& f, const Tunables& t);

// The cheapest eligible CPU path by construction, or offload if none is eligible. Mapped
// first: one CPU copy, no system call, no NIC or wire. Direct next: the same copy, made by
// the module behind a system call. Remote next (never eligible with direct:
// one is for a peer on this host, the other for one on another): both halves on CPUs, no
// NIC translation at either end, one message on the modules' channel. Inline next: one
// copy into the work request, and the NIC skips the payload fetch and local translation.
// Stage last: the same copy plus the NIC's DMA read of the staging slot.
Path cheapest_cpu_path(PathSet eligible);

class Policy {
 public:
  // Write classes: peer locality x target-page hotness x scattered (sge_count > 1) x
  // log2 size class, where class c holds lengths in [2^(c-1), 2^c) and the last class
  // everything from 4 MiB up.
  static constexpr unsigned kSizeClasses = 24;
  static constexpr unsigned kClasses = 2 * 2 * 2 * kSizeClasses;
  // Consecutive writes a promising exploration buys the explored path, so that a path
  // that really became cheaper fills its recent window in one go.
  static constexpr uint8_t kTrialWrites = 8;
  // A path whose every probe sample (CostEstimate::kProbe) costs this many times the
  // cheapest warm path's estimate is warm from them: past the 2x a change could bridge
  // (the reason exploration thins such paths), it cannot take the class. At 8 B under
  // TCG the NIC's paths cost 40x mapped, and their 14 further warm-up writes were most of
  // what a 5000-write stream paid for adaptive.
  static constexpr unsigned kDearProbe = 3;

  // Whether a decision may reuse the work of the one before it (see decide()). Off only
  // to show, in tests and benchmarks, that reusing it changes no decision.
  enum class Reuse : bool { off, on };

  explicit Policy(uint64_t seed = 0x756E6C6F6164ULL, Reuse reuse = Reuse::on);

  // Adaptive observes one decision in kSampleEvery, and one in kSteadySampleEvery while
  // its decisions are steady (each kept its class's chosen path with nothing pending and
  // drew nothing from a capped budget: what a reused decision is). Timing every write (two
  // clock reads and observe()) cost more than the policy saves on a small write, and a
  // sampled write is a slow one: at 1 in 8 it was the median write's main extra cost
  // under an emulator. A steady class still gets a sample every 32 writes, and a sample far
  // from its estimate samples the next writes, so a 2x step is followed within a few
  // hundred decisions (tests/policy/sim_step_test.cpp). Warm-up, exploration, trial and
  // budget-denied decisions are always observed: they are what the policy learns from.
  //
  // A steady class's samples are there to notice its path growing dearer. A path m times
  // cheaper than the next-cheapest warm one must grow m times dearer before it loses its
  // place, so its samples are m times as far apart, up to kWideSampleEvery: under an
  // emulator a sampled write (its clocks, a full decision, observe()) cost ten 8 B writes
  // through the mapping, and at one in 32 it made adaptive 1.7x the mapped path's time
  // in an 8 B stream where every other path is 9x dearer.
  static constexpr uint8_t kSampleEvery = 8;
  static constexpr uint16_t kSteadySampleEvery = 32;
  static constexpr uint16_t kWideSampleEvery = 256;

  // The path for this write. Always one of effective_eligible(f, t). f.now_ns may be 0
  // when wants_clock() was false: the CPU budget then refills at the next decision that
  // has a clock.
  //
  // A settled decision is reused: when an adaptive decision kept its class's chosen path
  // with nothing pending (no warm-up, trial or exploration), the next write with the
  // same features, target page and tunables takes the same path after counting what the
  // full decision counts (hotness, its charge on a capped budget while the balance lasts,
  // the sample and exploration countdowns, statistics) and skipping what cannot have changed (the
  // class's lookup, the estimate scans, the switch test). Only observe() changes a
  // class's estimates; the reuse survives a sample that leaves the choice standing.
  // Decisions, samples and statistics are exactly those of Reuse::off
  // (tests/policy/settled_test.cpp).
  //
  // The reuse is inline: under an emulator, calls and returns cost more than the checks.
  Path decide(const WriteFeatures& f, const Tunables& t) {
    Path p;
    if (decide_reused(f, t, p)) return p;
    return decide_unreused(f, t);
  }

  // decide() for a caller whose decide_reused() on these features just said false (with
  // at most an observe() since, which ends a reuse): the rest of the decision, without
  // asking again.
  Path decide_unreused(const WriteFeatures& f, const Tunables& t) {
    Path p;
    end_run();
    // A voucher (settled_gen()) stands for the settled decision's path, rkey and all beside
    // the target: a decision that settles the same again leaves it standing, so that a
    // runtime's many QPs of one shape need not each ask again after it.
    const bool same = settled_.live && settled_differs_beside_target(f, t) == 0;
    const bool voucher_holds = same && f.rkey == settled_.rkey;
    const Path before = settled_.path;
    if (!same)
      p = decide_full(f, t);
    else if (settled_on_target(f))
      p = decide_settled(f, t);
    else
      p = decide_settled_elsewhere(f, t);
    if (!voucher_holds || !settled_.live || settled_.path != before) ++settled_gen_;
    arm_reuse();
    return p;
  }

  // decide() for a reuse with nothing due, or false (then call decide()): one branch, no
  // clock, and the decision neither sampled() nor wanting a clock. A runtime calls this
  // first to skip its own checks around decide() (the clock, the sample) for such a write.
  bool decide_reused(const WriteFeatures& f, const Tunables& t, Path& p) {
    if ((settled_differs(f, t) | (reuse_left_ == 0)) != 0) return false;
    take_reuse(p);
    return true;
  }

  // A caller that keeps writes of one shape (the runtime's express lane, per QP) can vouch
  // for the comparison decide_reused() makes, all but the target page: after one of them
  // was reused, settled_gen() names the settled decision it matched, and while no whole
  // decision settled another (another path, rkey or features beside the target, or none)
  // and no observe() ended it (either moves the generation) a write with the same features
  // and tunables beside the target matches it too.
  uint64_t settled_gen() const { return settled_gen_; }
  // Whether the settled decision (the one a reuse just took) draws on a capped CPU budget:
  // a runtime that would stop asking for such writes must not, or they go uncharged.
  bool settled_charges() const { return settled_.charged_ns != 0; }
  // decide_reused() for a write the caller vouches is, beside its target page, what the
  // write reused at settled_gen() == gen was: the target page compared, and the
  // countdowns'; that write's path taken.
  bool decide_reused_vouched(uint64_t gen, uint64_t page, Path& p) {
    if (((gen ^ settled_gen_) | (page ^ settled_.page) | (reuse_left_ == 0)) != 0) return false;
    take_reuse(p);
    return true;
  }
  // decide_reused_vouched() when the reuse has nothing to do but count down (no draw due
  // in it, no charge on a capped budget): false, nothing done, otherwise. A runtime's lane
  // that calls nothing takes this one and leaves the rest to decide_reused_vouched().
  bool decide_reused_vouched_plainly(uint64_t gen, uint64_t page) {
    if (((gen ^ settled_gen_) | (page ^ settled_.page) | (reuse_left_ <= plain_floor_)) != 0) return false;
    --reuse_left_;
    sampled_ = false;
    return true;
  }
  // decide_elsewhere_as() for a write the caller vouches is, beside its target page, what
  // the write decided at settled_gen() == gen was (as for decide_reused_vouched(); the
  // generation stands for the rkey too): on another page, nothing compared but the page
  // and the rkey. The write's features beside its target are the settled decision's.
  bool decide_elsewhere_vouched(uint64_t gen, uint32_t rkey, uint64_t remote_addr) {
    const Settled& s = settled_;
    if (((gen ^ settled_gen_) | (rkey ^ s.rkey)) != 0 || remote_addr >> kTargetPageShift == s.page)
      return false;
    const WriteFeatures f{.length = s.length,
                          .sge_count = s.sge_count,
                          .rkey = rkey,
                          .remote_addr = remote_addr,
                          .now_ns = 0,
                          .eligible = s.eligible,
                          .peer_local = s.peer_local,
                          .nic_outstanding = s.nic_outstanding};
    return take_elsewhere_as(f, s.t, s.path);
  }

  // decide_reused() for a caller that can carry out only `want` (a runtime's shortcut for
  // one path): false, with nothing counted, when the reused decision would be another path.
  bool decide_reused_as(const WriteFeatures& f, const Tunables& t, Path want) {
    Path p;
    return settled_.path == want && decide_reused(f, t, p);
  }

  // decide() for a caller that can carry out only `want` (the runtime's NIC lane), for a
  // write whose decide_reused() said false: true, the decision made and counted exactly as
  // decide_unreused() makes it, when it is certain to be the settled path `want`, the write
  // being what the settled decision saw beside its target and on another target page of
  // the settled hotness; false, with nothing decided or counted, when it may not be (a
  // sample or a clock due, another hotness, an exploration due, a charge on the budget, a
  // resident set to ask), and the caller calls decide_unreused(). Random targets then cost
  // the sketch's touch and the countdowns, not a whole decision's lookups.
  bool decide_elsewhere_as(const WriteFeatures& f, const Tunables& t, Path want) {
    return !settled_on_target(f) && settled_differs_beside_target(f, t) == 0 && take_elsewhere_as(f, t, want);
  }
  // decide_reused_as(), and when it says false for a write that only its target sets apart
  // from the settled one, decide_elsewhere_as() if `elsewhere`: the comparison beside the
  // target (the tunables word by word) made once for both.
  bool decide_reused_or_elsewhere_as(const WriteFeatures& f, const Tunables& t, Path want, bool elsewhere) {
    const Settled& s = settled_;
    if (s.path != want) return false;
    const uint64_t beside = settled_differs_beside_target(f, t);
    const uint64_t target = settled_target_differs(f);
    if ((beside | target | (reuse_left_ == 0)) == 0) {
      Path p;
      take_reuse(p);
      return true;
    }
    return elsewhere && beside == 0 && target != 0 && take_elsewhere_as(f, t, want);
  }

  // Whether the next decision needs f.now_ns (a periodic sample, or an empty CPU budget
  // that must refill to let a CPU path through). Only adaptive decisions use the clock.
  bool wants_clock() const {
    pay_run();
    return sample_countdown_ <= 1 || (budget_enforced_ && budget_.tokens_ns() <= 0);
  }

  // Whether the write of the last decision must be observed. In adaptive mode a decision
  // that is not sampled must not be: its CPU path was charged to the budget at decision
  // time, by its class's estimates. Other modes always say true (observing only keeps the
  // estimates warm for a switch to adaptive).
  bool sampled() const { return sampled_; }

  // The measured cost of a sampled() write decide() routed to `path` (latency to completion, the
  // quantity adaptive minimises), and `cpu_ns`, the part of it the CPU spent copying.
  // `nic_wait_ns`, for an offloaded write: how long the thread spent on it in verbs calls,
  // its post (where a software NIC does the NIC's work) and its busy-poll for the
  // completion (none if the completion was there when the program first looked). Pass the
  // same features decide() saw. Only adaptive mode uses what it learns; calling it in
  // other modes keeps the estimates warm for a switch to adaptive, skipping it costs
  // nothing else.
  //
  // The CPU budget is charged only the CPU a path costs beyond the wait: cpu_ns minus the
  // write class's offload wait (estimated as costs are, so an outlier does not move it),
  // never below 0. A program that busy-polls for every completion would spend that time
  // anyway, so it is never kept off a faster CPU path; a program that computes between
  // writes waits little and has its copies charged in full. A runtime that cannot tell
  // passes 0, and every CPU nanosecond is charged. A write is charged at most twice its
  // path's settled cost: a cpu_ns measured as wall time includes preemption.
  void observe(Path path, const WriteFeatures& f, uint64_t cost_ns, uint64_t cpu_ns,
               uint64_t nic_wait_ns = 0);
  // As above, with all of a CPU path's cost charged as CPU time (none of remote's: charges_budget).
  void observe(Path path, const WriteFeatures& f, uint64_t cost_ns) {
    observe(path, f, cost_ns, charges_budget(path) ? cost_ns : 0);
  }

  // What made the last adaptive decision take its path, for a runtime that says why a
  // write left the path it prefers: the path's estimates (cost, also for a reused
  // decision), another path's warm-up (cold), an exploration or trial (exploring), or the
  // CPU budget (budget).
  enum class Reason : uint8_t { cost, cold, exploring, budget };
  Reason reason() const { return reason_; }

  // Introspection for statistics and tests; never needed on the fast path.
  const PolicyStats& stats() const {
    pay_run();
    return stats_;
  }
  Path chosen_path(const WriteFeatures& f) const;  // the write class's current choice
  const CostEstimate& estimate(const WriteFeatures& f, Path p) const;
  const CostEstimate& nic_wait(const WriteFeatures& f) const;  // the class's offload wait
  bool is_hot(const WriteFeatures& f) const;

 private:
  struct WriteClass {
    CostEstimate estimate[kPathCount];
    CostEstimate nic_wait;  // what the program spends posting and polling an offloaded write
    Path chosen = Path::offload;
    bool has_chosen = false;  // set once every eligible path has a warm estimate
    Path trial_path = Path::offload;
    uint8_t trial_left = 0;
    uint8_t explored_last = 0;  // exploration's round-robin cursor
    // Warm-up samples sent and not yet observed, per path: a deep stream returns them a
    // queue's time later (20 ms behind 128 writes under TCG), and until then every write
    // would be another warm-up sample. Forgotten after kWarmWaits decisions that waited
    // on them (a sample the runtime could not observe never comes).
    uint8_t warming[kPathCount] = {};
    uint8_t warm_waits = 0;
    // Per path, the part of its cost that is this thread's CPU time, in 1/kShareOne (a
    // decayed mean of its samples' cpu_ns / cost_ns): all of a direct write's, an inline
    // or stage write's post. What an unsampled write is charged, and what makes a
    // decision steady under a capped budget, is that part of the path's estimate: its
    // whole latency put an inline path that did not draw on the budget out of reuse.
    uint16_t cpu_share[kPathCount] = {kShareOne, kShareOne, kShareOne, kShareOne, kShareOne, kShareOne};
  };
  static constexpr uint16_t kShareOne = 256;
  static_assert(kPathCount == 6, "cpu_share's initialiser names every path");
  // What a write of `p` in `wc` usually costs this thread's CPU (0 for a path the budget
  // does not cap).
  static uint64_t usual_cpu_ns(const WriteClass& wc, Path p) {
    if (!charges_budget(p)) return 0;
    const unsigned i = index_of(p);
    return uint64_t{wc.estimate[i].settled_ns()} * wc.cpu_share[i] / kShareOne;
  }
  static constexpr uint8_t kWarmWaits = 255;

  // The last adaptive decision, while the next may reuse it (decide()).
  struct Settled {
    Tunables t;
    uint64_t page = 0;
    uint32_t length = 0;
    uint32_t sge_count = 0;
    uint32_t rkey = 0;
    uint64_t key = 0;  // its target page's sketch key
    HotnessSketch::Slots slots{};
    PathSet eligible;
    PathSet explorable;  // class_eligible(): what its draws visit
    bool peer_local = false;
    bool nic_outstanding = false;
    const WriteClass* cls = nullptr;
    bool explores = false;  // its decisions count down to an exploration
    uint8_t explore_thin = 0;  // ... drawn 2^-explore_thin as likely (explore_thinning())
    Path path = Path::offload;
    bool live = false;
    bool hot = false;           // its page's hotness when it was decided: its class's
    mutable uint32_t touches_left = 0;  // reuses whose hotness is known without the sketch
    uint64_t waived_ns = 0;     // what an unsampled decision adds to budget_waived_ns
    uint64_t charged_ns = 0;    // ... and charges the budget (charge_cpu())
    uint16_t sample_every = kSteadySampleEvery;  // its steady sampling interval
  };

  bool settled_matches(const WriteFeatures& f, const Tunables& t) const { return settled_differs(f, t) == 0; }
  // Whether exploration's countdown is drawn for another thinning than settled decision
  // s's (another class's draw drew it anew): s's next decision draws it again, in full.
  bool draws_elsewise(const Settled& s) const { return s.explores && s.explore_thin != explore_thin_; }
  // Nonzero when f or t is not what the settled decision saw: every field compared
  // without a branch, where == and && make one each (and GCC turns a memcmp of the
  // tunables into a call).
  uint64_t settled_differs(const WriteFeatures& f, const Tunables& t) const {
    return settled_differs_beside_target(f, t) | settled_target_differs(f);
  }
  // Nonzero when f's target (rkey, page) is not the settled decision's.
  uint64_t settled_target_differs(const WriteFeatures& f) const {
    return (f.rkey ^ settled_.rkey) | ((f.remote_addr >> kTargetPageShift) ^ settled_.page);
  }
  // The same, but for the target (rkey, page): what a write's class depends on besides
  // the target page's hotness. Nothing else of the policy reads the target.
  uint64_t settled_differs_beside_target(const WriteFeatures& f, const Tunables& t) const {
    return differs_beside_target(settled_, f, t);
  }
  static uint64_t differs_beside_target(const Settled& s, const WriteFeatures& f, const Tunables& t) {
    const uint32_t diff = (f.length ^ s.length) | (f.sge_count ^ s.sge_count) |
                          uint32_t(f.eligible.bits() ^ s.eligible.bits()) |
                          uint32_t(f.peer_local ^ s.peer_local) |
                          uint32_t(f.nic_outstanding ^ s.nic_outstanding);
    return diff | tunables_differ(t, s.t);
  }
  bool settled_on_target(const WriteFeatures& f) const { return settled_target_differs(f) == 0; }
  // Nonzero when t != u: word by word, unrolled (a loop over the 4-byte fields cost 100
  // instructions a write, most of a settled decision).
  static uint64_t tunables_differ(const Tunables& t, const Tunables& u) {
    static_assert(std::has_unique_object_representations_v<Tunables> && sizeof(Tunables) % 4 == 0);
    const auto word = [](const Tunables& x, std::size_t at, auto zero) {
      decltype(zero) w;
      std::memcpy(&w, reinterpret_cast<const char*>(&x) + at, sizeof(w));
      return uint64_t{w};
    };
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      uint64_t diff = ((word(t, 8 * I, uint64_t{}) ^ word(u, 8 * I, uint64_t{})) | ... | 0);
      if constexpr (sizeof(Tunables) % 8 != 0)
        diff |= word(t, sizeof(Tunables) - 4, uint32_t{}) ^ word(u, sizeof(Tunables) - 4, uint32_t{});
      return diff;
    }
    (std::make_index_sequence<sizeof(Tunables) / 8>{});
  }
  // A reuse of the run arm_reuse() allowed: what it decides by now (its exploration's
  // countdown, its charge on a capped budget), the rest counted by pay_run().
  void take_reuse(Path& p) {
    --reuse_left_;
    if (reuse_left_ == draw_at_) [[unlikely]]
      pass_draw();
    if (settled_.charged_ns != 0) [[unlikely]]
      charge_settled();
    sampled_ = false;
    p = settled_.path;
  }
  // The run's reuses take_reuse() took and did not count: what a whole decision counts for
  // each (decide_settled()), counted at once before anything reads it (every entry but the
  // reuses'). Within a run those counts only move by one a reuse and nothing reads them,
  // so counting late counts them exactly (tests/policy/settled_test.cpp).
  void pay_run() const {
    const uint32_t n = run_armed_ - reuse_left_;
    if (n == 0) return;
    run_armed_ = reuse_left_;
    stats_.decisions += n;
    stats_.reused += n;
    stats_.budget_waived_ns += uint64_t{n} * settled_.waived_ns;
    sample_countdown_ = static_cast<uint16_t>(sample_countdown_ - n);
    explore_left_ -= uint64_t{n} * settled_.explores;
    settled_.touches_left -= n;
    touches_owed_ += n;
  }
  // The run ends: its reuses counted, none left.
  void end_run() {
    pay_run();
    reuse_left_ = 0;
    run_armed_ = 0;
  }
  // An unsampled write of the settled decision: what its usual CPU time waives and, when
  // the decision draws on the budget, charges, as charge_cpu() split it for the decision.
  void count_unsampled_settled() {
    stats_.budget_waived_ns += settled_.waived_ns;
    if (settled_.charged_ns != 0) [[unlikely]]
      charge_settled();
  }
  void charge_settled() {
    budget_.charge(settled_.charged_ns);
    stats_.budget_charged_ns += settled_.charged_ns;
    parked_.live = false;
  }
  // Whether a settled decision that draws on a capped budget must make way for a whole
  // one: the balance, refilled at `now_ns` when the write read the clock, is spent, and a
  // whole decision would deny the CPU path.
  bool settled_budget_spent(uint64_t now_ns, const Tunables& t) {
    if (settled_.charged_ns == 0) return false;
    if (now_ns != 0) budget_.refill(now_ns, t.cpu_budget_pct);
    return !budget_.allows_cpu(t.cpu_budget_pct);
  }

  // After a slow decision: how many of the next settled_matches() writes decide_reused()
  // may take. decide_settled()'s countdowns cannot reach what it checks within them (a
  // sample, a touch of the sketch, an exploration), nor does the budget want a clock, so
  // its decrements are all they do. observe() disarms it.
  void arm_reuse() {
    if (!settled_.live || sample_countdown_ <= 1 || (budget_enforced_ && budget_.tokens_ns() <= 0) ||
        draws_elsewise(settled_))
      return;
    uint64_t n = sample_countdown_ - 1u;
    if (settled_.touches_left < n) n = settled_.touches_left;
    // A draw within the reuse that explores nothing is passed (pass_draw()).
    if (settled_.explores && explore_left_ - 1 < n && settled_draw_explores() != settled_.path) n = explore_left_ - 1;
    // A decision that draws on the budget: as many as leave the balance positive before
    // each, as a whole decision would find it.
    if (settled_.charged_ns != 0) {
      const uint64_t c =
          settled_.charged_ns < CpuBudget::kMaxChargeNs ? settled_.charged_ns : CpuBudget::kMaxChargeNs;
      const int64_t tokens = budget_.tokens_ns();
      const uint64_t k = tokens > 0 ? (static_cast<uint64_t>(tokens) + c - 1) / c : 0;
      if (k < n) n = k;
    }
    reuse_left_ = static_cast<uint32_t>(n);
    run_armed_ = reuse_left_;
    mark_run();
  }
  // Where the run's reuses reach exploration's draw (reuse_left_ == draw_at_ after one is
  // taken, a draw the run passes), and how many of them are plain (reuse_left_ above
  // plain_floor_: before the draw, and no charge on a capped budget), so that a reuse
  // compares one count. With the countdowns as pay_run() leaves them.
  void mark_run() {
    draw_at_ = settled_.explores && explore_left_ - 1 < reuse_left_
                   ? reuse_left_ - static_cast<uint32_t>(explore_left_)
                   : kNoDraw;
    plain_floor_ = settled_.charged_ns != 0 ? UINT32_MAX : draw_at_ == kNoDraw ? 0 : draw_at_ + 1;
  }
  // A write settled_matches(): count what a full decision counts, and take the settled
  // path unless the page's hotness changed or exploration is due.
  //
  // The reuse leaves the sketch alone: its touches are owed and paid, in order, before
  // anything else reads or touches the sketch (pay_touches()). Within touches_left its
  // answer cannot change, so the write's class is known; beyond, the touch is made now.
  Path decide_settled(const WriteFeatures& f, const Tunables& t) {
    ++stats_.decisions;
    sampled_ = --sample_countdown_ == 0;
    if (sampled_) sample_countdown_ = settled_.sample_every;  // a reuse follows a steady decision
    if (settled_.touches_left == 0) [[unlikely]] {
      pay_touches();
      return decide_in_class(f, t, touch_target(settled_.peer_local, settled_.key));
    }
    if (settled_.explores && (explore_left_ == 1 || draws_elsewise(settled_))) [[unlikely]]
      return decide_settled_draw(f, t);
    if (settled_budget_spent(f.now_ns, t)) [[unlikely]] {
      pay_touches();
      return decide_in_class(f, t, touch_target(settled_.peer_local, settled_.key));
    }
    --settled_.touches_left;
    ++touches_owed_;
    if (settled_.explores) {
      --explore_left_;
      if (f.now_ns != 0) budget_.refill(f.now_ns, t.cpu_budget_pct);
    }
    if (!sampled_) count_unsampled_settled();
    ++stats_.reused;
    return settled_.path;
  }
  // decide_elsewhere_as() for a write known to be the settled one's beside its target and
  // on another target: the rest of its checks, and the decision.
  bool take_elsewhere_as(const WriteFeatures& f, const Tunables& t, Path want) {
    pay_run();
    const Settled& s = settled_;
    if (!s.live || s.path != want || reuse_ != Reuse::on || s.charged_ns != 0 || wants_clock() ||
        (s.explores && explore_left_ == 1) || draws_elsewise(s) || resident_on(f.peer_local))
      return false;
    // The touch decide_settled_elsewhere() makes, foreseen: owed touches first, as it pays
    // them (paying early changes nothing a later decision sees).
    pay_touches();
    const uint64_t key = HotnessSketch::key_of(f.rkey, f.remote_addr >> kTargetPageShift);
    if ((hotness_.count(HotnessSketch::slots_of_key(key)) + 1 >= HotnessSketch::kHotCount) != s.hot)
      return false;
    settle_elsewhere(f, t, key);
    return true;
  }
  // A write like the settled one but to another target (random targets, a scan): the
  // sketch is touched for its page, and the settled path taken when that page is in the
  // settled write's hotness class, as a full decision would take it; then the settled
  // decision is the new page's.
  Path decide_settled_elsewhere(const WriteFeatures& f, const Tunables& t);
  void settle_elsewhere(const WriteFeatures& f, const Tunables& t, uint64_t key);
  Path decide_settled_draw(const WriteFeatures& f, const Tunables& t);
  Path decide_full(const WriteFeatures& f, const Tunables& t);
  Path decide_adaptive(const WriteFeatures& f, const Tunables& t);
  Path decide_in_class(const WriteFeatures& f, const Tunables& t, bool hot);
  Path choose(WriteClass& wc, const WriteFeatures& f, const Tunables& t, PathSet eligible, bool cpu_allowed,
              bool& settled);
  bool explore_due(uint32_t explore_shift, unsigned thin, uint16_t& coin);
  void next_draw();
  Path explore_from(WriteClass& wc, const WriteFeatures& f, const Tunables& t, PathSet explorable, Path chosen);
  static uint64_t explored_ns(const WriteClass& wc, bool nic_outstanding, Path chosen, Path other);
  static bool explore_outcome(const WriteClass& wc, bool nic_outstanding, Path chosen, Path other,
                              uint16_t coin, unsigned thin);
  static unsigned explore_thinning(const WriteClass& wc, bool nic_outstanding, Path chosen, PathSet others,
                                   uint32_t explore_shift);
  Path settled_draw_explores() const;
  void pass_draw();
  static Path cheapest_warm(const WriteClass& wc, PathSet eligible, uint64_t& ns);
  static bool switches_to(const WriteClass& wc, Path best, uint64_t best_ns, PathSet eligible,
                          bool nic_outstanding, const Tunables& t);
  bool settled_still_holds(Settled& s);
  bool unpark(const WriteFeatures& f, const Tunables& t, bool hot);
  static bool trial_due(const WriteClass& wc, Path chosen, PathSet explorable);
  uint64_t charge_of(const WriteClass& wc, Path path, uint64_t cpu_ns, uint64_t& waived_ns) const;
  void settled_charge(const WriteClass& wc, Path p, bool budget_capped, uint64_t& waived_ns,
                      uint64_t& charged_ns) const;
  static uint16_t steady_every(const WriteClass& wc, Path p, PathSet eligible);
  static uint16_t sample_every_of(const WriteClass& wc, Path p, PathSet eligible, uint64_t charged_ns);
  void learn(Path path, const WriteFeatures& f, uint64_t cost_ns, uint64_t cpu_ns, uint64_t nic_wait_ns);
  void settle(const WriteFeatures& f, const Tunables& t, bool hot, bool explores, Path p, uint64_t waived_ns,
              uint64_t charged_ns, uint16_t sample_every);
  void retarget(const WriteFeatures& f, bool hot, uint64_t key);
  void charge_cpu(WriteClass& wc, Path path, uint64_t cpu_ns);
  // Inline to its test: most decisions owe nothing, and a call cost more than the test.
  [[gnu::always_inline]] void pay_touches() const {
    pay_run();
    if (touches_owed_ != 0) pay_touches_owed();
  }
  [[gnu::noinline]] void pay_touches_owed() const {
    if (!resident_on(settled_.peer_local)) {  // the sketch alone: at once (touch_many)
      hotness_.touch_many(settled_.slots, touches_owed_);
      touches_owed_ = 0;
      return;
    }
    for (; touches_owed_ != 0; --touches_owed_) touch_target(settled_.peer_local, settled_.key);
  }
  // Counts a write to the target page of `key` and says whether the page is hot: with the
  // target NICs' cache size known (target_xlate_pages), a write to another host's page is
  // hot when the page is in the resident set; otherwise when the sketch says so.
  bool touch_target(bool peer_local, uint64_t key) const {
    const bool hot = hotness_.touch(HotnessSketch::slots_of_key(key));
    return resident_on(peer_local) ? resident_.touch(key, hotness_) : hot;
  }
  bool resident_on(bool peer_local) const { return !peer_local && resident_.active(); }
  WriteClass& class_of(const WriteFeatures& f, bool hot) { return classes_[class_index(f, hot)]; }
  const WriteClass& class_of(const WriteFeatures& f, bool hot) const { return classes_[class_index(f, hot)]; }
  static unsigned class_index(const WriteFeatures& f, bool hot);

  // What a reused decision reads and writes comes first, together: under an emulator that
  // flushes its TLB at every syscall, each page a write touches costs a page walk.
  Settled settled_;
  // The settled decision of the other hotness, parked when a write of this one replaced
  // it, and still live while nothing it depended on changed: a hot set's writes among
  // cold ones turn between the two without a full decision at each turn.
  Settled parked_;
  mutable PolicyStats stats_;              // pay_run() counts into it, sample_countdown_,
                                           // settled_.touches_left and touches_owed_
  mutable uint16_t sample_countdown_ = 1;  // adaptive decisions until the next periodic sample
  uint32_t reuse_left_ = 0;       // decide_reused() decisions left (arm_reuse())
  mutable uint32_t run_armed_ = 0;  // reuse_left_ when the run was armed, less those counted
  static constexpr uint32_t kNoDraw = UINT32_MAX;
  uint32_t draw_at_ = kNoDraw;    // reuse_left_ at the run's draw (mark_run())
  uint32_t plain_floor_ = 0;      // the run's reuses are plain while reuse_left_ is above it
  uint64_t settled_gen_ = 1;      // settled_gen(): a whole decision or an observe() moves it
  bool sampled_ = true;           // the last decision's write is to be observed
  bool steady_ = false;           // the last adaptive decision was steady (kSteadySampleEvery)
  uint16_t steady_every_ = kSteadySampleEvery;  // ... and its sampling interval (steady_every())
  bool budget_enforced_ = false;  // the last decision ran under a CPU cap
  Reason reason_ = Reason::cost;  // the last adaptive decision's (reason())
  Reuse reuse_;
  uint32_t hysteresis_pct_ = 0;  // the last adaptive decision's, for observe()
  // Touches of settled_'s page the sketch has not had yet (decide_settled()).
  mutable uint32_t touches_owed_ = 0;
  // Decisions at exploration's draw point until the next one explores: a geometric
  // countdown, drawn anew after each, for explore_base_ and explore_thin_ (explore_due()).
  mutable uint64_t explore_left_ = 0;  // less a run's reuses until pay_run() counts them
  uint32_t explore_base_ = UINT32_MAX;      // the explore_shift tunable explore_gaps_ are for
  static constexpr unsigned kMaxThin = 15;  // (0x10000 << thin) * a 32-bit estimate fits
  static constexpr uint8_t kNoThin = UINT8_MAX;
  uint8_t explore_thin_ = kNoThin;           // the countdown's draws are 2^-thin as likely
  uint16_t explore_coin_ = 0;                // the coin of that next draw (explore_outcome())
  GeometricGap explore_gaps_[kMaxThin + 1];  // by thin, for explore_base_
  CpuBudget budget_;
  Prng prng_;
  mutable HotnessSketch hotness_;
  WriteClass classes_[kClasses];
  mutable ResidentSet resident_;  // off until target_xlate_pages is set
};

}  // namespace unload::policy
