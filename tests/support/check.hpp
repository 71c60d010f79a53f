// The test programs' result vocabulary and exit codes, the same as the scripts'
// (tests/support/check.sh) and the one scripts/test parses:
//
//   ok: NAME[ — DETAIL]        a check that held
//   FAIL: NAME: REASON         a check that did not (finish() then exits 1)
//   skip: NAME: REASON         a check that could not run here, and why (never a pass)
//
// Exit codes: 0 every check held, 1 a check failed, 2 set-up failed (die), 3 a watchdog
// fired (a hang: one "FAIL: watchdog: ..." line), 77 the whole test cannot run here (skip,
// one "skip: REASON" line). Lines go to stdout and are flushed at once, so a crash or a
// watchdog later leaves everything printed before it.
#pragma once

#include <cerrno>
#include <cstdint>
#include <string>

namespace unload::test {

constexpr int kExitOk = 0;
constexpr int kExitFail = 1;
constexpr int kExitSetup = 2;
constexpr int kExitHang = 3;
constexpr int kExitSkip = 77;

// Set-up failed: "setup: WHAT: <strerror(-err)>" on stderr, exit 2. `err` is a negative
// errno, as the 0/-errno functions return; by default errno's at the call ("failed" if 0).
[[noreturn]] void die(const char* what, int err = -errno);
// The whole test cannot run here: "skip: WHY" on stdout, exit 77.
[[noreturn]] void skip(const char* why);

void ok(const char* name, const char* detail = nullptr);
void fail(const char* name, const char* reason);
void skip_check(const char* name, const char* reason);
// ok(name, detail) when `held`, else fail(name, detail); printf-formatted; returns held.
bool expect(bool held, const char* name, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
int failures();  // FAIL lines printed so far
// Exits 1 if any check failed, else 0.
[[noreturn]] void finish();

// A hang fails instead of blocking: after `seconds` the watchdog prints
// "FAIL: watchdog: WHAT (<note()>)" and exits 3. `note` (optional) describes the progress.
void watchdog(unsigned seconds, const char* what, std::string (*note)() = nullptr);
// A stall fails too: a thread samples `progress()` every second and, when it has not
// changed for `seconds`, fires the watchdog. For runs whose length depends on the load.
void stall_watchdog(unsigned seconds, const char* what, uint64_t (*progress)(),
                    std::string (*note)() = nullptr);
// Stops both: once it returns, neither calls progress() or note() again.
void stop_watchdogs();
// Fires the watchdog now (what a bounded wait that ran out does).
[[noreturn]] void hang(const char* what, const std::string& note);

}  // namespace unload::test
