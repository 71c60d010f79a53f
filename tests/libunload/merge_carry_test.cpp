// A hidden marker that fails first leaves its status to the QP's next flushed completion the
// program sees. rxe gives no deterministic RETRY_EXC_ERR (a dead peer's writes retry for
// ever there) and no NAK for a zero-length marker (no rkey check), so the merger's rule is
// tested here, the suite's name says why.
#include "merge.hpp"

#include <gtest/gtest.h>

namespace unload::rt {
namespace {

SqEntry* post(QpRec& q, uint64_t wr_id, uint8_t flags) {
  const uint64_t t = q.sq.ring.tail();
  SqEntry* e = q.sq.ring.reserve(t);
  *e = SqEntry{};
  e->seq = t;
  e->user_wr_id = wr_id;
  e->stage_mark = 0;
  e->flags = flags;
  q.sq.ring.publish(t + 1);
  return e;
}

TEST(MergeCarryRxeCannotFailAMarker, FailedMarkerStatusGoesToTheNextFlushedCompletion) {
  QpRec q{};
  ASSERT_EQ(q.sq.ring.init(16), 0);
  SqEntry* marker = post(q, 0, kHidden | kMarker);
  SqEntry* mine = post(q, 7, kSignaled | kWrite);
  SqEntry* later = post(q, 8, kSignaled | kWrite);
  uint64_t wr_id = 0;
  ibv_wc_status st = IBV_WC_RETRY_EXC_ERR;
  EXPECT_FALSE(merge_entry(&q, marker, &st, &wr_id));
  st = IBV_WC_WR_FLUSH_ERR;
  EXPECT_TRUE(merge_entry(&q, mine, &st, &wr_id));
  EXPECT_EQ(wr_id, 7u);
  EXPECT_EQ(st, IBV_WC_RETRY_EXC_ERR);  // the cause, once
  st = IBV_WC_WR_FLUSH_ERR;
  EXPECT_TRUE(merge_entry(&q, later, &st, &wr_id));
  EXPECT_EQ(st, IBV_WC_WR_FLUSH_ERR);
  EXPECT_TRUE(q.failed.load());
}

TEST(MergeCarryRxeCannotFailAMarker, SucceededMarkerCarriesNothing) {
  QpRec q{};
  ASSERT_EQ(q.sq.ring.init(16), 0);
  SqEntry* marker = post(q, 0, kHidden | kMarker);
  SqEntry* mine = post(q, 7, kSignaled | kWrite);
  uint64_t wr_id = 0;
  ibv_wc_status st = IBV_WC_SUCCESS;
  EXPECT_FALSE(merge_entry(&q, marker, &st, &wr_id));
  st = IBV_WC_WR_FLUSH_ERR;
  EXPECT_TRUE(merge_entry(&q, mine, &st, &wr_id));
  EXPECT_EQ(st, IBV_WC_WR_FLUSH_ERR);
}

}  // namespace
}  // namespace unload::rt
