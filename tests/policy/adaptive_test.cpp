// Adaptive mode's rules in isolation: warm-up then the cheapest path, hysteresis, stage only past
// inline's reach, the fence cost of going direct, exploration rate, remote outside the CPU budget,
// sampling, write classes kept apart, and seeded determinism.
#include <gtest/gtest.h>

#include <functional>
#include <vector>

#include "test_support.hpp"

namespace unload::policy {
namespace {

using testing::tunables_in;
using testing::write_of;

using CostOf = std::function<uint64_t(Path, uint64_t index)>;

// Runs `writes` noise-free decisions of one write shape, observing those the policy samples,
// as the runtime does; returns how many took `counted`. Each write targets a different
// page, so every one stays in the cold class of its shape.
uint64_t run(Policy& policy, const Tunables& t, WriteFeatures f, uint64_t writes, const CostOf& cost,
             Path counted = Path::offload, uint64_t* index = nullptr) {
  uint64_t local_index = 0;
  uint64_t& i = index ? *index : local_index;
  uint64_t hits = 0;
  for (uint64_t n = 0; n < writes; ++n, ++i) {
    f.now_ns = i * 1000;
    f.remote_addr = (i % (1u << 24)) << kTargetPageShift;
    const Path p = policy.decide(f, t);
    hits += p == counted;
    if (policy.sampled()) policy.observe(p, f, cost(p, i));
  }
  return hits;
}

TEST(policy_adaptive, WarmsEveryEligiblePathThenPicksTheCheapest) {
  Policy policy;
  const Tunables t = tunables_in(Mode::adaptive);
  const WriteFeatures f = write_of(4096, PathSet(Path::unload_stage));
  const CostOf cost = [](Path p, uint64_t) { return p == Path::offload ? 3000 : 2000; };
  uint64_t i = 0;
  run(policy, t, f, 2 * CostEstimate::kWindow, cost, Path::offload, &i);
  EXPECT_EQ(policy.estimate(f, Path::offload).samples(), CostEstimate::kWindow);
  EXPECT_EQ(policy.estimate(f, Path::unload_stage).samples(), CostEstimate::kWindow);
  EXPECT_EQ(policy.stats().warmups, 2 * CostEstimate::kWindow);
  EXPECT_EQ(policy.stats().switches, 0u);
  run(policy, t, f, 1, cost, Path::offload, &i);
  EXPECT_EQ(policy.chosen_path(f), Path::unload_stage);
  EXPECT_EQ(policy.stats().switches, 0u);  // a first choice is not a switch
}

// Offload is chosen; then stage becomes 15% cheaper than it.
uint64_t stage_writes_after_a_15pct_gain(uint32_t hysteresis_pct, Path* chosen_at_end) {
  Policy policy;
  Tunables t = tunables_in(Mode::adaptive);
  t.hysteresis_pct = hysteresis_pct;
  const WriteFeatures f = write_of(4096, PathSet(Path::unload_stage));
  const CostOf cost = [](Path p, uint64_t i) -> uint64_t {
    if (p == Path::offload) return 2000;
    return i < 1000 ? 2600 : 1700;
  };
  uint64_t i = 0;
  run(policy, t, f, 1000, cost, Path::unload_stage, &i);
  EXPECT_EQ(policy.chosen_path(f), Path::offload);
  const uint64_t stage = run(policy, t, f, 20'000, cost, Path::unload_stage, &i);
  *chosen_at_end = policy.chosen_path(f);
  return stage;
}

TEST(policy_adaptive, AGainBelowTheHysteresisDoesNotMoveIt) {
  Path chosen;
  const uint64_t stage_writes = stage_writes_after_a_15pct_gain(20, &chosen);
  EXPECT_EQ(chosen, Path::offload);
  EXPECT_LT(stage_writes, 20'000u / 16);  // exploration only, no trials
}

TEST(policy_adaptive, AGainAboveTheHysteresisMovesIt) {
  Path chosen;
  stage_writes_after_a_15pct_gain(10, &chosen);
  EXPECT_EQ(chosen, Path::unload_stage);
}

// Stage is inline's copy plus an arena: adaptive weighs it only for writes inline cannot take.
TEST(policy_adaptive, StagesOnlyAWriteInlineCannotTake) {
  const CostOf stage_cheapest = [](Path p, uint64_t) -> uint64_t {
    return p == Path::unload_stage ? 1000 : p == Path::unload_inline ? 2000 : 3000;
  };
  const WriteFeatures f = write_of(64, PathSet(Path::unload_inline).with(Path::unload_stage));
  Policy both;
  EXPECT_EQ(run(both, tunables_in(Mode::adaptive), f, 4000, stage_cheapest, Path::unload_stage), 0u);
  EXPECT_EQ(both.chosen_path(f), Path::unload_inline);
  Tunables no_inline = tunables_in(Mode::adaptive);
  no_inline.inline_max = 0;
  Policy stage_only;
  run(stage_only, no_inline, f, 4000, stage_cheapest);
  EXPECT_EQ(stage_only.chosen_path(f), Path::unload_stage);
}

// Same-host writes: offload chosen, then direct becomes 25% cheaper, less than the fence
// (about one offload write) it would have to wait for when the QP has NIC requests out:
// it stays offload there, though direct is still sampled.
TEST(policy_adaptive, GoingDirectMustAlsoPayTheFence) {
  for (bool outstanding : {true, false}) {
    Policy policy;
    const Tunables t = tunables_in(Mode::adaptive);
    WriteFeatures f = write_of(64, PathSet(Path::unload_direct), true);
    const CostOf cost = [](Path p, uint64_t i) -> uint64_t {
      if (p == Path::offload) return 2000;
      return i < 1000 ? 2600 : 1500;
    };
    uint64_t i = 0;
    run(policy, t, f, 1000, cost, Path::offload, &i);  // warm-up needs direct samples
    ASSERT_EQ(policy.chosen_path(f), Path::offload);
    f.nic_outstanding = outstanding;
    const uint64_t direct_writes = run(policy, t, f, 20'000, cost, Path::unload_direct, &i);
    if (outstanding) {
      // Still explored (a stream always has NIC requests out), at no more than the rate,
      // and no trial: the sample's gain does not cover the fence.
      EXPECT_EQ(policy.chosen_path(f), Path::offload);
      EXPECT_LE(direct_writes, 20'000u / 32 + 100) << "trials for a path that cannot win";
      EXPECT_GT(direct_writes, 0u) << "direct never sampled behind NIC requests";
    } else {
      EXPECT_EQ(policy.chosen_path(f), Path::unload_direct);
    }
  }
}

// A deep stream (ib_write_bw) or a write behind a READ (rping) has NIC requests out at
// every write: direct still warms up, first, and the stream goes direct.
TEST(policy_adaptive, AStreamAlwaysBehindNicRequestsStillGoesDirect) {
  Policy policy;
  const Tunables t = tunables_in(Mode::adaptive);
  WriteFeatures f = write_of(4096, PathSet::cpu_paths().without(Path::unload_mapped), true);
  f.nic_outstanding = true;
  const CostOf cost = [](Path p, uint64_t) -> uint64_t { return p == Path::unload_direct ? 500 : 3000; };
  EXPECT_EQ(policy.decide(f, t), Path::unload_direct) << "direct is not warmed first";
  run(policy, t, f, 1000, cost);
  EXPECT_EQ(policy.chosen_path(f), Path::unload_direct);
  EXPECT_GE(run(policy, t, f, 10'000, cost, Path::unload_direct), 9'500u);
}

// The mapped path and the module's direct copy are two alternatives, learnt per write class
// like the others: under TCG mapped is 2.5x the cheaper at 4 KiB and 5x the dearer at 64 KiB.
TEST(policy_adaptive, MappedAndDirectAreWeighedPerClass) {
  Policy policy;
  Tunables t = tunables_in(Mode::adaptive);
  t.cpu_budget_pct = 100;  // the weighing alone (the budget is its own tests')
  const PathSet here = PathSet(Path::unload_mapped).with(Path::unload_direct);
  WriteFeatures small = write_of(4096, here, true), large = write_of(65536, here, true);
  const CostOf cost4k = [](Path p, uint64_t) -> uint64_t {
    return p == Path::unload_mapped ? 1900 : p == Path::unload_direct ? 5200 : 88'000;
  };
  const CostOf cost64k = [](Path p, uint64_t) -> uint64_t {
    return p == Path::unload_mapped ? 107'000 : p == Path::unload_direct ? 20'000 : 1'250'000;
  };
  uint64_t i = 0;  // one clock for both classes
  uint64_t mapped_small = 0, direct_large = 0;
  for (int round = 0; round < 40; ++round) {
    mapped_small += run(policy, t, small, 100, cost4k, Path::unload_mapped, &i);
    direct_large += run(policy, t, large, 100, cost64k, Path::unload_direct, &i);
  }
  EXPECT_EQ(policy.chosen_path(small), Path::unload_mapped);
  EXPECT_EQ(policy.chosen_path(large), Path::unload_direct);
  EXPECT_GE(mapped_small, 3800u);
  EXPECT_GE(direct_large, 3800u);
}

// A path's first write pays one-time costs (ib_write_bw's first 64 KiB direct write on
// 6.12: 80 times its settled cost). Charged whole to the default 50 % budget, it denied
// the CPU paths for milliseconds, the first 140 writes of the stream; a burst per sample
// still did now and then. The whole warm-up is charged at most one burst.
TEST(policy_adaptive, AColdPathsCostlyWarmUpSpendsAtMostOneBurst) {
  Policy policy;
  const Tunables t = tunables_in(Mode::adaptive);
  WriteFeatures f = write_of(65536, PathSet(Path::unload_direct), true);
  f.now_ns = 1'000'000;
  // Direct's whole warm-up at 2.5 ms a write, all of it CPU, a NIC write's post apart.
  for (unsigned i = 0; i < CostEstimate::kWindow; ++i, f.now_ns += 40'000) {
    ASSERT_EQ(policy.decide(f, t), Path::unload_direct) << "warm-up write " << i;
    policy.observe(Path::unload_direct, f, 2'500'000);
  }
  policy.decide(f, t);
  EXPECT_EQ(policy.stats().budget_denials, 0u);
}

// A deep stream returns its NIC samples a queue's time later: the warm-up sends a window's
// worth per path, and meanwhile the warm path (direct, observed at once) takes the writes.
TEST(policy_adaptive, AWarmUpDoesNotOutrunItsSamplesInFlight) {
  Policy policy;
  const Tunables t = tunables_in(Mode::adaptive);
  WriteFeatures f = write_of(65536, PathSet(Path::unload_direct).with(Path::unload_stage), true);
  f.nic_outstanding = true;
  struct Pending {
    Path p;
    uint64_t due;
  };
  std::vector<Pending> queue;
  uint64_t direct = 0;
  constexpr uint64_t kDepth = 128, kWrites = 500;
  for (uint64_t i = 0; i < kWrites; ++i) {
    const Path p = policy.decide(f, t);
    direct += p == Path::unload_direct;
    if (policy.sampled()) {
      if (p == Path::unload_direct)
        policy.observe(p, f, 500);
      else
        queue.push_back({p, i + kDepth});
    }
    std::erase_if(queue, [&](const Pending& s) {
      if (s.due != i) return false;
      policy.observe(s.p, f, 20'000);
      return true;
    });
  }
  // Two classes (the target page turns hot), three paths, a window of 8 each.
  EXPECT_LE(policy.stats().warmups, 2u * 3 * 8) << "a warm-up sample per write while they are in flight";
  EXPECT_GE(direct, kWrites * 3 / 4);
}

// Once a path is warm, another's warm-up starts with a probe: one kDearProbe times dearer in
// every probe sample is warm from them, and its remaining samples are never sent (8 B under
// TCG: direct 5x mapped, the NIC's paths 40x); a path within that keeps its full warm-up.
TEST(policy_adaptive, APathTheProbeFindsFarDearerWarmsFromItsProbe) {
  for (const uint64_t direct_ns : {3500u, 1400u}) {
    Policy policy;
    const Tunables t = tunables_in(Mode::adaptive);
    const WriteFeatures f =
        write_of(8, PathSet(Path::unload_mapped).with(Path::unload_direct).with(Path::unload_inline), true);
    const CostOf cost = [&](Path p, uint64_t) -> uint64_t {
      return p == Path::unload_mapped ? 700 : p == Path::unload_direct ? direct_ns : 28'000;
    };
    run(policy, t, f, 1000, cost);
    const bool direct_dear = direct_ns >= Policy::kDearProbe * 700;
    EXPECT_EQ(policy.stats().warmups,
              CostEstimate::kWindow + 2 * CostEstimate::kProbe + (direct_dear ? CostEstimate::kProbe : CostEstimate::kWindow))
        << "direct at " << direct_ns << " ns";
    for (const Path p : {Path::offload, Path::unload_inline, Path::unload_direct})
      EXPECT_TRUE(policy.estimate(f, p).warm()) << index_of(p);
    EXPECT_EQ(policy.estimate(f, Path::offload).settled_ns(), 28'000u);
    EXPECT_EQ(policy.chosen_path(f), Path::unload_mapped);
  }
}

TEST(policy_adaptive, ExploresAtTwoToTheMinusExploreShift) {
  for (uint32_t shift : {3u, 5u, 7u}) {
    Policy policy(shift);
    Tunables t = tunables_in(Mode::adaptive);
    t.explore_shift = shift;
    const WriteFeatures f = write_of(4096, PathSet(Path::unload_stage));
    const CostOf cost = [](Path p, uint64_t) { return p == Path::offload ? 2000 : 2600; };
    run(policy, t, f, 100, cost);
    const uint64_t before = policy.stats().explorations;
    constexpr uint64_t kWrites = 1 << 20;
    run(policy, t, f, kWrites, cost);
    const double rate = static_cast<double>(policy.stats().explorations - before) / kWrites;
    EXPECT_NEAR(rate, 1.0 / (1u << shift), 0.1 / (1u << shift)) << "shift " << shift;
  }
}

TEST(policy_adaptive, ExploreShiftZeroNeverExplores) {
  Policy policy;
  Tunables t = tunables_in(Mode::adaptive);
  t.explore_shift = 0;
  const WriteFeatures f = write_of(4096, PathSet(Path::unload_stage));
  const CostOf cost = [](Path p, uint64_t) { return p == Path::offload ? 2000 : 2600; };
  run(policy, t, f, 100, cost);
  EXPECT_EQ(run(policy, t, f, 100'000, cost, Path::unload_stage), 0u);
  EXPECT_EQ(policy.stats().explorations, 0u);
}

TEST(policy_adaptive, FarDearerPathsAreExploredLessOften) {
  Policy policy;
  const Tunables t = tunables_in(Mode::adaptive);
  const WriteFeatures f = write_of(4096, PathSet(Path::unload_stage));
  // Stage costs 5x offload: sampled at a sixteenth of the rate (1/(4(r-1))).
  const CostOf cost = [](Path p, uint64_t) { return p == Path::offload ? 1000 : 5000; };
  run(policy, t, f, 100, cost);
  const uint64_t draws = policy.stats().draws;
  const uint64_t stage = run(policy, t, f, 1 << 20, cost, Path::unload_stage);
  EXPECT_NEAR(static_cast<double>(stage) / (1 << 20), 1.0 / 32 / 16, 0.1 / 32 / 16);
  // ... by draws a sixteenth as frequent, each of which explores: none passed in vain.
  EXPECT_NEAR(static_cast<double>(policy.stats().draws - draws) / (1 << 20), 1.0 / 32 / 16, 0.1 / 32 / 16);
}

TEST(policy_adaptive, DrawsAreThinnedOnlyAsFarAsTheLikeliestVisit) {
  const Tunables t = tunables_in(Mode::adaptive);
  const WriteFeatures f = write_of(256, PathSet(Path::unload_inline) | PathSet(Path::unload_direct), true);
  // Inline at 1.5x offload keeps every draw (a 2x change could make it the cheaper);
  // with it at 3x (odds 1/8) and the module's copy at 9x (1/32), draws are an eighth as
  // frequent; at 2.6x (odds 1/6.4) a quarter.
  for (const uint64_t inline_ns : {1500, 2600, 3000}) {
    Policy policy;
    const CostOf cost = [&](Path p, uint64_t) -> uint64_t {
      return p == Path::offload ? 1000 : p == Path::unload_inline ? inline_ns : 9000;
    };
    run(policy, t, f, 1000, cost);
    ASSERT_EQ(policy.chosen_path(f), Path::offload);
    const PolicyStats before = policy.stats();
    constexpr uint64_t kWrites = 1 << 20;
    run(policy, t, f, kWrites, cost);
    const double draws = static_cast<double>(policy.stats().draws - before.draws) / kWrites;
    const double expected = inline_ns == 1500 ? 1.0 / 32 : inline_ns == 2600 ? 1.0 / 32 / 4 : 1.0 / 32 / 8;
    EXPECT_NEAR(draws, expected, 0.1 * expected) << "inline at " << inline_ns;
    // Each path visited as often as unthinned draws visit it: inline on half the draws
    // (its turn) at its odds, the module's copy on the other half at 1/32.
    const double explored = static_cast<double>(policy.stats().explorations - before.explorations) / kWrites;
    const double odds = inline_ns == 1500 ? 1.0 : 1000.0 / (4 * (inline_ns - 1000));
    const double visits = odds / 64 + 1.0 / 32 / 64;
    EXPECT_NEAR(explored, visits, 0.1 * visits) << "inline at " << inline_ns;
  }
}

TEST(policy_adaptive, ExploringFarDearerCpuPathsCostsUnderOnePercent) {
  Policy policy;
  const Tunables t = tunables_in(Mode::adaptive);
  // A remote class on the NIC, its CPU paths 4-6x dearer (a large gather, a full arena).
  WriteFeatures f = write_of(4096, PathSet(Path::unload_inline) | PathSet(Path::unload_stage));
  const auto cost_of = [](Path p) -> uint64_t {
    return p == Path::offload ? 1000 : p == Path::unload_inline ? 4000 : 6000;
  };
  const auto run_costing = [&](uint64_t writes) {
    uint64_t total = 0;
    for (uint64_t i = 0; i < writes; ++i) {
      f.now_ns = i * 1000;
      const Path p = policy.decide(f, t);
      total += cost_of(p);
      if (policy.sampled()) policy.observe(p, f, cost_of(p));
    }
    return total;
  };
  run_costing(1000);
  ASSERT_EQ(policy.chosen_path(f), Path::offload);
  constexpr uint64_t kWrites = 1 << 20;
  const double extra = static_cast<double>(run_costing(kWrites)) / (kWrites * cost_of(Path::offload)) - 1;
  EXPECT_GT(extra, 0.0);   // it does explore
  EXPECT_LE(extra, 0.01);  // 2^-(5 + 2) = 0.78%; at 1/(r - 1), 3.1%
}

TEST(policy_adaptive, RemoteDrawsNothingOnTheCpuBudget) {
  // Its sender sleeps while the peer host places the write: a budget of 0 keeps stage off,
  // and remote, the cheapest, takes every write after its warm-up.
  Policy policy;
  Tunables t = tunables_in(Mode::adaptive);
  t.cpu_budget_pct = 0;
  const WriteFeatures f = write_of(64, PathSet(Path::unload_remote).with(Path::unload_stage));
  const CostOf cost = [](Path p, uint64_t) { return p == Path::unload_remote ? 1000 : 3000; };
  const uint64_t remote = run(policy, t, f, 2000, cost, Path::unload_remote);
  EXPECT_GT(remote, 1900u);
  EXPECT_EQ(policy.stats().budget_charged_ns, 0u);
}

TEST(policy_adaptive, AnInlinePathWhosePostIsItsOnlyCpuTimeIsReusedUnderACappedBudget) {
  // Inline's latency (850 ns) is over what the program waits for the NIC (500 of
  // offload's 1000), but its CPU time is its post (150): the wait waives all of it, so
  // its decisions are steady and reused as offload's would be.
  Policy policy;
  const Tunables t = tunables_in(Mode::adaptive);
  ASSERT_LT(t.cpu_budget_pct, 100u);
  WriteFeatures f = write_of(64, PathSet(Path::unload_inline));
  const auto observe = [&](Path p) {
    if (p == Path::offload)
      policy.observe(p, f, 1000, 0, 500);
    else
      policy.observe(p, f, 850, 150, 0);
  };
  uint64_t inline_writes = 0;
  PolicyStats before{};
  for (uint64_t i = 0; i < 6000; ++i) {
    if (i == 2000) before = policy.stats();
    f.now_ns = policy.wants_clock() ? i * 1000 : 0;
    f.remote_addr = (i % (1u << 24)) << kTargetPageShift;
    const Path p = policy.decide(f, t);
    inline_writes += i >= 2000 && p == Path::unload_inline;
    if (policy.sampled()) observe(p);
  }
  EXPECT_EQ(policy.chosen_path(f), Path::unload_inline);
  EXPECT_GT(inline_writes, 3800u);
  // Every decision but the explorations and the ones right after them is a reuse.
  EXPECT_GT(policy.stats().reused - before.reused, 3600u);
  EXPECT_EQ(policy.stats().budget_charged_ns, 0u);
}

TEST(policy_adaptive, WriteClassesLearnApart) {
  Policy policy;
  const Tunables t = tunables_in(Mode::adaptive);
  // Stage wins for one SGE, loses for four (a gather copy); the NIC does not care.
  // Same-host writes of the same length learn separately again.
  const WriteFeatures one = write_of(2048, PathSet(Path::unload_stage));
  WriteFeatures four = one;
  four.sge_count = 4;
  const WriteFeatures local = write_of(2048, PathSet(Path::unload_stage), true);
  const CostOf cost_one = [](Path p, uint64_t) { return p == Path::offload ? 2000 : 1500; };
  const CostOf cost_four = [](Path p, uint64_t) { return p == Path::offload ? 2000 : 3000; };
  const CostOf cost_local = [](Path p, uint64_t) { return p == Path::offload ? 1000 : 1500; };
  for (int round = 0; round < 100; ++round) {
    run(policy, t, one, 10, cost_one);
    run(policy, t, four, 10, cost_four);
    run(policy, t, local, 10, cost_local);
  }
  EXPECT_EQ(policy.chosen_path(one), Path::unload_stage);
  EXPECT_EQ(policy.chosen_path(four), Path::offload);
  EXPECT_EQ(policy.chosen_path(local), Path::offload);
}

TEST(policy_adaptive, IneligibleChoiceFallsBackWithoutSwitching) {
  Policy policy;
  const Tunables t = tunables_in(Mode::adaptive);
  WriteFeatures f = write_of(4096, PathSet(Path::unload_stage));
  const CostOf cost = [](Path p, uint64_t) { return p == Path::offload ? 2000 : 1000; };
  run(policy, t, f, 100, cost);
  ASSERT_EQ(policy.chosen_path(f), Path::unload_stage);
  f.eligible = PathSet();  // e.g. the staging arena is momentarily full
  EXPECT_EQ(policy.decide(f, t), Path::offload);
  EXPECT_EQ(policy.chosen_path(f), Path::unload_stage);
}

// A class settled on stage (2000 ns against offload's 3000), with no CPU budget to deny it.
struct SettledOnStage : ::testing::Test {
  void SetUp() override {
    t.cpu_budget_pct = 100;  // no denials: every decision is the policy's choice
    run(policy, t, f, 1000, cost, Path::offload, &i);
    ASSERT_EQ(policy.chosen_path(f), Path::unload_stage);
  }
  Policy policy;
  Tunables t = tunables_in(Mode::adaptive);
  WriteFeatures f = write_of(4096, PathSet(Path::unload_stage));
  const CostOf cost = [](Path p, uint64_t) { return p == Path::offload ? 3000 : 2000; };
  uint64_t i = 0;
};

TEST_F(SettledOnStage, ObservesOneSteadyWriteIn32AndEveryOtherPath) {
  uint64_t chosen = 0, chosen_sampled = 0, other = 0, other_sampled = 0;
  for (int n = 0; n < 8000; ++n, ++i) {
    f.now_ns = policy.wants_clock() ? i * 1000 : 0;
    f.remote_addr = (i % (1u << 24)) << kTargetPageShift;
    const Path p = policy.decide(f, t);
    const bool on_chosen = p == Path::unload_stage;
    (on_chosen ? chosen : other)++;
    if (policy.sampled()) {
      (on_chosen ? chosen_sampled : other_sampled)++;
      policy.observe(p, f, cost(p, i));
    }
  }
  EXPECT_GT(other, 50u);  // exploration still runs
  EXPECT_EQ(other_sampled, other);
  // A sample right after an exploration comes 8 decisions on, not 32: a little over 1/32.
  EXPECT_NEAR(static_cast<double>(chosen_sampled) / chosen, 1.0 / Policy::kSteadySampleEvery, 0.006);
}

// A steady path m times cheaper than the next warm one samples m times less often (up to
// kWideSampleEvery): it must grow m times dearer to lose its place.
TEST(policy_adaptive, AChosenPathFarCheaperThanTheNextSamplesInProportion) {
  for (const uint64_t stage_ns : {1000u, 200u}) {  // 3x and 15x cheaper than offload
    Policy policy;
    Tunables t = tunables_in(Mode::adaptive);
    t.cpu_budget_pct = 100;
    WriteFeatures f = write_of(4096, PathSet(Path::unload_stage));
    const CostOf cost = [stage_ns](Path p, uint64_t) { return p == Path::offload ? 3000 : stage_ns; };
    uint64_t i = 0;
    run(policy, t, f, 1000, cost, Path::offload, &i);
    ASSERT_EQ(policy.chosen_path(f), Path::unload_stage);
    uint64_t chosen = 0, chosen_sampled = 0;
    for (int n = 0; n < 64000; ++n, ++i) {
      f.now_ns = policy.wants_clock() ? i * 1000 : 0;
      const Path p = policy.decide(f, t);
      if (p == Path::unload_stage) ++chosen;
      if (policy.sampled()) {
        if (p == Path::unload_stage) ++chosen_sampled;
        policy.observe(p, f, cost(p, i));
      }
    }
    const double every = stage_ns == 1000 ? 3.0 * Policy::kSteadySampleEvery : Policy::kWideSampleEvery;
    // Within a tenth: a sample after an exploration comes kSampleEvery decisions on.
    EXPECT_NEAR(static_cast<double>(chosen_sampled) / chosen, 1.0 / every, 0.1 / every) << stage_ns;
  }
}

// Exploration's draw comes every 32 decisions, and where every other path is far dearer
// nearly every draw explores nothing: a reuse goes on across such a draw instead of ending
// there (1 decision in 32 made whole, 8 B under TCG: most of what adaptive cost a write).
TEST(policy_adaptive, AReuseGoesOnAcrossADrawThatExploresNothing) {
  Policy policy;
  Tunables t = tunables_in(Mode::adaptive);
  t.cpu_budget_pct = 100;
  WriteFeatures f =
      write_of(8, PathSet(Path::unload_mapped).with(Path::unload_direct).with(Path::unload_inline), true);
  const CostOf cost = [](Path p, uint64_t) -> uint64_t {
    return p == Path::unload_mapped ? 700 : p == Path::unload_direct ? 3500 : 28'000;
  };
  for (int i = 0; i < 2000; ++i) {  // warm, and the target page hot: one class
    const Path p = policy.decide(f, t);
    if (policy.sampled()) policy.observe(p, f, cost(p, 0));
  }
  ASSERT_EQ(policy.chosen_path(f), Path::unload_mapped);
  const PolicyStats before = policy.stats();
  constexpr uint64_t kWrites = 64'000;
  uint64_t unreused = 0;  // the runtime's shortcut declined: the write took the full route
  for (uint64_t i = 0; i < kWrites; ++i) {
    Path p;
    if (!policy.decide_reused(f, t, p)) {
      ++unreused;
      p = policy.decide_unreused(f, t);
    }
    if (policy.sampled()) policy.observe(p, f, cost(p, i));
  }
  const uint64_t draws = kWrites >> kDefaultTunables.explore_shift;
  // What ends a reuse now: a sample (1 in 160 here, 400), a draw that explores (about 1
  // in 30 of them) and the write after it: 630 writes. Before, every draw too, and the
  // write after each sample: 2910.
  EXPECT_LT(unreused, draws) << "writes off the shortcut against " << draws << " draws";
  EXPECT_GT(policy.stats().explorations, before.explorations) << "the draws still explore now and then";
}

TEST_F(SettledOnStage, AChosenPathSampleFarFromItsEstimateSamplesTheNextWrites) {
  // Decide until a sampled write on the chosen path, and report it twice as dear.
  for (int n = 0; n < 1000; ++n, ++i) {
    f.now_ns = i * 1000;
    f.remote_addr = (i % (1u << 24)) << kTargetPageShift;
    const Path p = policy.decide(f, t);
    if (!policy.sampled()) continue;
    const bool on_chosen = p == Path::unload_stage;
    policy.observe(p, f, on_chosen ? 4000 : cost(p, i));
    if (on_chosen) break;
  }
  EXPECT_TRUE(policy.wants_clock());
  f.remote_addr = (++i % (1u << 24)) << kTargetPageShift;
  policy.decide(f, t);
  EXPECT_TRUE(policy.sampled());
}

TEST(policy_adaptive, SameSeedSameDecisionsOtherSeedOtherExplorations) {
  const auto trace = [](uint64_t seed) {
    Policy policy(seed);
    const Tunables t = tunables_in(Mode::adaptive);
    const WriteFeatures f = write_of(4096, PathSet(Path::unload_stage));
    uint64_t bits = 0;
    for (uint64_t i = 0; i < 4096; ++i) {
      const Path p = policy.decide(f, t);
      bits = bits * 31 + index_of(p) + i * (p == Path::unload_stage);
      if (policy.sampled()) policy.observe(p, f, p == Path::offload ? 2000 : 2600);
    }
    return bits;
  };
  EXPECT_EQ(trace(11), trace(11));
  EXPECT_NE(trace(11), trace(12));
}

}  // namespace
}  // namespace unload::policy
