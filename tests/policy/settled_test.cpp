// Reusing a settled decision changes nothing: the same stream gives the same paths, samples, clock requests
// and statistics with reuse on and off, and reuse does happen, on one page and across pages, with the
// sketch's hotness and with a resident set.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "test_support.hpp"

namespace unload::policy {
namespace {

using testing::tunables_in;
using testing::write_of;

// What one decision showed the runtime.
struct Seen {
  bool wanted_clock;
  Path path;
  bool sampled;
  bool operator==(const Seen&) const = default;
};

// A program as the runtime drives the policy: runs of writes to one page, sometimes
// another page, length or eligibility, NIC requests outstanding now and then, and the
// tunables changed while it runs. Costs are noise-free per path; direct turns 3x dearer
// halfway, past the other CPU paths (a switch), and back later (a trial, then a switch);
// offloaded writes report a wait as a latency-bound program's do.
struct Stream {
  uint64_t seed;
  uint32_t compute_ns;       // > 0: the program computes between writes and waits little
  bool pipelined;            // a write is observed after the next one is decided, as with two in flight
  uint64_t pages = 4;        // target pages; with many, their counts hover at the hotness threshold
  uint64_t run_length = 64;  // writes to one page before the next, on average
  uint32_t xlate_pages = 0;  // nonzero: the peer is on another host and this is target_xlate_pages
  uint64_t reused_pct = 50;  // decisions that must have been reused, at least
  uint64_t hot_set = 0;      // nonzero: 9 targets in 10 are among these pages, the rest among `pages` others
  uint32_t cpu_budget_pct = kDefaultTunables.cpu_budget_pct;
  // With a hot set: a CPU path costs 4000 to a hot page and 9000 to a cold one (the NIC
  // 10000 to either; direct's step as above), so that only the cold class's copies
  // outlast the wait and are charged.
  bool hot_pages_cheaper = false;
  // The runtime's express lane: decide_reused_as(direct) first, decide() when it declines.
  bool shortcut = false;
  // ... and with its memo: after a write of a shape was reused as direct, the next of the
  // same features and tunables beside the target asks decide_reused_vouched() first.
  bool vouched = false;
  // The runtime's NIC lane for another target page: decide_elsewhere_as(the last path)
  // after decide_reused() said false, decide_unreused() when it declines.
  bool elsewhere = false;
  mutable uint64_t elsewhere_taken = 0;
  // The lanes as the runtime has them: the voucher and the shortcut asked before the
  // clock (a reused write reads none), wants_clock() only for a write they decline. The
  // reuses then run on uncounted (Policy::pay_run()).
  bool clock_late = false;

  static bool same_beside_target(const WriteFeatures& a, const Tunables& at, const WriteFeatures& b,
                                 const Tunables& bt) {
    return a.length == b.length && a.sge_count == b.sge_count && a.eligible == b.eligible &&
           a.peer_local == b.peer_local && a.nic_outstanding == b.nic_outstanding &&
           std::memcmp(&at, &bt, sizeof at) == 0;
  }
  mutable uint64_t vouched_reuses = 0;
  // ... and the voucher's plain entry before it, as the runtime's plain lane asks
  // (decide_reused_vouched_plainly(), the memo's path taken when it says true).
  bool plainly = false;
  mutable uint64_t plain_reuses = 0;
  mutable uint64_t charged_asked = 0, charged_plain = 0;  // the plain entry asked with a charge due

  std::vector<Seen> run(Policy& policy) const {
    Prng rng(seed);
    Tunables t = tunables_in(Mode::adaptive);
    t.target_xlate_pages = xlate_pages;
    t.cpu_budget_pct = cpu_budget_pct;
    // Across hosts remote takes direct's place: the costs below are the CPU path's.
    WriteFeatures f = write_of(64, PathSet::cpu_paths(), xlate_pages == 0);
    std::vector<Seen> seen;
    uint64_t now = 1;
    struct Sample {
      Path p;
      WriteFeatures f;
      uint64_t cost, wait;
    };
    std::vector<Sample> pending;
    struct Memo {
      uint64_t gen = 0;
      WriteFeatures f{};
      Tunables t{};
    } memo;
    Path last = Path::offload;
    for (uint64_t i = 0; i < 40'000; ++i) {
      const uint64_t r = rng.next();
      if (r % run_length == 0) {
        const uint64_t page = hot_set && rng.next() % 10 != 0 ? rng.next() % hot_set : hot_set + rng.next() % pages;
        f.remote_addr = page << kTargetPageShift;
      }
      if (r % 512 == 1) f.length = r % 1024 < 512 ? 64 : 4096;
      if (r % 1024 == 2) f.eligible = f.eligible == PathSet() ? PathSet::cpu_paths() : PathSet();
      f.nic_outstanding = r % 256 == 3;
      if (i == 10'000) t.direct_max = 32;
      if (i == 12'000) t.direct_max = kDefaultTunables.direct_max;
      if (i == 15'000) t.explore_shift = 3;
      if (i == 18'000) t.mode = static_cast<uint32_t>(Mode::unload);
      if (i == 18'100) t.mode = static_cast<uint32_t>(Mode::adaptive);
      if (i == 25'000) t.cpu_budget_pct = 100;
      if (i == 27'000 && xlate_pages) t.target_xlate_pages = xlate_pages / 2;  // the set starts again

      Path p;
      const bool vouch = vouched && memo.gen != 0 && same_beside_target(memo.f, memo.t, f, t);
      bool lane_took = false;
      if (clock_late) {
        f.now_ns = 0;
        const bool charges = vouch && plainly && policy.settled_charges();
        charged_asked += charges;
        if (vouch && plainly &&
            policy.decide_reused_vouched_plainly(memo.gen, f.remote_addr >> kTargetPageShift)) {
          p = Path::unload_direct;
          ++plain_reuses;
          charged_plain += charges;
          lane_took = true;
        } else if (vouch && policy.decide_reused_vouched(memo.gen, f.remote_addr >> kTargetPageShift, p)) {
          ++vouched_reuses;
          lane_took = true;
        } else if ((shortcut || vouched) && policy.decide_reused_as(f, t, Path::unload_direct)) {
          p = Path::unload_direct;
          memo = {policy.settled_gen(), f, t};
          lane_took = true;
        }
      }
      const bool wanted = !lane_took && policy.wants_clock();
      f.now_ns = wanted ? now : 0;
      if (lane_took) {
      } else if (!clock_late && vouch &&
                 policy.decide_reused_vouched(memo.gen, f.remote_addr >> kTargetPageShift, p)) {
        ++vouched_reuses;
      } else if ((shortcut || vouched) && policy.decide_reused_as(f, t, Path::unload_direct)) {
        p = Path::unload_direct;
        memo = {policy.settled_gen(), f, t};
      } else if (elsewhere && !policy.decide_reused(f, t, p)) {
        if (policy.decide_elsewhere_as(f, t, last)) {
          p = last;
          ++elsewhere_taken;
        } else {
          p = policy.decide_unreused(f, t);
        }
      } else if (!elsewhere) {
        p = policy.decide(f, t);
      }
      last = p;
      seen.push_back({wanted, p, policy.sampled()});
      const uint64_t direct_ns = i < 20'000 || i >= 30'000 ? 3000 : 9000;
      const bool cheapest = p == Path::unload_direct || p == Path::unload_remote;
      uint64_t cost = p == Path::offload ? 10'000 : cheapest ? direct_ns : 7000;
      if (hot_pages_cheaper && p != Path::offload) {
        const uint64_t base = f.remote_addr >> kTargetPageShift < hot_set ? 4000 : 9000;
        cost = cheapest ? base * direct_ns / 3000 : base + 500;  // direct's step, as above
      }
      const uint64_t wait = p == Path::offload && cost > compute_ns ? cost - compute_ns : 0;
      const bool sampled = policy.sampled();
      for (const Sample& x : pending) policy.observe(x.p, x.f, x.cost, is_cpu_path(x.p) ? x.cost : 0, x.wait);
      pending.clear();
      if (sampled) {
        if (pipelined)
          pending.push_back({p, f, cost, wait});
        else
          policy.observe(p, f, cost, is_cpu_path(p) ? cost : 0, wait);
      }
      now += cost + compute_ns;
    }
    return seen;
  }
};

void expect_same_stats(const PolicyStats& a, const PolicyStats& b) {
  EXPECT_EQ(a.decisions, b.decisions);
  EXPECT_EQ(a.warmups, b.warmups);
  EXPECT_EQ(a.explorations, b.explorations);
  EXPECT_EQ(a.draws, b.draws);
  EXPECT_EQ(a.trials, b.trials);
  EXPECT_EQ(a.switches, b.switches);
  EXPECT_EQ(a.budget_denials, b.budget_denials);
  EXPECT_EQ(a.budget_charged_ns, b.budget_charged_ns);
  EXPECT_EQ(a.budget_waived_ns, b.budget_waived_ns);
}

void expect_reuse_changes_nothing(const Stream& s) {
  Policy reusing(s.seed, Policy::Reuse::on);
  Policy full(s.seed, Policy::Reuse::off);
  const std::vector<Seen> a = s.run(reusing);
  const std::vector<Seen> b = s.run(full);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i], b[i]) << "decision " << i << ": path " << name_of(a[i].path) << " against "
                          << name_of(b[i].path);
  }
  expect_same_stats(reusing.stats(), full.stats());
  EXPECT_GE(full.stats().switches, 2u);
  EXPECT_GT(full.stats().trials, 0u);
  EXPECT_EQ(full.stats().reused, 0u);
  // Most writes repeat the one before: most decisions must have been reused.
  EXPECT_GT(reusing.stats().reused * 100, reusing.stats().decisions * s.reused_pct) << "seed " << s.seed;
}

TEST(policy_settled, ReuseChangesNoDecisionOfALatencyBoundProgram) {
  for (uint64_t seed : {1, 2, 3}) expect_reuse_changes_nothing({seed, 0, false});
}

TEST(policy_settled, ReuseChangesNoDecisionOfAProgramThatComputes) {
  // Its CPU writes are charged to the budget: their decisions are reused while the balance
  // stays positive (94-96 % of decisions; 69-72 % when each was decided in full).
  for (uint64_t seed : {4, 5}) {
    Stream s{seed, 20'000, false};
    s.reused_pct = 90;
    expect_reuse_changes_nothing(s);
  }
}

TEST(policy_settled, ReuseChangesNoDecisionOfAProgramThatComputesOnATightBudget) {
  // On a 2 % budget the balance runs dry within a reuse of one page's decision: the reuse
  // ends where a whole decision would first find it spent, and that decision denies.
  for (uint64_t seed : {30, 31}) {
    Stream s{seed, 8'000, false, 1, 64};
    s.cpu_budget_pct = 2;
    s.reused_pct = 40;
    expect_reuse_changes_nothing(s);
  }
}

TEST(policy_settled, ReuseChangesNoDecisionWhenSamplesArriveAWriteLate) {
  // A sample that starts a trial or moves the choice lands while a later decision is reused.
  for (uint64_t seed : {6, 7, 8}) expect_reuse_changes_nothing({seed, 0, true});
}

TEST(policy_settled, ReuseChangesNoDecisionAtTheHotnessThreshold) {
  // 150 pages take short runs of writes in turn: their counts hover about the threshold,
  // rising past it within a run and halved back below by the sweep.
  for (uint64_t seed : {9, 10, 11}) expect_reuse_changes_nothing({seed, 0, false, 150, 8});
}

TEST(policy_settled, ReuseChangesNoDecisionWhenEveryWriteTargetsAnotherPage) {
  // Random targets, as over a large buffer: a new page each write, over 16384 pages (all
  // cold), and over 256 (each written about as often as the hotness threshold asks).
  for (uint64_t seed : {12, 13}) expect_reuse_changes_nothing({seed, 0, false, 16384, 1});
  for (uint64_t seed : {14, 15}) expect_reuse_changes_nothing({seed, 0, false, 256, 1});
}

TEST(policy_settled, ReuseChangesNoDecisionWithAResidentSet) {
  // Writes to another host whose NIC caches target_xlate_pages: random targets over more
  // pages than the set holds (it fills, and stays), and runs over 150 pages with a set of
  // 64 (runs make pages hot enough to take a member's place). A page outside the set is
  // touched at every write, in case it may join: fewer decisions are reused.
  for (uint64_t seed : {16, 17}) expect_reuse_changes_nothing({seed, 0, false, 4096, 1, 64});
  for (uint64_t seed : {18, 19}) expect_reuse_changes_nothing({seed, 0, false, 150, 8, 64, 40});
}

TEST(policy_settled, ReuseChangesNoDecisionOfAHotSetAmongColdPages) {
  // Nine writes in ten to 16 pages, the rest over 4096, each to another page than the one
  // before: the hot and the cold class take turns, each with its own settled decision
  // (the other one parked), on this host (the sketch's hotness) and across hosts (a
  // resident set, where the cold pages' class takes remote and the hot one does not).
  for (uint64_t seed : {22, 23}) {
    Stream s{seed, 0, false, 4096, 1};
    s.hot_set = 16;
    s.reused_pct = 85;  // 75-79 % with the turns decided in full
    expect_reuse_changes_nothing(s);
  }
  for (uint64_t seed : {24, 25}) {
    Stream s{seed, 0, false, 4096, 1, 1024};
    s.hot_set = 16;
    s.reused_pct = 85;
    expect_reuse_changes_nothing(s);
  }
  // A program that computes half as long as the NIC takes, on a 2 % budget: the cold
  // class's copies outlast the wait and are charged (and denied when it runs dry), the hot
  // class's are waived, steady and parked by turns.
  for (uint64_t seed : {26, 27}) {
    Stream s{seed, 5'000, false, 4096, 1};
    s.hot_set = 16;
    s.cpu_budget_pct = 2;
    s.hot_pages_cheaper = true;
    s.reused_pct = 77;  // 69 and 76 % with the turns decided in full
    expect_reuse_changes_nothing(s);
  }
  // A program that computes for most of the NIC's time, on a 2 % budget, its samples
  // observed at once and a write late: the budget runs dry and refills by turns. A choice
  // made while it was dry (no CPU path's warm-up, trial or exploration) is not steady: the
  // write after a refill decides again.
  for (uint64_t seed : {28, 29}) {
    for (bool pipelined : {false, true}) {
      Stream s{seed, 8'000, pipelined, 4096, 1};
      s.hot_set = 16;
      s.cpu_budget_pct = 2;
      s.hot_pages_cheaper = true;
      s.reused_pct = 45;  // 49-55 %
      SCOPED_TRACE(::testing::Message() << "seed " << seed << (pipelined ? ", pipelined" : ""));
      expect_reuse_changes_nothing(s);
    }
  }
}

TEST(policy_settled, AShortcutForDirectAloneChangesNoDecision) {
  // Asked first whether the reused decision is direct, the policy says no without counting
  // anything when it is another path, so the full decision after it is the same.
  for (uint64_t seed : {20, 21}) {
    Stream s{seed, 0, false};
    s.shortcut = true;
    expect_reuse_changes_nothing(s);
  }
}

TEST(policy_settled, AVouchedReuseChangesNoDecision) {
  // The caller compares the shape, the policy the target page and its generation: every
  // decision as without reuse, and most of the reused ones taken on the caller's word.
  for (uint64_t seed : {22, 23}) {
    Stream s{seed, 0, false};
    s.vouched = true;
    expect_reuse_changes_nothing(s);
    EXPECT_GT(s.vouched_reuses, 5'000u) << "seed " << seed;
  }
}

TEST(policy_settled, ReusesCountedAtTheEndOfTheirRunChangeNoDecision) {
  // With the clock asked only when the lanes decline, runs of reuses go uncounted until
  // something reads what they count: every decision, sample and statistic as without reuse.
  for (uint64_t seed : {24, 25}) {
    for (const int lane : {0, 1, 2}) {  // the shortcut, the voucher, its plain entry first
      Stream s{seed, 0, false};
      s.shortcut = lane == 0;
      s.vouched = lane != 0;
      s.plainly = lane == 2;
      s.clock_late = true;
      SCOPED_TRACE(::testing::Message() << "seed " << seed << ", lane " << lane);
      expect_reuse_changes_nothing(s);
      if (lane == 1) {
        EXPECT_GT(s.vouched_reuses, 5'000u);
      }
      if (lane == 2) {  // most reuses plain; a draw due in one, the voucher's
        EXPECT_GT(s.plain_reuses, 5'000u);
        EXPECT_GT(s.vouched_reuses, 0u);
      }
    }
  }
  for (uint64_t seed : {9, 10}) {  // pages about the hotness threshold: the sketch's touches owed
    Stream s{seed, 0, false, 150, 8};
    s.shortcut = true;
    s.clock_late = true;
    s.reused_pct = 20;
    SCOPED_TRACE(::testing::Message() << "seed " << seed << ", threshold");
    expect_reuse_changes_nothing(s);
  }
  for (const bool plainly : {false, true}) {  // a program that computes: its copies charged as taken
    Stream s{26, 4000, false};
    s.vouched = true;
    s.plainly = plainly;
    s.clock_late = true;
    s.reused_pct = 40;
    expect_reuse_changes_nothing(s);
  }
  for (uint64_t seed : {30, 31}) {  // ... on a 2 % budget: the plain entry leaves a charged reuse alone
    Stream s{seed, 8'000, false, 1, 64};
    s.cpu_budget_pct = 2;
    s.vouched = true;
    s.plainly = true;
    s.clock_late = true;
    s.reused_pct = 40;
    SCOPED_TRACE(::testing::Message() << "seed " << seed << ", a tight budget");
    expect_reuse_changes_nothing(s);
    EXPECT_GT(s.charged_asked, 100u);
    EXPECT_EQ(s.charged_plain, 0u) << "a reuse with a charge due is the voucher's";
  }
}

TEST(policy_settled, ADecisionElsewhereForTheSettledPathChangesNoDecision) {
  // The NIC lane's question for a write to another page: every decision as without reuse,
  // over random targets (all cold, and about the hotness threshold), over runs, and with a
  // hot set among cold pages (its turns are declined), and many taken on those terms.
  const auto check = [](Stream s, uint64_t at_least) {
    s.elsewhere = true;
    SCOPED_TRACE(::testing::Message() << "seed " << s.seed);
    expect_reuse_changes_nothing(s);
    EXPECT_GT(s.elsewhere_taken, at_least);
  };
  for (uint64_t seed : {30, 31}) check({seed, 0, false, 16384, 1}, 10'000);
  for (uint64_t seed : {32, 33}) check({seed, 0, false, 256, 1}, 1'000);
  for (uint64_t seed : {34, 35}) check({seed, 0, false, 150, 8}, 1'000);
  for (uint64_t seed : {36, 37}) {
    Stream s{seed, 0, false, 4096, 1};
    s.hot_set = 16;
    s.reused_pct = 85;
    check(s, 1'000);
  }
}

// The same question asked step by step against the whole decision: a policy whose lane
// takes writes to other pages by decide_elsewhere_as() and one that decides every write
// (both reusing) agree after each write on the path, the sample, the clock wanted, the
// statistics and the voucher's generation (which the runtime's memos are keyed on), over
// random targets cold and at the hotness threshold, across rkeys, lengths and a change of
// the tunables, with exploration on.
TEST(policy_settled, ADecisionElsewhereIsTheWholeDecisionStepByStep) {
  // Asked as the NIC lane once asked it (decide_reused(), then decide_elsewhere_as()), as
  // the lanes ask it now, both questions in one (decide_reused_or_elsewhere_as()), and as
  // the express lane asks first with its memo's voucher (decide_reused_vouched(), then
  // decide_elsewhere_vouched(), for a write the same as the memo's beside its target).
  enum class Ask { two, one, vouched };
  for (const Ask ask : {Ask::two, Ask::one, Ask::vouched}) {
    for (const uint64_t pages : {16384u, 200u, 24u}) {
      SCOPED_TRACE(::testing::Message() << pages << " pages, asked " << static_cast<int>(ask));
      Policy lane(7), whole(7);
      Tunables t = tunables_in(Mode::adaptive);
      t.explore_shift = 4;
      WriteFeatures f = write_of(64, PathSet::cpu_paths(), true);
      Prng rng(pages);
      uint64_t now = 1, taken = 0, vouched_taken = 0, gen_moves = 0;
      Path last = Path::offload;
      struct Memo {
        uint64_t gen = 0;
        WriteFeatures f{};
        Tunables t{};
      } memo;
      for (int i = 0; i < 20'000; ++i) {
        const uint64_t r = rng.next();
        f.remote_addr = (r % pages) << kTargetPageShift;
        f.rkey = r % 97 == 0 ? 0x1234 : 0x5678;
        f.length = r % 89 == 0 ? 4096 : 64;  // beside the target: another class now and then
        if (i == 10'000) t.hysteresis_pct += 5;
        const bool clock = lane.wants_clock();
        ASSERT_EQ(clock, whole.wants_clock()) << "write " << i;
        f.now_ns = clock ? now : 0;
        const uint64_t gen_before = whole.settled_gen();
        Path a = last;
        const bool vouch = ask == Ask::vouched && memo.gen != 0 && f.rkey == memo.f.rkey &&
                           Stream::same_beside_target(memo.f, memo.t, f, t);
        if (vouch && (lane.decide_reused_vouched(memo.gen, f.remote_addr >> kTargetPageShift, a) ||
                      lane.decide_elsewhere_vouched(memo.gen, f.rkey, f.remote_addr))) {
          ++vouched_taken;
        } else if (ask != Ask::two) {
          if (lane.decide_reused_or_elsewhere_as(f, t, last, true)) {
            a = last;
            ++taken;
            memo = {lane.settled_gen(), f, t};
          } else {
            a = lane.decide(f, t);  // the memo stays, as the runtime's: its generation tells
          }
        } else if (!lane.decide_reused(f, t, a)) {
          if (lane.decide_elsewhere_as(f, t, last)) {
            a = last;
            ++taken;
          } else {
            a = lane.decide_unreused(f, t);
          }
        }
        const Path b = whole.decide(f, t);
        ASSERT_EQ(a, b) << "write " << i;
        ASSERT_EQ(lane.sampled(), whole.sampled()) << "write " << i;
        ASSERT_EQ(lane.settled_gen(), whole.settled_gen()) << "write " << i;
        gen_moves += whole.settled_gen() != gen_before;
        last = a;
        const uint64_t cost = a == Path::offload ? 10'000 : a == Path::unload_direct ? 3000 : 7000;
        if (lane.sampled()) {  // a latency-bound program: an offloaded write's cost is its wait
          const uint64_t cpu = is_cpu_path(a) ? cost : 0, wait = a == Path::offload ? cost : 0;
          lane.observe(a, f, cost, cpu, wait);
          whole.observe(b, f, cost, cpu, wait);
        }
        now += cost;
      }
      expect_same_stats(lane.stats(), whole.stats());
      EXPECT_EQ(lane.stats().reused, whole.stats().reused);
      EXPECT_GT(taken, ask == Ask::vouched ? 100u : 1'000u)
          << "the lane's question was asked and answered yes";
      if (ask == Ask::vouched) {
        EXPECT_GT(vouched_taken, 1'000u) << "the voucher was taken";
      }
      EXPECT_GT(gen_moves, 100u) << "writes under another rkey moved the voucher";
    }
  }
}

// A sample that confirms the choice keeps the reuse, from the very next write: of a class
// settled on mapped too (a peer on this host), which the check after a sample once
// rebuilt without the peer's locality and so without mapped.
TEST(policy_settled, ASampleThatConfirmsTheChoiceKeepsTheReuse) {
  for (const Path cheapest : {Path::unload_mapped, Path::unload_direct}) {
    Policy policy;
    Tunables t = tunables_in(Mode::adaptive);
    t.cpu_budget_pct = 100;
    const PathSet here = cheapest == Path::unload_mapped ? PathSet(Path::unload_mapped).with(Path::unload_direct)
                                                         : PathSet(Path::unload_direct).with(Path::unload_stage);
    const WriteFeatures f = write_of(4096, here, cheapest == Path::unload_mapped);
    const auto cost = [cheapest](Path p) -> uint64_t { return p == cheapest ? 1000 : 5000; };
    for (int i = 0; i < 2000; ++i) {
      const Path p = policy.decide(f, t);
      if (policy.sampled()) policy.observe(p, f, cost(p));
    }
    ASSERT_EQ(policy.chosen_path(f), cheapest);
    uint64_t confirmed = 0, kept = 0;
    for (int i = 0; i < 20'000; ++i) {
      Path p;
      if (!policy.decide_reused(f, t, p)) p = policy.decide_unreused(f, t);
      if (!policy.sampled() || p != cheapest) continue;
      policy.observe(p, f, cost(p));
      ++confirmed;
      kept += policy.decide_reused(f, t, p);
      if (policy.sampled()) policy.observe(p, f, cost(p));
    }
    ASSERT_GT(confirmed, 50u);
    EXPECT_GT(kept * 10, confirmed * 9) << name_of(cheapest) << ": " << kept << " of " << confirmed;
  }
}

// A voucher names one settled decision: once another shape's write was decided, a write
// of the vouched shape to the same page is not reused from that one's decision.
TEST(policy_settled, AVoucherEndsWithTheDecisionItNamed) {
  Policy policy;
  Tunables t = tunables_in(Mode::adaptive);
  t.cpu_budget_pct = 100;
  const WriteFeatures small = write_of(64, PathSet::cpu_paths(), true);
  const WriteFeatures large = write_of(4096, PathSet::cpu_paths(), true);
  const auto cost = [](Path p, const WriteFeatures& f) -> uint64_t {
    if (f.length == 64) return p == Path::unload_direct ? 1000 : 5000;
    return p == Path::unload_stage ? 1000 : 5000;
  };
  for (int i = 0; i < 4000; ++i) {
    const WriteFeatures& f = i % 2000 < 1000 ? small : large;
    const Path p = policy.decide(f, t);
    if (policy.sampled()) policy.observe(p, f, cost(p, f));
  }
  uint64_t gen = 0;
  for (int i = 0; i < 200 && gen == 0; ++i) {
    if (policy.decide_reused_as(small, t, Path::unload_direct))
      gen = policy.settled_gen();
    else if (const Path p = policy.decide(small, t); policy.sampled())
      policy.observe(p, small, cost(p, small));
  }
  ASSERT_NE(gen, 0u) << "a 64 B write reused as direct";
  // Nothing observed after it: only the decision itself can say the voucher is stale.
  ASSERT_EQ(policy.decide(large, t), Path::unload_stage);
  Path p = Path::offload;
  EXPECT_FALSE(policy.decide_reused_vouched(gen, small.remote_addr >> kTargetPageShift, p))
      << "reused as " << name_of(p) << " from the 4 KiB write's decision";
}

// A voucher names the settled decision, not the moment: a sample that confirms it, and a
// decision that settles it again (the end of a reuse), leave a write of the vouched shape
// reused from it, so that a runtime's many QPs of one shape (each with its own memo) do not
// each ask again after every sample.
TEST(policy_settled, AVoucherOutlivesWhatConfirmsItsDecision) {
  Policy policy;
  Tunables t = tunables_in(Mode::adaptive);
  t.cpu_budget_pct = 100;
  const WriteFeatures f = write_of(64, PathSet::cpu_paths(), true);
  const auto cost = [](Path p) -> uint64_t { return p == Path::unload_direct ? 1000 : 5000; };
  uint64_t gen = 0;
  for (int i = 0; i < 4000 && gen == 0; ++i) {
    if (policy.decide_reused_as(f, t, Path::unload_direct))
      gen = policy.settled_gen();
    else if (const Path p = policy.decide(f, t); policy.sampled())
      policy.observe(p, f, cost(p));
  }
  ASSERT_NE(gen, 0u) << "a 64 B write reused as direct";
  // As the express lane: the voucher first, then the shortcut that renews it, then the
  // whole decision (a sample due, an exploration drawn) and its sample.
  const uint64_t page = f.remote_addr >> kTargetPageShift;
  unsigned renewed = 0, confirmed = 0;
  for (int i = 0; i < 4000; ++i) {
    Path p;
    if (policy.decide_reused_vouched(gen, page, p)) {
      ASSERT_EQ(p, Path::unload_direct);
    } else if (policy.decide_reused_as(f, t, Path::unload_direct)) {
      gen = policy.settled_gen();
      ++renewed;
    } else if (p = policy.decide_unreused(f, t); policy.sampled()) {
      policy.observe(p, f, cost(p));
      ++confirmed;
    }
  }
  ASSERT_GT(confirmed, 20u);
  EXPECT_LT(renewed * 2, confirmed) << "renewed " << renewed << " times for " << confirmed << " samples";
}

// A runtime that stops asking the policy for a settled decision's writes (a QP settled on
// the NIC) must know when that decision draws on the budget: a program that computes
// between writes is charged for its CPU writes, one that waits for each is not.
TEST(policy_settled, ADecisionThatDrawsOnTheBudgetSaysSo) {
  for (const bool computes : {true, false}) {
    Policy policy;
    const Tunables t = tunables_in(Mode::adaptive);  // the default budget, capped
    WriteFeatures f = write_of(64, PathSet(Path::unload_inline), false);
    uint64_t reused = 0, charging = 0, now = 1;
    for (int i = 0; i < 4000; ++i) {
      f.now_ns = policy.wants_clock() ? now : 0;
      Path p;
      const bool was_reused = policy.decide_reused(f, t, p);
      if (!was_reused) p = policy.decide_unreused(f, t);
      if (was_reused && p == Path::unload_inline) {
        ++reused;
        charging += policy.settled_charges();
      }
      // Inline: 1000 ns, all of it CPU; the NIC 5000 ns, all of it waited for unless the
      // program computes meanwhile.
      if (policy.sampled())
        policy.observe(p, f, p == Path::offload ? 5000 : 1000, p == Path::offload ? 0 : 1000,
                       p == Path::offload && !computes ? 5000 : 0);
      now += (p == Path::offload ? 5000 : 1000) + (computes ? 10'000 : 0);
    }
    ASSERT_GT(reused, 1000u) << (computes ? "computes" : "waits");
    EXPECT_EQ(charging, computes ? reused : 0u) << (computes ? "computes" : "waits");
  }
}

TEST(policy_settled, ATunableChangeTakesEffectAtTheNextWrite) {
  Policy policy;
  Tunables t = tunables_in(Mode::adaptive);
  t.cpu_budget_pct = 100;
  WriteFeatures f = write_of(64, PathSet::cpu_paths(), true);
  for (int i = 0; i < 2000; ++i) {
    const Path p = policy.decide(f, t);
    if (policy.sampled()) policy.observe(p, f, p == Path::unload_direct ? 1000 : 5000);
  }
  ASSERT_EQ(policy.decide(f, t), Path::unload_direct);
  ASSERT_GT(policy.stats().reused, 0u);
  t.direct_max = 0;
  EXPECT_NE(policy.decide(f, t), Path::unload_direct);
}

}  // namespace
}  // namespace unload::policy
