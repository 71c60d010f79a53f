// The two lanes' memos stand for the policy's settled decision: when adaptive settles a
// QP's writes on the NIC, the express lane a mapped write armed earlier must not take them
// first (it would route each in full and keep the NIC lane and the QP's settling away), and
// a decision it timed arms nothing; a lane write whose decision charges the CPU budget
// never settles its QP; and a settled QP's memo sees the QP as its consults will.
#include "nic_lane.hpp"

#include <gtest/gtest.h>

#include "learn.hpp"

namespace unload::rt {
namespace {

struct InlineWrite {
  char payload[8] = {};
  ibv_sge sg{reinterpret_cast<uintptr_t>(payload), sizeof(payload), 0};
  ibv_send_wr wr{};
  InlineWrite() {
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.sg_list = &sg;
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;  // no source region to keep
    wr.wr.rdma.rkey = 7;
  }
};

// A route adaptive gave the NIC, weighing it against mapped; `t0`: when it timed it (0: not).
Route nic_route(bool reused, uint64_t t0 = 0) {
  Route rt;
  rt.req.is_write = true;
  rt.req.user_inline = true;
  rt.req.signaled = true;
  rt.req.length = 8;
  rt.req.sge_count = 1;
  rt.req.rkey = 7;
  rt.path = Path::offload;
  rt.preferred = Path::unload_mapped;
  rt.eligible = policy::PathSet(Path::offload).with(Path::unload_mapped);
  rt.reused = reused;
  rt.t0 = t0;
  rt.adaptive = true;
  return rt;
}

TEST(Lanes, ASettledNicDecisionDisarmsTheExpressLane) {
  QpRec q{};
  q.express.armed = true;  // an earlier mapped write of this shape
  InlineWrite w;
  nic_lane_arm(&q, w.wr, nic_route(true), Why::none);
  EXPECT_TRUE(q.nic_lane.armed);
  EXPECT_FALSE(q.express.armed);
}

TEST(Lanes, AnUntimedNicDecisionForAnotherPageArmsTheNicLane) {
  QpRec q{};
  InlineWrite w;
  nic_lane_arm(&q, w.wr, nic_route(false), Why::none);  // random targets: no reuse
  EXPECT_TRUE(q.nic_lane.armed);
}

TEST(Lanes, ANicWriteThePolicyTimedLeavesTheExpressLane) {
  QpRec q{};
  q.express.armed = true;  // a sample or an exploration on the NIC: mapped stays settled
  InlineWrite w;
  nic_lane_arm(&q, w.wr, nic_route(false, 12345), Why::none);
  EXPECT_FALSE(q.nic_lane.armed);
  EXPECT_TRUE(q.express.armed);
}

// route() says the adaptive policy decided (Route::adaptive) only in the adaptive mode,
// with no path forced and more than the NIC to weigh; any other route arms nothing.
TEST(Lanes, OnlyAnAdaptiveDecisionArmsTheNicLane) {
  InlineWrite w;
  QpRec fixed{};  // another mode decided, a path was forced, or the NIC was all to weigh
  Route rt = nic_route(false);
  rt.adaptive = false;
  nic_lane_arm(&fixed, w.wr, rt, Why::none);
  EXPECT_FALSE(fixed.nic_lane.armed);
}

// Settled, a QP's requests go around the ring (`untracked`): the policy's feature "a NIC
// request in flight" is true at each consult, where the memo armed on a QP with nothing in
// flight kept false and declined every consult (at 1024 QPs, a write in 64 took the full
// walk and left its QP holding the CQ for a round of the others). The memo takes the
// feature, and the policy vouches for it afresh.
TEST(Lanes, ASettledQpsMemoKeepsTheFeatureItsConsultsSee) {
  QpRec q{};
  InlineWrite w;
  nic_lane_arm(&q, w.wr, nic_route(true), Why::none);
  ASSERT_TRUE(q.nic_lane.armed);
  ASSERT_FALSE(q.nic_lane.nic_outstanding);
  q.nic_lane.policy_gen = 42;  // a reuse the policy vouched for, with the feature false
  q.sq.untracked.store(true);  // settled (post.cpp, settle_after_lane)
  nic_lane_settled(&q);
  EXPECT_TRUE(q.nic_lane.armed);
  EXPECT_EQ(q.nic_lane.nic_outstanding, nic_outstanding(q.sq));
  EXPECT_EQ(q.nic_lane.policy_gen, 0u) << "vouched for a feature the QP no longer has";
  q.nic_lane.policy_gen = 43;  // vouched again with it true: a later settle keeps that
  nic_lane_settled(&q);
  EXPECT_EQ(q.nic_lane.policy_gen, 43u);
}

// A policy settled on inline for a 64 B write: inline costs 1000 ns, all of it CPU, the
// NIC 5000 ns, which a program that computes meanwhile does not wait for (its inline
// writes are charged to the budget) and one that waits for each does (they are not).
void settle_on_inline(policy::Policy& pol, bool computes) {
  policy::Tunables t = policy::kDefaultTunables;
  t.mode = static_cast<uint32_t>(policy::Mode::adaptive);
  policy::WriteFeatures f{};
  f.length = 64;
  f.sge_count = 1;
  f.rkey = 7;
  f.remote_addr = 0x10000;
  f.eligible = policy::PathSet(Path::unload_inline);
  uint64_t now = 1;
  // Until a write after the first 4000 reuses the settled decision for inline.
  for (int i = 0; i < 8000; ++i) {
    f.now_ns = pol.wants_clock() ? now : 0;
    Path p;
    const bool reused = pol.decide_reused(f, t, p);
    if (reused && i >= 4000 && p == Path::unload_inline) return;
    if (!reused) p = pol.decide_unreused(f, t);
    const bool nic = p == Path::offload;
    if (pol.sampled()) pol.observe(p, f, nic ? 5000 : 1000, nic ? 0 : 1000, nic && !computes ? 5000 : 0);
    now += (nic ? 5000 : 1000) + (computes ? 10'000 : 0);
  }
  ADD_FAILURE() << "no write reused a settled inline decision";
}

TEST(Lanes, AnInlineWriteThatDrawsOnTheBudgetDoesNotSettleItsQp) {
  Route inline_rt = nic_route(true);
  inline_rt.path = Path::unload_inline;
  for (const bool computes : {true, false}) {
    policy::Policy pol;
    settle_on_inline(pol, computes);
    t_policy = &pol;
    EXPECT_EQ(nic_lane_may_settle(inline_rt), !computes) << (computes ? "charged" : "waived");
    EXPECT_TRUE(nic_lane_may_settle(nic_route(true)));  // the NIC's writes are never charged
    t_policy = nullptr;
  }
  EXPECT_TRUE(nic_lane_may_settle(inline_rt));  // no policy yet: nothing decided, nothing charged
}

}  // namespace
}  // namespace unload::rt
