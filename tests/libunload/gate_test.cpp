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

TEST(Gate, MutualExclusionAcrossTheHandOver) {
  gate_init();
  constexpr int kThreads = 4;
  constexpr int kRounds = 200000;
  for (int trial = 0; trial < 5; ++trial) {
    Gate g;
    // Plain (non-atomic) counter and an occupancy flag: a lost update or two threads inside
    // at once shows up in one of them.
    uint64_t counter = 0;
    std::atomic<int> inside{0};
    std::atomic<bool> overlap{false};
    std::atomic<bool> go{false};
    auto body = [&] {
      const uint32_t me = this_tid();
      while (!go.load()) {
      }
      for (int i = 0; i < kRounds; ++i) {
        const bool how = g.enter(me);
        if (inside.fetch_add(1, std::memory_order_relaxed) != 0) overlap = true;
        counter = counter + 1;
        inside.fetch_sub(1, std::memory_order_relaxed);
        g.leave(how);
      }
    };
    std::vector<std::thread> ts;
    for (int t = 0; t < kThreads; ++t) ts.emplace_back(body);
    go = true;
    for (std::thread& t : ts) t.join();
    EXPECT_FALSE(overlap.load());
    EXPECT_EQ(counter, static_cast<uint64_t>(kThreads) * kRounds);
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
