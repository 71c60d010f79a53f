#include "unload/policy.hpp"

namespace unload::policy {

const char* name_of(Path p) {
  switch (p) {
    case Path::offload:
      return "offload";
    case Path::unload_inline:
      return "unload.inline";
    case Path::unload_stage:
      return "unload.stage";
    case Path::unload_direct:
      return "unload.direct";
    case Path::unload_remote:
      return "unload.remote";
    case Path::unload_mapped:
      return "unload.mapped";
  }
  return "?";
}

const char* setting_name_of(Path p) {
  const char* n = name_of(p);
  return p == Path::offload || n[0] == '?' ? n : n + sizeof "unload." - 1;
}

PathSet effective_eligible(const WriteFeatures& f, const Tunables& t) {
  // A cap of 0 turns its path off rather than allowing only empty writes: that is what an
  // administrator writing 0 to inline_max means.
  const auto within = [&f](uint32_t cap) { return cap != 0 && f.length <= cap; };
  PathSet e = f.eligible.with(Path::offload);
  if (f.peer_local) e = e.without(Path::unload_remote);  // direct reaches it, not the channel
  else e = e.without(Path::unload_mapped);  // a mapping is of a region on this host
  if (!within(t.inline_max)) e = e.without(Path::unload_inline);
  if (!within(t.stage_max)) e = e.without(Path::unload_stage);
  if (!within(t.direct_max))
    e = e.without(Path::unload_direct).without(Path::unload_mapped).without(Path::unload_remote);
  return e;
}

Path cheapest_cpu_path(PathSet eligible) {
  if (eligible.contains(Path::unload_mapped)) return Path::unload_mapped;
  if (eligible.contains(Path::unload_direct)) return Path::unload_direct;
  if (eligible.contains(Path::unload_remote)) return Path::unload_remote;
  if (eligible.contains(Path::unload_inline)) return Path::unload_inline;
  if (eligible.contains(Path::unload_stage)) return Path::unload_stage;
  return Path::offload;
}

}  // namespace unload::policy
