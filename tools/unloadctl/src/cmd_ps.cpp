// unloadctl ps: the live sessions of the module (UNLOAD_IOC_LIST_SESSIONS): root sees
// every one, a user the ones it opened. Writes per path of offload, inline and stage
// are what each process reported on its counters page; direct is the module's count.
#include <cstdio>
#include <string>

#include "commands.hpp"
#include "device.hpp"
#include "error.hpp"
#include "json.hpp"
#include "stats.hpp"
#include "sysfs.hpp"

namespace unload::ctl {

namespace {

std::string comm_of(const unload_session_info& s) {
  size_t n = 0;
  while (n < sizeof s.comm && s.comm[n]) ++n;
  return std::string(s.comm, n);
}

}  // namespace

int cmd_ps(Options o, const Args& args) {
  if (!args.empty()) usage_error("ps takes no arguments");
  require_module();
  Device dev;
  const auto list = dev.sessions();
  const auto& paths = path_names();
  if (o.json) {
    Json j;
    j.begin_array();
    for (const auto& s : list) {
      j.begin_object().key("session").num(s.session_id).key("pid").num(s.pid).key("uid").num(s.uid);
      j.key("comm").str(comm_of(s)).key("qps").num(s.qps).key("regions").num(s.regions);
      j.key("pinned_pages").num(s.pinned_pages);
      j.key("writes").begin_object();
      for (size_t i = 0; i < paths.size(); ++i) j.key(paths[i]).num(s.writes[i]);
      j.end_object().key("bytes").begin_object();
      for (size_t i = 0; i < paths.size(); ++i) j.key(paths[i]).num(s.bytes[i]);
      j.end_object().key("fences").num(s.fences).end_object();
    }
    j.end_array();
    std::printf("%s\n", j.text().c_str());
    return 0;
  }
  std::printf("%8s %6s %-16s %5s %7s %8s %12s %12s %12s %12s %12s\n", "PID", "UID", "COMMAND", "QPS",
              "REGIONS", "PINNED", "OFFLOAD", "INLINE", "STAGE", "DIRECT", "REMOTE");
  for (const auto& s : list)
    std::printf("%8u %6u %-16s %5u %7u %8llu %12llu %12llu %12llu %12llu %12llu\n", s.pid, s.uid,
                comm_of(s).c_str(), s.qps, s.regions, static_cast<unsigned long long>(s.pinned_pages),
                static_cast<unsigned long long>(s.writes[UNLOAD_PATH_OFFLOAD]),
                static_cast<unsigned long long>(s.writes[UNLOAD_PATH_INLINE]),
                static_cast<unsigned long long>(s.writes[UNLOAD_PATH_STAGE]),
                static_cast<unsigned long long>(s.writes[UNLOAD_PATH_DIRECT]),
                static_cast<unsigned long long>(s.writes[UNLOAD_PATH_REMOTE]));
  return 0;
}

}  // namespace unload::ctl
