// Simulator (d): with default tunables, the CPU budget charges only CPU time beyond the program's wait for
// the NIC: a latency-bound program takes the faster CPU path, one that computes between writes stays within a
// tight budget, and a 2x step is followed within 500 decisions.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "simulator.hpp"

namespace unload::policy::sim {
namespace {

struct Shares {
  double direct = 0;   // share of writes that went direct
  double cpu = 0;      // CPU-path time over wall time
  double charged = 0;  // CPU time charged to the budget over wall time
  uint64_t denials = 0;
};

// Local 4 KiB writes, offload or direct, from `program`, measured after a warm-up.
Shares run(Program program, double offload_ns, double direct_ns, uint32_t budget_pct, bool report_wait,
           uint64_t seed, NoiseSpec noise = {}) {
  Tunables t = kDefaultTunables;
  t.cpu_budget_pct = budget_pct;
  Simulator sim(t, seed, noise);
  sim.run_program(program, report_wait);
  const CostModel model = [&](Path p, const SimWrite&, uint64_t) {
    return p == Path::offload ? offload_ns : direct_ns;
  };
  constexpr uint64_t kWarm = 5'000, kWrites = 50'000;
  uint64_t direct = 0;
  double cpu_start = 0, wall_start = 0;
  uint64_t denials_start = 0, charged_start = 0;
  for (uint64_t i = 0; i < kWarm + kWrites; ++i) {
    if (i == kWarm) {
      cpu_start = sim.cpu_ns();
      wall_start = static_cast<double>(sim.now_ns());
      denials_start = sim.policy().stats().budget_denials;
      charged_start = sim.policy().stats().budget_charged_ns;
    }
    const Outcome o = sim.step(random_write(sim.noise(), 4096, true, PathSet(Path::unload_direct)), model);
    if (i >= kWarm && o.path == Path::unload_direct) ++direct;
  }
  Shares s;
  s.direct = static_cast<double>(direct) / kWrites;
  const double wall = static_cast<double>(sim.now_ns()) - wall_start;
  s.cpu = (sim.cpu_ns() - cpu_start) / wall;
  s.charged = static_cast<double>(sim.policy().stats().budget_charged_ns - charged_start) / wall;
  s.denials = sim.policy().stats().budget_denials - denials_start;
  return s;
}

// Post, then poll: offload 10 us, direct 3 us. Copying costs the program nothing it was
// not already spending polling, so the default 50% budget must not hold direct back.
TEST(policy_sim_nic_wait, LatencyBoundProgramTakesTheFasterCpuPath) {
  for (uint64_t seed : {1u, 2u, 3u}) {
    const Shares s = run(Program{.compute_ns = 0}, 10'000, 3'000, 50, true, seed);
    std::printf("latency-bound, seed %llu: %.1f%% direct, CPU %.1f%% of wall, %llu denials\n",
                static_cast<unsigned long long>(seed), 100 * s.direct, 100 * s.cpu,
                static_cast<unsigned long long>(s.denials));
    EXPECT_GE(s.direct, 0.95);  // what exploration leaves
    EXPECT_EQ(s.denials, 0u);
  }
}

// A loaded host: 2% of writes take 300x as long (preempted for milliseconds, as seen in
// the sandbox), on every path. The runtime measures wall time, so a preempted direct
// write looks like milliseconds of copying; charged as such, one of them would empty
// the budget for hundreds of writes. The policy charges a CPU write at most twice its
// path's settled cost, so the faster path keeps the writes.
TEST(policy_sim_nic_wait, PreemptedWritesDoNotEmptyTheBudget) {
  const NoiseSpec loaded{.sigma = 0.20, .outlier_rate = 0.02, .outlier_scale = 300};
  for (uint64_t seed : {1u, 2u, 3u}) {
    const Shares s = run(Program{.compute_ns = 0}, 90'000, 10'000, 50, true, seed, loaded);
    std::printf("latency-bound, loaded host, seed %llu: %.1f%% direct, %llu denials\n",
                static_cast<unsigned long long>(seed), 100 * s.direct,
                static_cast<unsigned long long>(s.denials));
    EXPECT_GE(s.direct, 0.90);
  }
}

// The same program through a runtime that reports no wait: the budget charges every copy,
// caps direct near 50% of wall time (outliers beyond twice the path's cost are not
// charged) and keeps a fifth of the writes on the slower NIC.
// (What the budget did before it knew about waits; shows the test above can fail.)
TEST(policy_sim_nic_wait, WithoutTheWaitTheBudgetHoldsTheFasterPathBack) {
  const Shares s = run(Program{.compute_ns = 0}, 10'000, 3'000, 50, false, 1);
  std::printf("latency-bound, no wait reported: %.1f%% direct, CPU %.1f%% of wall, %.1f%% charged\n",
              100 * s.direct, 100 * s.cpu, 100 * s.charged);
  EXPECT_LT(s.direct, 0.85);
  EXPECT_LE(s.charged, 0.51);
}

// Computes 20 us between posting and polling: the NIC's 10 us are hidden, nothing is
// waited for, every copy is extra CPU. Direct is still the cheaper path to completion,
// but a 5% budget keeps most writes on the NIC and the copies within 5% (+1) of wall time.
TEST(policy_sim_nic_wait, ComputeBetweenWritesStaysOnOffloadUnderATightBudget) {
  for (uint64_t seed : {1u, 2u, 3u}) {
    const Shares s = run(Program{.compute_ns = 20'000}, 10'000, 5'000, 5, true, seed);
    std::printf("compute 20 us, budget 5%%, seed %llu: %.1f%% direct, CPU %.2f%% of wall\n",
                static_cast<unsigned long long>(seed), 100 * s.direct, 100 * s.cpu);
    EXPECT_LE(s.cpu, 0.06);
    EXPECT_GE(s.cpu, 0.04);  // the budget is used, not just respected
    EXPECT_LE(s.direct, 0.30);
  }
}

// Partly hidden: computes 8 us, the NIC takes 10 us, so 2 us of each 5 us copy are
// waived and the rest charged: the charged CPU fills the 10% budget, the CPU paths'
// whole time exceeds it by what the program would have spent polling.
TEST(policy_sim_nic_wait, APartlyHiddenWaitIsWaivedAndTheRestCharged) {
  const Shares s = run(Program{.compute_ns = 8'000}, 10'000, 5'000, 10, true, 1);
  std::printf("compute 8 us, budget 10%%: %.1f%% direct, CPU %.2f%% of wall, %.2f%% charged\n",
              100 * s.direct, 100 * s.cpu, 100 * s.charged);
  EXPECT_LE(s.charged, 0.11);
  EXPECT_GE(s.charged, 0.09);
  EXPECT_GT(s.cpu, 0.15);
}

struct Step {
  const char* name;
  uint32_t length;
  bool peer_local;
  PathSet eligible;
  double before[kPathCount];  // latency per path, 0 = not eligible
  double after[kPathCount];
  Path expected_before;
  Path expected_after;
};

constexpr uint64_t kStepAt = 20'000;
constexpr uint64_t kMaxDelay = 500;

struct Reaction {
  uint64_t decisions = UINT64_MAX;  // from the step until the class chose the new path
  double taken = 0;                 // share of writes on it over the 2000 after that
};

Reaction react(const Step& s, uint64_t seed) {
  Simulator sim(kDefaultTunables, seed);  // cpu_budget_pct 50: the default, not lifted
  sim.run_program(Program{.compute_ns = 0});
  const CostModel model = [&s](Path p, const SimWrite&, uint64_t i) {
    return (i < kStepAt ? s.before : s.after)[index_of(p)];
  };
  Reaction r;
  uint64_t taken = 0;
  for (uint64_t i = 0; i < kStepAt + 10 * kMaxDelay + 2000; ++i) {
    const SimWrite w = random_write(sim.noise(), s.length, s.peer_local, s.eligible);
    const Outcome o = sim.step(w, model);
    const Path chosen = sim.policy().chosen_path(w.features);
    if (i + 1 == kStepAt) {
      EXPECT_EQ(chosen, s.expected_before) << s.name << " seed " << seed;
    }
    if (i >= kStepAt && r.decisions == UINT64_MAX && chosen == s.expected_after)
      r.decisions = i + 1 - kStepAt;
    if (i >= kStepAt + 10 * kMaxDelay && o.path == s.expected_after) ++taken;
  }
  r.taken = static_cast<double>(taken) / 2000;
  return r;
}

const Step kSteps[] = {
    // Only exploration sees the unused path get cheaper.
    {"local 4KiB, direct drops to half of offload",
     4096,
     true,
     PathSet(Path::unload_direct),
     {10'000, 0, 0, 12'000},
     {10'000, 0, 0, 5'000},
     Path::offload,
     Path::unload_direct},
    // The CPU path in use doubles past the NIC: every write sees it.
    {"local 4KiB, direct doubles past offload",
     4096,
     true,
     PathSet(Path::unload_direct),
     {6'000, 0, 0, 4'000},
     {6'000, 0, 0, 8'000},
     Path::unload_direct,
     Path::offload},
    // The NIC in use doubles past the CPU paths; inline becomes the cheapest of three, by
    // more than the hysteresis (closer, which one the class lands on is the estimates'
    // noise at the switch, and the hysteresis keeps it there by design).
    {"local 128B, offload doubles past inline",
     128,
     true,
     PathSet::cpu_paths().without(Path::unload_mapped),
     {2'000, 2'600, 3'000, 3'200},
     {4'000, 2'600, 3'000, 3'200},
     Path::offload,
     Path::unload_inline},
    {"remote 4KiB, stage drops to half of offload",
     4096,
     false,
     PathSet(Path::unload_stage),
     {2'000, 0, 2'600, 0},
     {2'000, 0, 1'000, 0},
     Path::offload,
     Path::unload_stage},
};

TEST(policy_sim_nic_wait, LatencyBoundFollowsA2xStepWithin500DecisionsAtTheDefaultBudget) {
  for (const Step& s : kSteps) {
    std::vector<uint64_t> delays;
    double least_taken = 1;
    for (uint64_t seed = 1; seed <= 20; ++seed) {
      const Reaction r = react(s, seed);
      delays.push_back(r.decisions);
      least_taken = std::min(least_taken, r.taken);
    }
    std::sort(delays.begin(), delays.end());
    std::printf("%-46s decisions to follow: median %llu, worst %llu (20 seeds); then %.1f%% on it\n", s.name,
                static_cast<unsigned long long>(delays[delays.size() / 2]),
                static_cast<unsigned long long>(delays.back()), 100 * least_taken);
    EXPECT_LE(delays.back(), kMaxDelay) << s.name;
    EXPECT_GE(least_taken, 0.90) << s.name;  // chosen and taken: the budget does not hold it back
  }
}

}  // namespace
}  // namespace unload::policy::sim
