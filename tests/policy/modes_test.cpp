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
  EXPECT_EQ(policy.decide(write_of(64, PathSet::all(), true), t), Path::unload_direct);
  EXPECT_EQ(policy.decide(write_of(64, PathSet::all().without(Path::unload_direct)), t), Path::unload_inline);
  // Past inline_max (256) only stage remains of the two.
  EXPECT_EQ(policy.decide(write_of(1024, PathSet::all().without(Path::unload_direct)), t),
            Path::unload_stage);
  // Past stage_max nothing CPU-side remains.
  EXPECT_EQ(policy.decide(write_of(1u << 20, PathSet::all().without(Path::unload_direct)), t), Path::offload);
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

TEST(policy_modes, NoModeRanksRemoteEvenWhenItIsTheOnlyCpuPath) {
  for (Mode m : {Mode::unload, Mode::threshold, Mode::adaptive}) {
    Policy policy;
    const Tunables t = tunables_in(m);
    for (int i = 0; i < 1000; ++i) {
      WriteFeatures f = write_of(64, PathSet(Path::unload_remote));
      f.now_ns = static_cast<uint64_t>(i) * 1000;
      ASSERT_EQ(policy.decide(f, t), Path::offload) << static_cast<int>(m);
      policy.observe(Path::offload, f, 10'000);
    }
  }
}

TEST(policy_modes, AdaptiveNeverTriesRemoteHoweverCheapItWouldBe) {
  Policy policy;
  const Tunables t = tunables_in(Mode::adaptive);
  for (int i = 0; i < 20'000; ++i) {
    WriteFeatures f = write_of(64, PathSet::all(), true);
    f.now_ns = static_cast<uint64_t>(i) * 1000;
    const Path p = policy.decide(f, t);
    ASSERT_NE(p, Path::unload_remote) << i;
    policy.observe(p, f, p == Path::offload ? 10'000 : 5'000);
  }
}

}  // namespace
}  // namespace unload::policy
