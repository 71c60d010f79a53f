// unloadctl's pure logic: the tunable value check, the JSON writer, rates and grouping of statistics.
#include <gtest/gtest.h>

#include "json.hpp"
#include "stats.hpp"
#include "tunables.hpp"

namespace unload::ctl {
namespace {

TEST(UnloadctlTunables, EveryModuleTunableIsKnown) {
  for (const char* n :
       {"enabled", "mode", "threshold_bytes", "inline_max", "stage_max", "direct_max", "explore_shift",
        "hysteresis_pct", "cpu_budget_pct", "target_xlate_pages", "pair_idle_ms", "user_sessions_max", "user_registrations_max",
        "channels_max", "user_channels_max"})
    EXPECT_NE(find_tunable(n), nullptr) << n;
  EXPECT_EQ(find_tunable("frobnicate"), nullptr);
  EXPECT_EQ(find_tunable(""), nullptr);
  EXPECT_EQ(find_tunable("stats/reset"), nullptr);
  EXPECT_EQ(find_tunable("reported/fences"), nullptr);
}

TEST(UnloadctlTunables, RangeEndsPassAndOneBeyondFails) {
  std::string why;
  const Tunable& t = *find_tunable("cpu_budget_pct");
  EXPECT_EQ(check_value(t, "0", why), "0");
  EXPECT_EQ(check_value(t, "100", why), "100");
  EXPECT_EQ(check_value(t, "101", why), std::nullopt);
  EXPECT_NE(why.find("from 0 to 100"), std::string::npos) << why;
  const Tunable& d = *find_tunable("direct_max");
  EXPECT_EQ(check_value(d, "2147483648", why), "2147483648");
  EXPECT_EQ(check_value(d, "2147483649", why), std::nullopt);
}

TEST(UnloadctlTunables, DecimalOnlyAsSysfs) {
  std::string why;
  const Tunable& t = *find_tunable("hysteresis_pct");
  EXPECT_EQ(check_value(t, "010", why), "10");  // leading zeros are decimal, as kstrtou32 base 10
  for (const char* bad : {"", "-1", "+5", "0x10", "12abc", " 7", "7 ", "4294967296", "99999999999999999999"})
    EXPECT_EQ(check_value(t, bad, why), std::nullopt) << bad;
}

TEST(UnloadctlTunables, ModeTakesTheFourWords) {
  std::string why;
  const Tunable& m = *find_tunable("mode");
  for (const char* w : {"offload", "unload", "threshold", "adaptive"}) EXPECT_EQ(check_value(m, w, why), w);
  for (const char* bad : {"", "Unload", "3", "adaptive "})
    EXPECT_EQ(check_value(m, bad, why), std::nullopt) << bad;
  EXPECT_EQ(mode_words()[m.def], "adaptive");
}

TEST(UnloadctlJson, NestedContainersAndCommas) {
  Json j;
  j.begin_object().key("a").num(1).key("b").begin_array().str("x").boolean(true).null().end_array();
  j.key("c").begin_object().end_object().key("d").real(0.5).end_object();
  EXPECT_EQ(j.text(), R"({"a":1,"b":["x",true,null],"c":{},"d":0.5})");
}

TEST(UnloadctlJson, StringsAreEscaped) {
  EXPECT_EQ(json_quote("a\"b\\c\n\x01"), R"("a\"b\\c\n\u0001")");
}

TEST(UnloadctlStats, RatePerSecondAndResetIsZero) {
  Sample a, b;
  a.t = 10;
  b.t = 12;
  a.values["writes_direct"] = 100;
  b.values["writes_direct"] = 300;
  a.values["fences"] = 50;
  b.values["fences"] = 5;  // a reset between the samples
  EXPECT_DOUBLE_EQ(rate(a, b, "writes_direct"), 100.0);
  EXPECT_DOUBLE_EQ(rate(a, b, "fences"), 0.0);
  EXPECT_DOUBLE_EQ(rate(a, b, "missing"), 0.0);
  EXPECT_DOUBLE_EQ(rate(b, a, "writes_direct"), 0.0);  // time went back: no rate
}

TEST(UnloadctlStats, OtherCountersAreEverythingButPerPath) {
  Sample s;
  for (const char* n : {"writes_offload", "bytes_stage", "fences", "direct_denied_rkey",
                        "why_not/inline_too_long", "sessions", "writes_future_path"})
    s.values[n] = 1;
  const auto o = other_counters(s);
  EXPECT_EQ(o, (std::vector<std::string>{"direct_denied_rkey", "fences", "sessions",
                                         "why_not/inline_too_long", "writes_future_path"}));
  Sample r;
  for (const char* n :
       {"writes_direct", "reported/writes_offload", "reported/bytes_stage", "reported/fences"})
    r.values[n] = 1;
  EXPECT_EQ(other_counters(r), (std::vector<std::string>{"reported/fences"}));
  EXPECT_EQ(path_counter("writes", "direct"), "writes_direct");  // the module's own count
  EXPECT_EQ(path_counter("bytes", "inline"), "reported/bytes_inline");
  EXPECT_TRUE(is_reported("reported/fences"));
  EXPECT_FALSE(is_reported("writes_direct"));
  EXPECT_TRUE(is_gauge("sessions"));
  EXPECT_TRUE(is_gauge("pinned_pages"));
  EXPECT_FALSE(is_gauge("fences"));
}

}  // namespace
}  // namespace unload::ctl
