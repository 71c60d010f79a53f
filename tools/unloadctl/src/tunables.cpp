// The tunables as the module takes them: the UAPI's ranges and defaults, one list for
// both, plus mode (a word), then the module's own (not in the control page).
#include "tunables.hpp"

#include <array>

#include "unload.h"

namespace unload::ctl {

namespace {

constexpr std::array<std::string_view, 4> kModeWords = {"offload", "unload", "threshold", "adaptive"};

#define UNLOAD_CTL_TUNABLE(name, min, max, def) Tunable{#name, false, min, max, def},
constexpr std::array kTunables = {Tunable{"mode", true, 0, UNLOAD_MODE_COUNT - 1, UNLOAD_MODE_DEFAULT},
                                  UNLOAD_TUNABLE_RANGES(UNLOAD_CTL_TUNABLE)
                                      UNLOAD_MODULE_TUNABLE_RANGES(UNLOAD_CTL_TUNABLE)};
#undef UNLOAD_CTL_TUNABLE
static_assert(kModeWords.size() == UNLOAD_MODE_COUNT, "a word per enum unload_mode");

}  // namespace

std::span<const std::string_view> mode_words() {
  return kModeWords;
}
std::span<const Tunable> tunables() {
  return kTunables;
}

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
