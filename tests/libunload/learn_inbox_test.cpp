// A sample a completion thread (one without a policy) merges reaches the policy of the
// thread that sampled the write at that thread's next decision, not at the QP's next post
// (at 1024 QPs a round of the others later); a full inbox drops and counts.
#include <gtest/gtest.h>

#include <thread>

#include "learn.hpp"
#include "stats.hpp"

namespace unload::rt {
namespace {

constexpr uint32_t kLength = 64, kRkey = 0x1234;
constexpr uint64_t kAddr = 0x10000;

WriteRequest request() {
  return one_sge_write(false, true, kLength, kRkey, kAddr);
}

// A write of q's, finished, learnt on a thread of its own that never posted.
void merged_elsewhere(QpRec* q, uint64_t cost_ns, int times = 1) {
  std::thread([=] {
    for (int i = 0; i < times; ++i) observe_direct(q, Path::unload_mapped, request(), cost_ns);
  }).join();
}

struct LearntElsewhere : ::testing::Test {
  QpRec qp{};
  policy::Policy* pol = nullptr;

  void SetUp() override {
    pol = thread_policy();
    ASSERT_NE(pol, nullptr);
    learn_inbox(pol);  // what another test left
  }
  uint32_t samples_learnt() const {
    const policy::WriteFeatures f = features_of(&qp, kLength, 1, kRkey, kAddr, policy::PathSet::all());
    return pol->estimate(f, Path::unload_mapped).samples();
  }
};

TEST_F(LearntElsewhere, TheSamplingThreadsNextDecisionLearnsIt) {
  learner_is_me(&qp);  // this thread's route sampled a write of qp
  const uint32_t before = samples_learnt();
  merged_elsewhere(&qp, 5000);
  ASSERT_TRUE(inbox_waiting()) << "the sample did not reach this thread's inbox";
  EXPECT_EQ(samples_learnt(), before) << "learnt before this thread decided anything";
  learn_inbox(pol);
  EXPECT_EQ(samples_learnt(), before + 1);
  EXPECT_FALSE(inbox_waiting());
}

TEST_F(LearntElsewhere, AFullInboxDropsAndCounts) {
  learner_is_me(&qp);
  const uint64_t dropped = stats_totals().samples_dropped;
  const uint32_t before = samples_learnt();
  merged_elsewhere(&qp, 5000, Inbox::kSize + 3);
  EXPECT_EQ(stats_totals().samples_dropped, dropped + 3);
  learn_inbox(pol);
  EXPECT_EQ(samples_learnt(), before + Inbox::kSize);
}

TEST_F(LearntElsewhere, AWriteNoPolicySampledIsDroppedAndCounted) {
  const uint64_t dropped = stats_totals().samples_dropped;
  merged_elsewhere(&qp, 5000);
  EXPECT_FALSE(inbox_waiting());
  EXPECT_EQ(stats_totals().samples_dropped, dropped + 1);
}

}  // namespace
}  // namespace unload::rt
