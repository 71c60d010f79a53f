// unloadctl: see the module's state and change its tunables, like `rdma` or `ethtool -S`
// for a driver. Usage in usage_text() (unloadctl --help) and tools/unloadctl/README.md.
#include <cstdio>
#include <cstring>
#include <string>

#include "commands.hpp"
#include "error.hpp"
#include "unload.h"

namespace unload::ctl {

const char* usage_text() {
  return "usage: unloadctl [-j] COMMAND [ARGS]\n"
         "\n"
         "commands:\n"
         "  status                  the module: loaded, version, ABI, every tunable with\n"
         "                          its value, range and default\n"
         "  set NAME VALUE          set a tunable (root); checked here, then by the module\n"
         "  stat [-w SECONDS] [-c COUNT]\n"
         "                          totals and rates per path, fences, denials and every\n"
         "                          other counter of " UNLOAD_SYSFS_ROOT
         "/stats; rates over\n"
         "                          1 s, or refreshed in place every SECONDS with -w\n"
         "                          (COUNT times, default until interrupted)\n"
         "  ps                      the live sessions: pid, command, QPs, regions, pinned\n"
         "                          pages, writes per path (root sees all, a user its own)\n"
         "  probe [-d DEV] [-p PORT] [-s BYTES] [-c COUNT] PEER\n"
         "                          is there an unload module at PEER (an IPv4 address)?\n"
         "                          echoes BYTES (default 64, at most 1 MiB) through the\n"
         "                          channel from device DEV (default: the only one), port\n"
         "                          PORT (default 1), COUNT times; round trip and state\n"
         "  help                    this text\n"
         "\n"
         "options:\n"
         "  -j, --json              JSON, one document per line (as `rdma -j`)\n"
         "  -h, --help              this text\n"
         "  -V, --version           unloadctl's version and ABI\n"
         "\n"
         "exit status: 0 done; 1 the system refused (module not loaded, permission);\n"
         "2 bad usage (unknown command or name, value out of range).\n";
}

void take_json_flag(Options& o, Args& args) {
  for (auto it = args.begin(); it != args.end();) {
    if (*it == "-j" || *it == "--json") {
      o.json = true;
      it = args.erase(it);
    } else {
      ++it;
    }
  }
}

namespace {

int run(Args args) {
  Options o;
  take_json_flag(o, args);
  if (args.empty()) usage_error("no command given (try `unloadctl --help`)");
  const std::string cmd = args.front();
  args.erase(args.begin());
  if (cmd == "-h" || cmd == "--help" || cmd == "help") {
    std::fputs(usage_text(), stdout);
    return 0;
  }
  if (cmd == "-V" || cmd == "--version") {
    std::printf("unloadctl %s (ABI %d)\n", UNLOAD_CTL_VERSION, UNLOAD_ABI_VERSION);
    return 0;
  }
  for (const std::string& a : args)
    if (a == "-h" || a == "--help") {
      std::fputs(usage_text(), stdout);
      return 0;
    }
  if (cmd == "status") return cmd_status(o, args);
  if (cmd == "set") return cmd_set(o, args);
  if (cmd == "stat") return cmd_stat(o, args);
  if (cmd == "ps") return cmd_ps(o, args);
  if (cmd == "probe") return cmd_probe(o, args);
  usage_error("unknown command '" + cmd + "' (try `unloadctl --help`)");
}

}  // namespace

}  // namespace unload::ctl

int main(int argc, char** argv) {
  try {
    return unload::ctl::run(unload::ctl::Args(argv + 1, argv + argc));
  } catch (const unload::ctl::Error& e) {
    std::fprintf(stderr, "unloadctl: %s\n", e.what());
    return e.status;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "unloadctl: %s\n", e.what());
    return unload::ctl::kExitFailure;
  }
}
