// Small builders shared by the policy unit tests.
#pragma once

#include "unload/policy.hpp"

namespace unload::policy::testing {

inline WriteFeatures write_of(uint32_t length, PathSet eligible, bool peer_local = false) {
  WriteFeatures f{};
  f.length = length;
  f.sge_count = 1;
  f.rkey = 7;
  f.remote_addr = 0x10000;
  f.eligible = eligible;
  f.peer_local = peer_local;
  return f;
}

inline Tunables tunables_in(Mode mode) {
  Tunables t = kDefaultTunables;
  t.mode = static_cast<uint32_t>(mode);
  return t;
}

}  // namespace unload::policy::testing
