// The UNLOAD_* tunable variables (shim/README.md, "Tunables"). Without the module they are
// the tunables. With it the control page carries root's values, and a process's variable
// may narrow what root allows, never widen it; one that is not a limit is named once on
// stderr as ignored, with where its value comes from (issue 54: nothing ignored in silence).
#pragma once

#include <cstdint>
#include <cstdio>

#include "unload/policy.hpp"

namespace unload::rt {

struct EnvTunables {
  policy::Tunables values;  // the defaults, with every valid variable's value over them
  uint32_t set;             // bit i: kEnvTunables[i]'s variable was set to a valid value
};

// Reads the variables (UNLOAD_MODE aside: it forces the mode, tunables.cpp). A bad value
// prints one line naming the variable and keeps the default.
EnvTunables env_tunables_read();

// UNLOAD_ENABLED=0: every write on the NIC, whatever the page says (a process may lower
// `enabled`, and nothing raises it again).
bool env_tunables_disable(const EnvTunables& env);

// With the module: the page's tunables, each narrowing variable's value where it is lower.
policy::Tunables env_tunables_narrow(const policy::Tunables& page, const EnvTunables& env);

// With the module: one line on `out` for each variable set that does not take effect now
// (one the page's value replaces; a narrowing one above the page's value). The number of
// lines written.
int env_tunables_notice(const policy::Tunables& page, const EnvTunables& env, FILE* out);

}  // namespace unload::rt
