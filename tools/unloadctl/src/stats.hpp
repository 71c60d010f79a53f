// The module's statistics (/sys/kernel/unload/stats/, what it counted itself) and what
// the sessions report (reported/, their counters pages, which their users write: claims,
// not measurements), read generically: every file there is a counter or a gauge, so
// counters added to the module later show up here without a change. writes_<path> and
// bytes_<path> are grouped per path.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace unload::ctl {

struct Sample {
  double t = 0;                            // CLOCK_MONOTONIC seconds
  std::map<std::string, uint64_t> values;  // file name (relative to the directory read) -> value
  std::vector<std::string> unreadable;     // files the caller may not read (root only)
};

// Reads every readable file of dir (not write-only controls), each name after prefix.
Sample read_sample(const std::string& dir, const std::string& prefix = "");

// stats/ and reported/ of the sysfs root in one sample, reported/'s names as
// "reported/<name>".
Sample read_stats(const std::string& root);
inline const char* kReported = "reported/";
bool is_reported(const std::string& name);

// The name of `what` ("writes" or "bytes") of a path in read_stats's sample: the module's
// own count for direct, what the sessions report for the others.
std::string path_counter(const std::string& what, const std::string& path);

// The paths, in enum unload_path order (the suffixes of writes_* and bytes_*).
const std::vector<std::string>& path_names();

// Gauges are levels, not counts: no rate is shown for them.
bool is_gauge(const std::string& name);

// Per second from a to b (b.t > a.t); 0 when the counter went back (a reset).
double rate(const Sample& a, const Sample& b, const std::string& name);

// The names that are neither writes_<path> nor bytes_<path>.
std::vector<std::string> other_counters(const Sample& s);

}  // namespace unload::ctl
