// The fatal signals the shim can see (docs/design.md, "How a process's statistics leave
// it"): SIGHUP, SIGINT and SIGTERM, where the program left them at SIG_DFL, get a handler
// that writes the statistics block and then dies of the signal as SIG_DFL would. The
// program never sees it: the shim's sigaction, signal, sysv_signal, bsd_signal, sigset and
// siginterrupt report and keep the disposition the program set (unload/runtime.h,
// unload_sig_*), and a program that sets its own handler or SIG_IGN replaces it for good.
#pragma once

namespace unload::rt {

// Once, from session_start: the handler where the disposition is SIG_DFL.
void signals_init();

}  // namespace unload::rt
