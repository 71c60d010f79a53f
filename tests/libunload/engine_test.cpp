// Direct's engine choice (libunload/src/engine.hpp): warm-up alternates, the cheaper engine
// by its least recent sample wins, a first write's one-time cost does not, exploration
// reaches the other engine, a change is followed, classes are apart, and no samples keep
// the mapped engine.
#include "engine.hpp"

#include <gtest/gtest.h>

namespace unload::rt {
namespace {

// Feeds `n` timed writes of `length`, each through the engine the choice names, costing
// `mapped_ns` or `module_ns`; returns how many went mapped.
int feed(EngineChoice& e, uint32_t length, int n, uint64_t mapped_ns, uint64_t module_ns) {
  int mapped = 0;
  for (int i = 0; i < n; ++i) {
    const bool m = e.mapped(length, true);
    mapped += m;
    e.learn(length, m, m ? mapped_ns : module_ns);
  }
  return mapped;
}

TEST(EngineChoice, NoSamplesKeepTheMappedEngine) {
  EngineChoice e;
  EXPECT_TRUE(e.mapped(65536, false));
  EXPECT_FALSE(e.module_chosen(65536));
}

TEST(EngineChoice, WarmUpAlternatesStartingMapped) {
  EngineChoice e;
  bool expect = true;
  for (unsigned i = 0; i < 2 * EngineChoice::kWarmSamples; ++i, expect = !expect) {
    const bool m = e.mapped(4096, true);
    EXPECT_EQ(m, expect) << "timed write " << i;
    e.learn(4096, m, 1000);
  }
}

TEST(EngineChoice, TheCheaperEngineTakesUntimedWrites) {
  EngineChoice e;
  feed(e, 65536, 40, 100000, 20000);
  EXPECT_TRUE(e.module_chosen(65536));
  EXPECT_FALSE(e.mapped(65536, false));
  feed(e, 4096, 40, 2000, 5000);
  EXPECT_FALSE(e.module_chosen(4096));
  EXPECT_TRUE(e.mapped(4096, false));
  EXPECT_TRUE(e.module_chosen(65536)) << "classes are learnt apart";
}

// A QP's first mapped writes cost milliseconds (the grant, the page's fault): with the
// least sample they do not hide the engine's cost.
TEST(EngineChoice, FirstWritesOneTimeCostsDoNotDecide) {
  EngineChoice e;
  const uint64_t mapped[] = {4000000, 76000, 3500, 1600, 34000, 1600, 1600, 1600};
  const uint64_t module[] = {1000000, 80000, 7600, 5400, 12800, 4500, 4500, 4500};
  unsigned im = 0, ik = 0;
  for (int i = 0; i < 16; ++i) {
    const bool m = e.mapped(4096, true);
    e.learn(4096, m, m ? mapped[im++ % 8] : module[ik++ % 8]);
  }
  EXPECT_FALSE(e.module_chosen(4096));
}

TEST(EngineChoice, ExplorationSamplesTheOtherEngineAndFollowsAChange) {
  EngineChoice e;
  feed(e, 65536, 40, 100000, 20000);
  ASSERT_TRUE(e.module_chosen(65536));
  const int explored = feed(e, 65536, 16 * 10, 100000, 20000);
  EXPECT_EQ(explored, 10) << "one timed write in kExploreEvery takes the other engine, its window full";
  // The mapped engine becomes the cheaper (and the module's dearer: its window forgets).
  feed(e, 65536, 16 * 20, 5000, 20000);
  EXPECT_FALSE(e.module_chosen(65536));
}

// The other engine's first samples were all dear (a QP's first writes): while its window
// is not full it is explored one timed write in kExploreYoung, so a cheap engine is back
// within a few timed writes rather than one in kExploreEvery.
TEST(EngineChoice, AYoungWindowIsExploredSooner) {
  EngineChoice e;
  for (unsigned i = 0; i < 2 * EngineChoice::kWarmSamples; ++i) {
    const bool m = e.mapped(8, true);
    e.learn(8, m, m ? 50000 : 3000);  // the mapped engine's warm-up: grants and faults
  }
  ASSERT_TRUE(e.module_chosen(8));
  feed(e, 8, static_cast<int>(EngineChoice::kExploreYoung), 500, 3000);
  EXPECT_FALSE(e.module_chosen(8)) << "back to mapped within kExploreYoung timed writes";
}

TEST(EngineChoice, WithinTheHysteresisTheChoiceStays) {
  EngineChoice e;
  feed(e, 4096, 100, 1000, 1100);  // the module 10 % dearer: mapped, and it stays so
  EXPECT_FALSE(e.module_chosen(4096));
  feed(e, 4096, 100, 1100, 1000);  // now mapped 10 % dearer: within 15 %, no switch
  EXPECT_FALSE(e.module_chosen(4096));
}

}  // namespace
}  // namespace unload::rt
