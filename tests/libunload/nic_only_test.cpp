// Memory the CPU must not touch: which MRs and rkeys the CPU paths never take (nic_only.hpp),
// for the cases rxe cannot make on the sandbox's kernels (ODP, dma-buf, peer memory).
#include "nic_only.hpp"

#include <gtest/gtest.h>

namespace rt = unload::rt;

namespace {

constexpr int kRw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;

TEST(NicOnly, PlainMrIsACpuSource) {
  EXPECT_FALSE(rt::mr_nic_only(kRw, false));
  EXPECT_FALSE(rt::mr_nic_only(0, false));
}

TEST(NicOnly, OdpMrNeverACpuSource_RxeHasNoOdpOnTheseKernels) {
  EXPECT_TRUE(rt::mr_nic_only(kRw | IBV_ACCESS_ON_DEMAND, false));
  EXPECT_TRUE(rt::mr_nic_only(IBV_ACCESS_ON_DEMAND, false));
}

TEST(NicOnly, DmabufMrNeverACpuSource_RxeHasNoDmabufOnTheseKernels) {
  EXPECT_TRUE(rt::mr_nic_only(kRw, true));
  EXPECT_TRUE(rt::mr_nic_only(0, true));
}

TEST(NicOnly, PinRefusedForIoPfnmapOrPeerMemory_RxeCannotRegisterSuchRanges) {
  EXPECT_TRUE(rt::pin_refusal_nic_only(-EFAULT));      // VM_IO / VM_PFNMAP, peer memory
  EXPECT_TRUE(rt::pin_refusal_nic_only(-EOPNOTSUPP));  // FOLL_LONGTERM refused (fs-dax)
}

TEST(NicOnly, OtherPinRefusalsLeaveTheMemoryTheProcesss) {
  for (int err : {-ENOMEM, -ENOSPC, -ENOENT, -EPERM, -EINVAL, -ENODEV, -EEXIST, -EINTR})
    EXPECT_FALSE(rt::pin_refusal_nic_only(err)) << err;
}

TEST(NicOnly, WindowKeyIgnoresTheKeyByteAndKeepsDevicesApart) {
  ibv_device d1{}, d2{};
  ibv_context c1{}, c2{};
  c1.device = &d1;
  c2.device = &d2;
  // A bind changes the low 8 bits (ibv_inc_rkey): the same window.
  EXPECT_EQ(rt::mw_key(&c1, 0x12345600), rt::mw_key(&c1, 0x123456ff));
  EXPECT_NE(rt::mw_key(&c1, 0x12345600), rt::mw_key(&c1, 0x12345700));
  EXPECT_NE(rt::mw_key(&c1, 0x12345600), rt::mw_key(&c2, 0x12345600));
  EXPECT_NE(rt::mw_key(&c1, 0), 0u);
}

}  // namespace
