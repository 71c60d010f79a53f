// A process's statistics block, written however it ends. Each block holds what was
// counted since the process's previous one, so writing one early (an exec that then
// fails, an abort whose SIGABRT handler carries on) never counts a write twice. Written
// with async-signal-safe calls only (no allocation, no stdio, no lock but the file's):
// abort and _exit may be called from a signal handler, and exec or _exit in a child of
// vfork, which shares its parent's memory.
#include "ending.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iterator>

#include "stats.hpp"
#include "tunables.hpp"
#include "unload/runtime.h"

namespace unload::rt {
namespace {

// The process whose counts this memory holds (0: the runtime never started). A child of
// vfork, or of _Fork or clone (no pthread_atfork handler), shares or copies the parent's
// counts without being the parent: its getpid() differs, and it writes nothing.
std::atomic<pid_t> g_owner{0};
std::atomic<bool> g_writing{false};  // a block is being written (another thread, or a handler)
Totals g_written{};                  // what this process's blocks so far added up to
bool g_wrote_one = false;            // the first block is written even when all zero

// A block's text, built without stdio.
struct Text {
  char buf[2048];
  size_t n = 0;
  void put(const char* s) {
    while (*s && n < sizeof buf) buf[n++] = *s++;
  }
  void num(uint64_t v) {
    char d[20];
    int k = 0;
    do d[k++] = static_cast<char>('0' + v % 10);
    while ((v /= 10) && k < 20);
    while (k && n < sizeof buf) buf[n++] = d[--k];
  }
  void line(const char* key, const char* suffix, uint64_t v) {
    put(key), put(suffix), put(" "), num(v), put("\n");
  }
};

void write_block(const char* path, const Totals& t) {
  Text b;
  b.line("pid", "", static_cast<uint64_t>(getpid()));
  for (unsigned i = 0; i < policy::kPathCount; ++i) b.line("writes_", path_name(i), t.writes[i]);
  for (unsigned i = 0; i < policy::kPathCount; ++i) b.line("bytes_", path_name(i), t.bytes[i]);
  b.line("fences", "", t.fences);
  if (t.express) b.line("writes_mapped_express", "", t.express);  // of writes_mapped, the express lane's
  if (t.nic_lane) b.line("writes_nic_lane", "", t.nic_lane);  // writes the NIC lane took
  if (t.nic_settled) b.line("writes_nic_settled", "", t.nic_settled);  // passed straight through, settled
  if (t.cq_through) b.line("cq_through", "", t.cq_through);            // a CQ's polls passing through again
  for (unsigned i = 0; i < UNLOAD_WHY_COUNT; ++i)  // the reasons that occurred
    if (t.why_not[i]) b.line("why_not_", why_name(static_cast<Why>(i)), t.why_not[i]);
  if (t.samples) b.line("samples", "", t.samples);  // timed writes the policies learnt
  if (t.samples_at_wake) b.line("samples_at_wake", "", t.samples_at_wake);  // ... at a wake-up marker
  if (t.samples_dropped) b.line("samples_dropped", "", t.samples_dropped);  // the poster's inbox full
  if (t.adaptive[0])  // adaptive decided: what it did
    for (unsigned i = 0; i < kAdaptiveCountN; ++i) b.line(kAdaptiveCounts[i].name, "", t.adaptive[i]);
  // Several processes (a server and its client) share one file: each appends its block
  // with one write() under an exclusive lock.
  const int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0666);
  if (fd < 0) {
    const char* e = strerrordesc_np(errno);  // not strerror: no locale, no allocation
    Text m;
    m.put("unload: UNLOAD_STATS_FILE="), m.put(path), m.put(": "), m.put(e), m.put("\n");
    ssize_t w = write(STDERR_FILENO, m.buf, m.n);
    (void)w;
    return;
  }
  flock(fd, LOCK_EX);
  ssize_t w = write(fd, b.buf, b.n);
  (void)w;
  flock(fd, LOCK_UN);
  close(fd);
}

Totals minus(const Totals& a, const Totals& b) {
  Totals d{};
  for (unsigned i = 0; i < policy::kPathCount; ++i) {
    d.writes[i] = a.writes[i] - b.writes[i];
    d.bytes[i] = a.bytes[i] - b.bytes[i];
  }
  d.fences = a.fences - b.fences;
  d.express = a.express - b.express;
  d.nic_lane = a.nic_lane - b.nic_lane;
  d.nic_settled = a.nic_settled - b.nic_settled;
  d.cq_through = a.cq_through - b.cq_through;
  for (unsigned i = 0; i < UNLOAD_WHY_COUNT; ++i) d.why_not[i] = a.why_not[i] - b.why_not[i];
  d.samples = a.samples - b.samples;
  d.samples_at_wake = a.samples_at_wake - b.samples_at_wake;
  d.samples_dropped = a.samples_dropped - b.samples_dropped;
  for (unsigned i = 0; i < kAdaptiveCountN; ++i) d.adaptive[i] = a.adaptive[i] - b.adaptive[i];
  return d;
}

bool all_zero(const Totals& t) {
  static constexpr Totals zero{};
  return std::memcmp(&t, &zero, sizeof t) == 0;
}

}  // namespace

void ending_init() {
  g_owner.store(getpid(), std::memory_order_release);
  std::atexit(unload_stats_flush);
  std::at_quick_exit(unload_stats_flush);
}

void ending_after_fork() {
  g_written = Totals{};
  const Totals inherited = stats_totals();  // the forking thread's policy's: the parent's to tell
  std::copy(std::begin(inherited.adaptive), std::end(inherited.adaptive), g_written.adaptive);
  g_wrote_one = false;
  g_writing.store(false, std::memory_order_relaxed);
  g_owner.store(getpid(), std::memory_order_release);
}

}  // namespace unload::rt

extern "C" void unload_stats_flush(void) {
  using namespace unload::rt;
  const pid_t owner = g_owner.load(std::memory_order_acquire);
  if (!owner || owner != getpid()) return;
  // One writer at a time; a second (a signal handler interrupting the first, or another
  // thread ending the process at once) leaves it to the first rather than wait for it.
  if (g_writing.exchange(true, std::memory_order_acquire)) return;
  kmod_flush_all();
  const Totals now = stats_totals();
  const Totals since = minus(now, g_written);
  const char* path = std::getenv("UNLOAD_STATS_FILE");
  if (path && *path && (!g_wrote_one || !all_zero(since))) {
    write_block(path, since);
    g_wrote_one = true;
  }
  g_written = now;
  g_writing.store(false, std::memory_order_release);
}
