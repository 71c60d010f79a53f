// The module's accounting and its judgement of other users, one check group per command:
//   kmod_safety charge_once   one MR registered in 8 sessions of a process pins and charges
//                             its pages once; the same MR claimed at 16 different addresses
//                             (the address is the owner's word) pins no more than the
//                             process's RLIMIT_MEMLOCK (uid 65534, 8 MiB).
//   kmod_safety arena_cycles  1000 alloc/mmap/free/munmap cycles of a staging arena leave
//                             VmPin and pinned_pages at their baseline; arenas freed while
//                             still mapped stay charged until unmapped, so they never add
//                             up past RLIMIT_MEMLOCK; a forked child cannot allocate arenas
//                             charged to its parent through the inherited fd.
//   kmod_safety err_mid_batch the responder QP moved to ERR while a batch of 200 direct
//                             writes runs: nothing placed after the move (as on the NIC).
//   kmod_safety unreg_other   UNREG_QP of another user's QPs (and the qp_num 0 the module
//                             uses inside) from a uid 65534 process disturbs no kept pair
//                             (stats/pairs_resolved does not move), nor does its
//                             QP_CHANGED raise their busy bytes (the owner's user's does).
//   kmod_safety destroy_drain the responder QP destroyed without UNREG_QP while its sender
//                             streams direct writes: the destroy returns within 5 s (the
//                             RDMA core drains the kept pair's reference first), and no
//                             write submitted after it returned is placed.
//   kmod_safety mw            a write to a type 2 memory window's rkey is refused by the
//                             module, gets the NIC's outcome, and poisons nothing: the next
//                             direct write of the pair is placed.
//   kmod_safety mr_churn      10k MR registrations by another user's process between two
//                             of ours leave REG_REGION finding our MR, in fewer than 64
//                             restrack probes (stats/mr_probes).
// One line per check; exit 0 pass, 1 fail, 77 skip.
#include <errno.h>
#include <sched.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "kmod_util.hpp"

using namespace kt;

namespace {

constexpr rlim_t kLimit = 8 << 20;  // the RLIMIT_MEMLOCK the unprivileged checks run under
constexpr uint32_t kRw = UNLOAD_ACCESS_LOCAL_WRITE | UNLOAD_ACCESS_REMOTE_WRITE;

// RLIMIT_MEMLOCK kLimit, then uid 65534 without CAP_IPC_LOCK, so the limit applies.
void drop_root() {
  rlimit rl{kLimit, kLimit};
  if (setrlimit(RLIMIT_MEMLOCK, &rl)) die("setrlimit");
  if (getuid() == 0 && (setgid(65534) || setuid(65534))) die("drop root");
}

// REG_REGION of mr claimed at `addr` (its iova stays the MR's): 0 or -errno; *pages the
// pages the module pinned for it.
int reg_at(int fd, const ibv_mr* mr, const void* addr, uint64_t* pages) {
  unload_region_reg r{};
  snprintf(r.ibdev, sizeof r.ibdev, "%s", ibv_get_device_name(mr->context->device));
  r.addr = reinterpret_cast<uintptr_t>(addr);
  r.length = mr->length;
  r.lkey = mr->lkey;
  r.rkey = mr->rkey;
  r.access = kRw;
  r.flags = UNLOAD_REGION_IOVA;
  r.iova = reinterpret_cast<uintptr_t>(mr->addr);
  const int ret = uioctl(fd, UNLOAD_IOC_REG_REGION, &r);
  *pages = ret ? 0 : r.pinned_pages;
  return ret;
}

// --- charge_once --------------------------------------------------------------------

int cmd_charge_once() {
  drop_root();
  Device dev = open_device();
  ibv_pd* pd = make_pd(dev.ctx);
  constexpr size_t kMr = 1 << 20;
  uint8_t* buf = map_zeroed(kMr);
  ibv_mr* mr = make_mr(pd, buf, kMr, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);

  // Eight sessions, one MR at its own address: one pin, one charge.
  const long long vm0 = vm_pin_kb(), pp0 = stat("pinned_pages");
  int fds[8], ok = 0;
  uint64_t reported = 0;
  for (int& fd : fds) {
    fd = unload_open();
    uint64_t pages = 0;
    ok += reg_at(fd, mr, buf, &pages) == 0;
    reported += pages;
  }
  const long long vm1 = vm_pin_kb(), pp1 = stat("pinned_pages");
  const long long once = kMr / 4096;
  expect(ok == 8 && pp1 - pp0 == once && vm1 == vm0, "charge_once.eight_sessions",
         "%d/8 registered; pinned_pages +%lld (once: +%lld), VmPin %lld -> %lld kB, reported %llu pages", ok,
         pp1 - pp0, once, vm0, vm1, static_cast<unsigned long long>(reported));
  for (int fd : fds) close(fd);

  // The same MR claimed at 16 other addresses of the process, one session each: what the
  // module pins for the process stays within its RLIMIT_MEMLOCK.
  const long long pp2 = stat("pinned_pages");
  std::vector<int> more;
  uint64_t pinned = 0;
  int took = 0;
  for (int i = 0; i < 16; i++) {
    uint8_t* other = map_zeroed(kMr);
    int fd = unload_open();
    more.push_back(fd);
    uint64_t pages = 0;
    if (reg_at(fd, mr, other, &pages) == 0) {
      took++;
      pinned += pages;
    }
  }
  const long long pp3 = stat("pinned_pages");
  expect(
      pinned * 4096 <= kLimit && pp3 - pp2 <= static_cast<long long>(kLimit / 4096),
      "charge_once.bounded_per_process",
      "%d/16 claims of 1 MiB registered: %llu pages pinned (pinned_pages +%lld), RLIMIT_MEMLOCK %llu pages",
      took, static_cast<unsigned long long>(pinned), pp3 - pp2,
      static_cast<unsigned long long>(kLimit / 4096));
  for (int fd : more) close(fd);
  const long long pp4 = stat("pinned_pages");
  expect(pp4 == pp0, "charge_once.released", "pinned_pages %lld after closing (%lld before)", pp4, pp0);
  ibv_dereg_mr(mr);
  ibv_dealloc_pd(pd);
  unload::verbs::close_device(&dev);
  return failures() ? 1 : 0;
}

// --- arena_cycles -------------------------------------------------------------------

// ARENA_ALLOC of len bytes: its mmap offset, or -errno.
long long arena_alloc(int fd, uint64_t len, uint32_t* id) {
  unload_arena a{};
  a.length = len;
  const int ret = uioctl(fd, UNLOAD_IOC_ARENA_ALLOC, &a);
  *id = a.id;
  return ret ? ret : static_cast<long long>(a.mmap_offset);
}

int arena_free(int fd, uint32_t id) {
  unload_arena a{};
  a.id = id;
  return uioctl(fd, UNLOAD_IOC_ARENA_FREE, &a);
}

int cmd_arena_cycles() {
  drop_root();
  const int fd = unload_open();
  constexpr size_t kLen = 64 << 10;
  const long long vm0 = vm_pin_kb(), pp0 = stat("pinned_pages");

  // Each arena unmapped before the next: nothing accumulates.
  int bad = 0;
  for (int i = 0; i < 1000; i++) {
    uint32_t id;
    const long long off = arena_alloc(fd, kLen, &id);
    void* p = off < 0 ? MAP_FAILED : mmap(nullptr, kLen, PROT_READ | PROT_WRITE, MAP_SHARED, fd, off);
    if (p == MAP_FAILED) {
      bad++;
      continue;
    }
    static_cast<volatile uint8_t*>(p)[kLen - 1] = 1;
    bad += arena_free(fd, id) != 0;
    munmap(p, kLen);
  }
  const long long vm1 = vm_pin_kb(), pp1 = stat("pinned_pages");
  expect(bad == 0 && vm1 == vm0 && pp1 == pp0, "arena.cycles_baseline",
         "1000 cycles (%d failed): VmPin %lld -> %lld kB, pinned_pages %lld -> %lld", bad, vm0, vm1, pp0,
         pp1);

  // Freed but still mapped: the pages live, so their charge does too.
  std::vector<void*> maps;
  int refused = 0;
  for (int i = 0; i < 1000; i++) {
    uint32_t id;
    const long long off = arena_alloc(fd, kLen, &id);
    if (off < 0) {
      refused++;
      continue;
    }
    void* p = mmap(nullptr, kLen, PROT_READ | PROT_WRITE, MAP_SHARED, fd, off);
    arena_free(fd, id);
    if (p == MAP_FAILED) continue;
    static_cast<volatile uint8_t*>(p)[kLen - 1] = 1;
    maps.push_back(p);
  }
  const long long live = static_cast<long long>(maps.size() * kLen);
  const long long vm2 = vm_pin_kb(), pp2 = stat("pinned_pages");
  expect(live <= static_cast<long long>(kLimit) && (vm2 - vm0) * 1024 == live && (pp2 - pp0) * 4096 == live,
         "arena.charged_while_mapped",
         "%zu arenas of 64 KiB mapped after ARENA_FREE (%d refused): %lld KiB live, VmPin +%lld kB, "
         "pinned_pages +%lld, RLIMIT_MEMLOCK %llu KiB",
         maps.size(), refused, live >> 10, vm2 - vm0, pp2 - pp0,
         static_cast<unsigned long long>(kLimit >> 10));
  for (void* p : maps) munmap(p, kLen);
  const long long vm3 = vm_pin_kb(), pp3 = stat("pinned_pages");
  expect(vm3 == vm0 && pp3 == pp0, "arena.unmapped_baseline",
         "VmPin %lld -> %lld kB, pinned_pages %lld -> %lld", vm0, vm3, pp0, pp3);

  // A child holding the fd is another mm: no arena charged to the opener.
  const pid_t pid = fork();
  if (pid == 0) {
    uint32_t id;
    _exit(arena_alloc(fd, kLen, &id) == -EPERM ? 0 : 1);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  const long long pp4 = stat("pinned_pages");
  expect(WIFEXITED(st) && WEXITSTATUS(st) == 0 && pp4 == pp0, "arena.inherited_fd",
         "child's ARENA_ALLOC through the inherited fd %s, pinned_pages %lld -> %lld",
         WEXITSTATUS(st) == 0 ? "refused (EPERM)" : "not refused", pp0, pp4);
  close(fd);
  return failures() ? 1 : 0;
}

// --- a pair of this process's QPs (a sends, b responds), both in one session -----------

// --- err_mid_batch ------------------------------------------------------------------

int cmd_err_mid_batch() {
  // 200 writes; the move must land while they run, so each attempt writes more (from 8 KiB
  // a write). A batch holds its pair for 1 MiB at most, then checks it afresh: what the
  // move may catch in between is at most one write, however long the hold.
  constexpr int kN = 200, kTrigger = 2, kAttempts = 6;
  for (int attempt = 0; attempt < kAttempts; attempt++) {
    const size_t kLen = size_t{8192} << (attempt < 3 ? attempt : 3);
    SelfPair p;
    pair_open(&p, kN * kLen);
    for (int i = 0; i < kN; i++) memset(p.src + i * kLen, 1 + i % 255, kLen);
    auto placed = [&p, kLen](int i) {
      return __atomic_load_n(&p.tgt[i * kLen + kLen - 1], __ATOMIC_ACQUIRE) != 0;
    };
    auto count = [&] {
      int n = 0;
      for (int i = 0; i < kN; i++) n += placed(i);
      return n;
    };
    std::vector<unload_direct_req> reqs;
    for (int i = 0; i < kN; i++)
      reqs.push_back(pair_req(p, i * kLen, p.tmr->rkey, reinterpret_cast<uintptr_t>(p.tgt + i * kLen), kLen));
    std::atomic<bool> go{false}, done{false};
    int at_move = -1, at_start = -1, move_ret = 0;
    std::thread mover([&] {
      pin_cpu(1);
      go = true;
      while (!placed(kTrigger) && !done) {
      }
      ibv_qp_attr attr{};
      attr.qp_state = IBV_QPS_ERR;
      at_start = count();
      move_ret = ibv_modify_qp(p.b.qp, &attr, IBV_QP_STATE);
      at_move = count();  // everything placed by the time the move returned
    });
    pin_cpu(0);
    while (!go) {
    }
    const int ret = submit(p.fd, reqs.data(), kN);
    done = true;
    mover.join();
    const int end = count();
    if (at_move == kN || move_ret) {
      std::printf("info: attempt %d (%zu bytes a write): the batch ended before the move (ret %d)\n", attempt,
                  kLen, move_ret);
      pair_close(&p);
      continue;
    }
    int consistent = 0, first_refused = kN, placed_after_refusal = 0;
    for (int i = 0; i < kN; i++) {
      consistent += (reqs[i].result == 0) == placed(i);
      if (reqs[i].result != 0 && first_refused == kN) first_refused = i;
      if (i > first_refused && placed(i)) placed_after_refusal++;
    }
    // A request checked just before the move may still be copied while it happens.
    expect(
        ret == 0 && end - at_move <= 1 && consistent == kN && placed_after_refusal == 0,
        "err_mid_batch.nothing_after",
        "batch of %d writes of %zu bytes: %d placed when the move to ERR began, %d when it returned, %d at "
        "the end; first refused #%d, %d placed after it, %d/%d results match the bytes",
        kN, kLen, at_start, at_move, end, first_refused, placed_after_refusal, consistent, kN);
    pair_close(&p);
    return failures() ? 1 : 0;
  }
  skip("the batch always ended before the responder's move to ERR (6 attempts)");
}

// --- unreg_other --------------------------------------------------------------------

int cmd_unreg_other() {
  if (stat("pairs_resolved") < 0) {
    fail("unreg_other.pairs_resolved", "no stats/pairs_resolved: the module does not count resolutions");
    return 1;
  }
  std::string idle;
  if (!sysfs_read("pair_idle_ms", &idle)) die("pair_idle_ms");
  sysfs_write("pair_idle_ms", "1000");  // the longest: nothing reaped while the child runs
  SelfPair p;
  pair_open(&p, 1 << 16);
  int go[2], back[2];
  if (pipe(go) || pipe(back)) die("pipe");
  const pid_t pid = fork();
  if (pid == 0) {
    if (setgid(65534) || setuid(65534)) _exit(2);
    const int fd = unload_open();
    char c;
    xread(go[0], &c, 1);
    int rets[5];
    const uint32_t qpns[5] = {p.a.wire.qpn, p.b.wire.qpn, 0, p.a.wire.qpn, p.b.wire.qpn};
    for (int i = 0; i < 5; i++) {
      unload_qp_reg r{};
      snprintf(r.ibdev, sizeof r.ibdev, "%s", p.a.dev.c_str());
      r.qp_num = qpns[i];
      rets[i] = uioctl(fd, i < 3 ? UNLOAD_IOC_UNREG_QP : UNLOAD_IOC_QP_CHANGED, &r);
    }
    xwrite(back[1], rets, sizeof rets);
    _exit(0);
  }
  // Both QPs' busy bytes lowered: another user's QP_CHANGED must not raise them.
  auto* busy = static_cast<uint8_t*>(mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, p.fd, UNLOAD_MMAP_BUSY));
  unload_qp_reg ra{}, rb{};
  if (busy == MAP_FAILED || reg_qp(p.fd, p.a.dev.c_str(), p.a.wire.qpn, &ra) ||
      reg_qp(p.fd, p.b.dev.c_str(), p.b.wire.qpn, &rb))
    die("the busy page and slots");
  busy[ra.busy_slot] = busy[rb.busy_slot] = 0;
  memset(p.src, 0x42, 64);
  const int r0 = submit_one(p.fd, pair_req(p, 0, p.tmr->rkey, reinterpret_cast<uintptr_t>(p.tgt), 64));
  const long long n0 = stat("pairs_resolved");
  xwrite(go[1], "G", 1);
  int rets[5];
  xread(back[0], rets, sizeof rets);
  const int r1 = submit_one(p.fd, pair_req(p, 0, p.tmr->rkey, reinterpret_cast<uintptr_t>(p.tgt) + 64, 64));
  const long long n1 = stat("pairs_resolved");
  waitpid(pid, nullptr, 0);
  sysfs_write("pair_idle_ms", idle);
  expect(r0 == 0 && r1 == 0 && rets[0] == -ENOENT && rets[1] == -ENOENT && rets[2] == -ENOENT && n1 == n0,
         "unreg_other.pairs_kept",
         "writes %d/%d; uid 65534's UNREG_QP of a, b, 0: %d/%d/%d; pairs_resolved +%lld between the writes",
         r0, r1, rets[0], rets[1], rets[2], n1 - n0);
  const bool quiet = busy[ra.busy_slot] == 0 && busy[rb.busy_slot] == 0;
  // The same user's, from another session (as a forked child's shim): the byte rises.
  const int own = unload_open();
  unload_qp_reg r{};
  snprintf(r.ibdev, sizeof r.ibdev, "%s", p.a.dev.c_str());
  r.qp_num = p.a.wire.qpn;
  const int mine = uioctl(own, UNLOAD_IOC_QP_CHANGED, &r);
  expect(rets[3] == -ENOENT && rets[4] == -ENOENT && quiet && mine == 0 && busy[ra.busy_slot] == 1,
         "unreg_other.qp_changed",
         "uid 65534's QP_CHANGED of a, b: %d/%d, both bytes still 0: %s; the owner's user's from another "
         "session: %d, a's byte raised: %s",
         rets[3], rets[4], quiet ? "yes" : "no", mine, busy[ra.busy_slot] == 1 ? "yes" : "no");
  close(own);
  munmap(busy, 4096);
  pair_close(&p);
  return failures() ? 1 : 0;
}

// --- destroy_drain ------------------------------------------------------------------

int cmd_destroy_drain() {
  // The RDMA core drains a QP's restrack references before its driver destroys it, and a
  // kept pair holds one: a destroy nobody announced (no UNREG_QP) must not wait for the
  // sender's stream to end. The stream would run kStream s; the bound is a liveness one.
  constexpr double kStream = 12, kBound = 5;
  SelfPair p;
  pair_open(&p, 4096);
  const auto req = pair_req(p, 0, p.tmr->rkey, reinterpret_cast<uintptr_t>(p.tgt), 8);
  if (submit_one(p.fd, req) != 0) die("destroy_drain: the first direct write was refused");
  std::atomic<bool> stop{false}, destroyed{false};
  long streamed = 0, placed_after = 0, refused_after = 0;
  std::thread streamer([&] {
    const double end = now_s() + kStream;
    while (!stop.load() && now_s() < end) {
      const bool after = destroyed.load(std::memory_order_acquire);
      const int r = submit_one(p.fd, req);
      streamed++;
      if (after) (r == 0 ? placed_after : refused_after)++;
    }
  });
  usleep(200 * 1000);  // the pair is kept and in use
  const double t0 = now_s();
  const int ret = ibv_destroy_qp(p.b.qp);
  const double took = now_s() - t0;
  destroyed.store(true, std::memory_order_release);
  if (!ret) p.b.qp = nullptr;
  usleep(200 * 1000);
  stop = true;
  streamer.join();
  expect(ret == 0 && took < kBound, "destroy_drain.destroy_returns",
         "ibv_destroy_qp of the responder (no UNREG_QP) returned %d after %.3f s while its sender streamed "
         "direct writes (%ld in all; the stream would have ended after %.0f s)",
         ret, took, streamed, kStream);
  expect(placed_after == 0 && refused_after > 0, "destroy_drain.nothing_after",
         "writes submitted after the destroy returned: %ld placed, %ld refused", placed_after, refused_after);
  pair_close(&p);
  return failures() ? 1 : 0;
}

// --- mw -----------------------------------------------------------------------------

bool poll_one(ibv_cq* cq, ibv_wc* wc) {
  for (int i = 0; i < 20000000; i++) {
    const int n = ibv_poll_cq(cq, 1, wc);
    if (n) return n == 1;
  }
  return false;
}

int cmd_mw() {
  SelfPair p;
  pair_open(&p, 1 << 16, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_MW_BIND);
  ibv_mw* mw = ibv_alloc_mw(p.a.pd, IBV_MW_TYPE_2);
  if (!mw) skip(("ibv_alloc_mw(type 2): " + std::string(strerror(errno))).c_str());
  // Bind on the responder QP b: a type 2 window is reached through the QP it is bound to.
  constexpr size_t kWin = 4096;
  ibv_send_wr w{}, *bad = nullptr;
  w.opcode = IBV_WR_BIND_MW;
  w.send_flags = IBV_SEND_SIGNALED;
  w.bind_mw.mw = mw;
  w.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
  w.bind_mw.bind_info.mr = p.tmr;
  w.bind_mw.bind_info.addr = reinterpret_cast<uintptr_t>(p.tgt);
  w.bind_mw.bind_info.length = kWin;
  w.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
  ibv_wc wc{};
  const int pr = ibv_post_send(p.b.qp, &w, &bad);
  if (pr || !poll_one(p.b.cq, &wc) || wc.status != IBV_WC_SUCCESS) {
    char why[128];
    snprintf(why, sizeof why, "rxe did not bind a type 2 MW from userspace (post %d, status %s)", pr,
             pr ? "-" : ibv_wc_status_str(wc.status));
    skip(why);
  }
  const uint32_t mw_rkey = w.bind_mw.rkey;

  // The module knows no region by the window's rkey: refused, for the NIC to judge.
  memset(p.src, 0x6d, 256);
  const int r0 = submit_one(p.fd, pair_req(p, 0, mw_rkey, reinterpret_cast<uintptr_t>(p.tgt), 64));
  // What the shim does next: the NIC writes it.
  ibv_sge sge{reinterpret_cast<uintptr_t>(p.src), 64, p.smr->lkey};
  ibv_send_wr wr{}, *badw = nullptr;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.rkey = mw_rkey;
  wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(p.tgt);
  ibv_wc wc2{};
  const bool nic = !ibv_post_send(p.a.qp, &wr, &badw) && poll_one(p.a.cq, &wc2);
  const bool nic_placed = nic && wc2.status == IBV_WC_SUCCESS && !memcmp(p.tgt, p.src, 64);
  expect(r0 == -EACCES && nic_placed, "mw.nic_outcome", "direct result %d; the NIC's write: %s, bytes %s", r0,
         nic ? ibv_wc_status_str(wc2.status) : "no completion", nic_placed ? "placed" : "not placed");
  // Nothing poisoned: the pair's next direct write (the MR's own rkey) is placed.
  const int r1 =
      submit_one(p.fd, pair_req(p, 64, p.tmr->rkey, reinterpret_cast<uintptr_t>(p.tgt) + 8192, 64));
  unload_qp_reg q;
  const int rq = reg_qp(p.fd, p.a.dev.c_str(), p.a.wire.qpn, &q);
  expect(
      r1 == 0 && !memcmp(p.tgt + 8192, p.src + 64, 64) && rq == 0 && !(q.peer_flags & UNLOAD_PEER_POISONED),
      "mw.nothing_poisoned", "next direct write %d, REG_QP flags 0x%x", r1, q.peer_flags);
  ibv_dealloc_mw(mw);
  pair_close(&p);
  return failures() ? 1 : 0;
}

// --- mr_churn -----------------------------------------------------------------------

int cmd_mr_churn() {
  Device dev = open_device();
  ibv_pd* pd = make_pd(dev.ctx);
  const int fd = unload_open();
  uint8_t* b1 = map_zeroed(4096);
  uint8_t* b2 = map_zeroed(4096);
  ibv_mr* m1 = make_mr(pd, b1, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  const int r1 = reg_mr(fd, m1, kRw);

  constexpr int kChurn = 10000;
  const pid_t pid = fork();
  if (pid == 0) {
    if (setgid(65534) || setuid(65534)) _exit(2);
    Device d = open_device();
    ibv_pd* cpd = make_pd(d.ctx);
    uint8_t* b = map_zeroed(4096);
    for (int i = 0; i < kChurn; i++) {
      ibv_mr* m = ibv_reg_mr(cpd, b, 4096, IBV_ACCESS_LOCAL_WRITE);
      if (!m || ibv_dereg_mr(m)) _exit(3);
    }
    _exit(0);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) die("the churning child (uid 65534) failed", 0);
  ibv_mr* m2 = make_mr(pd, b2, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  const long long p0 = stat("mr_probes");
  const int r2 = reg_mr(fd, m2, kRw);
  const long long probes = stat("mr_probes") - p0;
  expect(r1 == 0 && r2 == 0, "mr_churn.reg_region",
         "REG_REGION before %d, after uid 65534 registered and deregistered %d MRs: %d", r1, kChurn, r2);
  // The churn must not even make it search: a scan from our last find would cross every
  // id the child used, and a longer churn would exhaust any bound.
  constexpr long long kFew = 64;
  expect(p0 >= 0 && probes < kFew, "mr_churn.unsteered",
         "the REG_REGION after the churn tried %lld MR ids (fewer than %lld wanted)", probes, kFew);
  close(fd);
  ibv_dereg_mr(m1);
  ibv_dereg_mr(m2);
  ibv_dealloc_pd(pd);
  unload::verbs::close_device(&dev);
  return failures() ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const std::string c = argc > 1 ? argv[1] : "";
  if (access(UNLOAD_DEVICE_PATH, F_OK)) skip("no /dev/unload (module not loaded)");
  if (c == "charge_once") return cmd_charge_once();
  if (c == "arena_cycles") return cmd_arena_cycles();
  if (c == "err_mid_batch") return cmd_err_mid_batch();
  if (c == "unreg_other") return cmd_unreg_other();
  if (c == "destroy_drain") return cmd_destroy_drain();
  if (c == "mw") return cmd_mw();
  if (c == "mr_churn") return cmd_mr_churn();
  std::fprintf(
      stderr,
      "usage: kmod_safety charge_once | arena_cycles | err_mid_batch | unreg_other | destroy_drain | mw |\n"
      "       mr_churn\n");
  return 2;
}
