// The reasons' names, as the statistics file and sysfs spell them (why.hpp).
#include "why.hpp"

namespace unload::rt {

const char* why_name(Why w) {
  static const char* const names[UNLOAD_WHY_COUNT] = {
      "not_rc",    "program_inline", "path_off", "no_module",  "remote_peer", "unregistered", "unpaired",
      "poisoned",  "qp_error",       "cq",       "queue",      "fence",       "size",         "region",
      "no_room",   "refused",        "policy",   "with_imm",   "nic_memory",  "window",       "cold",
      "exploring", "budget",         "cost",     "local_peer", "no_channel",   "no_key",       "no_mapping"};
  const unsigned i = static_cast<unsigned>(w);
  return i < UNLOAD_WHY_COUNT ? names[i] : "none";
}

}  // namespace unload::rt
