#include "stats.hpp"

#include <time.h>

#include "sysfs.hpp"
#include "tunables.hpp"

namespace unload::ctl {

namespace {

double now_s() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// A u64 counter: decimal digits (sysfs_emit "%llu"); a negative gauge reads as 0.
bool parse_u64(const std::string& s, uint64_t& v) {
  if (s.empty()) return false;
  if (s[0] == '-') {
    v = 0;
    return s.size() > 1;
  }
  v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    const uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  return true;
}

}  // namespace

Sample read_sample(const std::string& dir, const std::string& prefix) {
  Sample s;
  s.t = now_s();
  for (const Entry& e : list_files(dir)) {
    if (e.write_only) continue;
    uint64_t v;
    const auto line = e.readable ? read_line(dir + "/" + e.name) : std::nullopt;
    if (line && parse_u64(*line, v))
      s.values[prefix + e.name] = v;
    else
      s.unreadable.push_back(prefix + e.name);
  }
  return s;
}

Sample read_stats(const std::string& root) {
  Sample s = read_sample(root + "/stats");
  const Sample r = read_sample(root + "/reported", kReported);
  s.values.insert(r.values.begin(), r.values.end());
  s.unreadable.insert(s.unreadable.end(), r.unreadable.begin(), r.unreadable.end());
  return s;
}

bool is_reported(const std::string& name) {
  return name.rfind(kReported, 0) == 0;
}

std::string path_counter(const std::string& what, const std::string& path) {
  return (path == "direct" ? "" : kReported) + what + "_" + path;
}

const std::vector<std::string>& path_names() {
  static const std::vector<std::string> names = {"offload", "inline", "stage", "direct", "remote"};
  return names;
}

bool is_gauge(const std::string& name) {
  return name == "sessions" || name == "pinned_pages";
}

double rate(const Sample& a, const Sample& b, const std::string& name) {
  const auto ia = a.values.find(name);
  const auto ib = b.values.find(name);
  if (ia == a.values.end() || ib == b.values.end() || b.t <= a.t || ib->second < ia->second) return 0;
  return static_cast<double>(ib->second - ia->second) / (b.t - a.t);
}

std::vector<std::string> other_counters(const Sample& s) {
  std::vector<std::string> out;
  for (const auto& [name, v] : s.values) {
    bool per_path = false;
    for (const std::string& p : path_names())
      for (const char* w : {"writes", "bytes"})
        if (name == std::string(w) + "_" + p || name == path_counter(w, p)) per_path = true;
    if (!per_path) out.push_back(name);
  }
  return out;
}

}  // namespace unload::ctl
