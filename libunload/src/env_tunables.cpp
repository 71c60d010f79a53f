// The UNLOAD_* tunable variables: parsed once, then the tunables themselves (no module),
// or a narrowing of the control page's (the module), or a line on stderr.
#include "env_tunables.hpp"

#include <cinttypes>
#include <cstdlib>
#include <iterator>

#include "unload/policy/resident_set.hpp"

namespace unload::rt {
namespace {

using policy::Tunables;

struct Var {
  const char* name;            // the variable
  const char* sysfs;           // the module's file, /sys/kernel/unload/<sysfs>
  uint32_t Tunables::*field;
  uint32_t max;
  // A limit on what the CPU paths may take, where the lower value is the narrower: a
  // process may lower it under root's. The others tune how adaptive learns or describe
  // the hardware: a process's value would be neither narrower nor wider, so root's holds.
  bool narrows;
};

constexpr Var kVars[] = {
    {"UNLOAD_ENABLED", "enabled", &Tunables::enabled, 1, true},
    {"UNLOAD_THRESHOLD_BYTES", "threshold_bytes", &Tunables::threshold_bytes, UINT32_MAX, true},
    {"UNLOAD_INLINE_MAX", "inline_max", &Tunables::inline_max, UINT32_MAX, true},
    {"UNLOAD_STAGE_MAX", "stage_max", &Tunables::stage_max, UINT32_MAX, true},
    {"UNLOAD_DIRECT_MAX", "direct_max", &Tunables::direct_max, UINT32_MAX, true},
    {"UNLOAD_EXPLORE_SHIFT", "explore_shift", &Tunables::explore_shift, 63, false},
    {"UNLOAD_HYSTERESIS_PCT", "hysteresis_pct", &Tunables::hysteresis_pct, UINT32_MAX, false},
    {"UNLOAD_CPU_BUDGET_PCT", "cpu_budget_pct", &Tunables::cpu_budget_pct, UINT32_MAX, true},
    {"UNLOAD_TARGET_XLATE_PAGES", "target_xlate_pages", &Tunables::target_xlate_pages,
     policy::ResidentSet::kMaxPages, false},
};
// Every numeric field but mode has a variable here: a field added to Tunables must be
// placed in this table (narrowing or named as ignored), never left to the page in silence.
static_assert(std::size(kVars) + 1 == sizeof(Tunables) / sizeof(uint32_t),
              "every tunable but mode has its UNLOAD_* variable in kVars");

// Strict unsigned decimal that fits 32 bits.
bool parse_u32(const char* s, uint32_t& out) {
  if (!s || !*s) return false;
  uint64_t v = 0;
  for (const char* p = s; *p; ++p) {
    if (*p < '0' || *p > '9') return false;
    v = v * 10 + static_cast<uint64_t>(*p - '0');
    if (v > UINT32_MAX) return false;
  }
  out = static_cast<uint32_t>(v);
  return true;
}

}  // namespace

EnvTunables env_tunables_read() {
  EnvTunables e{policy::kDefaultTunables, 0};
  for (unsigned i = 0; i < std::size(kVars); ++i) {
    const Var& v = kVars[i];
    const char* s = std::getenv(v.name);
    if (!s) continue;
    uint32_t x;
    if (!parse_u32(s, x) || x > v.max) {
      std::fprintf(stderr, "unload: %s=\"%s\" is not a number in 0..%" PRIu32 "; keeping %" PRIu32 "\n", v.name,
                   s, v.max, e.values.*v.field);
      continue;
    }
    e.values.*v.field = x;
    e.set |= 1u << i;
  }
  return e;
}

bool env_tunables_disable(const EnvTunables& env) {
  for (unsigned i = 0; i < std::size(kVars); ++i)
    if (kVars[i].field == &Tunables::enabled) return (env.set >> i & 1) && env.values.enabled == 0;
  return false;
}

Tunables env_tunables_narrow(const Tunables& page, const EnvTunables& env) {
  Tunables t = page;
  for (unsigned i = 0; i < std::size(kVars); ++i) {
    const Var& v = kVars[i];
    if (v.narrows && (env.set >> i & 1) && env.values.*v.field < t.*v.field) t.*v.field = env.values.*v.field;
  }
  return t;
}

int env_tunables_notice(const Tunables& page, const EnvTunables& env, FILE* out) {
  int lines = 0;
  for (unsigned i = 0; i < std::size(kVars); ++i) {
    const Var& v = kVars[i];
    if (!(env.set >> i & 1)) continue;
    const uint32_t mine = env.values.*v.field, root = page.*v.field;
    if (!v.narrows) {
      std::fprintf(out,
                   "unload: %s=%" PRIu32 " ignored: with the module loaded %s comes from "
                   "/sys/kernel/unload/%s (now %" PRIu32 ")\n",
                   v.name, mine, v.sysfs, v.sysfs, root);
      ++lines;
    } else if (mine > root) {
      std::fprintf(out,
                   "unload: %s=%" PRIu32 " does not apply now: a process may lower the module's %s "
                   "(/sys/kernel/unload/%s, now %" PRIu32 "), never raise it; the lower of the two holds\n",
                   v.name, mine, v.sysfs, v.sysfs, root);
      ++lines;
    }
  }
  return lines;
}

}  // namespace unload::rt
