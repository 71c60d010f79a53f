#include "simulator.hpp"

#include <cmath>

namespace unload::policy::sim {

uint64_t Noise::next() {
  uint64_t x = (counter_ += 0x9E3779B97F4A7C15ULL);
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

double Noise::uniform() {
  return static_cast<double>(next() >> 11) * 0x1.0p-53;
}

double Noise::factor() {
  const double u1 = 1.0 - uniform();  // (0, 1]: log is finite
  const double u2 = uniform();
  const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  double f = 1.0 + spec_.sigma * z;
  if (f < 0.05) f = 0.05;  // a cost is never negative
  if (uniform() < spec_.outlier_rate) f *= spec_.outlier_scale;
  return f;
}

Simulator::Simulator(Tunables tunables, uint64_t seed, NoiseSpec noise, uint64_t gap_ns)
    : policy_(seed), tunables_(tunables), noise_(seed ^ 0x5157A7E5ULL, noise), gap_ns_(gap_ns) {}

Outcome Simulator::step(SimWrite w, const CostModel& model) {
  w.features.now_ns = policy_.wants_clock() ? now_ns_ : 0;  // as the runtime reads its clock
  Outcome out{};
  out.eligible = effective_eligible(w.features, tunables_);
  for (unsigned i = 0; i < kPathCount; ++i) {
    const Path p = static_cast<Path>(i);
    out.path_cost_ns[i] = out.eligible.contains(p) ? model(p, w, index_) * noise_.factor() : 0;
  }
  out.path = policy_.decide(w.features, tunables_);
  out.cost_ns = out.path_cost_ns[index_of(out.path)];
  const bool cpu = charges_budget(out.path);
  if (!closed_loop_) {
    const uint64_t cost = static_cast<uint64_t>(out.cost_ns);
    if (policy_.sampled()) policy_.observe(out.path, w.features, cost);
    if (cpu) cpu_ns_ += out.cost_ns;
    now_ns_ += gap_ns_;
    ++index_;
    return out;
  }
  // Closed loop: a NIC write's completion is merged when the program polls after computing.
  const double compute = program_.compute_ns;
  double seen_ns = out.cost_ns;
  double wall_ns = out.cost_ns + compute;
  if (!cpu) {
    out.wait_ns = out.cost_ns > compute ? out.cost_ns - compute : 0;
    seen_ns = compute + out.wait_ns;
    wall_ns = seen_ns;
  }
  const uint64_t seen = static_cast<uint64_t>(seen_ns);
  if (policy_.sampled())
    policy_.observe(out.path, w.features, seen, cpu ? seen : 0,
                    report_wait_ ? static_cast<uint64_t>(out.wait_ns) : 0);
  if (cpu) cpu_ns_ += out.cost_ns;
  wait_ns_ += out.wait_ns;
  now_ns_ += static_cast<uint64_t>(wall_ns);
  ++index_;
  return out;
}

SimWrite random_write(Noise& rng, uint32_t length, bool peer_local, PathSet eligible) {
  SimWrite w;
  w.features.length = length;
  w.features.sge_count = 1;
  w.features.rkey = 0x1234;
  w.features.remote_addr = (static_cast<uint64_t>(rng.uniform() * (1u << 24)) << 12) + 64;
  w.features.eligible = eligible;
  w.features.peer_local = peer_local;
  return w;
}

}  // namespace unload::policy::sim
