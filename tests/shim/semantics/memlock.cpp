// memlock: under an 8 MiB RLIMIT_MEMLOCK without CAP_IPC_LOCK, N RC QPs at RTS write, then an MR filling the
// rest of the limit registers and is written from: the program fits as it does without the shim.
//
//   sem_memlock N
//
// Set-up without CAP_IPC_LOCK (dropped from every set), then N RC QPs
// connected in pairs (N = 1: to itself) and a 128 KiB MR; one signaled 4 KiB write per QP
// (each polled), then an MR of the limit less the first MR and 32 KiB, one write per QP
// from it, then an MR past the limit (refused: the limit is in force). Printed: each
// phase's completions (exact or how many were wrong), each registration's outcome, the
// target.
#include <linux/capability.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "fixture.hpp"

using namespace sem;

namespace {

constexpr size_t kLimit = 8 << 20, kSmall = 128 << 10, kSlack = 32 << 10, kLen = 4096;

// Takes CAP_IPC_LOCK out of this process's effective and permitted sets (root keeps the
// rest, so the statistics file is still written): registrations are then charged and
// bounded as an unprivileged program's.
void drop_ipc_lock() {
  __user_cap_header_struct h{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct d[2]{};
  if (syscall(SYS_capget, &h, d) != 0) die("capget");
  const unsigned word = CAP_IPC_LOCK / 32, bit = 1u << (CAP_IPC_LOCK % 32);
  d[word].effective &= ~bit;
  d[word].permitted &= ~bit;
  d[word].inheritable &= ~bit;
  if (syscall(SYS_capset, &h, d) != 0) die("capset");
}

const char* reg_outcome(ibv_mr* mr, int err) {
  if (mr) return "registered";
  return err == ENOMEM ? "refused (ENOMEM)" : "refused (other)";
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 16;
  if (n < 1 || n > 1024) die("usage: sem_memlock N (1..1024)");
  rlimit rl{kLimit, kLimit};
  if (setrlimit(RLIMIT_MEMLOCK, &rl) != 0) die("setrlimit");
  // The shim (if any) opened its module session already; the program's own registrations
  // are judged with the capabilities it has now.
  drop_ipc_lock();
  watchdog(300, "memlock did not finish");
  Env e = open_env();
  ibv_cq* cq = make_cq(e, 64);
  std::vector<ibv_qp*> qps(static_cast<size_t>(n));
  for (auto& q : qps) q = make_qp(e, cq, cq);
  if (n == 1) connect(e, qps[0], qps[0]->qp_num);
  for (int i = 0; i + 1 < n; i += 2) connect_pair(e, qps[i], qps[i + 1]);
  if (n > 1 && n % 2) connect(e, qps[n - 1], qps[n - 1]->qp_num);

  // Sources in the first half, targets in the second: QP i writes its own 4 KiB slot.
  uint8_t* small = alloc(kSmall);
  ibv_mr* smr = ibv_reg_mr(e.pd, small, kSmall, kRemote);
  const int small_err = errno;
  out("memlock: %d RC QPs at RTS, RLIMIT_MEMLOCK %zu KiB, without CAP_IPC_LOCK", n, kLimit >> 10);
  out("MR of %zu KiB: %s", kSmall >> 10, reg_outcome(smr, small_err));
  if (!smr) return 0;
  uint8_t* dst = small + kSmall / 2;
  const size_t slots = kSmall / 2 / kLen;

  auto phase = [&](const uint8_t* src, uint32_t lkey, uint64_t seed) {
    uint64_t bad = 0;
    for (int i = 0; i < n; ++i) {
      uint8_t* s = const_cast<uint8_t*>(src) + (static_cast<size_t>(i) % slots) * kLen;
      fill(s, kLen, seed + static_cast<uint64_t>(i));
      uint8_t* d = dst + (static_cast<size_t>(i) % slots) * kLen;
      if (post_write(qps[static_cast<size_t>(i)], static_cast<uint64_t>(i), s, kLen, lkey,
                     reinterpret_cast<uintptr_t>(d), smr->rkey, IBV_SEND_SIGNALED) != 0) {
        ++bad;
        continue;
      }
      std::vector<ibv_wc> got;
      collect(cq, got, 1, 5000, 1);
      if (got.size() != 1 || got[0].status != IBV_WC_SUCCESS || got[0].wr_id != static_cast<uint64_t>(i) ||
          std::memcmp(d, s, kLen) != 0)
        ++bad;
    }
    return bad ? "WRONG (" + std::to_string(bad) + ")" : std::string("exact");
  };
  out("writes from the first MR, one per QP: %s", phase(small, smr->lkey, 100).c_str());

  const size_t big_len = kLimit - kSmall - kSlack;
  void* big = mmap(nullptr, big_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (big == MAP_FAILED) die("mmap");
  ibv_mr* bmr = ibv_reg_mr(e.pd, big, big_len, IBV_ACCESS_LOCAL_WRITE);
  const int big_err = errno;
  out("MR of the rest of the limit (%zu KiB): %s", big_len >> 10, reg_outcome(bmr, big_err));
  if (bmr)
    out("writes from it, one per QP: %s",
        phase(static_cast<uint8_t*>(big) + big_len - kSmall / 2, bmr->lkey, 200).c_str());

  // Past the limit: refused with and without the shim, else the limit was not in force.
  void* over = mmap(nullptr, 2 * kSlack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (over == MAP_FAILED) die("mmap");
  ibv_mr* omr = ibv_reg_mr(e.pd, over, 2 * kSlack, IBV_ACCESS_LOCAL_WRITE);
  const int over_err = errno;
  out("MR past the limit (%zu KiB): %s", (2 * kSlack) >> 10, reg_outcome(omr, over_err));
  return 0;
}
