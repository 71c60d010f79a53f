// The subcommands; each parses its own arguments (after the command word) and prints to
// stdout. Errors are thrown as ctl::Error (error.hpp).
#pragma once

#include <string>
#include <vector>

namespace unload::ctl {

struct Options {
  bool json = false;  // -j: JSON instead of text
};

using Args = std::vector<std::string>;

int cmd_status(Options o, const Args& args);
int cmd_set(Options o, const Args& args);
int cmd_stat(Options o, const Args& args);
int cmd_ps(Options o, const Args& args);
int cmd_probe(Options o, const Args& args);

// Takes -j/--json out of args (anywhere), so `unloadctl stat -j` works as `-j stat`.
void take_json_flag(Options& o, Args& args);
// The full --help text.
const char* usage_text();

}  // namespace unload::ctl
