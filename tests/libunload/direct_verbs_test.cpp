// What a vendor direct-verbs call takes out of the shim's tracking. rxe has no mlx5dv, so the
// sandbox cannot run these calls: the decision is tested here, the suite's name says why.
#include "unload/direct_verbs.hpp"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace unload
