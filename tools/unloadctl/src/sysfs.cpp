#include "sysfs.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "error.hpp"
#include "unload.h"

namespace unload::ctl {

std::string sysfs_root() {
  return UNLOAD_SYSFS_ROOT;
}

bool module_loaded() {
  struct stat st;
  return stat(UNLOAD_SYSFS_ROOT, &st) == 0 && S_ISDIR(st.st_mode);
}

void require_module() {
  if (!module_loaded())
    fail("the unload module is not loaded (no " UNLOAD_SYSFS_ROOT "): load it with `modprobe unload`");
}

std::optional<std::string> read_line(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char buf[4096];
  const ssize_t n = read(fd, buf, sizeof buf - 1);
  const int e = errno;
  close(fd);
  if (n < 0) {
    errno = e;
    return std::nullopt;
  }
  std::string s(buf, static_cast<size_t>(n));
  if (const auto nl = s.find('\n'); nl != std::string::npos) s.resize(nl);
  return s;
}

int write_value(const std::string& path, const std::string& value) {
  const int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  const ssize_t n = write(fd, value.data(), value.size());
  const int e = n < 0 ? errno : (static_cast<size_t>(n) == value.size() ? 0 : EIO);
  close(fd);
  return e;
}

namespace {

void list_into(const std::string& dir, const std::string& prefix, int depth, std::vector<Entry>& out) {
  DIR* d = opendir(dir.c_str());
  if (!d) return;
  while (const dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    const std::string path = dir + "/" + name;
    struct stat st;
    if (stat(path.c_str(), &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      if (depth > 0) list_into(path, prefix + name + "/", depth - 1, out);
    } else if (S_ISREG(st.st_mode)) {
      out.push_back({prefix + name, access(path.c_str(), R_OK) == 0, (st.st_mode & 0444) == 0});
    }
  }
  closedir(d);
}

}  // namespace

std::vector<Entry> list_files(const std::string& dir) {
  std::vector<Entry> out;
  list_into(dir, "", 1, out);
  std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) { return a.name < b.name; });
  return out;
}

}  // namespace unload::ctl
