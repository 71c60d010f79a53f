// Request classification and path eligibility: only writes the program did not inline
// are candidates; a failed CPU-path precondition leaves the NIC; WRITE_WITH_IMM never
// goes direct.
#include "classify.hpp"

#include <gtest/gtest.h>

namespace unload::rt {
namespace {

using policy::Path;
using policy::PathSet;

ibv_send_wr write_wr(ibv_sge* sg, int n, ibv_wr_opcode op = IBV_WR_RDMA_WRITE, unsigned flags = 0) {
  ibv_send_wr wr{};
  wr.opcode = op;
  wr.sg_list = sg;
  wr.num_sge = n;
  wr.send_flags = flags;
  wr.wr.rdma.remote_addr = 0x1000;
  wr.wr.rdma.rkey = 77;
  return wr;
}

TEST(libunload_classify, WritesAreRecognisedWithLengthAndTarget) {
  ibv_sge sg[2] = {{0x10, 100, 1}, {0x200, 28, 1}};
  ibv_send_wr wr = write_wr(sg, 2, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED | IBV_SEND_FENCE);
  const WriteRequest r = classify(wr, false);
  EXPECT_TRUE(r.is_write);
  EXPECT_FALSE(r.with_imm);
  EXPECT_TRUE(r.signaled);
  EXPECT_TRUE(r.fence);
  EXPECT_EQ(r.length, 128u);
  EXPECT_EQ(r.sge_count, 2u);
  EXPECT_EQ(r.rkey, 77u);
  EXPECT_EQ(r.remote_addr, 0x1000u);
}

TEST(libunload_classify, SignaledBySqSigAll) {
  ibv_sge sg{0x10, 8, 1};
  ibv_send_wr wr = write_wr(&sg, 1);
  EXPECT_FALSE(classify(wr, false).signaled);
  EXPECT_TRUE(classify(wr, true).signaled);
}

TEST(libunload_classify, OtherOpcodesAreNotWrites) {
  ibv_sge sg{0x10, 8, 1};
  for (ibv_wr_opcode op : {IBV_WR_SEND, IBV_WR_SEND_WITH_IMM, IBV_WR_RDMA_READ, IBV_WR_ATOMIC_CMP_AND_SWP,
                           IBV_WR_ATOMIC_FETCH_AND_ADD}) {
    ibv_send_wr wr = write_wr(&sg, 1, op);
    EXPECT_FALSE(classify(wr, false).is_write) << op;
    PathContext c{1024, true, true, true};
    EXPECT_EQ(eligible_paths(classify(wr, false), c), PathSet(Path::offload)) << op;
  }
}

TEST(libunload_classify, EligibilityFollowsPreconditions) {
  ibv_sge sg{0x10, 64, 1};
  ibv_send_wr wr = write_wr(&sg, 1);
  const WriteRequest r = classify(wr, false);
  PathContext c{256, true, false, false};
  EXPECT_EQ(eligible_paths(r, c), PathSet(Path::offload).with(Path::unload_inline));
  c.max_inline = 32;  // does not fit the QP's real inline cap
  EXPECT_EQ(eligible_paths(r, c), PathSet(Path::offload));
  c.max_inline = 256;
  c.sges_valid = false;  // unknown lkey or out of bounds: the NIC reports it
  EXPECT_EQ(eligible_paths(r, c), PathSet(Path::offload));
  c = {256, true, true, true, true, true};
  EXPECT_EQ(eligible_paths(r, c), PathSet::all());
}

TEST(libunload_classify, ProgramInlineTakesDirectOrMappedOnly) {
  ibv_sge sg{0x10, 64, 1};
  ibv_send_wr inl = write_wr(&sg, 1, IBV_WR_RDMA_WRITE, IBV_SEND_INLINE);
  PathContext c{256, false, true, true};  // no lkey is checked: sges_valid does not matter
  EXPECT_EQ(eligible_paths(classify(inl, false), c), PathSet(Path::offload).with(Path::unload_direct));
  c.mapped_available = true;
  EXPECT_EQ(eligible_paths(classify(inl, false), c),
            PathSet(Path::offload).with(Path::unload_direct).with(Path::unload_mapped));
  c.direct_available = c.mapped_available = false;
  EXPECT_EQ(eligible_paths(classify(inl, false), c), PathSet(Path::offload));
}

TEST(libunload_classify, ProgramInlineMayGoRemoteWhenRemoteIsAvailable) {
  ibv_sge sg{0x10, 64, 1};
  ibv_send_wr inl = write_wr(&sg, 1, IBV_WR_RDMA_WRITE, IBV_SEND_INLINE);
  const PathContext c{256, false, true, false, true};
  EXPECT_EQ(eligible_paths(classify(inl, false), c), PathSet(Path::offload).with(Path::unload_remote));
}

TEST(libunload_classify, ImmediateNeverDirectNorRemote) {
  ibv_sge sg{0x10, 64, 1};
  PathContext c{256, true, true, true, true, true};
  ibv_send_wr imm = write_wr(&sg, 1, IBV_WR_RDMA_WRITE_WITH_IMM);
  const WriteRequest r = classify(imm, false);
  EXPECT_TRUE(r.with_imm);
  EXPECT_FALSE(eligible_paths(r, c).contains(Path::unload_direct));
  EXPECT_FALSE(eligible_paths(r, c).contains(Path::unload_mapped));
  EXPECT_FALSE(eligible_paths(r, c).contains(Path::unload_remote));
  EXPECT_TRUE(eligible_paths(r, c).contains(Path::unload_inline));
  EXPECT_TRUE(eligible_paths(r, c).contains(Path::unload_stage));
}

}  // namespace
}  // namespace unload::rt
