// Simulator (d): when writes to hot target pages are cheap on the NIC and writes to cold pages are cheaper
// unloaded, adaptive learns hotness from its sketch and routes the two apart.
#include <gtest/gtest.h>

#include <cstdio>

#include "simulator.hpp"

namespace unload::policy::sim {
namespace {

TEST(policy_sim_hotness, SeparatesHotAndColdPages) {
  Tunables t = kDefaultTunables;
  t.cpu_budget_pct = 100;
  // The target NIC's translation cache holds the hot pages: offload is fast there and
  // pays a miss on cold pages, which stage's target-side cost does not depend on.
  const CostModel model = [](Path p, const SimWrite& w, uint64_t) {
    if (p == Path::offload) return w.page_hot ? 1500.0 : 3000.0;
    return 2000.0;
  };
  constexpr uint64_t kWrites = 200'000, kWarmup = 20'000;
  constexpr unsigned kHotPages = 8;
  for (uint64_t seed : {1u, 2u, 3u}) {
    Simulator sim(t, seed);
    uint64_t hot = 0, hot_offload = 0, cold = 0, cold_stage = 0, cold_judged_hot = 0;
    double hot_ns = 0, cold_ns = 0;
    for (uint64_t i = 0; i < kWrites; ++i) {
      // Half the writes go to 8 hot pages, half spread over 16 M cold ones.
      SimWrite w = random_write(sim.noise(), 2048, false, PathSet(Path::unload_stage));
      w.page_hot = sim.noise().uniform() < 0.5;
      if (w.page_hot) {
        w.features.remote_addr = (static_cast<uint64_t>(sim.noise().uniform() * kHotPages) << 12) + 8;
      }
      const Outcome o = sim.step(w, model);
      if (i < kWarmup) continue;
      if (w.page_hot) {
        ++hot;
        hot_offload += o.path == Path::offload;
        hot_ns += o.cost_ns;
      } else {
        ++cold;
        cold_stage += o.path == Path::unload_stage;
        cold_judged_hot += sim.policy().is_hot(w.features);
        cold_ns += o.cost_ns;
      }
    }
    std::printf("seed %llu: hot pages offloaded %.1f%%, cold pages staged %.1f%%, cold judged hot %.2f%%\n",
                static_cast<unsigned long long>(seed), 100.0 * hot_offload / hot, 100.0 * cold_stage / cold,
                100.0 * cold_judged_hot / cold);
    EXPECT_GE(hot_offload, hot * 90 / 100);
    EXPECT_GE(cold_stage, cold * 90 / 100);
    EXPECT_LE(cold_judged_hot, cold / 100);
    // Each kind costs within 5% of its best path (noise and outliers have mean ~1.09).
    const double noise_mean = 1.0 + 0.01 * 9.0;
    EXPECT_LE(hot_ns / hot, 1.05 * 1500 * noise_mean);
    EXPECT_LE(cold_ns / cold, 1.05 * 2000 * noise_mean);
  }
}

// Without hotness in the picture, one class would have to pick one path for both kinds
// and lose on one of them: the separation above is the sketch's doing.
TEST(policy_sim_hotness, OneClassCannotServeBoth) {
  const double mixed_offload = 0.5 * 1500 + 0.5 * 3000, mixed_stage = 2000;
  const double separated = 0.5 * 1500 + 0.5 * 2000;
  EXPECT_GT(std::min(mixed_offload, mixed_stage), 1.1 * separated);
}

}  // namespace
}  // namespace unload::policy::sim
