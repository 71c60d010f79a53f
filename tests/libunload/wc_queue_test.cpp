// The pending-completion queue: FIFO per producer, bounded, nothing lost or duplicated with
// several producers and one consumer.
#include "wc_queue.hpp"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace unload::rt {
namespace {

ibv_wc wc_of(uint64_t id) {
  ibv_wc wc{};
  wc.wr_id = id;
  return wc;
}

TEST(WcQueue, EmptyUntilPushedThenFifo) {
  WcQueue q;
  ASSERT_EQ(q.init(8), 0);
  EXPECT_TRUE(q.empty());
  for (uint64_t i = 1; i <= 5; ++i) ASSERT_TRUE(q.push(wc_of(i)));
  EXPECT_FALSE(q.empty());
  ibv_wc out[8];
  ASSERT_EQ(q.pop(out, 3), 3);
  EXPECT_EQ(out[0].wr_id, 1u);
  EXPECT_EQ(out[2].wr_id, 3u);
  ASSERT_EQ(q.pop(out, 8), 2);
  EXPECT_EQ(out[0].wr_id, 4u);
  EXPECT_EQ(out[1].wr_id, 5u);
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.pop(out, 8), 0);
}

TEST(WcQueue, RefusesWhenFullAndReusesCellsAfterPop) {
  WcQueue q;
  ASSERT_EQ(q.init(16), 0);
  ASSERT_EQ(q.capacity(), 16u);
  for (uint64_t i = 0; i < 16; ++i) ASSERT_TRUE(q.push(wc_of(i)));
  EXPECT_FALSE(q.push(wc_of(99)));
  ibv_wc out[4];
  ASSERT_EQ(q.pop(out, 4), 4);
  for (uint64_t i = 16; i < 20; ++i) ASSERT_TRUE(q.push(wc_of(i)));
  EXPECT_FALSE(q.push(wc_of(99)));
  uint64_t want = 4;
  ibv_wc all[16];
  ASSERT_EQ(q.pop(all, 16), 16);
  for (const ibv_wc& wc : all) EXPECT_EQ(wc.wr_id, want++);
}

TEST(WcQueue, ManyProducersOneConsumerLoseNothing) {
  constexpr unsigned kProducers = 4;
  constexpr uint64_t kEach = 200000;
  WcQueue q;
  ASSERT_EQ(q.init(256), 0);
  std::vector<std::thread> producers;
  for (unsigned p = 0; p < kProducers; ++p)
    producers.emplace_back([&q, p] {
      for (uint64_t i = 0; i < kEach; ++i)
        while (!q.push(wc_of((static_cast<uint64_t>(p) << 32) | i))) std::this_thread::yield();
    });
  std::vector<uint64_t> next(kProducers, 0);
  uint64_t got = 0;
  bool in_order = true;
  ibv_wc out[32];
  while (got < kProducers * kEach) {
    const int n = q.pop(out, 32);
    for (int i = 0; i < n; ++i) {
      const unsigned p = static_cast<unsigned>(out[i].wr_id >> 32);
      in_order &= p < kProducers && (out[i].wr_id & 0xffffffffu) == next[p];
      if (p < kProducers) next[p]++;
    }
    got += static_cast<uint64_t>(n);
  }
  for (std::thread& t : producers) t.join();
  EXPECT_TRUE(in_order) << "a producer's completions came out of order, or one was invented";
  for (unsigned p = 0; p < kProducers; ++p) EXPECT_EQ(next[p], kEach);
  EXPECT_TRUE(q.empty());
}

}  // namespace
}  // namespace unload::rt

namespace unload::rt {
namespace {

// A claimed cell holds its place: a cancelled one is skipped, a filled one keeps its order.
TEST(WcQueue, ClaimedCellsKeepOrderAndCancelledOnesVanish) {
  WcQueue q;
  ASSERT_EQ(q.init(16), 0);
  uint64_t a, b;
  ASSERT_TRUE(q.claim(a));
  ASSERT_TRUE(q.claim(b));
  ASSERT_TRUE(q.push(wc_of(3)));
  EXPECT_TRUE(q.empty());  // the head cell is claimed, not published
  q.cancel(a);
  q.fill(b, wc_of(2));
  ibv_wc out[4];
  ASSERT_EQ(q.pop(out, 4), 2);
  EXPECT_EQ(out[0].wr_id, 2u);
  EXPECT_EQ(out[1].wr_id, 3u);
  EXPECT_TRUE(q.empty());
}

TEST(WcQueue, GrowKeepsContentsAndOrder) {
  WcQueue q;
  ASSERT_EQ(q.init(16), 0);
  for (uint64_t i = 0; i < 16; ++i) ASSERT_TRUE(q.push(wc_of(i)));
  EXPECT_FALSE(q.push(wc_of(99)));
  ASSERT_EQ(q.grow(64), 0);
  EXPECT_EQ(q.capacity(), 64u);
  ASSERT_TRUE(q.push(wc_of(16)));
  ibv_wc out[32];
  ASSERT_EQ(q.pop(out, 32), 17);
  for (uint64_t i = 0; i < 17; ++i) EXPECT_EQ(out[i].wr_id, i);
}

// A purging provider (mlx5) drops a destroyed or reset QP's CQEs: the shim's queued ones of
// that QP go too, the others stay in order, a claimed unpublished cell is its producer's.
TEST(WcQueue, PurgeQpDropsThatQpsCompletionsOnly) {
  WcQueue q;
  ASSERT_EQ(q.init(16), 0);
  for (uint64_t i = 0; i < 6; ++i) {
    ibv_wc wc = wc_of(i);
    wc.qp_num = i % 2 ? 7 : 9;
    ASSERT_TRUE(q.push(wc));
  }
  uint64_t ticket;
  ASSERT_TRUE(q.claim(ticket));
  q.purge_qp(7);
  ibv_wc late = wc_of(100);
  late.qp_num = 7;
  q.fill(ticket, late);
  ibv_wc out[16];
  ASSERT_EQ(q.pop(out, 16), 4);
  EXPECT_EQ(out[0].wr_id, 0u);
  EXPECT_EQ(out[1].wr_id, 2u);
  EXPECT_EQ(out[2].wr_id, 4u);
  EXPECT_EQ(out[3].wr_id, 100u);
  EXPECT_TRUE(q.empty());
}

}  // namespace
}  // namespace unload::rt
