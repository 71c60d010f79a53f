// Each mode's rule (offload, unload, threshold), enabled=0 and unknown modes forcing offload, and the mode
// encoding of the control page.
#include <gtest/gtest.h>

#include "test_support.hpp"

namespace unload::policy {
namespace {

using testing::tunables_in;
using testing::write_of;

TEST(policy_modes, ModeEncodingMatchesSysfsOrder) {
  EXPECT_EQ(mode_of(tunables_in(Mode::offload)), Mode::offload);
  EXPECT_EQ(mode_of(tunables_in(Mode::unload)), Mode::unload);
  EXPECT_EQ(mode_of(tunables_in(Mode::threshold)), Mode::threshold);
  EXPECT_EQ(mode_of(tunables_in(Mode::adaptive)), Mode::adaptive);
  Tunables t = kDefaultTunables;
  t.mode = 4;
  EXPECT_EQ(mode_of(t), Mode::offload);
}

TEST(policy_modes, OffloadAlwaysTakesTheNic) {
  Policy policy;
  const Tunables t = tunables_in(Mode::offload);
  for (uint32_t len : {0u, 1u, 64u, 4096u, 1u << 20}) {
    EXPECT_EQ(policy.decide(write_of(len, PathSet::all(), true), t), Path::offload) << len;
  }
}

TEST(policy_modes, DisabledMeansOffloadInEveryMode) {
  for (Mode m : {Mode::offload, Mode::unload, Mode::threshold, Mode::adaptive}) {
    Policy policy;
    Tunables t = tunables_in(m);
    t.enabled = 0;
    for (int i = 0; i < 1000; ++i) {
      const WriteFeatures f = write_of(static_cast<uint32_t>(i), PathSet::all(), i % 2 == 0);
      ASSERT_EQ(policy.decide(f, t), Path::offload) << static_cast<int>(m);
      policy.observe(Path::offload, f, 100);
    }
  }
}

TEST(policy_modes, UnknownModeMeansOffload) {
  Policy policy;
  Tunables t = kDefaultTunables;
  t.mode = 99;
  EXPECT_EQ(policy.decide(write_of(8, PathSet::all(), true), t), Path::offload);
}

TEST(policy_modes, UnloadTakesTheCheapestEligibleCpuPath) {
  Policy policy;
  const Tunables t = tunables_in(Mode::unload);
  EXPECT_EQ(policy.decide(write_of(64, PathSet::all(), true), t), Path::unload_mapped);
  EXPECT_EQ(policy.decide(write_of(64, PathSet::all().without(Path::unload_mapped), true), t), Path::unload_direct);
  const PathSet copies = PathSet(Path::unload_inline).with(Path::unload_stage);
  EXPECT_EQ(policy.decide(write_of(64, copies), t), Path::unload_inline);
  // Past inline_max (256) only stage remains of the two.
  EXPECT_EQ(policy.decide(write_of(1024, copies), t), Path::unload_stage);
  // Past stage_max nothing CPU-side remains.
  EXPECT_EQ(policy.decide(write_of(1u << 20, copies), t), Path::offload);
}

TEST(policy_modes, UnloadIgnoresTheCpuBudget) {
  Policy policy;
  Tunables t = tunables_in(Mode::unload);
  t.cpu_budget_pct = 0;
  for (int i = 0; i < 100; ++i) {
    WriteFeatures f = write_of(64, PathSet(Path::unload_inline));
    f.now_ns = static_cast<uint64_t>(i);
    ASSERT_EQ(policy.decide(f, t), Path::unload_inline);
    policy.observe(Path::unload_inline, f, 1'000'000);
  }
}

TEST(policy_modes, ThresholdUnloadsUpToThresholdBytes) {
  Policy policy;
  Tunables t = tunables_in(Mode::threshold);
  t.threshold_bytes = 512;
  t.inline_max = 256;
  const PathSet remote = PathSet(Path::unload_inline).with(Path::unload_stage);
  EXPECT_EQ(policy.decide(write_of(256, remote), t), Path::unload_inline);
  EXPECT_EQ(policy.decide(write_of(512, remote), t), Path::unload_stage);
  EXPECT_EQ(policy.decide(write_of(513, remote), t), Path::offload);
  EXPECT_EQ(policy.decide(write_of(8, PathSet()), t), Path::offload);  // nothing CPU-side eligible
  t.threshold_bytes = 0;
  EXPECT_EQ(policy.decide(write_of(1, remote), t), Path::offload);
}

// A peer on another host whose module answers: remote, inline and stage are eligible.
constexpr PathSet kCrossHost = PathSet(Path::unload_remote).with(Path::unload_inline).with(Path::unload_stage);

TEST(policy_modes, UnloadAndThresholdTakeRemoteForAPeerOnAnotherHost) {
  for (Mode m : {Mode::unload, Mode::threshold}) {
    Policy policy;
    const Tunables t = tunables_in(m);
    EXPECT_EQ(policy.decide(write_of(64, kCrossHost), t), Path::unload_remote) << static_cast<int>(m);
    EXPECT_EQ(policy.decide(write_of(64, kCrossHost.without(Path::unload_remote)), t), Path::unload_inline);
    // A peer on this host is direct's, never the channel's.
    EXPECT_EQ(policy.decide(write_of(64, kCrossHost, true), t), Path::unload_inline);
  }
  Tunables t = tunables_in(Mode::threshold);
  t.threshold_bytes = 32;
  EXPECT_EQ(Policy().decide(write_of(64, kCrossHost), t), Path::offload);
}

// Adaptive, remote costing half the NIC's: `page_of(i)` is write i's target page.
template <typename PageOf>
uint64_t remote_writes_after_warmup(PageOf page_of) {
  Policy policy;
  Tunables t = tunables_in(Mode::adaptive);
  t.cpu_budget_pct = 100;  // the budget has its own tests
  uint64_t remote = 0;
  for (int i = 0; i < 40'000; ++i) {
    WriteFeatures f = write_of(64, kCrossHost);
    f.remote_addr = page_of(i) << kTargetPageShift;
    f.now_ns = static_cast<uint64_t>(i) * 1000;
    const Path p = policy.decide(f, t);
    if (i >= 20'000) remote += p == Path::unload_remote;
    if (policy.sampled())
      policy.observe(p, f, p == Path::offload ? 10'000 : p == Path::unload_remote ? 5'000 : 9'000);
  }
  return remote;
}

TEST(policy_modes, AdaptiveLearnsRemoteOnColdTargetPages) {
  // Each write to a page of its own: none is hot.
  EXPECT_GT(remote_writes_after_warmup([](int i) { return uint64_t(i) * 7919; }), 19'000u);
}

TEST(policy_modes, AdaptiveKeepsAHotTargetPageOffRemote) {
  // Every write to one page: hot after its first few, and then never remote, however cheap.
  EXPECT_EQ(remote_writes_after_warmup([](int) { return uint64_t{42}; }), 0u);
}

}  // namespace
}  // namespace unload::policy
