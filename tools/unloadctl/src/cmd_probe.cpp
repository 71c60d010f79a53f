// unloadctl probe: is there an unload module at a peer host, and how far is it? The module
// echoes bytes through its channel to the peer's module (UNLOAD_IOC_CHANNEL_PROBE) and
// checks them; the answer the policy needs for "the peer host has no module".
#include <arpa/inet.h>
#include <dirent.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "commands.hpp"
#include "device.hpp"
#include "error.hpp"
#include "json.hpp"
#include "sysfs.hpp"
#include "tunables.hpp"

namespace unload::ctl {

namespace {

// The only RDMA device of this host, or a usage error asking for -d.
std::string only_device() {
  std::string found;
  int n = 0;
  if (DIR* d = opendir("/sys/class/infiniband")) {
    while (const dirent* e = readdir(d))
      if (e->d_name[0] != '.') {
        found = e->d_name;
        ++n;
      }
    closedir(d);
  }
  if (n == 1) return found;
  usage_error(n ? "several RDMA devices: name one with -d" : "no RDMA device on this host");
}

uint32_t number(const Args& args, size_t i, const char* flag, uint32_t max) {
  if (i >= args.size()) usage_error(std::string(flag) + " needs a value");
  const auto v = parse_u32(args[i]);
  if (!v || *v > max)
    usage_error(std::string(flag) + " wants 0.." + std::to_string(max) + ", not " + args[i]);
  return *v;
}

const char* state_name(uint32_t s) {
  switch (s) {
    case UNLOAD_CHANNEL_CONNECTING:
      return "connecting";
    case UNLOAD_CHANNEL_UP:
      return "up";
    case UNLOAD_CHANNEL_DOWN:
      return "down";
    default:
      return "none";
  }
}

}  // namespace

int cmd_probe(Options o, const Args& args) {
  std::string dev, peer;
  uint32_t port = 1, bytes = 64, count = 1;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "-d") {
      if (++i >= args.size()) usage_error("-d needs a device name");
      dev = args[i];
    } else if (args[i] == "-p") {
      port = number(args, ++i, "-p", 255);
    } else if (args[i] == "-s") {
      bytes = number(args, ++i, "-s", UNLOAD_PROBE_MAX_LEN);
    } else if (args[i] == "-c") {
      count = number(args, ++i, "-c", 1000000);
    } else if (peer.empty() && args[i][0] != '-') {
      peer = args[i];
    } else {
      usage_error("probe: unexpected '" + args[i] + "'");
    }
  }
  if (peer.empty()) usage_error("probe needs the peer's IPv4 address");
  unload_channel_probe base{};
  base.peer_gid[10] = base.peer_gid[11] = 0xff;
  if (inet_pton(AF_INET, peer.c_str(), base.peer_gid + 12) != 1)
    usage_error("probe: '" + peer + "' is not an IPv4 address");
  if (dev.empty()) dev = only_device();
  if (dev.size() >= sizeof base.ibdev) usage_error("probe: device name too long");
  std::memcpy(base.ibdev, dev.c_str(), dev.size() + 1);
  base.port = port;
  base.length = bytes;
  require_module();
  Device d;
  int worst = 0;
  Json j;
  if (o.json) j.begin_array();
  for (uint32_t i = 0; i < count; ++i) {
    unload_channel_probe p = base;
    const int r = d.channel_probe(&p);
    if (r) worst = r;
    if (o.json) {
      j.begin_object().key("peer").str(peer).key("device").str(dev).key("port").num(port);
      j.key("bytes").num(bytes).key("ok").boolean(r == 0).key("errno").num(-r);
      j.key("rtt_ns").num(p.rtt_ns).key("channel").num(p.channel_id).key("state").str(state_name(p.state));
      j.key("segments").num(p.segments).key("opened_by_peer").boolean(p.passive != 0).end_object();
    } else if (r) {
      std::printf("%s via %s/%u: %u B: %s (channel %s)\n", peer.c_str(), dev.c_str(), port, bytes,
                  std::strerror(-r), state_name(p.state));
    } else {
      std::printf("%s via %s/%u: %u B echoed in %.1f us, %u segment%s, channel %llu %s%s\n", peer.c_str(),
                  dev.c_str(), port, bytes, p.rtt_ns / 1e3, p.segments, p.segments == 1 ? "" : "s",
                  static_cast<unsigned long long>(p.channel_id), state_name(p.state),
                  p.passive ? " (opened by the peer)" : "");
    }
  }
  if (o.json) {
    j.end_array();
    std::printf("%s\n", j.text().c_str());
  }
  return worst ? kExitFailure : 0;
}

}  // namespace unload::ctl
