// The tunables table mirrors kmod/sysfs.c (UNLOAD_TUNABLE lines and mode_store); the
// sandbox test tests/tools/unloadctl_test.sh checks every range against the module.
#include "tunables.hpp"

#include <array>

namespace unload::ctl {

namespace {

constexpr std::array<std::string_view, 4> kModeWords = {"offload", "unload", "threshold", "adaptive"};

constexpr std::array<Tunable, 9> kTunables = {{
    {"enabled", false, 0, 1, 1},
    {"mode", true, 0, 3, 3},
    {"threshold_bytes", false, 0, 1u << 31, 1024},
    {"inline_max", false, 0, 1u << 16, 256},
    {"stage_max", false, 0, 1u << 30, 64 * 1024},
    {"direct_max", false, 0, 1u << 31, 1u << 30},
    {"explore_shift", false, 0, 31, 5},
    {"hysteresis_pct", false, 0, 1000, 10},
    {"cpu_budget_pct", false, 0, 100, 50},
}};

}  // namespace

std::span<const std::string_view> mode_words() { return kModeWords; }
std::span<const Tunable> tunables() { return kTunables; }

const Tunable* find_tunable(std::string_view name) {
  for (const Tunable& t : kTunables)
    if (t.name == name) return &t;
  return nullptr;
}

std::optional<uint32_t> parse_u32(std::string_view s) {
  if (s.empty() || s.size() > 32) return std::nullopt;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(c - '0');
    if (v > UINT32_MAX) return std::nullopt;
  }
  return static_cast<uint32_t>(v);
}

std::optional<std::string> check_value(const Tunable& t, std::string_view value, std::string& why) {
  if (t.words) {
    for (std::string_view w : kModeWords)
      if (w == value) return std::string(value);
    why = std::string(t.name) + " takes one of offload, unload, threshold, adaptive";
    return std::nullopt;
  }
  const auto v = parse_u32(value);
  if (!v || *v < t.min || *v > t.max) {
    why = std::string(t.name) + " takes a decimal number from " + std::to_string(t.min) + " to " +
          std::to_string(t.max);
    return std::nullopt;
  }
  return std::to_string(*v);
}

}  // namespace unload::ctl
