// tests/support on the host: the check lines and exit codes are check.sh's, the device rule
// refuses what it cannot honour, and a watchdog turns a hang into exit 3.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string>

#include "check.hpp"
#include "verbs_env.hpp"

namespace t = unload::test;
using testing::ExitedWithCode;

namespace {

std::string printed(void (*f)()) {
  testing::internal::CaptureStdout();
  f();
  return testing::internal::GetCapturedStdout();
}

TEST(CheckLines, OkFailSkipInTheScriptsVocabulary) {
  EXPECT_EQ(printed([] { t::ok("a.b", "3 of 3"); }), "ok: a.b — 3 of 3\n");
  EXPECT_EQ(printed([] { t::ok("a.b"); }), "ok: a.b\n");
  const int before = t::failures();
  EXPECT_EQ(printed([] { t::fail("a.c", "2 differ"); }), "FAIL: a.c: 2 differ\n");
  EXPECT_EQ(t::failures(), before + 1);
  EXPECT_EQ(printed([] { t::skip_check("a.d", "no rxe1"); }), "skip: a.d: no rxe1\n");
  EXPECT_EQ(printed([] { t::expect(false, "a.e", "%d left", 4); }), "FAIL: a.e: 4 left\n");
  EXPECT_EQ(printed([] { t::expect(true, "a.f", "%d left", 0); }), "ok: a.f — 0 left\n");
}

TEST(ExitCodes, OneTable) {
  // 0 when nothing failed in this process yet (ctest runs each test alone).
  EXPECT_EXIT(t::finish(), ExitedWithCode(t::failures() ? 1 : 0), "");
  EXPECT_EXIT(
      {
        t::fail("x", "y");
        t::finish();
      },
      ExitedWithCode(1), "");
  EXPECT_EXIT(t::die("ibv_alloc_pd", -ENOMEM), ExitedWithCode(2),
              "^setup: ibv_alloc_pd: Cannot allocate memory");
  EXPECT_EXIT(t::skip("no device"), ExitedWithCode(77), "");
  EXPECT_EXIT(
      {
        t::watchdog(1, "a post");
        pause();
      },
      ExitedWithCode(3), "");
  EXPECT_EXIT(
      {
        t::stall_watchdog(1, "a stall", [] { return uint64_t{7}; });
        pause();
      },
      ExitedWithCode(3), "");
}

TEST(DeviceRule, AnAbsentDeviceIsNoDevice) {
  unload::verbs::Device d;
  EXPECT_EQ(unload::verbs::open_device(&d, "no-such-device0"), -ENODEV);
  EXPECT_EQ(d.ctx, nullptr);
  setenv("UNLOAD_TEST_DEV", "no-such-device0", 1);
  EXPECT_EQ(unload::verbs::open_device(&d), -ENODEV);
  unsetenv("UNLOAD_TEST_DEV");
}

TEST(DeviceRule, AMalformedGidIsRefused) {
  unload::verbs::Device d;
  for (const char* bad : {"abc", "-1", "1x", "70000"}) {
    setenv("UNLOAD_TEST_GID", bad, 1);
    EXPECT_EQ(unload::verbs::open_device(&d), -EINVAL) << bad;
  }
  unsetenv("UNLOAD_TEST_GID");
}

}  // namespace
