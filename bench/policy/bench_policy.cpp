// Cost per call of Policy::decide and Policy::observe in each mode (goal: decide <= 20 ns),
// and of a steady stream's decisions with and without reusing the settled one.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "unload/policy.hpp"

namespace {

using unload::policy::kDefaultTunables;
using unload::policy::Mode;
using unload::policy::Path;
using unload::policy::PathSet;
using unload::policy::Policy;
using unload::policy::Prng;
using unload::policy::Tunables;
using unload::policy::WriteFeatures;

constexpr unsigned kWrites = 4096;  // power of two; a mixed stream, cycled

struct Stream {
  std::vector<WriteFeatures> writes;
  std::vector<uint64_t> cost_ns;
};

// Sizes from 8 B to 1 MiB, a third same-host, a quarter with NIC requests outstanding,
// half the writes on 16 hot pages: every branch of adaptive is exercised.
Stream make_stream() {
  Stream s;
  Prng rng(7);
  uint64_t now = 0;
  for (unsigned i = 0; i < kWrites; ++i) {
    WriteFeatures f{};
    f.length = static_cast<uint32_t>(8u << (rng.next() % 18));
    f.sge_count = rng.next() % 8 == 0 ? 2 : 1;
    f.rkey = 0x42;
    f.remote_addr = (rng.next() % 2 == 0 ? rng.next() % 16 : rng.next() % (1u << 24)) << 12;
    f.peer_local = rng.next() % 3 == 0;
    f.eligible = PathSet(Path::unload_inline).with(Path::unload_stage);
    if (f.peer_local) f.eligible = f.eligible.with(Path::unload_direct);
    f.nic_outstanding = rng.next() % 4 == 0;
    f.now_ns = now += 1000;
    s.writes.push_back(f);
    s.cost_ns.push_back(500 + f.length / 8 + rng.next() % 400);
  }
  return s;
}

Tunables tunables_for(int64_t mode) {
  Tunables t = kDefaultTunables;
  t.mode = static_cast<uint32_t>(mode);
  return t;
}

// Runs the stream a few times so adaptive is past warm-up, as it is in a running program.
void warm(Policy& policy, const Stream& s, const Tunables& t) {
  for (unsigned round = 0; round < 16; ++round) {
    for (unsigned i = 0; i < kWrites; ++i) {
      WriteFeatures f = s.writes[i];
      f.now_ns += round * kWrites * 1000ull;
      policy.observe(policy.decide(f, t), f, s.cost_ns[i]);
    }
  }
}

void BM_Policy_Decide(benchmark::State& state) {
  const Stream s = make_stream();
  const Tunables t = tunables_for(state.range(0));
  Policy policy;
  warm(policy, s, t);
  unsigned i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(policy.decide(s.writes[i++ & (kWrites - 1)], t));
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_Policy_Observe(benchmark::State& state) {
  const Stream s = make_stream();
  const Tunables t = tunables_for(state.range(0));
  Policy policy;
  warm(policy, s, t);
  std::vector<Path> paths;
  for (const WriteFeatures& f : s.writes) paths.push_back(policy.decide(f, t));
  unsigned i = 0;
  for (auto _ : state) {
    const unsigned k = i++ & (kWrites - 1);
    policy.observe(paths[k], s.writes[k], s.cost_ns[k]);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_Policy_DecideThenObserve(benchmark::State& state) {
  const Stream s = make_stream();
  const Tunables t = tunables_for(state.range(0));
  Policy policy;
  warm(policy, s, t);
  unsigned i = 0;
  for (auto _ : state) {
    const unsigned k = i++ & (kWrites - 1);
    const Path p = policy.decide(s.writes[k], t);
    policy.observe(p, s.writes[k], s.cost_ns[k]);
  }
  state.SetItemsProcessed(state.iterations());
}

// The steady state of a latency-bound program: one write class, the runtime's protocol (a
// clock when asked, observe() when sampled), one target page or (pages:16384) a random
// one of many each write. With reuse on, most decisions reuse the settled one; reuse:0
// makes every decision in full.
void BM_Policy_DecideSettled(benchmark::State& state) {
  const Policy::Reuse reuse = state.range(0) ? Policy::Reuse::on : Policy::Reuse::off;
  const uint64_t pages = static_cast<uint64_t>(state.range(1));
  Prng rng(3);
  const Tunables t = kDefaultTunables;
  WriteFeatures f{};
  f.length = 64;
  f.sge_count = 1;
  f.rkey = 0x42;
  f.remote_addr = 0x10000;
  f.peer_local = true;
  f.eligible = PathSet::cpu_paths();
  Policy policy(1, reuse);
  uint64_t now = 1;
  const auto step = [&] {
    if (pages > 1) f.remote_addr = (rng.next() % pages) << unload::policy::kTargetPageShift;
    f.now_ns = policy.wants_clock() ? now : 0;
    const Path p = policy.decide(f, t);
    const uint64_t cost = p == Path::unload_direct ? 3000 : 10'000;
    if (policy.sampled())
      policy.observe(p, f, cost, is_cpu_path(p) ? cost : 0, p == Path::offload ? cost : 0);
    now += cost;
    return p;
  };
  for (int i = 0; i < 100'000; ++i) step();
  for (auto _ : state) benchmark::DoNotOptimize(step());
  state.SetItemsProcessed(state.iterations());
  state.counters["reused_pct"] =
      100.0 * static_cast<double>(policy.stats().reused) / static_cast<double>(policy.stats().decisions);
}

void modes(benchmark::internal::Benchmark* b) {
  b->ArgName("mode");
  for (Mode m : {Mode::offload, Mode::unload, Mode::threshold, Mode::adaptive}) {
    b->Arg(static_cast<int64_t>(m));
  }
}

BENCHMARK(BM_Policy_Decide)->Apply(modes);
BENCHMARK(BM_Policy_Observe)->Apply(modes);
BENCHMARK(BM_Policy_DecideThenObserve)->Apply(modes);
BENCHMARK(BM_Policy_DecideSettled)->ArgNames({"reuse", "pages"})->ArgsProduct({{0, 1}, {1, 16384}});

}  // namespace

BENCHMARK_MAIN();
