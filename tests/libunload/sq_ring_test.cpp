// The send-queue ring: tags map back to their entries only while in flight, a completion
// retires its entry and every earlier one at once, and the producer's rollback and the
// reset's clear forget exactly what they should.
#include "sq_ring.hpp"

#include <gtest/gtest.h>

#include <random>

namespace unload::rt {
namespace {

// Posts one request; returns its entry.
SqEntry* post(SqRing& r, uint64_t wr_id, uint8_t flags) {
  const uint64_t t = r.tail();
  SqEntry* e = r.reserve(t);
  if (!e) return nullptr;
  e->user_wr_id = wr_id;
  e->flags = flags;
  r.publish(t + 1);
  return e;
}

TEST(SqRing, TagMapsBackToItsEntryWhileInFlight) {
  SqRing r;
  ASSERT_EQ(r.init(8), 0);
  SqEntry* a = post(r, 100, kWrite | kSignaled);
  SqEntry* b = post(r, 200, kWrite);
  EXPECT_EQ(r.entry_of_tag(r.tag_of(a)), a);
  EXPECT_EQ(r.entry_of_tag(r.tag_of(b)), b);
  EXPECT_EQ(r.entry_of_tag(r.tag_of(b) + 1), nullptr);  // inside an entry, not its start
  EXPECT_EQ(r.entry_of_tag(100), nullptr);              // a program's wr_id
  EXPECT_EQ(r.entry_of_tag(0), nullptr);
  r.retire_through(a);
  EXPECT_EQ(r.entry_of_tag(r.tag_of(a)), nullptr);  // retired: a late copy of its tag is no tag
  EXPECT_EQ(r.entry_of_tag(r.tag_of(b)), b);
}

TEST(SqRing, RingWithoutSlotsNamesNoTag) {
  SqRing r;  // an untracked QP's: never initialised
  EXPECT_EQ(r.entry_of_tag(0), nullptr);
  EXPECT_EQ(r.entry_of_tag(sizeof(SqEntry)), nullptr);
  EXPECT_EQ(r.entry_of_tag(~0ull), nullptr);
}

TEST(SqRing, CompletionRetiresEveryEarlierEntryAtOnce) {
  SqRing r;
  ASSERT_EQ(r.init(16), 0);
  for (uint64_t i = 0; i < 9; ++i) post(r, i, kWrite);  // unsignaled
  SqEntry* last = post(r, 9, kWrite | kSignaled);
  EXPECT_EQ(r.in_flight(), 10u);
  r.retire_through(last);
  EXPECT_EQ(r.in_flight(), 0u);
  EXPECT_EQ(r.head(), 10u);
}

TEST(SqRing, FullRingRefusesAndFreesAfterRetire) {
  SqRing r;
  ASSERT_EQ(r.init(16), 0);
  SqEntry* first = nullptr;
  for (uint64_t i = 0; i < r.capacity(); ++i) {
    SqEntry* e = post(r, i, kWrite);
    ASSERT_NE(e, nullptr);
    if (!first) first = e;
  }
  EXPECT_EQ(r.reserve(r.tail()), nullptr);
  r.retire_through(first);
  EXPECT_NE(r.reserve(r.tail()), nullptr);
}

TEST(SqRing, LastSignaledSeesTheNewestInFlight) {
  SqRing r;
  ASSERT_EQ(r.init(8), 0);
  EXPECT_FALSE(r.last_signaled());
  post(r, 1, kWrite | kSignaled);
  EXPECT_TRUE(r.last_signaled());
  SqEntry* u = post(r, 2, kWrite);
  EXPECT_FALSE(r.last_signaled());  // a fence needs a marker behind it
  post(r, 3, kHidden | kMarker);
  EXPECT_TRUE(r.last_signaled());
  r.retire_through(r.at(u->seq + 1));
  EXPECT_FALSE(r.last_signaled());  // nothing in flight
}

TEST(SqRing, RollbackForgetsWhatTheProviderRefused) {
  SqRing r;
  ASSERT_EQ(r.init(8), 0);
  post(r, 1, kWrite);
  const uint64_t before = r.tail();
  SqEntry* refused = post(r, 2, kWrite);
  const uint64_t tag = r.tag_of(refused);
  r.rollback(before);
  EXPECT_EQ(r.in_flight(), 1u);
  EXPECT_EQ(r.entry_of_tag(tag), nullptr);
}

TEST(SqRing, ClearForgetsEverythingInFlight) {
  SqRing r;
  ASSERT_EQ(r.init(8), 0);
  SqEntry* a = post(r, 1, kWrite | kSignaled);
  const uint64_t tag = r.tag_of(a);
  post(r, 2, kWrite);
  r.clear();
  EXPECT_EQ(r.in_flight(), 0u);
  EXPECT_EQ(r.entry_of_tag(tag), nullptr);
}

// Random posts and in-order completions of random prefixes: the ring's accounting and its
// tag mapping agree with a model at every step.
TEST(SqRing, RandomPostsAndCompletionsMatchAModel) {
  SqRing r;
  ASSERT_EQ(r.init(64), 0);
  std::mt19937_64 rng(7);
  uint64_t model_head = 0, model_tail = 0;
  for (int step = 0; step < 100000; ++step) {
    if (rng() % 2 && model_tail - model_head < r.capacity()) {
      ASSERT_NE(post(r, model_tail, kWrite), nullptr);
      ++model_tail;
    } else if (model_tail != model_head) {
      const uint64_t done = model_head + rng() % (model_tail - model_head);
      SqEntry* e = r.entry_of_tag(r.tag_of(r.at(done)));
      ASSERT_NE(e, nullptr);
      ASSERT_EQ(e->user_wr_id, done);
      r.retire_through(e);
      model_head = done + 1;
    }
    ASSERT_EQ(r.in_flight(), model_tail - model_head);
  }
}

}  // namespace
}  // namespace unload::rt
