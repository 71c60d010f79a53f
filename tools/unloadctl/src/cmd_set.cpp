// unloadctl set NAME VALUE: checked against the module's rules here (a clear message,
// exit 2), then written to sysfs, where the module checks it again. Nothing is written
// when a check fails.
#include <sys/stat.h>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "commands.hpp"
#include "error.hpp"
#include "json.hpp"
#include "sysfs.hpp"
#include "tunables.hpp"

namespace unload::ctl {

namespace {

std::string known_names() {
  std::string s;
  for (const Tunable& t : tunables()) {
    if (!s.empty()) s += ", ";
    s += t.name;
  }
  return s;
}

}  // namespace

int cmd_set(Options o, const Args& args) {
  if (args.size() != 2) usage_error("usage: unloadctl set NAME VALUE");
  const std::string& name = args[0];
  std::string value = args[1];
  const Tunable* t = find_tunable(name);
  if (t) {
    std::string why;
    const auto checked = check_value(*t, value, why);
    if (!checked) usage_error("invalid value '" + value + "': " + why);
    value = *checked;
  }
  require_module();
  const std::string path = sysfs_root() + "/" + name;
  struct stat st;
  // A tunable this table lacks (a newer module) is still a file of the root: the
  // module's own check is then the only one.
  if (!t && (name.find('/') != std::string::npos || name.empty() || name[0] == '.' ||
             stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || !(st.st_mode & 0200)))
    usage_error("unknown tunable '" + name + "' (one of " + known_names() + ")");

  const auto before = read_line(path);
  const int e = write_value(path, value);
  if (e == EINVAL) usage_error("the module refused " + name + " = " + value + " (EINVAL)");
  if (e == EACCES || e == EPERM)
    fail("cannot set " + name + ": " + std::strerror(e) + " (tunables need root)");
  if (e) fail("cannot set " + name + ": " + std::strerror(e));
  const auto after = read_line(path);
  if (o.json) {
    Json j;
    j.begin_object().key("name").str(name).key("old");
    before ? j.str(*before) : j.null();
    j.key("value");
    after ? j.str(*after) : j.null();
    j.end_object();
    std::printf("%s\n", j.text().c_str());
  } else {
    std::printf("%s: %s -> %s\n", name.c_str(), before ? before->c_str() : "?", after ? after->c_str() : "?");
  }
  return 0;
}

}  // namespace unload::ctl
