// The two lanes' memos stand for the policy's settled decision: when adaptive settles a
// QP's writes on the NIC, the express lane a mapped write armed earlier must not take them
// first (it would route each in full and keep the NIC lane and the QP's settling away).
#include "nic_lane.hpp"

#include <gtest/gtest.h>

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

Route nic_route(bool reused) {
  Route rt;
  rt.req.is_write = true;
  rt.req.user_inline = true;
  rt.req.signaled = true;
  rt.req.length = 8;
  rt.req.sge_count = 1;
  rt.req.rkey = 7;
  rt.path = Path::offload;
  rt.preferred = Path::unload_mapped;
  rt.reused = reused;
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

TEST(Lanes, ANicWriteTheTimingPolicyDidNotSettleLeavesTheExpressLane) {
  QpRec q{};
  q.express.armed = true;  // a sample or an exploration on the NIC: mapped stays settled
  InlineWrite w;
  nic_lane_arm(&q, w.wr, nic_route(false), Why::none);
  EXPECT_FALSE(q.nic_lane.armed);
  EXPECT_TRUE(q.express.armed);
}

}  // namespace
}  // namespace unload::rt
