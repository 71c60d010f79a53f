// The ways a process ends that skip atexit, and the calls that read or set a signal's
// disposition (for the fatal signals the shim can see: libunload/src/signals.hpp): _exit and _Exit (a forked job process's usual
// end), an exec of a new image, abort (std::terminate's too). Each wrapper writes the
// statistics block (unload_stats_flush: what was counted since the last one) and calls
// libc's own, resolved once into a table when the shim loads, so that a child of vfork,
// which may call these, never resolves anything. exit and quick_exit need no wrapper:
// the runtime registers with atexit and at_quick_exit. Calls inside libc (its execl
// family, system, posix_spawn, an assert's abort) go to libc's internal symbols, not
// here: those of execl, execlp and execle are rebuilt below as glibc's own are. x86-64
// glibc's version nodes (shim.map).
#include <dlfcn.h>
#include <unistd.h>

#include <alloca.h>
#include <signal.h>
#include <cstdarg>
#include <cstddef>
#include <cstdlib>

#include "unload/runtime.h"

#define UNLOAD_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

struct Libc {
  void (*exit_)(int);
  void (*abort_)();
  int (*execve)(const char*, char* const*, char* const*);
  int (*execv)(const char*, char* const*);
  int (*execvp)(const char*, char* const*);
  int (*execvpe)(const char*, char* const*, char* const*);
  int (*fexecve)(int, char* const*, char* const*);
  int (*execveat)(int, const char*, char* const*, char* const*, int);
  unload_sigaction_fn sigaction_;
  __sighandler_t (*signal_)(int, __sighandler_t);
  __sighandler_t (*sysv_signal)(int, __sighandler_t);
  __sighandler_t (*sigset)(int, __sighandler_t);
  int (*siginterrupt)(int, int);
};
Libc g_libc;

template <class T>
void resolve(T& slot, const char* name, const char* version) {
  slot = reinterpret_cast<T>(dlvsym(RTLD_NEXT, name, version));
}

__attribute__((constructor)) void libc_resolve() {
  resolve(g_libc.exit_, "_exit", "GLIBC_2.2.5");
  resolve(g_libc.abort_, "abort", "GLIBC_2.2.5");
  resolve(g_libc.execve, "execve", "GLIBC_2.2.5");
  resolve(g_libc.execv, "execv", "GLIBC_2.2.5");
  resolve(g_libc.execvp, "execvp", "GLIBC_2.2.5");
  resolve(g_libc.execvpe, "execvpe", "GLIBC_2.11");
  resolve(g_libc.fexecve, "fexecve", "GLIBC_2.2.5");
  resolve(g_libc.execveat, "execveat", "GLIBC_2.34");
  resolve(g_libc.sigaction_, "sigaction", "GLIBC_2.2.5");
  resolve(g_libc.signal_, "signal", "GLIBC_2.2.5");
  resolve(g_libc.sysv_signal, "sysv_signal", "GLIBC_2.2.5");
  resolve(g_libc.sigset, "sigset", "GLIBC_2.2.5");
  resolve(g_libc.siginterrupt, "siginterrupt", "GLIBC_2.2.5");
  unload_sig_set_real(g_libc.sigaction_);
}

// The table, resolved already unless another library's constructor ended the process first.
const Libc& libc() {
  if (__builtin_expect(!g_libc.exit_, 0)) libc_resolve();
  return g_libc;
}

// execl's list, arg to the NULL, as an argv in `argv` (room for argc_of's count + 1); `ap`
// is left after the NULL (where execle's envp is).
size_t argc_of(const char* arg, va_list ap) {
  va_list c;
  va_copy(c, ap);
  size_t n = 1;
  if (arg)
    while (va_arg(c, const char*)) ++n;
  va_end(c);
  return arg ? n : 0;
}
char** fill_argv(char** argv, const char* arg, va_list& ap) {
  size_t i = 0;
  argv[i] = const_cast<char*>(arg);
  if (arg)
    while ((argv[++i] = va_arg(ap, char*))) {
    }
  return argv;
}

}  // namespace

// Every wrapper: the statistics block, then libc's own.
UNLOAD_EXPORT void _exit(int status) {
  unload_stats_flush();
  libc().exit_(status);
  __builtin_unreachable();
}
UNLOAD_EXPORT void _Exit(int status) {
  _exit(status);
}
UNLOAD_EXPORT void abort() {
  unload_stats_flush();
  libc().abort_();
  __builtin_unreachable();
}
UNLOAD_EXPORT int execve(const char* path, char* const argv[], char* const envp[]) {
  unload_stats_flush();
  return libc().execve(path, argv, envp);
}
UNLOAD_EXPORT int execv(const char* path, char* const argv[]) {
  unload_stats_flush();
  return libc().execv(path, argv);
}
UNLOAD_EXPORT int execvp(const char* file, char* const argv[]) {
  unload_stats_flush();
  return libc().execvp(file, argv);
}
UNLOAD_EXPORT int execvpe(const char* file, char* const argv[], char* const envp[]) {
  unload_stats_flush();
  return libc().execvpe(file, argv, envp);
}
UNLOAD_EXPORT int fexecve(int fd, char* const argv[], char* const envp[]) {
  unload_stats_flush();
  return libc().fexecve(fd, argv, envp);
}
UNLOAD_EXPORT int execveat(int dirfd, const char* path, char* const argv[], char* const envp[], int flags) {
  unload_stats_flush();
  return libc().execveat(dirfd, path, argv, envp, flags);
}
// The list forms, as glibc builds them: an argv on the stack, then the vector form above.
UNLOAD_EXPORT int execl(const char* path, const char* arg, ...) {
  va_list ap;
  va_start(ap, arg);
  char** argv = fill_argv(static_cast<char**>(alloca((argc_of(arg, ap) + 1) * sizeof(char*))), arg, ap);
  va_end(ap);
  return execv(path, argv);
}
UNLOAD_EXPORT int execlp(const char* file, const char* arg, ...) {
  va_list ap;
  va_start(ap, arg);
  char** argv = fill_argv(static_cast<char**>(alloca((argc_of(arg, ap) + 1) * sizeof(char*))), arg, ap);
  va_end(ap);
  return execvp(file, argv);
}
UNLOAD_EXPORT int execle(const char* path, const char* arg, ...) {
  va_list ap;
  va_start(ap, arg);
  char** argv = fill_argv(static_cast<char**>(alloca((argc_of(arg, ap) + 1) * sizeof(char*))), arg, ap);
  char* const* envp = va_arg(ap, char* const*);
  va_end(ap);
  return execve(path, argv, envp);
}

// The disposition calls: libc's own, shown the disposition the program set.
UNLOAD_EXPORT int sigaction(int sig, const struct sigaction* act, struct sigaction* oact) {
  return unload_sig_action(sig, act, oact, libc().sigaction_);
}
UNLOAD_EXPORT int __sigaction(int sig, const struct sigaction* act, struct sigaction* oact) {
  return unload_sig_action(sig, act, oact, libc().sigaction_);
}
UNLOAD_EXPORT __sighandler_t signal(int sig, __sighandler_t h) {
  return unload_sig_replace(sig, h, libc().signal_);
}
UNLOAD_EXPORT __sighandler_t bsd_signal(int sig, __sighandler_t h) {
  return unload_sig_replace(sig, h, libc().signal_);
}
UNLOAD_EXPORT __sighandler_t ssignal(int sig, __sighandler_t h) {
  return unload_sig_replace(sig, h, libc().signal_);
}
UNLOAD_EXPORT __sighandler_t sysv_signal(int sig, __sighandler_t h) {
  return unload_sig_replace(sig, h, libc().sysv_signal);
}
UNLOAD_EXPORT __sighandler_t __sysv_signal(int sig, __sighandler_t h) {
  return unload_sig_replace(sig, h, libc().sysv_signal);
}
UNLOAD_EXPORT __sighandler_t sigset(int sig, __sighandler_t h) {
  return unload_sig_replace(sig, h, libc().sigset);
}
UNLOAD_EXPORT int siginterrupt(int sig, int flag) {
  return unload_sig_interrupt(sig, flag, libc().siginterrupt);
}
