// The UNLOAD_* tunable variables with the module loaded: a limit narrows the control
// page's value and never widens it; a variable the page replaces is named on stderr.
#include "env_tunables.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace unload::rt {
namespace {

using policy::Tunables;

// The notice's lines for (page, env), as text.
std::string notice(const Tunables& page, const EnvTunables& env, int* lines = nullptr) {
  char* buf = nullptr;
  size_t len = 0;
  FILE* f = open_memstream(&buf, &len);
  const int n = env_tunables_notice(page, env, f);
  std::fclose(f);
  std::string s(buf, len);
  std::free(buf);
  if (lines) *lines = n;
  return s;
}

// The environment read with exactly `var`=`value` set among the tunable variables.
EnvTunables read_with(const char* var, const char* value) {
  static const char* const all[] = {"UNLOAD_ENABLED",        "UNLOAD_THRESHOLD_BYTES", "UNLOAD_INLINE_MAX",
                                    "UNLOAD_STAGE_MAX",      "UNLOAD_DIRECT_MAX",      "UNLOAD_EXPLORE_SHIFT",
                                    "UNLOAD_HYSTERESIS_PCT", "UNLOAD_CPU_BUDGET_PCT",  "UNLOAD_TARGET_XLATE_PAGES"};
  for (const char* v : all) unsetenv(v);
  if (var) setenv(var, value, 1);
  EnvTunables e = env_tunables_read();
  if (var) unsetenv(var);
  return e;
}

TEST(EnvTunables, NothingSetLeavesThePageAndSaysNothing) {
  const EnvTunables e = read_with(nullptr, nullptr);
  EXPECT_EQ(e.set, 0u);
  EXPECT_EQ(e.values, policy::kDefaultTunables);
  Tunables page = policy::kDefaultTunables;
  page.direct_max = 4096;
  EXPECT_EQ(env_tunables_narrow(page, e), page);
  int lines = -1;
  EXPECT_EQ(notice(page, e, &lines), "");
  EXPECT_EQ(lines, 0);
}

TEST(EnvTunables, DirectMaxZeroNarrowsThePageSilently) {
  const EnvTunables e = read_with("UNLOAD_DIRECT_MAX", "0");
  const Tunables page = policy::kDefaultTunables;
  const Tunables t = env_tunables_narrow(page, e);
  EXPECT_EQ(t.direct_max, 0u) << "UNLOAD_DIRECT_MAX=0 must turn the direct path off under the module";
  Tunables rest = t;
  rest.direct_max = page.direct_max;
  EXPECT_EQ(rest, page) << "only direct_max may change";
  EXPECT_EQ(notice(page, e), "") << "a variable that takes effect needs no word";
}

TEST(EnvTunables, EveryLimitNarrowsAndNeverWidens) {
  struct Case {
    const char* var;
    uint32_t Tunables::*field;
  };
  const Case limits[] = {{"UNLOAD_ENABLED", &Tunables::enabled},
                         {"UNLOAD_THRESHOLD_BYTES", &Tunables::threshold_bytes},
                         {"UNLOAD_INLINE_MAX", &Tunables::inline_max},
                         {"UNLOAD_STAGE_MAX", &Tunables::stage_max},
                         {"UNLOAD_DIRECT_MAX", &Tunables::direct_max},
                         {"UNLOAD_CPU_BUDGET_PCT", &Tunables::cpu_budget_pct}};
  for (const Case& c : limits) {
    SCOPED_TRACE(c.var);
    Tunables page = policy::kDefaultTunables;
    page.*c.field = 1;
    // Lower than root's: applies, and a change of the page later is narrowed again.
    EnvTunables e = read_with(c.var, "0");
    EXPECT_EQ(env_tunables_narrow(page, e).*c.field, 0u);
    EXPECT_EQ(notice(page, e), "");
    // Higher than root's: root's holds, and stderr says so, naming the variable and the file.
    e = read_with(c.var, "1");
    page.*c.field = 0;
    EXPECT_EQ(env_tunables_narrow(page, e).*c.field, 0u);
    int lines = 0;
    const std::string n = notice(page, e, &lines);
    EXPECT_EQ(lines, 1);
    EXPECT_NE(n.find(std::string(c.var) + "=1 does not apply now"), std::string::npos) << n;
    EXPECT_NE(n.find("/sys/kernel/unload/"), std::string::npos) << n;
  }
}

TEST(EnvTunables, TheOthersAreIgnoredAndNamed) {
  const char* const vars[] = {"UNLOAD_EXPLORE_SHIFT", "UNLOAD_HYSTERESIS_PCT", "UNLOAD_TARGET_XLATE_PAGES"};
  const char* const files[] = {"explore_shift", "hysteresis_pct", "target_xlate_pages"};
  for (unsigned i = 0; i < 3; ++i) {
    SCOPED_TRACE(vars[i]);
    const EnvTunables e = read_with(vars[i], "3");
    EXPECT_NE(e.set, 0u);
    const Tunables page = policy::kDefaultTunables;
    EXPECT_EQ(env_tunables_narrow(page, e), page) << "the page's value holds";
    int lines = 0;
    const std::string n = notice(page, e, &lines);
    EXPECT_EQ(lines, 1);
    EXPECT_NE(n.find(std::string(vars[i]) + "=3 ignored"), std::string::npos) << n;
    EXPECT_NE(n.find(std::string("/sys/kernel/unload/") + files[i]), std::string::npos) << n;
  }
}

TEST(EnvTunables, ABadValueKeepsTheDefaultAndIsNotSet) {
  const EnvTunables e = read_with("UNLOAD_DIRECT_MAX", "abc");
  EXPECT_EQ(e.set, 0u);
  EXPECT_EQ(e.values.direct_max, policy::kDefaultTunables.direct_max);
  EXPECT_EQ(read_with("UNLOAD_ENABLED", "2").set, 0u) << "enabled is 0 or 1";
  EXPECT_EQ(read_with("UNLOAD_EXPLORE_SHIFT", "64").set, 0u) << "explore_shift is 0..63";
}

}  // namespace
}  // namespace unload::rt
