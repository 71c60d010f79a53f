// The policy's knobs: the kmod's sysfs tunables, carried to every process by the
// control page (docs/design.md, section 4), or by UNLOAD_* variables without the kmod.
#pragma once

#include <cstdint>

namespace unload::policy {

// The numeric values are the control page's encoding of sysfs `mode`.
enum class Mode : uint32_t {
  offload = 0,    // always the NIC
  unload = 1,     // always the cheapest eligible CPU path
  threshold = 2,  // unload when length <= threshold_bytes
  adaptive = 3,   // learn per write class which path is cheapest
};

// Field names are exactly the sysfs file names; plain integers so the runtime can copy
// them out of the control page under its sequence counter.
struct Tunables {
  uint32_t enabled;          // 0: every write takes the NIC, whatever the mode
  uint32_t mode;             // a Mode value; an unknown value behaves as offload
  uint32_t threshold_bytes;  // threshold mode: unload writes of at most this length
  uint32_t inline_max;       // longest write the inline path may take (0: path off)
  uint32_t stage_max;        // longest write the stage path may take (0: path off)
  uint32_t direct_max;       // longest write the direct path may take (0: path off)
  uint32_t explore_shift;    // adaptive explores at rate 2^-explore_shift (0: never)
  uint32_t hysteresis_pct;   // adaptive switches only for a predicted gain above this
  uint32_t cpu_budget_pct;   // adaptive: share of wall time CPU paths may copy (>=100: no cap)
  uint32_t target_xlate_pages;  // adaptive: pages a target NIC's translation cache holds (0: unknown)

  bool operator==(const Tunables&) const = default;
};

// The defaults the kmod and the kmod-less runtime start from.
inline constexpr Tunables kDefaultTunables{
    .enabled = 1,
    .mode = static_cast<uint32_t>(Mode::adaptive),
    .threshold_bytes = 1024,
    .inline_max = 256,
    .stage_max = 64 * 1024,
    .direct_max = 1u << 30,
    .explore_shift = 5,
    .hysteresis_pct = 10,
    .cpu_budget_pct = 50,
    .target_xlate_pages = 0,
};

constexpr Mode mode_of(const Tunables& t) {
  return t.mode <= static_cast<uint32_t>(Mode::adaptive) ? static_cast<Mode>(t.mode) : Mode::offload;
}

}  // namespace unload::policy
