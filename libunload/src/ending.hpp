// The statistics block (UNLOAD_STATS_FILE) however a process ends: exit, quick_exit and
// the shim's wrappers of _exit, _Exit, the exec family and abort all call
// unload_stats_flush (unload/runtime.h), which appends what was counted since this
// process's last block (docs/design.md, "How a process's statistics leave it").
#pragma once

namespace unload::rt {

// Once, from session_start: this process owns the counts from now on; the exit hooks.
void ending_init();
// In a forked child (pthread_atfork): the child owns its own, zeroed, counts.
void ending_after_fork();

}  // namespace unload::rt
