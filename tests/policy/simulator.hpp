// A deterministic simulator that drives a Policy with synthetic per-path cost curves.
#pragma once

#include <cstdint>
#include <functional>

#include "unload/policy.hpp"

namespace unload::policy::sim {

// Multiplicative noise on a path's mean cost: Gaussian with relative spread `sigma`, plus
// rare outliers (interrupts, preemption) `outlier_scale` times the cost. Box-Muller over
// our own generator, so runs are identical on every standard library. The generator is
// splitmix64 over a counter, not the policy's xorshift64*: the simulator takes many
// draws per write at fixed offsets, and its outlier clustering must be that of
// independent draws, or the test would measure the generator instead of the policy.
struct NoiseSpec {
  double sigma = 0.20;
  double outlier_rate = 0.01;
  double outlier_scale = 10.0;
};

class Noise {
 public:
  Noise(uint64_t seed, NoiseSpec spec) : counter_(seed * 0xD1B54A32D192ED03ULL), spec_(spec) {}
  double factor();
  double uniform();  // [0, 1)
  uint64_t next();

 private:
  uint64_t counter_;
  NoiseSpec spec_;
};

// One write as the simulated program posts it, plus the ground truth the cost model may
// use but the policy must infer (whether its target page is really hot).
struct SimWrite {
  WriteFeatures features{};
  bool page_hot = false;
};

// Mean (noise-free) cost of a write on a path; `index` is the write's position in the run,
// so a model can change at a given point.
using CostModel = std::function<double(Path, const SimWrite&, uint64_t index)>;

// A linear cost curve, base + length * per_byte.
struct Linear {
  double base_ns;
  double ns_per_byte;
  double at(uint32_t length) const { return base_ns + ns_per_byte * length; }
};

// A closed-loop program: it posts a write, computes for compute_ns, then polls until the
// write's completion is there. A NIC write of latency L is seen L or compute_ns after the
// post, whichever is later, and the program busy-polls for max(0, L - compute_ns): the wait
// the runtime reports. A CPU path's cost is spent copying before the program goes on, all
// of it CPU time. compute_ns = 0 is a latency-bound program (post, then poll).
struct Program {
  double compute_ns = 0;
};

struct Outcome {
  Path path;
  double cost_ns;                   // what the policy's write cost
  double path_cost_ns[kPathCount];  // what each eligible path would have cost (same noise law)
  PathSet eligible;                 // effective eligibility, for fixed-path comparisons
  double wait_ns = 0;               // closed loop: what the program busy-polled for the NIC
};

class Simulator {
 public:
  // Writes arrive every `gap_ns` of simulated wall time, and nobody waits for the NIC.
  Simulator(Tunables tunables, uint64_t seed, NoiseSpec noise = {}, uint64_t gap_ns = 1000);
  // Writes come from `program` instead, one after the other; `report_wait` false is a
  // runtime that does not measure the wait (every CPU nanosecond charged).
  void run_program(Program program, bool report_wait = true) {
    program_ = program;
    closed_loop_ = true;
    report_wait_ = report_wait;
  }

  // Decides, draws the cost of every eligible path, observes the chosen one.
  Outcome step(SimWrite w, const CostModel& model);

  Policy& policy() { return policy_; }
  Tunables& tunables() { return tunables_; }
  Noise& noise() { return noise_; }
  uint64_t now_ns() const { return now_ns_; }
  uint64_t writes() const { return index_; }
  double cpu_ns() const { return cpu_ns_; }    // simulated CPU time spent on CPU paths
  double wait_ns() const { return wait_ns_; }  // simulated time spent polling for the NIC

 private:
  Policy policy_;
  Tunables tunables_;
  Noise noise_;
  uint64_t gap_ns_;
  uint64_t now_ns_ = 1'000'000;
  uint64_t index_ = 0;
  double cpu_ns_ = 0;
  double wait_ns_ = 0;
  Program program_;
  bool closed_loop_ = false;
  bool report_wait_ = true;
};

// A cold-traffic remote write of `length` bytes to a random page among 2^24.
SimWrite random_write(Noise& rng, uint32_t length, bool peer_local, PathSet eligible);

}  // namespace unload::policy::sim
