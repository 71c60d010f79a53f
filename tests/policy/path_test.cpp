// PathSet algebra, path names, the tunables' length caps on eligibility, and the CPU-path preference order.
#include <gtest/gtest.h>

#include <cstring>

#include "test_support.hpp"

namespace unload::policy {
namespace {

using testing::write_of;

TEST(policy_path_set, Algebra) {
  constexpr PathSet none;
  EXPECT_TRUE(none.empty());
  constexpr PathSet s = PathSet(Path::unload_stage).with(Path::offload);
  static_assert(s.contains(Path::offload) && s.contains(Path::unload_stage));
  static_assert(!s.contains(Path::unload_inline));
  EXPECT_EQ(s.without(Path::offload), PathSet(Path::unload_stage));
  EXPECT_EQ(PathSet::all().bits(), 0x3F);
  EXPECT_EQ(PathSet::from_bits(0xFF), PathSet::all());
  EXPECT_FALSE(PathSet::cpu_paths().contains(Path::offload));
  EXPECT_EQ((PathSet::cpu_paths() | Path::offload), PathSet::all());
  EXPECT_EQ((PathSet::all() & Path::unload_direct), PathSet(Path::unload_direct));
}

TEST(policy_path, NamesMatchTheDesign) {
  EXPECT_STREQ(name_of(Path::offload), "offload");
  EXPECT_STREQ(name_of(Path::unload_inline), "unload.inline");
  EXPECT_STREQ(name_of(Path::unload_stage), "unload.stage");
  EXPECT_STREQ(name_of(Path::unload_direct), "unload.direct");
  EXPECT_STREQ(name_of(Path::unload_remote), "unload.remote");
  EXPECT_STREQ(name_of(Path::unload_mapped), "unload.mapped");
}

TEST(policy_path, SettingNamesAreTheNamesWithoutTheirPrefix) {
  EXPECT_STREQ(setting_name_of(Path::offload), "offload");
  EXPECT_STREQ(setting_name_of(Path::unload_inline), "inline");
  EXPECT_STREQ(setting_name_of(Path::unload_stage), "stage");
  EXPECT_STREQ(setting_name_of(Path::unload_direct), "direct");
  EXPECT_STREQ(setting_name_of(Path::unload_remote), "remote");
  EXPECT_STREQ(setting_name_of(Path::unload_mapped), "mapped");
  EXPECT_STREQ(setting_name_of(static_cast<Path>(kPathCount)), "?");
}

TEST(policy_path, OnlyThePathsLeavingTheSendQueueNeedAFence) {
  EXPECT_TRUE(needs_fence_after_nic(Path::unload_direct));
  EXPECT_TRUE(needs_fence_after_nic(Path::unload_mapped));
  EXPECT_TRUE(needs_fence_after_nic(Path::unload_remote));
  EXPECT_FALSE(needs_fence_after_nic(Path::unload_inline));
  EXPECT_FALSE(needs_fence_after_nic(Path::unload_stage));
  EXPECT_FALSE(needs_fence_after_nic(Path::offload));
}

TEST(policy_eligibility, OffloadIsAlwaysEligible) {
  EXPECT_EQ(effective_eligible(write_of(64, PathSet()), kDefaultTunables), PathSet(Path::offload));
}

TEST(policy_eligibility, CapsBoundEachCpuPath) {
  Tunables t = kDefaultTunables;
  t.inline_max = 256;
  t.stage_max = 4096;
  t.direct_max = 65536;
  const auto at = [&](uint32_t len) { return effective_eligible(write_of(len, PathSet::all()), t); };
  // A peer on another host (write_of's default): never mapped.
  EXPECT_EQ(at(256), PathSet::all().without(Path::unload_mapped));
  EXPECT_EQ(at(257), PathSet::all().without(Path::unload_mapped).without(Path::unload_inline));
  // Remote shares direct's cap: the module places both.
  EXPECT_EQ(at(4097), PathSet(Path::offload).with(Path::unload_direct).with(Path::unload_remote));
  EXPECT_EQ(at(65537), PathSet(Path::offload));
}

TEST(policy_eligibility, MappedIsForAPeerHereRemoteForOneElsewhereBothUnderDirectsCap) {
  Tunables t = kDefaultTunables;
  t.direct_max = 4096;
  const PathSet here = effective_eligible(write_of(64, PathSet::all(), true), t);
  EXPECT_TRUE(here.contains(Path::unload_mapped));
  EXPECT_FALSE(here.contains(Path::unload_remote));
  const PathSet there = effective_eligible(write_of(64, PathSet::all(), false), t);
  EXPECT_FALSE(there.contains(Path::unload_mapped));
  EXPECT_TRUE(there.contains(Path::unload_remote));
  EXPECT_FALSE(effective_eligible(write_of(4097, PathSet::all(), true), t).contains(Path::unload_mapped));
}

TEST(policy_eligibility, AZeroCapTurnsThePathOff) {
  Tunables t = kDefaultTunables;
  t.inline_max = 0;
  EXPECT_FALSE(effective_eligible(write_of(0, PathSet::all()), t).contains(Path::unload_inline));
}

TEST(policy_eligibility, CapsNeverAddAPathTheRuntimeRuledOut) {
  EXPECT_EQ(effective_eligible(write_of(8, PathSet(Path::unload_stage)), kDefaultTunables),
            PathSet(Path::offload).with(Path::unload_stage));
}

TEST(policy_cheapest_cpu_path, PrefersMappedThenDirectThenRemoteThenInlineThenStage) {
  EXPECT_EQ(cheapest_cpu_path(PathSet::all()), Path::unload_mapped);
  const PathSet here = PathSet::all().without(Path::unload_mapped);
  EXPECT_EQ(cheapest_cpu_path(here), Path::unload_direct);
  EXPECT_EQ(cheapest_cpu_path(here.without(Path::unload_direct)), Path::unload_remote);
  EXPECT_EQ(cheapest_cpu_path(here.without(Path::unload_direct).without(Path::unload_remote)),
            Path::unload_inline);
  EXPECT_EQ(cheapest_cpu_path(PathSet(Path::unload_stage).with(Path::offload)), Path::unload_stage);
  EXPECT_EQ(cheapest_cpu_path(PathSet(Path::offload)), Path::offload);
}

}  // namespace
}  // namespace unload::policy
