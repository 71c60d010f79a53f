// What a vendor direct-verbs call takes out of the shim's tracking. rxe has no mlx5dv, so the
// sandbox cannot run these calls: the decision is tested here, the suite's name says why.
#include "unload/direct_verbs.hpp"

#include <gtest/gtest.h>

#include "registry.hpp"
#include "unload/runtime.h"

namespace unload {
namespace {

TEST(DirectVerbsRxeCannotRunMlx5dv, InitObjOnAQpUntracksItAndEveryQpOnItsCqs) {
  const DvUntrack u = dv_untrack(DvCall::init_obj_qp);
  EXPECT_TRUE(u.qp);
  EXPECT_TRUE(u.its_cqs);
  EXPECT_FALSE(u.context);
}

TEST(DirectVerbsRxeCannotRunMlx5dv, InitObjOnACqUntracksEveryQpOnIt) {
  const DvUntrack u = dv_untrack(DvCall::init_obj_cq);
  EXPECT_FALSE(u.qp);
  EXPECT_TRUE(u.its_cqs);
  EXPECT_FALSE(u.context);
}

TEST(DirectVerbsRxeCannotRunMlx5dv, Mlx5dvCreateQpUntracksEveryQpOnItsCqs) {
  const DvUntrack u = dv_untrack(DvCall::create_qp);
  EXPECT_TRUE(u.qp);
  EXPECT_TRUE(u.its_cqs);
}

TEST(DirectVerbsRxeCannotRunMlx5dv, Mlx5dvCreateCqIsUnrecordedSoItsQpsAreUntrackedAlready) {
  const DvUntrack u = dv_untrack(DvCall::create_cq);
  EXPECT_FALSE(u.qp);
  EXPECT_FALSE(u.its_cqs);
  EXPECT_FALSE(u.context);
}

TEST(DirectVerbsRxeCannotRunMlx5dv, DevxObjectUntracksTheContextsLaterQps) {
  const DvUntrack u = dv_untrack(DvCall::devx_obj_create);
  EXPECT_TRUE(u.context);
}

// The QP a call takes out of tracking takes none of its writes into a lane: the express
// lane's memo is entered from the post's front, before any test of `tracked`.
TEST(DirectVerbsRxeCannotRunMlx5dv, AnUntrackedQpsLanesAreDisarmed) {
  rt::CqRec cq{};
  rt::QpRec q{};
  ibv_qp qp{};
  q.qp = &qp;
  q.scq = &cq;
  q.tracked = true;
  q.express.armed = true;
  q.nic_lane.armed = true;
  ASSERT_EQ(rt::g_qps.insert(rt::key_of(&qp), &q), 0);
  unload_dv_used(static_cast<int>(DvCall::init_obj_qp), nullptr, &qp, nullptr);
  rt::g_qps.remove(rt::key_of(&qp));
  EXPECT_FALSE(q.tracked);
  EXPECT_FALSE(q.express.armed);
  EXPECT_FALSE(q.nic_lane.armed);
}

}  // namespace
}  // namespace unload
