// A thread's last lookup (tls.hpp, LastFound; registry.hpp, find_through): found again
// without a probe while the table did not change, and probed again once a key left or
// mapped to another value.
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

}  // namespace
}  // namespace unload::rt
