// fork: fork() after registration; the child writes into the registered buffers (copy-on-write) and
// exits; the parent's writes before, during and after the child complete exactly and land.
//
//   sem_fork [WRITES]
//
// One pair; WRITES signaled random writes (1 B to 512 B), each polled before the next;
// fork; WRITES more while the child lives; waitpid; WRITES more. Printed per phase the
// completions (exact, or how many were wrong), the child's exit, the target.
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <random>

#include "fixture.hpp"

using namespace sem;

namespace {

constexpr uint32_t kDepth = 16, kMaxLen = 512;

}  // namespace

int main(int argc, char** argv) {
  const uint64_t writes = argc > 1 ? std::strtoull(argv[1], nullptr, 0) : 100;
  Env e = open_env();
  ibv_cq* cq = make_cq(e, kDepth);
  QpCaps caps;
  caps.send_wr = kDepth;
  Pair p = make_pair(e, cq, cq, size_t{kDepth} * kMaxLen, 1 << 16, caps);
  std::vector<uint8_t> shadow(p.dst_len, 0);
  std::mt19937_64 rng(3);
  watchdog(120, "fork did not finish");
  auto run = [&](uint64_t from, uint64_t to) {
    uint64_t bad = 0;
    for (uint64_t k = from; k < to; ++k) {
      const uint32_t len =
          rng() % 2 ? 1 + static_cast<uint32_t>(rng() % 64) : 1 + static_cast<uint32_t>(rng() % kMaxLen);
      const size_t off = rng() % (p.dst_len - len);
      uint8_t* s = p.src + (k % kDepth) * kMaxLen;
      for (uint32_t i = 0; i < len; ++i) s[i] = static_cast<uint8_t>(rng());
      std::memcpy(&shadow[off], s, len);
      if (int rc = post_write(p.s, k, s, len, p.smr->lkey, reinterpret_cast<uintptr_t>(p.dst + off),
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
  return 0;
}
