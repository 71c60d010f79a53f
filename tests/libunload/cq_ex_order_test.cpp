// ibv_cq_ex polling keeps a QP's completions in order when a direct write of that QP queues
// its completion while the poll looks at the provider: the provider's later completion goes
// behind it. On rxe the window is a preempted poller; a fake provider opens it every time.
// And the shim's own completions are stepped over in a way rxe's ibv_cq_ex survives.
#include "cq_ex.hpp"
#include "registry.hpp"
#include "unload/runtime.h"

#include <gtest/gtest.h>

#include <functional>
#include <vector>

namespace unload::rt {
namespace {

constexpr uint32_t kQpn = 5;

struct FakeWc {
  uint64_t wr_id;
  uint32_t byte_len;
};

// A provider CQ as rxe in rdma-core 44 polls one: a sequence holds the CQ's lock from
// start_poll to end_poll, and a next_poll that finds nothing already moves the consumer
// index and unlocks, so the end_poll due after it moves it once more (a completion lost).
struct FakeCq {
  ibv_cq_ex cqx{};  // first: the provider's callbacks get its address
  std::vector<FakeWc> cqes;  // the producer index is its size
  size_t consumer = 0;
  size_t cur = 0;
  bool locked = false;
  int bad_unlocks = 0;
  std::function<void()> during_poll;  // runs once, inside the next start_poll
};

FakeCq* fake(ibv_cq_ex* cq) {
  return reinterpret_cast<FakeCq*>(cq);
}

void fake_unlock(FakeCq* f) {
  if (!f->locked) f->bad_unlocks++;
  f->locked = false;
}
int fake_current(ibv_cq_ex* cq) {
  FakeCq* f = fake(cq);
  cq->wr_id = f->cqes[f->cur].wr_id;
  cq->status = IBV_WC_SUCCESS;
  return 0;
}
int fake_start(ibv_cq_ex* cq, ibv_poll_cq_attr*) {
  FakeCq* f = fake(cq);
  if (auto hook = std::exchange(f->during_poll, nullptr)) hook();
  f->locked = true;
  f->cur = f->consumer;
  if (f->cur == f->cqes.size()) {
    fake_unlock(f);
    return ENOENT;
  }
  return fake_current(cq);
}
int fake_next(ibv_cq_ex* cq) {
  FakeCq* f = fake(cq);
  if (++f->cur == f->cqes.size()) {
    f->consumer = f->cur;
    fake_unlock(f);
    return ENOENT;
  }
  return fake_current(cq);
}
void fake_end(ibv_cq_ex* cq) {
  FakeCq* f = fake(cq);
  f->consumer = ++f->cur;
  fake_unlock(f);
}
ibv_wc_opcode fake_opcode(ibv_cq_ex*) {
  return IBV_WC_RDMA_WRITE;
}
uint32_t fake_zero(ibv_cq_ex*) {
  return 0;
}
unsigned int fake_flags(ibv_cq_ex*) {
  return 0;
}
uint32_t fake_qpn(ibv_cq_ex*) {
  return kQpn;
}
uint32_t fake_byte_len(ibv_cq_ex* cq) {
  return fake(cq)->cqes[fake(cq)->cur].byte_len;
}

class CqxOrder : public ::testing::Test {
 protected:
  void SetUp() override {
    ctx_.id = 7;
    rec_.c = &ctx_;
    rec_.cqx = &f_.cqx;
    rec_.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_QP_NUM;
    rec_.cq = ibv_cq_ex_to_cq(&f_.cqx);
    rec_.tracked.store(true);
    ASSERT_EQ(rec_.pending.init(16), 0);
    ASSERT_EQ(g_cqs.insert(key_of(rec_.cq), &rec_), 0);
    ibv_cq_ex* orig = unload_cqx_provider(&f_.cqx);
    ASSERT_NE(orig, nullptr);
    orig->start_poll = fake_start;
    orig->next_poll = fake_next;
    orig->end_poll = fake_end;
    orig->read_opcode = fake_opcode;
    orig->read_vendor_err = fake_zero;
    orig->read_wc_flags = fake_flags;
    orig->read_qp_num = fake_qpn;
    orig->read_byte_len = fake_byte_len;
  }
  void TearDown() override {
    g_cqs.remove_if(key_of(rec_.cq), &rec_);
    cqx_release(&rec_);
  }

  // What a program reads polling until the CQ is empty, one completion per start_poll ..
  // end_poll sequence, as a program on rxe in rdma-core 44 must: wr_ids and byte lengths.
  std::vector<FakeWc> poll_all() {
    std::vector<FakeWc> got;
    ibv_poll_cq_attr attr{};
    while (unload_cqx_start_poll(&f_.cqx, &attr) == 0) {
      got.push_back({f_.cqx.wr_id, unload_cqx_read_byte_len(&f_.cqx)});
      unload_cqx_end_poll(&f_.cqx);
    }
    return got;
  }

  static ibv_wc direct_wc(uint64_t wr_id) {
    ibv_wc wc{};
    wc.wr_id = wr_id;
    wc.status = IBV_WC_SUCCESS;
    wc.opcode = IBV_WC_RDMA_WRITE;
    wc.qp_num = kQpn;
    return wc;
  }

  ContextRec ctx_{};
  CqRec rec_{};
  FakeCq f_;
};

TEST_F(CqxOrder, ADirectCompletionQueuedDuringThePollComesBeforeTheProvidersLaterOne) {
  f_.cqes = {{2, 64}, {3, 64}};
  f_.during_poll = [&] { ASSERT_TRUE(rec_.pending.push(direct_wc(1))); };
  const std::vector<FakeWc> got = poll_all();
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].wr_id, 1u);
  EXPECT_EQ(got[1].wr_id, 2u);
  EXPECT_EQ(got[2].wr_id, 3u);
  EXPECT_EQ(got[1].byte_len, 64u) << "a queued provider completion keeps its fields";
}

TEST_F(CqxOrder, NothingIsCurrentWhileADirectWriteFillsItsCellThenAllComeInOrder) {
  f_.cqes = {{2, 64}};
  uint64_t ticket = 0;
  f_.during_poll = [&] { ASSERT_TRUE(rec_.pending.claim(ticket)); };
  EXPECT_TRUE(poll_all().empty()) << "the provider's completion may belong behind the claimed cell";
  rec_.pending.fill(ticket, direct_wc(1));
  const std::vector<FakeWc> got = poll_all();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].wr_id, 1u);
  EXPECT_EQ(got[1].wr_id, 2u);
  EXPECT_TRUE(poll_all().empty());
}

TEST_F(CqxOrder, TheShimsHiddenCompletionIsSkippedWithoutLosingTheNextOne) {
  QpRec q{};
  q.qp_num = kQpn;
  q.scq = &rec_;
  ASSERT_EQ(q.sq.ring.init(16), 0);
  const uint64_t t = q.sq.ring.tail();
  SqEntry* marker = q.sq.ring.reserve(t);
  *marker = SqEntry{};
  marker->seq = t;
  marker->flags = kHidden | kMarker;
  q.sq.ring.publish(t + 1);
  ASSERT_EQ(g_qps_by_num.insert(qpn_key(&ctx_, kQpn), &q), 0);
  f_.cqes = {{q.sq.ring.tag_of(marker), 0}};
  EXPECT_TRUE(poll_all().empty()) << "a marker is the shim's own";
  f_.cqes.push_back({9, 64});
  const std::vector<FakeWc> got = poll_all();
  g_qps_by_num.remove_if(qpn_key(&ctx_, kQpn), &q);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].wr_id, 9u);
  EXPECT_EQ(f_.consumer, f_.cqes.size());
  EXPECT_EQ(f_.bad_unlocks, 0);
}

TEST_F(CqxOrder, WithNothingQueuedTheProvidersCompletionsPassAsTheyAre) {
  f_.cqes = {{4, 8}, {5, 16}};
  const std::vector<FakeWc> got = poll_all();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].wr_id, 4u);
  EXPECT_EQ(got[1].byte_len, 16u);
}

}  // namespace
}  // namespace unload::rt
