// unloadctl status: is the module loaded, which version and ABI, is the channel open (and
// if not, why), every tunable with its value, range and default. Tunables the module has
// and this table lacks are shown too.
#include <cstdio>
#include <optional>
#include <string>

#include "commands.hpp"
#include "device.hpp"
#include "error.hpp"
#include "json.hpp"
#include "sysfs.hpp"
#include "tunables.hpp"

namespace unload::ctl {

namespace {

std::string range_text(const Tunable& t) {
  if (!t.words) return std::to_string(t.min) + ".." + std::to_string(t.max);
  std::string s;
  for (std::string_view w : mode_words()) {
    if (!s.empty()) s += '|';
    s += w;
  }
  return s;
}

std::string default_text(const Tunable& t) {
  return t.words ? std::string(mode_words()[t.def]) : std::to_string(t.def);
}

// Regular files of the sysfs root that this table does not know (a newer module).
std::vector<std::string> unknown_tunables() {
  std::vector<std::string> out;
  for (const Entry& e : list_files(sysfs_root()))
    if (e.name.find('/') == std::string::npos && !find_tunable(e.name)) out.push_back(e.name);
  return out;
}

// The channel between hosts' modules: open, or closed and why (docs/security.md).
struct ChannelState {
  std::optional<std::string> auth, listening, key;
  std::string text() const {
    if (!listening) return "? (a module without channel/listening)";
    if (*listening == "1")
      return auth && *auth == "none" ? "open, channel/auth none: every host on the fabric is trusted"
                                     : "open, a peer proves the key";
    if (key && *key == "0" && (!auth || *auth == "key"))
      return "closed: no key installed (write one to channel/key on every host)";
    return "closed";
  }
};

ChannelState channel_state(const std::string& root) {
  return {read_line(root + "/channel/auth"), read_line(root + "/channel/listening"),
          read_line(root + "/channel/key_installed")};
}

}  // namespace

int cmd_status(Options o, const Args& args) {
  if (!args.empty()) usage_error("status takes no arguments");
  if (!module_loaded()) {
    if (o.json)
      std::printf("%s\n", Json().begin_object().key("loaded").boolean(false).end_object().text().c_str());
    else
      std::printf("module    not loaded (load it with `modprobe unload`)\n");
    return kExitFailure;
  }
  const std::string root = sysfs_root();
  const auto version = read_line(std::string(kModuleDir) + "/version");
  const uint32_t abi = probe_module_abi();
  const auto sessions = read_line(root + "/stats/sessions");

  if (o.json) {
    Json j;
    j.begin_object().key("loaded").boolean(true);
    j.key("version");
    version ? j.str(*version) : j.null();
    j.key("abi");
    abi ? j.num(abi) : j.null();
    j.key("tool_abi").num(UNLOAD_ABI_VERSION);
    j.key("sessions");
    const auto nsessions = sessions ? parse_u32(*sessions) : std::nullopt;
    nsessions ? j.num(*nsessions) : j.null();
    const ChannelState ch = channel_state(root);
    j.key("channel").begin_object().key("listening");
    ch.listening ? j.boolean(*ch.listening == "1") : j.null();
    j.key("auth");
    ch.auth ? j.str(*ch.auth) : j.null();
    j.key("key_installed");
    ch.key ? j.boolean(*ch.key == "1") : j.null();
    j.key("state").str(ch.text()).end_object();
    j.key("tunables").begin_array();
    for (const Tunable& t : tunables()) {
      const auto v = read_line(root + "/" + std::string(t.name));
      j.begin_object().key("name").str(t.name).key("value");
      if (!v)
        j.null();
      else if (t.words)
        j.str(*v);
      else if (const auto n = parse_u32(*v))
        j.num(*n);
      else
        j.str(*v);
      if (t.words) {
        j.key("values").begin_array();
        for (std::string_view w : mode_words()) j.str(w);
        j.end_array().key("default").str(mode_words()[t.def]);
      } else {
        j.key("min").num(t.min).key("max").num(t.max).key("default").num(t.def);
      }
      j.end_object();
    }
    for (const std::string& name : unknown_tunables()) {
      const auto v = read_line(root + "/" + name);
      j.begin_object().key("name").str(name).key("value");
      v ? j.str(*v) : j.null();
      j.end_object();
    }
    j.end_array().end_object();
    std::printf("%s\n", j.text().c_str());
    return 0;
  }

  std::printf("module    loaded\n");
  std::printf("version   %s\n", version ? version->c_str() : "?");
  if (abi)
    std::printf("abi       %u (unloadctl %d)\n", abi, UNLOAD_ABI_VERSION);
  else
    std::printf("abi       ? (cannot open " UNLOAD_DEVICE_PATH ")\n");
  std::printf("sessions  %s\n", sessions ? sessions->c_str() : "?");
  std::printf("channel   %s\n\n", channel_state(root).text().c_str());
  std::printf("%-16s %-10s %-34s %s\n", "tunable", "value", "range", "default");
  for (const Tunable& t : tunables()) {
    const auto v = read_line(root + "/" + std::string(t.name));
    std::printf("%-16s %-10s %-34s %s\n", std::string(t.name).c_str(), v ? v->c_str() : "?",
                range_text(t).c_str(), default_text(t).c_str());
  }
  for (const std::string& name : unknown_tunables()) {
    const auto v = read_line(root + "/" + name);
    std::printf("%-16s %-10s %-34s %s\n", name.c_str(), v ? v->c_str() : "?", "(see docs/sysfs.md)", "?");
  }
  return 0;
}

}  // namespace unload::ctl
