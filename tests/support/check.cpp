// The test programs' result vocabulary, exit codes and watchdogs (see check.hpp).
#include "check.hpp"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

namespace unload::test {

namespace {

int g_failures = 0;

void line(const char* s) {
  std::fputs(s, stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

}  // namespace

void die(const char* what, int err) {
  std::fflush(stdout);
  std::fprintf(stderr, "setup: %s: %s\n", what, err ? std::strerror(-err) : "failed");
  std::exit(kExitSetup);
}

void skip(const char* why) {
  line((std::string("skip: ") + why).c_str());
  std::exit(kExitSkip);
}

void ok(const char* name, const char* detail) {
  std::string s = std::string("ok: ") + name;
  if (detail && *detail) s += std::string(" — ") + detail;
  line(s.c_str());
}

void fail(const char* name, const char* reason) {
  g_failures++;
  line((std::string("FAIL: ") + name + ": " + (reason && *reason ? reason : "failed")).c_str());
}

void skip_check(const char* name, const char* reason) {
  line((std::string("skip: ") + name + ": " + reason).c_str());
}

bool expect(bool held, const char* name, const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (held)
    ok(name, buf);
  else
    fail(name, buf);
  return held;
}

int failures() {
  return g_failures;
}

void finish() {
  std::fflush(stdout);
  std::exit(g_failures ? kExitFail : kExitOk);
}

namespace {

const char* g_wd_what = "";
std::string (*g_wd_note)() = nullptr;

[[noreturn]] void fire(const char* what, const std::string& note) {
  // Diagnostics only: the run has failed already. write(2): this may run in a handler.
  std::string s = std::string("FAIL: watchdog: ") + what;
  if (!note.empty()) s += " (" + note + ")";
  s += "\n";
  std::fflush(stdout);
  ssize_t w = write(1, s.data(), s.size());
  (void)w;
  _exit(kExitHang);
}

void on_alarm(int) {
  fire(g_wd_what, g_wd_note ? g_wd_note() : std::string());
}

// What stops the stall watchdog: its progress() reads the program's state, which must
// outlive every sample. It samples only under g_stall_mu with g_stall_stop false, so once
// stop_watchdogs has set the flag under the lock, no sample runs or will run.
// Never destroyed: the detached thread may still be leaving a wait at exit.
std::mutex& g_stall_mu = *new std::mutex;
std::condition_variable& g_stall_cv = *new std::condition_variable;
bool g_stall_stop = false;  // guarded by g_stall_mu

}  // namespace

void hang(const char* what, const std::string& note) {
  fire(what, note);
}

void watchdog(unsigned seconds, const char* what, std::string (*note)()) {
  g_wd_what = what;
  g_wd_note = note;
  signal(SIGALRM, on_alarm);
  alarm(seconds);
}

void stall_watchdog(unsigned seconds, const char* what, uint64_t (*progress)(), std::string (*note)()) {
  std::thread([=] {
    std::unique_lock<std::mutex> lk(g_stall_mu);
    uint64_t last = progress();
    unsigned still = 0;
    while (!g_stall_cv.wait_for(lk, std::chrono::seconds(1), [] { return g_stall_stop; })) {
      const uint64_t now = progress();
      still = now == last ? still + 1 : 0;
      last = now;
      if (still >= seconds) fire(what, note ? note() : std::string());
    }
  }).detach();
}

void stop_watchdogs() {
  alarm(0);
  {
    std::lock_guard<std::mutex> lk(g_stall_mu);
    g_stall_stop = true;
  }
  g_stall_cv.notify_all();
}

}  // namespace unload::test
