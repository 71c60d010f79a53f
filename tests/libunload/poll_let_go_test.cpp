// A QP settled on the NIC that held its send CQ for one tracked write (a consult's sample)
// lets the CQ go in the program's poll that retires the write, so the CQ's polls pass
// through again at once: at 1024 QPs its own next post, which would let it go too, is a
// round of the others away, and every poll until then went through the merger. Whichever
// thread polls, and with the QP's posts going on beside the poll.
#include <gtest/gtest.h>

#include <atomic>
#include <deque>
#include <mutex>
#include <thread>

#include "gate.hpp"
#include "registry.hpp"
#include "tls.hpp"
#include "unload/runtime.h"

namespace unload::rt {
namespace {

// The fake provider's CQ: one completion to give, then none; or, for a test with a
// poster beside the poller, what the poster queued, in order.
ibv_wc g_completion;
bool g_has_completion = false;
std::mutex g_queue_mu;  // guards g_queue
std::deque<ibv_wc> g_queue;

int one_completion(ibv_cq*, int n, ibv_wc* wc) {
  if (!g_has_completion || n < 1) return 0;
  wc[0] = g_completion;
  g_has_completion = false;
  return 1;
}

int queued_completions(ibv_cq*, int n, ibv_wc* wc) {
  std::lock_guard<std::mutex> l(g_queue_mu);
  int got = 0;
  for (; got < n && !g_queue.empty(); ++got) {
    wc[got] = g_queue.front();
    g_queue.pop_front();
  }
  return got;
}

struct SettledQpHoldingItsCq : ::testing::Test {
  static constexpr uint32_t kQpn = 0x4242;
  ibv_context ctx_verbs{};
  ibv_cq cq_verbs{};
  ibv_qp qp_verbs{};
  ContextRec ctx{};
  CqRec cq{};
  QpRec qp{};

  void SetUp() override {
    if (!gate_init())
      GTEST_SKIP() << "no private expedited membarrier: no gate is biased, and the let-go is the owner's";
    ctx.ctx = &ctx_verbs;
    ctx.id = 0x7e57;
    ctx.provider.poll_cq = one_completion;
    cq_verbs.context = &ctx_verbs;
    cq.cq = &cq_verbs;
    cq.c = &ctx;
    ASSERT_EQ(cq.pending.init(64), 0);
    qp_verbs.qp_num = kQpn;
    qp.qp = &qp_verbs;
    qp.c = &ctx;
    qp.scq = &cq;
    qp.qp_num = kQpn;
    qp.tracked = true;
    ASSERT_EQ(qp.sq.ring.init(16), 0);
    // This thread owns both gates, as the program's posting and polling thread does.
    for (Gate* g : {&qp.sq.gate, &cq.gate}) {
      ASSERT_EQ(g->enter(this_tid()), Gate::kBiased);
      g->leave(Gate::kBiased);
    }
    ASSERT_EQ(g_cqs.insert(key_of(&cq_verbs), &cq), 0);
    ASSERT_EQ(g_qps_by_num.insert(qpn_key(&ctx, kQpn), &qp), 0);
  }
  void TearDown() override {
    g_qps_by_num.remove_if(qpn_key(&ctx, kQpn), &qp);
    g_cqs.remove_if(key_of(&cq_verbs), &cq);
  }

  // The consult's write: tracked (the CQ held for it, its entry in the ring), the QP
  // settled again at once (post.cpp, settle_again); returns the completion the NIC gives.
  ibv_wc sample(uint64_t wr_id) {
    mark_tracked(&qp);
    const uint64_t t = qp.sq.ring.tail();
    SqEntry* e = qp.sq.ring.reserve(t);
    *e = SqEntry{};
    e->seq = t;
    e->user_wr_id = wr_id;
    e->flags = kSignaled | kWrite;
    qp.sq.ring.publish(t + 1);
    qp.sq.untracked.store(true);
    qp.sq.settled.store(true);
    settled_release(&qp);  // its entry is in flight: the CQ stays held
    ibv_wc wc{};
    wc.wr_id = qp.sq.ring.tag_of(e);
    wc.status = IBV_WC_SUCCESS;
    wc.opcode = IBV_WC_RDMA_WRITE;
    wc.qp_num = kQpn;
    return wc;
  }
};

TEST_F(SettledQpHoldingItsCq, ThePollThatRetiresItsWriteLetsTheCqGo) {
  g_completion = sample(77);
  ASSERT_TRUE(cq_held(qp.sq));
  ASSERT_EQ(cq.holders.load(), 1u);
  ASSERT_TRUE(cq.tracked.load());
  ibv_wc wc{};
  g_has_completion = false;
  EXPECT_EQ(unload_cq_poll(&cq_verbs, 1, &wc), 0);  // nothing yet: still held
  EXPECT_EQ(cq.holders.load(), 1u);
  g_has_completion = true;
  ASSERT_EQ(unload_cq_poll(&cq_verbs, 1, &wc), 1);
  EXPECT_EQ(wc.wr_id, 77u);
  EXPECT_EQ(qp.sq.ring.in_flight(), 0u);
  EXPECT_FALSE(cq_held(qp.sq)) << "the QP still holds its CQ: its polls wait for its next post";
  EXPECT_EQ(cq.holders.load(), 0u);
  EXPECT_FALSE(cq.tracked.load()) << "the CQ's polls do not pass through again";
  EXPECT_TRUE(qp.sq.settled.load());
}

// A poll that first hands over a queued completion merges the provider's the longer way
// (poll_merging_more), which lets go alike.
TEST_F(SettledQpHoldingItsCq, APollBehindAQueuedCompletionLetsGoAlike) {
  g_completion = sample(78);
  g_has_completion = true;
  ibv_wc queued{};
  queued.wr_id = 5;
  queued.opcode = IBV_WC_RECV;
  cq.pending.push(queued);
  ibv_wc wc[4]{};
  ASSERT_EQ(unload_cq_poll(&cq_verbs, 4, wc), 2);
  EXPECT_EQ(wc[0].wr_id, 5u);
  EXPECT_EQ(wc[1].wr_id, 78u);
  EXPECT_FALSE(cq_held(qp.sq));
  EXPECT_FALSE(cq.tracked.load());
}

// A program that polls from a thread of its own: the QP's post gate is the posting
// thread's, and the poller lets the CQ go without entering it (which would make every
// later post of the QP take the shared way in).
TEST_F(SettledQpHoldingItsCq, APollerOfAnotherThreadLetsGoAlike) {
  g_completion = sample(79);
  g_has_completion = true;
  ibv_wc wc{};
  int got = -1;
  std::thread poller([&] { got = unload_cq_poll(&cq_verbs, 1, &wc); });
  poller.join();
  ASSERT_EQ(got, 1);
  EXPECT_EQ(wc.wr_id, 79u);
  EXPECT_FALSE(cq_held(qp.sq)) << "a poller that does not own the QP's gate left the CQ held";
  EXPECT_EQ(cq.holders.load(), 0u);
  EXPECT_FALSE(cq.tracked.load());
  EXPECT_FALSE(qp.sq.gate.shared()) << "the let-go entered the QP's post gate";
}

// The posting thread takes samples one after another while another thread polls: each
// completion reaches the program merged (its own wr_id, never the shim's tag, which a poll
// that passed through while an entry was in flight would hand over), and once both are
// done the CQ is let go and counted once.
TEST_F(SettledQpHoldingItsCq, APosterBesideThePollerNeverLosesItsHold) {
  constexpr uint64_t kSamples = 20000;
  ctx.provider.poll_cq = queued_completions;
  std::atomic<uint64_t> received{0};
  std::atomic<bool> wrong{false};
  std::thread poller([&] {
    ibv_wc wc[4];
    uint64_t next = 1;
    unsigned empty = 0;
    while (next <= kSamples) {
      const int got = unload_cq_poll(&cq_verbs, 4, wc);
      if (got < 0) {
        wrong = true;
        return;
      }
      // A run of empty polls yields: sharing a CPU with the poster (a loaded host), a
      // spin of a whole time slice per 8 samples made the test take seconds.
      if (got == 0 && ++empty % 64 == 0) std::this_thread::yield();
      for (int i = 0; i < got; ++i)
        if (wc[i].wr_id != next++) wrong = true;
      received.store(next - 1, std::memory_order_release);
      if (wrong) return;
    }
  });
  for (uint64_t i = 1; i <= kSamples && !wrong; ++i) {
    while (qp.sq.ring.in_flight() >= 8 && !wrong) std::this_thread::yield();
    ASSERT_EQ(qp.sq.gate.enter(this_tid()), Gate::kBiased);
    const ibv_wc wc = sample(i);
    qp.sq.gate.leave(Gate::kBiased);
    std::lock_guard<std::mutex> l(g_queue_mu);
    g_queue.push_back(wc);
  }
  poller.join();
  ctx.provider.poll_cq = one_completion;
  ASSERT_FALSE(wrong) << "a completion reached the program unmerged or out of order, after "
                      << received.load() << " right";
  EXPECT_EQ(qp.sq.ring.in_flight(), 0u);
  EXPECT_FALSE(cq_held(qp.sq));
  EXPECT_EQ(cq.holders.load(), 0u) << "the hold was counted more or less than once";
  EXPECT_FALSE(cq.tracked.load());
}

}  // namespace
}  // namespace unload::rt
