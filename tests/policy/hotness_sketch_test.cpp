// The hotness sketch: frequently written pages are hot, uniformly spread pages are not, a page cools once
// writes to it stop, rkeys are told apart, steady_touches() never promises an answer a touch would not
// give, and touch_many() is that many touches.
#include <cstring>

#include <gtest/gtest.h>

#include "unload/policy/hotness_sketch.hpp"
#include "unload/policy/prng.hpp"

namespace unload::policy {
namespace {

TEST(policy_hotness_sketch, FrequentPagesAreHotSpreadPagesAreNot) {
  HotnessSketch sketch;
  Prng rng(1);
  uint64_t cold_hot = 0, cold = 0;
  for (int i = 0; i < 100'000; ++i) {
    if (i % 4 == 0) {
      sketch.touch(1, rng.next() % 16);  // 16 pages share a quarter of the writes: ~1/64 each
    } else {
      const bool hot = sketch.touch(1, 1000 + rng.next() % (1u << 22));
      if (i > 10'000) {
        ++cold;
        cold_hot += hot;
      }
    }
  }
  for (uint64_t page = 0; page < 16; ++page) EXPECT_TRUE(sketch.is_hot(1, page)) << page;
  EXPECT_LT(cold_hot, cold / 1000);
}

TEST(policy_hotness_sketch, APageCoolsWhenWritesStop) {
  HotnessSketch sketch;
  for (int i = 0; i < 1000; ++i) sketch.touch(3, 77);
  EXPECT_TRUE(sketch.is_hot(3, 77));
  Prng rng(2);
  // Every counter is halved once per kWidth touches: 16 sweeps take 1000+ down to 0.
  for (unsigned i = 0; i < 16 * HotnessSketch::kWidth; ++i) sketch.touch(3, 1000 + rng.next() % (1u << 22));
  EXPECT_FALSE(sketch.is_hot(3, 77));
}

TEST(policy_hotness_sketch, SamePageUnderAnotherRkeyIsAnotherTarget) {
  HotnessSketch sketch;
  for (int i = 0; i < 100; ++i) sketch.touch(5, 42);
  EXPECT_TRUE(sketch.is_hot(5, 42));
  EXPECT_FALSE(sketch.is_hot(6, 42));
}

TEST(policy_hotness_sketch, CountsSaturateInsteadOfWrapping) {
  HotnessSketch sketch;
  for (int i = 0; i < 200'000; ++i) sketch.touch(9, 9);
  EXPECT_TRUE(sketch.is_hot(9, 9));
}

TEST(policy_hotness_sketch, SteadyTouchesAnswerAsPromised) {
  // Pages whose counts hover about the threshold, the sweep anywhere: every one of the
  // promised touches must answer as count + 1 >= kHotCount says.
  Prng rng(3);
  HotnessSketch sketch;
  uint64_t promised = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    for (int i = 0; i < 97; ++i) sketch.touch(1, rng.next() % 160);
    const HotnessSketch::Slots s = HotnessSketch::slots_of(1, rng.next() % 160);
    const bool hot = sketch.count(s) + 1 >= HotnessSketch::kHotCount;
    const unsigned n = sketch.steady_touches(s);
    HotnessSketch copy = sketch;
    for (unsigned j = 1; j <= n; ++j)
      ASSERT_EQ(copy.touch(s), hot) << "trial " << trial << ", touch " << j << " of " << n;
    promised += n;
  }
  EXPECT_GT(promised, 3000u);  // it does promise something
}

TEST(policy_hotness_sketch, TouchManyIsThatManyTouches) {
  // The sweep anywhere, counts anywhere (saturated ones too): n <= steady_touches(s)
  // touches at once leave the sketch as n single touches do.
  Prng rng(5);
  HotnessSketch sketch;
  for (int trial = 0; trial < 2000; ++trial) {
    for (int i = 0; i < 61; ++i) sketch.touch(1, rng.next() % 200);
    if (trial % 500 == 0)
      for (int i = 0; i < 70000; ++i) sketch.touch(2, 0);  // one page's counters saturate
    const HotnessSketch::Slots s = HotnessSketch::slots_of(trial % 7 == 0 ? 2 : 1, rng.next() % 200);
    const unsigned n = 1 + static_cast<unsigned>(rng.next() % sketch.steady_touches(s));
    HotnessSketch one_by_one = sketch;
    for (unsigned j = 0; j < n; ++j) one_by_one.touch(s);
    sketch.touch_many(s, n);
    ASSERT_EQ(std::memcmp(&sketch, &one_by_one, sizeof sketch), 0) << "trial " << trial << ", n " << n;
  }
}

}  // namespace
}  // namespace unload::policy
