// The biased gate: the first thread enters without the lock, a second thread makes the
// gate shared, and no two threads are ever inside at once.
#include "gate.hpp"
#include "tls.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace unload::rt {
namespace {

TEST(Gate, FirstPollerIsBiasedUntilAnotherThreadComes) {
  if (!gate_init()) GTEST_SKIP() << "membarrier(PRIVATE_EXPEDITED) unavailable: every gate locks";
  Gate g;
  const uint32_t me = this_tid();
  bool how = g.enter(me);
  EXPECT_EQ(how, Gate::kBiased);
  g.leave(how);
  EXPECT_FALSE(g.shared());
  std::thread([&g] {
    const bool h = g.enter(this_tid());
    EXPECT_EQ(h, Gate::kLocked);
    g.leave(h);
  }).join();
  EXPECT_TRUE(g.shared());
  how = g.enter(me);
  EXPECT_EQ(how, Gate::kLocked) << "the owner must lock once the gate is shared";
  g.leave(how);
}

TEST(Gate, JoinerWaitsForTheOwnerInside) {
  if (!gate_init()) GTEST_SKIP() << "membarrier(PRIVATE_EXPEDITED) unavailable: every gate locks";
  Gate g;
  const bool how = g.enter(this_tid());
  ASSERT_EQ(how, Gate::kBiased);
  std::atomic<bool> owner_inside{true};
  std::atomic<bool> saw_owner_inside{false};
  std::atomic<bool> joiner_started{false};
  std::thread joiner([&] {
    joiner_started = true;
    const bool h = g.enter(this_tid());
    saw_owner_inside = owner_inside.load();
    g.leave(h);
  });
  while (!joiner_started.load()) {
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  owner_inside = false;
  g.leave(how);
  joiner.join();
  EXPECT_FALSE(saw_owner_inside.load()) << "the joiner entered while the owner was inside";
}

// What each thread does inside the gate: a plain (non-atomic) counter and an occupancy
// flag, so a lost update or two threads inside at once shows up in one of them.
struct Inside {
  uint64_t counter = 0;
  std::atomic<int> now{0};
  std::atomic<bool> overlap{false};
  void visit() {
    if (now.fetch_add(1, std::memory_order_relaxed) != 0) overlap = true;
    counter = counter + 1;
    now.fetch_sub(1, std::memory_order_relaxed);
  }
  void expect_exclusive(uint64_t visits) const {
    EXPECT_FALSE(overlap.load());
    EXPECT_EQ(counter, visits);
  }
};

TEST(Gate, MutualExclusionAcrossTheHandOver) {
  gate_init();
  constexpr int kThreads = 4;
  constexpr int kRounds = 200000;
  for (int trial = 0; trial < 5; ++trial) {
    Gate g;
    Inside inside;
    std::atomic<bool> go{false};
    auto body = [&] {
      const uint32_t me = this_tid();
      while (!go.load()) {
      }
      for (int i = 0; i < kRounds; ++i) {
        const bool how = g.enter(me);
        inside.visit();
        g.leave(how);
      }
    };
    std::vector<std::thread> ts;
    for (int t = 0; t < kThreads; ++t) ts.emplace_back(body);
    go = true;
    for (std::thread& t : ts) t.join();
    inside.expect_exclusive(static_cast<uint64_t>(kThreads) * kRounds);
  }
}

TEST(Gate, OnlyTheOwnerEntersItsWayAndOnlyUntilShared) {
  if (!gate_init()) GTEST_SKIP() << "membarrier(PRIVATE_EXPEDITED) unavailable: every gate locks";
  Gate g;
  const uint32_t me = this_tid();
  EXPECT_FALSE(g.try_enter_biased(me)) << "a gate nobody claimed has no owner's way in";
  EXPECT_FALSE(g.try_enter_biased(0)) << "a gate nobody claimed let a thread whose id is not yet known in";
  g.leave(g.enter(me));  // claims it
  ASSERT_TRUE(g.try_enter_biased(me));
  g.leave(Gate::kBiased);
  EXPECT_FALSE(g.try_enter_biased(me + 1)) << "another thread entered the owner's way";
  EXPECT_FALSE(g.try_enter_biased(0)) << "a thread whose id is not yet known entered the owner's way";
  std::thread([&g] { g.leave(g.enter(this_tid())); }).join();
  EXPECT_FALSE(g.try_enter_biased(me)) << "the owner entered its way after the gate was shared";
}

// The fronts' pattern (poll.cpp, post.cpp): the owner tries its way first and, refused,
// takes the full way in; others always take the full way.
TEST(Gate, OwnersWayAndFullWayExcludeEachOther) {
  gate_init();
  constexpr int kThreads = 3;
  constexpr int kRounds = 200000;
  for (int trial = 0; trial < 5; ++trial) {
    Gate g;
    Inside inside;
    std::atomic<int> ready{0};
    auto body = [&](bool tries_first) {
      const uint32_t me = this_tid();
      if (tries_first) g.leave(g.enter(me));  // the owner
      ready.fetch_add(1);
      while (ready.load() < kThreads) {
      }
      for (int i = 0; i < kRounds; ++i) {
        const bool how = tries_first && g.try_enter_biased(me) ? Gate::kBiased : g.enter(me);
        inside.visit();
        g.leave(how);
      }
    };
    std::vector<std::thread> ts;
    ts.emplace_back(body, true);
    while (ready.load() < 1) {
    }
    for (int t = 1; t < kThreads; ++t) ts.emplace_back(body, false);
    for (std::thread& t : ts) t.join();
    inside.expect_exclusive(static_cast<uint64_t>(kThreads) * kRounds);
  }
}

TEST(Gate, ThreadIdIsCachedAndReal) {
  EXPECT_EQ(this_tid(), static_cast<uint32_t>(gettid()));
  uint32_t other = 0;
  std::thread([&other] { other = this_tid(); }).join();
  EXPECT_NE(other, this_tid());
}

}  // namespace
}  // namespace unload::rt
