// Without the module's control page no thread's copy of the tunables is fresh, whatever
// sequence it holds: the post's and poll's fronts then always take their slow way in.
#include "kmod.hpp"
#include "tunables.hpp"
#include "unload.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace unload::rt {
namespace {

TEST(Tunables, NoCopyIsFreshWithoutTheModulesPage) {
  ASSERT_EQ(__atomic_load_n(&g_kmod.ctl, __ATOMIC_ACQUIRE), &kNoControl) << "this test runs without the module";
  const uint32_t was = t_hot.view.seq;
  // A thread's first sequence (1), and the stable ones a page shows (even), the first and last.
  for (const uint32_t seq : {1u, 0u, 2u, 0xfffffffeu, was}) {
    t_hot.view.seq = seq;
    EXPECT_FALSE(tunables_fresh()) << "a copy taken at sequence " << seq << " read as fresh with no page";
  }
  t_hot.view.seq = was;
}

}  // namespace
}  // namespace unload::rt
