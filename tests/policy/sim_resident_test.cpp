// Simulator (e): writes to another host whose NIC caches target_xlate_pages translations; knowing that
// size, adaptive keeps a resident set of pages on the NIC and sends the rest remote, and costs no more than
// the better of the NIC alone and remote alone, in steady state, below, at and above the cache's size.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "simulator.hpp"

namespace unload::policy::sim {
namespace {

// The target NIC's translation cache as the sandbox's NIC model has it: set-associative,
// 8 ways, LRU within a set, its sets chosen by a hash of its own.
class NicCache {
 public:
  explicit NicCache(uint32_t entries) : sets_(entries / kWays), ways_(entries, kEmpty), age_(entries, 0) {}
  bool holds(uint64_t page) const {
    const uint64_t* set = &ways_[set_of(page) * kWays];
    for (unsigned w = 0; w < kWays; ++w)
      if (set[w] == page) return true;
    return false;
  }
  // A NIC write to `page`: its translation cached, the set's least recent one evicted.
  void place(uint64_t page) {
    const size_t base = set_of(page) * kWays;
    size_t victim = base;
    for (size_t i = base; i < base + kWays; ++i) {
      if (ways_[i] == page) {
        victim = i;
        break;
      }
      if (age_[i] < age_[victim]) victim = i;
    }
    ways_[victim] = page;
    age_[victim] = ++clock_;
  }

 private:
  static constexpr unsigned kWays = 8;
  static constexpr uint64_t kEmpty = ~0ull;
  size_t set_of(uint64_t page) const { return ((page * 0x9E3779B97F4A7C15ULL) >> 40) % sets_; }
  size_t sets_;
  std::vector<uint64_t> ways_;
  std::vector<uint64_t> age_;
  uint64_t clock_ = 0;
};

struct Costs {
  double hit_ns, miss_ns, remote_ns;
};

// Writes to random target pages, `hot_pct` % of them on the first 16 (a hot set); the
// cost is the mean over writes [warmup, writes).
struct Workload {
  uint32_t pages;
  unsigned hot_pct = 0;
  uint64_t writes = 120'000;
  uint64_t warmup = 40'000;
};

// The workload's mean cost: the policy with `t`, or a path forced (`forced`: offload or
// remote, the policy not asked).
double mean_cost(const Tunables& t, const Workload& wl, const Costs& c, uint32_t cache_entries, Path forced,
                 bool use_policy, uint64_t seed, double* remote_share = nullptr) {
  Simulator sim(t, seed);
  NicCache nic(cache_entries);
  const CostModel model = [&](Path p, const SimWrite& w, uint64_t) {
    if (p == Path::unload_remote) return c.remote_ns;
    return nic.holds(w.features.remote_addr >> 12) ? c.hit_ns : c.miss_ns;
  };
  double sum = 0;
  uint64_t n = 0, remote = 0;
  for (uint64_t i = 0; i < wl.writes; ++i) {
    SimWrite w = random_write(sim.noise(), 64, false, PathSet(Path::unload_remote));
    const bool hot = sim.noise().next() % 100 < wl.hot_pct;
    const uint64_t page = sim.noise().next() % (hot ? 16 : wl.pages);
    w.features.remote_addr = (page << 12) + 8;
    double cost;
    Path path;
    if (use_policy) {
      const Outcome o = sim.step(w, model);
      cost = o.cost_ns;
      path = o.path;
    } else {
      path = forced;
      cost = model(path, w, i) * sim.noise().factor();
    }
    if (path == Path::offload) nic.place(page);
    if (i < wl.warmup) continue;
    sum += cost;
    ++n;
    remote += path == Path::unload_remote;
  }
  if (remote_share) *remote_share = static_cast<double>(remote) / static_cast<double>(n);
  return sum / static_cast<double>(n);
}

void expect_adaptive_within_5pct_of_the_better_path(const Costs& c, const char* what) {
  constexpr uint32_t kEntries = 1024;
  Tunables t = kDefaultTunables;  // the CPU budget too: remote must not draw on it
  t.target_xlate_pages = kEntries;
  for (uint32_t pages : {256u, 1024u, 4096u, 16384u}) {
    const double nic = mean_cost(t, {pages}, c, kEntries, Path::offload, false, 1);
    const double remote = mean_cost(t, {pages}, c, kEntries, Path::unload_remote, false, 1);
    double share = 0;
    const double adaptive = mean_cost(t, {pages}, c, kEntries, Path::offload, true, 1, &share);
    const double best = nic < remote ? nic : remote;
    std::printf("%s, %5u pages: NIC %.0f, remote %.0f, adaptive %.0f (%.2f of the better, %.0f%% remote)\n",
                what, pages, nic, remote, adaptive, adaptive / best, 100 * share);
    EXPECT_LE(adaptive, 1.05 * best) << what << ", " << pages << " pages";
  }
}

// What `scripts/bench --nic-model --hosts 2` measures: runs of 1969 timed writes after its
// warm-up (bench-nic-model-hosts: 16 writes a page, at most 16384), at the sandbox's costs,
// random targets and a hot set, the mean of 40 runs. The warm-up is what lets a run start in
// the steady state: with 4 writes a page and at most 4096, A's resident set was still
// filling over 16384 pages (each join a miss at B: 1.13 of remote) and a tenth of 256 pages
// had not been written twice (1.09 of the NIC).
TEST(policy_sim_resident, AtTheBenchsLengthAdaptiveIsWithin5PctOfTheBetterPath) {
  const Costs c{200'000, 2'200'000, 600'000};
  Tunables t = kDefaultTunables;
  t.target_xlate_pages = 1024;
  constexpr uint64_t kRuns = 40;
  for (unsigned hot_pct : {0u, 90u}) {
    for (uint32_t pages : {256u, 1024u, 4096u, 16384u}) {
      const uint64_t warmup = std::min<uint64_t>(16ull * pages, 16384);
      const Workload wl{.pages = pages, .hot_pct = hot_pct, .writes = warmup + 1969, .warmup = warmup};
      double nic = 0, remote = 0, adaptive = 0;
      for (uint64_t seed = 1; seed <= kRuns; ++seed) {
        nic += mean_cost(t, wl, c, 1024, Path::offload, false, seed);
        remote += mean_cost(t, wl, c, 1024, Path::unload_remote, false, seed);
        adaptive += mean_cost(t, wl, c, 1024, Path::offload, true, seed);
      }
      const double best = std::min(nic, remote);
      std::printf(
          "bench's length, %s, %5u pages: NIC %.0f, remote %.0f, adaptive %.0f (%.2f of the better)\n",
          hot_pct ? "hot set" : "random", pages, nic / kRuns, remote / kRuns, adaptive / kRuns,
          adaptive / best);
      EXPECT_LE(adaptive, 1.05 * best) << (hot_pct ? "hot set, " : "random, ") << pages << " pages";
    }
  }
}

TEST(policy_sim_resident, AMissTenWritesDearKeepsWhatFitsOnTheNicAndTheRestRemote) {
  // The sandbox's NIC model: a write 200 us, a miss 2 ms more, remote 600 us.
  expect_adaptive_within_5pct_of_the_better_path({200'000, 2'200'000, 600'000}, "miss 10x");
}

TEST(policy_sim_resident, AMissAsDearAsAWriteKeepsEverythingOnTheNic) {
  // The paper's ratio: a miss doubles a NIC write, still cheaper than remote here.
  expect_adaptive_within_5pct_of_the_better_path({200'000, 400'000, 600'000}, "miss 1x");
}

// Without the cache's size, a footprint as large as the cache has its pages hot and cold
// by turns (the sketch's threshold is about one write in 200, these take one in 1024): each
// goes now to the NIC, now remote, and its NIC writes find its translation evicted by
// the others'. The resident set is what keeps them apart. (With steady samples spread by
// the chosen path's margin, the unknown size's cost went from 1.21x to 1.06x the known's.)
TEST(policy_sim_resident, WithoutTheSizeAFootprintAsLargeAsTheCacheCostsMore) {
  const Costs c{200'000, 2'200'000, 600'000};
  Tunables t = kDefaultTunables;
  t.cpu_budget_pct = 100;
  const double unknown = mean_cost(t, {1024}, c, 1024, Path::offload, true, 1);
  t.target_xlate_pages = 1024;
  const double known = mean_cost(t, {1024}, c, 1024, Path::offload, true, 1);
  std::printf("1024 pages: adaptive %.0f without the size, %.0f with it\n", unknown, known);
  EXPECT_GT(unknown, 1.04 * known);
}

// A hot set's cold tenth is written about once a page: those pages must not join the set
// (each join a miss at the NIC, where remote costs a third), from the run's first write.
TEST(policy_sim_resident, AHotSetsColdPagesWrittenOnceGoRemote) {
  const Costs c{200'000, 2'200'000, 600'000};
  Tunables t = kDefaultTunables;
  t.target_xlate_pages = 1024;
  const Workload hot_set{.pages = 16384, .hot_pct = 90, .writes = 6000, .warmup = 0};
  const double nic = mean_cost(t, hot_set, c, 1024, Path::offload, false, 3);
  double share = 0;
  const double adaptive = mean_cost(t, hot_set, c, 1024, Path::offload, true, 3, &share);
  std::printf("hot set over 16384 pages, 6000 writes: NIC %.0f, adaptive %.0f (%.0f%% remote)\n", nic,
              adaptive, 100 * share);
  EXPECT_LT(adaptive, 0.8 * nic);
}

}  // namespace
}  // namespace unload::policy::sim
