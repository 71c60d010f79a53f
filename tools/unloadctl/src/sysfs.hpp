// Reading and writing /sys/kernel/unload/ and /sys/module/unload/: one value per file.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace unload::ctl {

// The module's sysfs root (UNLOAD_SYSFS_ROOT) and its directory under /sys/module.
std::string sysfs_root();
inline const char* kModuleDir = "/sys/module/unload";

// Fails (exit 1) with how to load it when /sys/kernel/unload is missing.
void require_module();
bool module_loaded();

// The file's first line without its newline; nothing when it cannot be read (errno set).
std::optional<std::string> read_line(const std::string& path);
// Writes value in one write(2); 0 or the errno the kernel answered.
int write_value(const std::string& path, const std::string& value);

struct Entry {
  std::string name;  // relative to the listed directory; "sub/name" one level down
  bool readable;     // the caller may read it (mode bits for its uid)
  bool write_only;   // no read bit for anyone: a control such as stats/reset
};
// Regular files of dir, and of its subdirectories one level down, sorted by name.
std::vector<Entry> list_files(const std::string& dir);

}  // namespace unload::ctl
