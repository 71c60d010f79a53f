// fork: fork() after registration; the child writes into the registered buffers (copy-on-write) and
// exits; the parent's writes before, during and after the child complete exactly and land; then
// CHILDREN children at once make their own QPs and write, and the parent's locked memory and writes
// are untouched by them.
//
//   sem_fork [WRITES [CHILDREN]]
//
// One pair; WRITES signaled random writes (1 B to 512 B), each polled before the next;
// fork; WRITES more while the child lives; waitpid; WRITES more. Printed per phase the
// completions (exact, or how many were wrong), the child's exit, the target. Then CHILDREN
// (default 50) children, alive together, each opening the device and writing 20 signaled
// 2 KiB writes on its own pair (under the shim: its own module session, stage or direct);
// the parent's VmPin and VmLck (/proc/self/status) while they live and after, compared
// with before; WRITES more writes of the parent's.
#include <linux/kcmp.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cstring>
#include <fstream>
#include <random>

#include "fixture.hpp"

using namespace sem;

namespace {

constexpr uint32_t kDepth = 16, kMaxLen = 512;

// VmPin and VmLck of this process, in kB.
std::string locked_memory() {
  std::ifstream f("/proc/self/status");
  std::string k, pin = "?", lck = "?";
  while (f >> k) {
    if (k == "VmPin:") f >> pin;
    if (k == "VmLck:") f >> lck;
  }
  return "VmPin " + pin + " kB, VmLck " + lck + " kB";
}

// This process's descriptors of /dev/unload (the shim's module session, if any).
std::vector<int> module_fds() {
  std::vector<int> fds;
  for (int fd = 0; fd < 1024; ++fd) {
    char link[64], target[PATH_MAX];
    std::snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    const ssize_t n = readlink(link, target, sizeof target - 1);
    if (n <= 0) continue;
    target[n] = 0;
    if (std::strcmp(target, "/dev/unload") == 0) fds.push_back(fd);
  }
  return fds;
}

// Does this child hold the very file (the session) the parent opened as one of `parent_fds`?
bool shares_parent_session(const std::vector<int>& parent_fds) {
  for (int c : module_fds())
    for (int p : parent_fds)
      if (syscall(SYS_kcmp, getppid(), getpid(), KCMP_FILE, p, c) == 0) return true;
  return false;
}

// A child of the batch: its own device, pair and writes; 0 when every write completed
// exactly and landed. Tells the parent on `ready`, then lives until `go` closes.
int child_writes(int ready, int go, const std::vector<int>& parent_fds) {
  Env ce = open_env();
  ibv_cq* cq = make_cq(ce, kDepth);
  constexpr uint32_t kLen = 2048, kWrites = 20;
  Pair cp = make_pair(ce, cq, cq, kLen, 1 << 16);
  int bad = 0;
  for (uint32_t k = 0; k < kWrites; ++k) {
    fill(cp.src, kLen, 1000 + k);
    uint8_t* d = cp.dst + (k % 16) * 4096;
    if (post_write(cp.s, k, cp.src, kLen, cp.smr->lkey, reinterpret_cast<uintptr_t>(d), cp.dmr->rkey,
                   IBV_SEND_SIGNALED) != 0) {
      ++bad;
      continue;
    }
    std::vector<ibv_wc> got;
    collect(cq, got, 1, 5000, 1);
    if (got.size() != 1 || got[0].status != IBV_WC_SUCCESS || got[0].wr_id != k ||
        std::memcmp(d, cp.src, kLen))
      ++bad;
  }
  // 'o' exact, 'x' not; upper case: it still holds its parent's module session.
  const char c = shares_parent_session(parent_fds) ? (bad ? 'X' : 'O') : (bad ? 'x' : 'o');
  if (write(ready, &c, 1) != 1) return 1;
  char x;
  while (read(go, &x, 1) > 0) {
  }
  return bad ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  const uint64_t writes = argc > 1 ? std::strtoull(argv[1], nullptr, 0) : 100;
  const int children = argc > 2 ? std::atoi(argv[2]) : 50;
  Env e = open_env();
  ibv_cq* cq = make_cq(e, kDepth);
  QpCaps caps;
  caps.send_wr = kDepth;
  Pair p = make_pair(e, cq, cq, size_t{kDepth} * kMaxLen, 1 << 16, caps);
  std::vector<uint8_t> shadow(p.dst_len, 0);
  std::mt19937_64 rng(3);
  watchdog(300, "fork did not finish");
  auto run = [&](uint64_t from, uint64_t to) {
    uint64_t bad = 0;
    for (uint64_t k = from; k < to; ++k) {
      uint8_t* s = p.src + (k % kDepth) * kMaxLen;
      const RandomWrite w = random_write(rng, 64, kMaxLen, s, shadow);
      if (int rc = post_write(p.s, k, s, w.len, p.smr->lkey, reinterpret_cast<uintptr_t>(p.dst + w.off),
                              p.dmr->rkey, IBV_SEND_SIGNALED)) {
        errno = rc;
        die("ibv_post_send");
      }
      std::vector<ibv_wc> got;
      collect(cq, got, 1, 5000, 1);
      if (got.size() != 1 || got[0].status != IBV_WC_SUCCESS || got[0].wr_id != k) ++bad;
    }
    return bad ? "WRONG (" + std::to_string(bad) + ")" : std::string("exact");
  };
  const std::string before = run(0, writes);
  const pid_t child = fork();
  if (child < 0) die("fork");
  if (child == 0) {
    std::memset(p.src, 0x5a, p.src_len);
    std::memset(p.dst, 0x5a, p.dst_len);
    _exit(0);
  }
  const std::string during = run(writes, 2 * writes);
  int st = 0;
  if (waitpid(child, &st, 0) != child) die("waitpid");
  const std::string after = run(2 * writes, 3 * writes);
  out("fork: %llu signaled writes before fork(), %llu while the child lives, %llu after it exited",
      static_cast<unsigned long long>(writes), static_cast<unsigned long long>(writes),
      static_cast<unsigned long long>(writes));
  out("completions: before %s, during %s, after %s", before.c_str(), during.c_str(), after.c_str());
  out("child exit %d", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
  out("target %s", std::memcmp(p.dst, shadow.data(), p.dst_len) == 0 ? "right" : "WRONG");

  const std::string locked0 = locked_memory();
  const std::vector<int> parent_fds = module_fds();
  int ready[2], go[2];
  if (pipe(ready) != 0 || pipe(go) != 0) die("pipe");
  std::vector<pid_t> kids;
  for (int i = 0; i < children; ++i) {
    const pid_t c = fork();
    if (c < 0) die("fork");
    if (c == 0) {
      close(ready[0]);
      close(go[1]);
      _exit(child_writes(ready[1], go[0], parent_fds));
    }
    kids.push_back(c);
  }
  close(ready[1]);
  close(go[0]);
  int reported = 0, wrote_right = 0, sharing = 0;
  for (char c; reported < children && read(ready[0], &c, 1) == 1; ++reported) {
    wrote_right += c == 'o' || c == 'O';
    sharing += c == 'O' || c == 'X';
  }
  const std::string locked_live = locked_memory();
  close(go[1]);
  int exited_ok = 0;
  for (pid_t c : kids) {
    int cst = 0;
    if (waitpid(c, &cst, 0) == c && WIFEXITED(cst) && WEXITSTATUS(cst) == 0) ++exited_ok;
  }
  const std::string locked1 = locked_memory();
  const std::string last = run(3 * writes, 4 * writes);
  out("%d children with their own pairs: %d wrote exactly, %d exited 0", children, wrote_right, exited_ok);
  out("children holding the parent's module session: %d", sharing);
  out("parent's locked memory while they lived: %s", locked_live == locked0 ? "as before" : "CHANGED");
  out("parent's locked memory after: %s", locked1 == locked0 ? "as before" : "CHANGED");
  if (locked_live != locked0 || locked1 != locked0)
    std::fprintf(stderr, "before: %s; while: %s; after: %s\n", locked0.c_str(), locked_live.c_str(),
                 locked1.c_str());
  out("parent's %llu writes after them: %s", static_cast<unsigned long long>(writes), last.c_str());
  out("target %s", std::memcmp(p.dst, shadow.data(), p.dst_len) == 0 ? "right" : "WRONG");
  return 0;
}
