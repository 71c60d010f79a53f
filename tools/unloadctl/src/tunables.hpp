// The module's tunables as unloadctl knows them: names, ranges, defaults, and the check
// a value must pass before it is written (the module checks again: kmod/sysfs.c).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace unload::ctl {

struct Tunable {
  std::string_view name;   // the sysfs file under /sys/kernel/unload/
  bool words;              // a word from `values` (mode), else a decimal u32
  uint32_t min, max, def;  // numeric range and default (words: indices into values)
};

// The mode words, in enum unload_mode order.
std::span<const std::string_view> mode_words();
// Every tunable of the module: mode, then the UAPI's lists in their order (the control
// page's, then the module's own); find_tunable gives nullptr when `name` is not one.
std::span<const Tunable> tunables();
const Tunable* find_tunable(std::string_view name);

// Checks `value` for tunable t as the module would. Returns the text to write, or sets
// `why` (a sentence naming the rule) and returns nothing.
std::optional<std::string> check_value(const Tunable& t, std::string_view value, std::string& why);

// A decimal u32 as sysfs takes it (digits only; leading zeros are decimal).
std::optional<uint32_t> parse_u32(std::string_view s);

}  // namespace unload::ctl
