// The resident set: a page joins at its second write, a footprint that fits is all members, one as large as
// the cache nearly all, a larger uniform one keeps its first members, a hot page takes a cold member's place,
// an idle member gives way, and off or resized it holds nothing.
#include <gtest/gtest.h>

#include <vector>

#include "unload/policy/prng.hpp"
#include "unload/policy/resident_set.hpp"

namespace unload::policy {
namespace {

// A write to `page` (rkey 1) as the policy makes it: counted by the sketch, then the set.
struct Target {
  HotnessSketch sketch;
  ResidentSet set;

  bool touch(uint64_t page) {
    const uint64_t key = HotnessSketch::key_of(1, page);
    sketch.touch(HotnessSketch::slots_of_key(key));
    return set.touch(key, sketch);
  }
  bool holds(uint64_t page) const { return set.contains(HotnessSketch::key_of(1, page)); }
  unsigned members(uint64_t pages) const {
    unsigned n = 0;
    for (uint64_t p = 0; p < pages; ++p) n += holds(p);
    return n;
  }
  // Pages 0 .. pages-1 written in turn, `passes` times; how many touches found a member.
  unsigned touch_each(uint64_t pages, int passes) {
    unsigned joined = 0;
    for (int pass = 0; pass < passes; ++pass)
      for (uint64_t p = 0; p < pages; ++p) joined += touch(p);
    return joined;
  }
};

TEST(policy_resident_set, APageWrittenOnceDoesNotJoin) {
  Target t;
  t.set.configure(1024);
  // The doorkeeper's bits are shared by hash: a few first writes find one set already.
  EXPECT_LE(t.touch_each(500, 1), 10u);
  t.touch_each(500, 1);
  EXPECT_GE(t.members(500), 495u);
}

TEST(policy_resident_set, AFootprintThatFitsIsAllMembersAfterTwoWritesEach) {
  Target t;
  t.set.configure(1024);
  t.touch_each(256, 2);
  EXPECT_EQ(t.members(256), 256u);
}

TEST(policy_resident_set, PagesWrittenOnceOverABigFootprintLeaveTheRoomFree) {
  // A hot set's cold tenth: writes over a million pages, each page written about once. A
  // first write joins only when another page's set its doorkeeper bit: 1 in 16 at most.
  Target t;
  t.set.configure(1024);
  Prng rng(3);
  for (int i = 0; i < 2'000; ++i) t.touch(rng.next() % (1u << 20));
  EXPECT_LE(t.set.members(), 125u);
}

TEST(policy_resident_set, AFootprintAsLargeAsTheCacheNearlyAllJoins) {
  Target t;
  t.set.configure(1024);
  t.touch_each(1024, 2);
  // Twice the ways it may fill: a ninth page in a set of eight is rare.
  EXPECT_GE(t.members(1024), 1000u);
  EXPECT_LE(t.set.members(), 1024u);
}

TEST(policy_resident_set, ALargerUniformFootprintKeepsItsFirstMembers) {
  Target t;
  t.set.configure(1024);
  Prng rng(1);
  constexpr uint64_t kPages = 16384;
  for (int i = 0; i < 20'000; ++i) t.touch(rng.next() % kPages);
  std::vector<bool> before(kPages);
  for (uint64_t p = 0; p < kPages; ++p) before[p] = t.holds(p);
  for (int i = 0; i < 200'000; ++i) t.touch(rng.next() % kPages);
  unsigned left = 0;
  for (uint64_t p = 0; p < kPages; ++p) left += before[p] && !t.holds(p);
  EXPECT_GE(t.members(kPages), 1000u);
  EXPECT_LE(t.members(kPages), 1024u);
  // A member leaves when unwritten for 64 turns of the set, or outnumbered by a newcomer
  // in the sketch by chance: fewer than one write in 1000 (each costs the NIC a miss).
  EXPECT_LE(left, 200u);
}

TEST(policy_resident_set, AHotPageTakesAColdMembersPlace) {
  Target t;
  t.set.configure(64);
  Prng rng(2);
  for (int i = 0; i < 5000; ++i) t.touch(1000 + rng.next() % 4096);  // full of cold members
  bool joined = false;
  for (int i = 0; i < 200 && !joined; ++i) {
    joined = t.touch(7);
    t.touch(1000 + rng.next() % 4096);
  }
  EXPECT_TRUE(joined);
}

TEST(policy_resident_set, AMemberUnwrittenForLongGivesWay) {
  Target t;
  t.set.configure(4);  // one set, room for four members
  for (uint64_t p = 0; p < 4; ++p) t.touch(p);
  for (uint64_t p = 0; p < 4; ++p) ASSERT_TRUE(t.touch(p));
  t.touch(100);
  EXPECT_FALSE(t.touch(100));  // full, and 100 no hotter than the members
  // Pages 1-3 stay written, page 0 not: past the idle limit, a newcomer takes its way.
  for (uint32_t i = 0; i < 4096 / 3 + 1; ++i)
    for (uint64_t p = 1; p < 4; ++p) t.touch(p);
  t.touch(100);  // its first write since the doorkeeper forgot
  EXPECT_TRUE(t.touch(100));
  EXPECT_FALSE(t.holds(0));
  for (uint64_t p = 1; p < 4; ++p) EXPECT_TRUE(t.holds(p)) << p;
}

TEST(policy_resident_set, OffItHoldsNothingAndANewSizeForgets) {
  Target t;
  EXPECT_FALSE(t.set.active());
  EXPECT_FALSE(t.touch(1));
  t.set.configure(16);
  t.touch(1);
  EXPECT_TRUE(t.touch(1));
  t.set.configure(16);  // the same size keeps its members
  EXPECT_TRUE(t.holds(1));
  t.set.configure(32);
  EXPECT_FALSE(t.holds(1));
  t.set.configure(ResidentSet::kMaxPages + 1);  // beyond its room: as large as it goes
  EXPECT_EQ(t.set.pages(), ResidentSet::kMaxPages);
}

}  // namespace
}  // namespace unload::policy
