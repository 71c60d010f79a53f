// How unloadctl fails: an Error carries the message for stderr and the exit status.
#pragma once

#include <stdexcept>
#include <string>

namespace unload::ctl {

// Exit statuses: 0 done; 1 the system said no (module missing, permission, kernel
// refused); 2 the command line is wrong (usage, unknown name, value out of range).
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

struct Error : std::runtime_error {
  int status;
  Error(int s, const std::string& msg) : std::runtime_error(msg), status(s) {}
};

[[noreturn]] inline void fail(const std::string& msg) {
  throw Error(kExitFailure, msg);
}
[[noreturn]] inline void usage_error(const std::string& msg) {
  throw Error(kExitUsage, msg);
}

}  // namespace unload::ctl
