// ends: a process writes, then ends one way (exit, _exit, _Exit, quick_exit, abort, an
// exec, a failed exec, a forked child's _exit, a vfork child's exec), so that the
// statistics file shows what each end leaves; `hold` keeps a forked child alive for
// unloadctl ps.
//
//   sem_ends HOW [WRITES [RELEASE_FILE]]
//
// Every HOW first writes WRITES (default 10) signaled 64 B RDMA WRITEs on a loopback pair
// of its own, each completed before the next, then:
//   exit, _exit, _Exit, quick_exit, abort   ends that way (abort: killed by SIGABRT)
//   exec, execl         execv / execl of /bin/true (which makes no verbs call)
//   exec_fail           execv of a path that does not exist, WRITES more writes, exit
//   fork_exit           a forked child writes 7 on a pair of its own and calls _exit; the
//                       parent waits for it and exits
//   vfork_exec          a vfork child execs /bin/true; the parent waits for it and exits
//   term                prints, as "view ..." lines, the dispositions the program meets
//                       (SIGTERM's; SIGINT's through signal() to a handler of its own and
//                       back; SIGHUP set to SIG_IGN and raised), then raises SIGTERM
//   int                 raises SIGINT
//   hold                a forked child writes 7 on its own pair, prints "child PID", waits
//                       for RELEASE_FILE to exist (60 s at most) and calls _exit; the parent
//                       prints "parent PID", waits for it and exits
// Prints "wrote N" per process that wrote; exit status 0 (abort aside), 2 on a set-up or
// write failure.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fixture.hpp"

using namespace sem;

namespace {

constexpr uint32_t kLen = 64;

// `n` signaled writes on a new loopback pair, each completed before the next.
void write_some(uint32_t n) {
  Env e = open_env();
  ibv_cq* scq = make_cq(e, 16);
  ibv_cq* rcq = make_cq(e, 16);
  Pair p = make_pair(e, scq, rcq, 4096, 4096);
  for (uint32_t i = 0; i < n; ++i) {
    fill(p.src, kLen, i);
    if (post_write(p.s, i, p.src, kLen, p.smr->lkey, reinterpret_cast<uint64_t>(p.dst), p.dmr->rkey,
                   IBV_SEND_SIGNALED))
      die("ibv_post_send");
    std::vector<ibv_wc> wc;
    if (collect(scq, wc, 1, 10000) != 1 || wc[0].status != IBV_WC_SUCCESS) die("write completion", -EIO);
  }
  out("wrote %u", n);
}

volatile sig_atomic_t g_caught = 0;
void catch_signal(int sig) {
  g_caught = sig;
}

// The handler sigaction reports for `sig`, and the flags a program may have set.
std::string disposition(int sig) {
  struct sigaction a {};
  if (sigaction(sig, nullptr, &a)) return "error";
  const char* h = a.sa_handler == SIG_DFL        ? "SIG_DFL"
                  : a.sa_handler == SIG_IGN      ? "SIG_IGN"
                  : a.sa_handler == catch_signal ? "the program's handler"
                                                 : "another handler";
  const int flags = a.sa_flags & (SA_RESTART | SA_SIGINFO | SA_RESETHAND | SA_NODEFER | SA_ONSTACK);
  return std::string(h) + ", flags " + std::to_string(flags);
}

// What a program sees of dispositions the shim may stand in for, line by line.
void show_dispositions() {
  out("view SIGTERM %s", disposition(SIGTERM).c_str());
  const sighandler_t before = signal(SIGINT, catch_signal);
  out("view signal(SIGINT, handler) returned %s", before == SIG_DFL ? "SIG_DFL" : "something else");
  out("view SIGINT %s", disposition(SIGINT).c_str());
  raise(SIGINT);
  out("view SIGINT raised: caught %s", g_caught == SIGINT ? "by the program's handler" : "by no one");
  const sighandler_t mine = signal(SIGINT, SIG_DFL);
  out("view signal(SIGINT, SIG_DFL) returned %s", mine == catch_signal ? "the program's handler" : "something else");
  out("view SIGINT %s", disposition(SIGINT).c_str());
  struct sigaction ign {};
  ign.sa_handler = SIG_IGN;
  struct sigaction old {};
  sigaction(SIGHUP, &ign, &old);
  out("view sigaction(SIGHUP, SIG_IGN) replaced %s", old.sa_handler == SIG_DFL ? "SIG_DFL" : "something else");
  raise(SIGHUP);
  out("view SIGHUP raised while ignored: still here");
  sigaction(SIGHUP, &old, nullptr);
  out("view SIGHUP %s", disposition(SIGHUP).c_str());
}

void wait_child(pid_t pid) {
  int st = 0;
  if (waitpid(pid, &st, 0) != pid) die("waitpid");
  if (!WIFEXITED(st) || WEXITSTATUS(st)) die("the child's end", -ECHILD);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) die("usage: sem_ends HOW [WRITES [RELEASE_FILE]]", -EINVAL);
  const std::string how = argv[1];
  const uint32_t writes = argc > 2 ? static_cast<uint32_t>(std::strtoul(argv[2], nullptr, 10)) : 10;
  watchdog(120, "ends");
  out("pid %d", static_cast<int>(getpid()));
  write_some(writes);
  char true_path[] = "/bin/true";
  char* const true_argv[] = {true_path, nullptr};
  if (how == "exit") std::exit(0);
  if (how == "_exit") _exit(0);
  if (how == "_Exit") _Exit(0);
  if (how == "quick_exit") std::quick_exit(0);
  if (how == "abort") std::abort();
  if (how == "term") show_dispositions(), raise(SIGTERM), die("alive after SIGTERM", -EINTR);
  if (how == "int") raise(SIGINT), die("alive after SIGINT", -EINTR);
  if (how == "exec") execv(true_path, true_argv), die("execv");
  if (how == "execl") execl(true_path, "true", static_cast<char*>(nullptr)), die("execl");
  if (how == "exec_fail") {
    char missing[] = "/nonexistent/sem_ends";
    char* const a[] = {missing, nullptr};
    if (execv(missing, a) != -1 || errno != ENOENT) die("execv of a missing file", -EINVAL);
    write_some(writes);
    return 0;
  }
  if (how == "fork_exit" || how == "hold") {
    const pid_t pid = fork();
    if (pid < 0) die("fork");
    if (pid == 0) {
      write_some(7);
      if (how == "hold") {
        out("child %d", static_cast<int>(getpid()));
        struct stat st;
        for (int i = 0; i < 6000 && (argc < 4 || stat(argv[3], &st) != 0); ++i) usleep(10000);
      }
      _exit(0);
    }
    if (how == "hold") out("parent %d", static_cast<int>(getpid()));
    wait_child(pid);
    return 0;
  }
  if (how == "vfork_exec") {
    const pid_t pid = vfork();
    if (pid < 0) die("vfork");
    if (pid == 0) {
      execv(true_path, true_argv);
      _exit(127);
    }
    wait_child(pid);
    return 0;
  }
  die("unknown HOW", -EINVAL);
}
