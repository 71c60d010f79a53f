// Simulator (b): after a step change that makes another path 2x cheaper than the chosen one, adaptive moves
// to it within 500 decisions, whether the change is seen on the chosen path or only through exploration.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "simulator.hpp"

namespace unload::policy::sim {
namespace {

constexpr uint64_t kStepAt = 20'000;  // writes before the change: warm and settled
constexpr uint64_t kMaxDelay = 500;

struct StepScenario {
  const char* name;
  uint32_t length;
  bool peer_local;
  PathSet eligible;
  double before[kPathCount];  // mean cost per path, 0 = not eligible
  double after[kPathCount];
  Path expected_before;
  Path expected_after;
};

// Decisions from the step until the write class's chosen path is the new cheapest, or
// UINT64_MAX if that never happens within 10x the allowed delay.
uint64_t decisions_to_follow(const StepScenario& s, uint64_t seed) {
  Tunables t = kDefaultTunables;
  t.cpu_budget_pct = 100;
  Simulator sim(t, seed);
  const CostModel model = [&s](Path p, const SimWrite&, uint64_t i) {
    return (i < kStepAt ? s.before : s.after)[index_of(p)];
  };
  for (uint64_t i = 0; i < kStepAt + 10 * kMaxDelay; ++i) {
    const SimWrite w = random_write(sim.noise(), s.length, s.peer_local, s.eligible);
    sim.step(w, model);
    const Path chosen = sim.policy().chosen_path(w.features);
    if (i + 1 == kStepAt) {
      EXPECT_EQ(chosen, s.expected_before) << s.name << " seed " << seed;
    }
    if (i >= kStepAt && chosen == s.expected_after) return i + 1 - kStepAt;
  }
  return UINT64_MAX;
}

const StepScenario kScenarios[] = {
    // The unused path gets cheaper: only exploration can see it.
    {"remote 4KiB, stage drops to half of offload",
     4096,
     false,
     PathSet(Path::unload_stage),
     {2000, 0, 2600, 0},
     {2000, 0, 1000, 0},
     Path::offload,
     Path::unload_stage},
    // The chosen path gets dearer: every write sees it.
    {"remote 4KiB, offload doubles past stage",
     4096,
     false,
     PathSet(Path::unload_stage),
     {2000, 0, 2600, 0},
     {5200, 0, 2600, 0},
     Path::offload,
     Path::unload_stage},
    // Three alternatives share the exploration; the changed one is the dearest before.
    {"local 128B, direct drops to half of offload",
     128,
     true,
     PathSet::cpu_paths().without(Path::unload_mapped),
     {2000, 2600, 2800, 3000},
     {2000, 2600, 2800, 1000},
     Path::offload,
     Path::unload_direct},
    // And back: the CPU path in use gets dearer, the NIC is now 2x cheaper.
    {"remote 128B, inline doubles past offload",
     128,
     false,
     PathSet(Path::unload_inline),
     {2000, 1200, 0, 0},
     {2000, 4000, 0, 0},
     Path::unload_inline,
     Path::offload},
};

TEST(policy_sim_step, FollowsA2xChangeWithin500Decisions) {
  for (const StepScenario& s : kScenarios) {
    std::vector<uint64_t> delays;
    for (uint64_t seed = 1; seed <= 20; ++seed) delays.push_back(decisions_to_follow(s, seed));
    std::sort(delays.begin(), delays.end());
    std::printf("%-46s decisions to follow: median %llu, worst %llu (20 seeds)\n", s.name,
                static_cast<unsigned long long>(delays[delays.size() / 2]),
                static_cast<unsigned long long>(delays.back()));
    EXPECT_LE(delays.back(), kMaxDelay) << s.name;
  }
}

// The converse of following quickly: a step too small to clear the hysteresis must not
// move the policy at all.
TEST(policy_sim_step, IgnoresAChangeBelowTheHysteresis) {
  Tunables t = kDefaultTunables;
  t.cpu_budget_pct = 100;
  t.hysteresis_pct = 20;
  Simulator sim(t, 7, NoiseSpec{.sigma = 0.05, .outlier_rate = 0, .outlier_scale = 1});
  // Stage goes from 30% dearer to 10% cheaper than offload: a 10% gain, under 20%.
  const CostModel model = [](Path p, const SimWrite&, uint64_t i) {
    if (p == Path::offload) return 2000.0;
    return i < kStepAt ? 2600.0 : 1800.0;
  };
  for (uint64_t i = 0; i < 3 * kStepAt; ++i) {
    const SimWrite w = random_write(sim.noise(), 4096, false, PathSet(Path::unload_stage));
    sim.step(w, model);
    if (i >= kStepAt / 2) {
      ASSERT_EQ(sim.policy().chosen_path(w.features), Path::offload) << i;
    }
  }
}

}  // namespace
}  // namespace unload::policy::sim
