// A process's session with the runtime: started once, carried across fork.
#pragma once

namespace unload::rt {

// Once per process, from unload_runtime_init: the tunables (and the module's session), the
// ways a process's statistics leave it, and the fork hook.
void session_start();

}  // namespace unload::rt
