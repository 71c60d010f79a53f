// The send-queue ring and completion merger: completions leave each send queue in post
// order whatever path each request took, with the program's wr_id, none for unsignaled
// successful requests, none for the shim's own, and errors always reported.
#include "unload/sq_ring.hpp"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace unload::rt {
namespace {

struct Recorder {
  std::vector<uint64_t> delivered;  // program wr_ids, in delivery order
  std::vector<int> statuses;
  std::vector<uint64_t> retired_ids;
  void retired(SqEntry& e) { retired_ids.push_back(e.user_wr_id); }
  void nic(SqEntry& e, ibv_wc& wc) {
    if ((e.flags & kHidden) && wc.status == IBV_WC_SUCCESS) return;
    delivered.push_back(e.user_wr_id);
    statuses.push_back(wc.status);
  }
  void cpu(SqEntry& e) {
    if ((e.flags & kSignaled) || e.status != IBV_WC_SUCCESS) {
      delivered.push_back(e.user_wr_id);
      statuses.push_back(e.status);
    }
  }
};

// Posts one request; returns its entry.
SqEntry* post(SqRing& r, uint64_t wr_id, uint8_t flags, bool cpu_done = false) {
  const uint64_t t = r.tail();
  SqEntry* e = r.reserve(t);
  EXPECT_NE(e, nullptr);
  e->user_wr_id = wr_id;
  e->flags = flags;
  e->status = IBV_WC_SUCCESS;
  e->opcode = IBV_WC_RDMA_WRITE;
  r.publish(t + 1, (flags & kCpu) ? 0 : 1);
  if (cpu_done) e->done.store(1);
  return e;
}

ibv_wc nic_wc(const SqRing& r, const SqEntry* e, ibv_wc_status st = IBV_WC_SUCCESS) {
  ibv_wc wc{};
  wc.wr_id = r.tag_of(e);
  wc.status = st;
  wc.opcode = IBV_WC_RDMA_WRITE;
  return wc;
}

TEST(libunload_sq_ring, TagsRoundTripAndForeignWrIdsAreNotTags) {
  SqRing r;
  ASSERT_EQ(r.init(100), 0);
  EXPECT_EQ(r.capacity(), 128u);
  SqEntry* e = post(r, 42, kSignaled);
  EXPECT_EQ(r.entry_of_tag(r.tag_of(e)), e);
  EXPECT_EQ(r.entry_of_tag(42), nullptr);
  EXPECT_EQ(r.entry_of_tag(r.tag_of(e) + 1), nullptr);
  EXPECT_EQ(r.entry_of_tag(0), nullptr);
}

TEST(libunload_sq_ring, UnsignaledNicRequestsRetireSilentlyAtTheNextCompletion) {
  SqRing r;
  ASSERT_EQ(r.init(16), 0);
  post(r, 1, kWrite);
  post(r, 2, kWrite);
  SqEntry* s = post(r, 3, kWrite | kSignaled);
  EXPECT_EQ(r.nic_outstanding(), 3u);
  Recorder rec;
  ibv_wc wc = nic_wc(r, s);
  r.on_nic_completion(s, wc, rec);
  EXPECT_EQ(rec.delivered, (std::vector<uint64_t>{3}));
  EXPECT_EQ(rec.retired_ids, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(r.nic_outstanding(), 0u);
  EXPECT_EQ(r.in_flight(), 0u);
}

TEST(libunload_sq_ring, HiddenCompletionsNeverReachTheProgramButErrorsDo) {
  SqRing r;
  ASSERT_EQ(r.init(16), 0);
  SqEntry* h = post(r, 7, kWrite | kHidden);
  Recorder rec;
  ibv_wc wc = nic_wc(r, h);
  r.on_nic_completion(h, wc, rec);
  EXPECT_TRUE(rec.delivered.empty());
  SqEntry* h2 = post(r, 8, kWrite | kHidden);
  ibv_wc bad = nic_wc(r, h2, IBV_WC_REM_ACCESS_ERR);
  r.on_nic_completion(h2, bad, rec);
  EXPECT_EQ(rec.delivered, (std::vector<uint64_t>{8}));
  EXPECT_EQ(rec.statuses, (std::vector<int>{IBV_WC_REM_ACCESS_ERR}));
}

TEST(libunload_sq_ring, CpuCompletionsWaitForEarlierNicRequests) {
  SqRing r;
  ASSERT_EQ(r.init(16), 0);
  SqEntry* n1 = post(r, 1, kWrite | kSignaled);
  post(r, 2, kWrite | kSignaled | kCpu, true);
  post(r, 3, kWrite | kCpu, true);  // unsignaled: no completion
  SqEntry* n4 = post(r, 4, kWrite | kSignaled);
  post(r, 5, kWrite | kSignaled | kCpu, true);
  Recorder rec;
  r.drain_ready(rec);  // 1 is outstanding: nothing may pass it
  EXPECT_TRUE(rec.delivered.empty());
  ibv_wc w1 = nic_wc(r, n1);
  r.on_nic_completion(n1, w1, rec);
  EXPECT_EQ(rec.delivered, (std::vector<uint64_t>{1, 2}));
  ibv_wc w4 = nic_wc(r, n4);
  r.on_nic_completion(n4, w4, rec);
  EXPECT_EQ(rec.delivered, (std::vector<uint64_t>{1, 2, 4, 5}));
  EXPECT_EQ(r.in_flight(), 0u);
}

TEST(libunload_sq_ring, CpuCompletionsAtTheHeadDrainAtOnce) {
  SqRing r;
  ASSERT_EQ(r.init(16), 0);
  post(r, 1, kWrite | kSignaled | kCpu, true);
  SqEntry* e2 = post(r, 2, kWrite | kSignaled | kCpu, false);  // still copying
  post(r, 3, kWrite | kSignaled | kCpu, true);
  Recorder rec;
  r.drain_ready(rec);
  EXPECT_EQ(rec.delivered, (std::vector<uint64_t>{1}));
  e2->done.store(1);
  r.drain_ready(rec);
  EXPECT_EQ(rec.delivered, (std::vector<uint64_t>{1, 2, 3}));
}

TEST(libunload_sq_ring, FullRingRefusesAndRollbackForgets) {
  SqRing r;
  ASSERT_EQ(r.init(16), 0);
  for (int i = 0; i < 16; ++i) post(r, static_cast<uint64_t>(i), kWrite);
  EXPECT_EQ(r.reserve(r.tail()), nullptr);
  r.rollback(8, 8);
  EXPECT_EQ(r.tail(), 8u);
  EXPECT_EQ(r.nic_outstanding(), 8u);
  EXPECT_NE(r.reserve(r.tail()), nullptr);
}

// Random mixes of paths and signaling: the merged sequence is exactly the signaled (or
// failed) requests in post order, every time. The runtime takes a CPU path only when
// the last NIC request outstanding is signaled (or there is none), else the CPU
// request's completion could wait forever for a completion that never comes; the
// model here keeps that rule.
TEST(libunload_sq_ring, RandomMixesComeOutInPostOrder) {
  std::mt19937_64 rng(12345);
  for (int round = 0; round < 200; ++round) {
    SqRing r;
    ASSERT_EQ(r.init(64), 0);
    Recorder rec;
    std::vector<uint64_t> expected;
    std::vector<SqEntry*> nic_signaled;  // NIC completions the "device" will produce
    uint64_t id = 0;
    bool last_nic_signaled = true;
    for (int step = 0; step < 2000; ++step) {
      const bool can_post = r.in_flight() + 1 < r.capacity();
      if (can_post && rng() % 3 != 0) {
        const bool cpu = rng() % 2 && (r.nic_outstanding() == 0 || last_nic_signaled);
        const bool sig = rng() % 2;
        const uint8_t flags = static_cast<uint8_t>(kWrite | (sig ? kSignaled : 0) | (cpu ? kCpu : 0));
        SqEntry* e = post(r, ++id, flags, cpu);
        if (sig) expected.push_back(id);
        if (!cpu && sig) nic_signaled.push_back(e);
        if (!cpu) last_nic_signaled = sig;
        if (cpu) r.drain_ready(rec);
      } else if (!nic_signaled.empty()) {
        SqEntry* e = nic_signaled.front();
        nic_signaled.erase(nic_signaled.begin());
        ibv_wc wc = nic_wc(r, e);
        r.on_nic_completion(e, wc, rec);
      }
    }
    while (!nic_signaled.empty()) {
      SqEntry* e = nic_signaled.front();
      nic_signaled.erase(nic_signaled.begin());
      ibv_wc wc = nic_wc(r, e);
      r.on_nic_completion(e, wc, rec);
    }
    // What remains: unsignaled NIC requests at the tail that no completion retired.
    std::vector<uint64_t> got = rec.delivered;
    ASSERT_LE(got.size(), expected.size());
    EXPECT_TRUE(std::equal(got.begin(), got.end(), expected.begin())) << "round " << round;
    // Only CPU requests posted after the last NIC request still outstanding may be
    // missing, and after the drain all NIC requests are done: nothing is missing.
    r.drain_ready(rec);
    EXPECT_EQ(rec.delivered.size(), expected.size()) << "round " << round;
  }
}

}  // namespace
}  // namespace unload::rt
