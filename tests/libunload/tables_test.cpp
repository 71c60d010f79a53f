// A thread's last lookup (tls.hpp, LastFound; registry.hpp, find_through): found again
// without a probe while the table did not change, and probed again once a key left or
// mapped to another value; and the post front's home-slot lookup (find_home), which
// answers as find() does or not at all.
#include "registry.hpp"

#include <gtest/gtest.h>

namespace unload::rt {
namespace {

struct Rec {
  int id;
};

TEST(LastFound, TheMemoAnswersWhileTheTableIsUnchanged) {
  static PtrTable<Rec, 4> t;
  Rec a{1}, b{2};
  LastFound<Rec> last;
  ASSERT_EQ(t.insert(10, &a), 0);
  ASSERT_EQ(t.insert(20, &b), 0);
  EXPECT_EQ(find_through(t, last, 10), &a);
  EXPECT_EQ(last.key, 10u);
  EXPECT_EQ(find_through(t, last, 10), &a);
  EXPECT_EQ(find_through(t, last, 20), &b);  // another key: probed, and kept instead
  EXPECT_EQ(last.key, 20u);
  EXPECT_EQ(find_through(t, last, 30), nullptr);  // absent: nothing kept
  EXPECT_EQ(last.key, 20u);
}

TEST(LastFound, ARemovalOrAReplacementEndsTheMemo) {
  static PtrTable<Rec, 4> t;
  Rec a{1}, c{3};
  LastFound<Rec> last;
  ASSERT_EQ(t.insert(10, &a), 0);
  EXPECT_EQ(find_through(t, last, 10), &a);
  ASSERT_EQ(t.remove(10), &a);  // the object was destroyed ...
  EXPECT_EQ(find_through(t, last, 10), nullptr);
  ASSERT_EQ(t.insert(10, &c), 0);  // ... and another made at its address
  EXPECT_EQ(find_through(t, last, 10), &c);
  ASSERT_EQ(t.insert(10, &a), 0);  // the key mapped to another value in place
  EXPECT_EQ(find_through(t, last, 10), &a);
  EXPECT_TRUE(t.remove_if(10, &a));
  EXPECT_EQ(find_through(t, last, 10), nullptr);
}

// A full table: every key sits somewhere, some past their home slot (16 keys in 16 slots
// with Fibonacci hashing collide), and find_home answers for each key as find() does, or
// null for one past its home, never another key's record; a key that left is not found.
TEST(FindHome, AnswersAsFindDoesOrNotAtAll) {
  static PtrTable<Rec, 4> t;
  static Rec recs[16];
  unsigned home = 0;
  for (unsigned i = 0; i < 16; ++i) {
    recs[i].id = static_cast<int>(i);
    ASSERT_EQ(t.insert(0x1000 + 64 * i, &recs[i]), 0);
  }
  for (unsigned i = 0; i < 16; ++i) {
    const uint64_t key = 0x1000 + 64 * i;
    ASSERT_EQ(t.find(key), &recs[i]);
    if (Rec* r = t.find_home(key)) {
      EXPECT_EQ(r, &recs[i]) << "key " << i;
      ++home;
    }
  }
  EXPECT_GT(home, 0u);
  EXPECT_LT(home, 16u) << "no key past its home slot: the test shows nothing of the fallback";
  for (unsigned i = 0; i < 16; ++i) {
    const uint64_t key = 0x1000 + 64 * i;
    const bool was_home = t.find_home(key) != nullptr;
    ASSERT_EQ(t.remove(key), &recs[i]);
    EXPECT_EQ(t.find_home(key), nullptr) << "key " << i << (was_home ? " (home)" : "");
    EXPECT_EQ(t.find(key), nullptr);
  }
}

}  // namespace
}  // namespace unload::rt
