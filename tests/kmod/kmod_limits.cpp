// The module's stall and memlock checks: no fault stalls anyone; memory is charged once.
//   kmod_limits stall     a direct write of a live pair whose source names a page held by
//                         userfaultfd (a fault that never resolves) is refused at once
//                         without touching the page (regions are pinned at registration:
//                         a request neither faults nor pins); then, with that sender
//                         alive, the target deregisters its region and MR, exits, and
//                         (once the sender closed its verbs context, which rxe waits for
//                         with or without the module) `rdma link delete` removes the
//                         device: each must finish within 5 s.
//   kmod_limits stall_batch  the same steps while the pair's submitter is blocked for good
//                         reading its own request array (its second request on the held
//                         page, the first one live): nothing of the pair may be held then.
//   kmod_limits memlock   a plain verbs program (run with and without the shim): 40 QP
//                         create/destroy cycles leave the process's pinned memory (VmPin)
//                         and the module's pinned_pages at their baseline; then MRs
//                         adding up to just under RLIMIT_MEMLOCK all register, and a
//                         write through them completes. Drops root first (uid 65534, no
//                         CAP_IPC_LOCK), so the limit applies.
//   kmod_limits counters  a session writes huge values into every slot of its own
//                         counters page (mapped as the shim maps it): no file of stats/
//                         moves (the module's own counts), reported/ moves by at least
//                         that, and back when the page is zeroed again.
//   kmod_limits users     with user_sessions_max 3 and user_registrations_max 4, uid
//                         65534 opens 3 sessions and the 4th fails with EMFILE, registers
//                         a QP (again: no charge) and 3 regions over its sessions and the
//                         next fails with EDQUOT; a deregistration frees one; a forked
//                         child's exit frees nothing; meanwhile uid 65533 and root are
//                         unaffected; closing the sessions with their registrations
//                         outstanding frees every count.
// One line per check; exit 0 pass, 1 fail, 77 skip.
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dirent.h>

#include <algorithm>
#include <cstddef>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "kmod_util.hpp"

using namespace kt;

namespace {

constexpr double kLimit = 5.0;  // the bound for each step

// T: a target with a registered QP and region; obeys 'D' (deregister region and MR) and
// 'X' (exit). Never returns.
[[noreturn]] void stall_target(int in, int out) {
  Rc t;
  rc_open(&t);
  int fd = unload_open();
  static uint8_t buf[65536];
  ibv_mr* mr = ibv_reg_mr(t.pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  uint64_t h = 0;
  if (!mr || reg_mr(fd, mr, UNLOAD_ACCESS_LOCAL_WRITE | UNLOAD_ACCESS_REMOTE_WRITE, &h)) _exit(3);
  struct {
    Wire w;
    uint32_t rkey;
    uint64_t addr;
  } mine{t.wire, mr->rkey, reinterpret_cast<uintptr_t>(buf)};
  xwrite(out, &mine, sizeof mine);
  Wire s;
  xread(in, &s, sizeof s);
  rc_connect(&t, s);
  if (reg_qp(fd, t.dev.c_str(), t.wire.qpn)) _exit(4);
  char c = 'R';
  xwrite(out, &c, 1);
  for (;;) {
    xread(in, &c, 1);
    if (c == 'D') {
      if (dereg_region(fd, h) || ibv_dereg_mr(mr)) _exit(5);
    } else if (c == 'X') {
      _exit(0);
    }
    xwrite(out, &c, 1);
  }
}

// Waits for one byte on fd for at most `limit` seconds: true if it came.
bool read_within(int fd, double limit) {
  pollfd p{fd, POLLIN, 0};
  char c;
  return poll(&p, 1, static_cast<int>(limit * 1000)) == 1 && read(fd, &c, 1) == 1;
}

bool reaped_within(pid_t pid, double limit, int* status) {
  const double t0 = now_s();
  while (now_s() - t0 < limit) {
    if (waitpid(pid, status, WNOHANG) == pid) return true;
    usleep(10000);
  }
  return false;
}

struct TInfo {
  Wire w;
  uint32_t rkey;
  uint64_t addr;
};

struct StallOutcome {
  int rc;        // the submit ioctl's status
  int result;    // the request's
  bool faulted;  // a fault on the held page reached the userfaultfd
};

// S: a page held by a userfaultfd nobody serves; once paired with T it submits one direct
// write naming that page as its source and reports the outcome (the ioctl's status, the
// request's result, whether a fault reached the userfaultfd). On 'C' it closes its verbs
// resources (rxe cannot disassociate a live context: `rdma link delete` waits for every
// process that has the device open, module or not) and answers 'C'. Never returns.
// With `batch`, the held page is instead the second page of the request array: a batch
// of two whose first request (live, from sbuf) sits at the end of a normal page and whose
// second is on the held page. The submission blocks in a thread of its own; the outcome
// says whether a fault reached the userfaultfd.
[[noreturn]] void stall_sender(int in, int out, bool batch) {
  const int uffd = static_cast<int>(syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK));
  uffdio_api api{};
  api.api = UFFD_API;
  const size_t len = 4096;
  auto* area = static_cast<uint8_t*>(
      mmap(nullptr, 2 * len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  void* held = area + len;
  uffdio_register reg{};
  reg.range.start = reinterpret_cast<uintptr_t>(held);
  reg.range.len = len;
  reg.mode = UFFDIO_REGISTER_MODE_MISSING;
  if (uffd < 0 || ioctl(uffd, UFFDIO_API, &api) || area == MAP_FAILED || ioctl(uffd, UFFDIO_REGISTER, &reg)) {
    xwrite(out, "U", 1);  // no userfaultfd here
    _exit(77);
  }
  Rc s;
  rc_open(&s);
  static uint8_t sbuf[4096];
  ibv_mr* smr = ibv_reg_mr(s.pd, sbuf, sizeof sbuf, IBV_ACCESS_LOCAL_WRITE);
  static int fd;
  fd = unload_open();
  xwrite(out, "W", 1);
  xwrite(out, &s.wire, sizeof s.wire);
  TInfo t;
  xread(in, &t, sizeof t);
  rc_connect(&s, t.w);
  unload_qp_reg rq{};
  if (!smr || reg_mr(fd, smr, UNLOAD_ACCESS_LOCAL_WRITE) || reg_qp(fd, s.dev.c_str(), s.wire.qpn, &rq))
    _exit(3);
  static unload_direct_req r{};
  r.qp_num = s.wire.qpn;
  r.rkey = t.rkey;
  r.remote_addr = t.addr;
  r.length = len;
  r.iov = reinterpret_cast<uintptr_t>(held);  // outside smr, and never served
  r.lkey = smr->lkey;
  // The same request from sbuf first: the pair is live and would place it.
  static unload_direct_req live = r;
  live.iov = reinterpret_cast<uintptr_t>(sbuf);
  unload_submit lb{};
  lb.reqs = reinterpret_cast<uintptr_t>(&live);
  lb.count = 1;
  if (ioctl(fd, UNLOAD_IOC_SUBMIT, &lb) || live.result != 0) _exit(6);
  StallOutcome o{};
  pollfd p{uffd, POLLIN, 0};
  if (batch) {
    auto* reqs = reinterpret_cast<unload_direct_req*>(area + len - sizeof live);
    reqs[0] = live;  // reqs[1] is on the held page: never written, read by the module only
    static unload_submit bb{};
    bb.reqs = reinterpret_cast<uintptr_t>(reqs);
    bb.count = 2;
    std::thread([] { ioctl(fd, UNLOAD_IOC_SUBMIT, &bb); }).detach();  // blocks for good
    o.faulted = poll(&p, 1, 10000) == 1;
    o.result = -EACCES;  // nothing to report: the submission never returns
  } else {
    unload_submit sb{};
    sb.reqs = reinterpret_cast<uintptr_t>(&r);
    sb.count = 1;
    o.rc = ioctl(fd, UNLOAD_IOC_SUBMIT, &sb) ? -errno : 0;
    o.result = r.result;
    o.faulted = poll(&p, 1, 0) == 1;
  }
  xwrite(out, &o, sizeof o);
  char c;
  xread(in, &c, 1);  // 'C'
  rc_close(&s);
  if (ibv_dereg_mr(smr) || ibv_dealloc_pd(s.pd) || ibv_close_device(s.ctx)) _exit(7);
  xwrite(out, "C", 1);
  for (;;) pause();
}

// Each check's name is "<mode>.<step>": mode "stall" (a source on the held page) or
// "stall_batch" (the request array on it).
int cmd_stall(bool batch) {
  const std::string m = batch ? "stall_batch" : "stall";
  const auto name = [&m](const char* step) { return m + "." + step; };
  int to_t[2], from_t[2], to_s[2], from_s[2];
  if (pipe(to_t) || pipe(from_t) || pipe(to_s) || pipe(from_s)) die("pipe");
  pid_t spid = fork();
  if (spid == 0) stall_sender(to_s[0], from_s[1], batch);
  char c = 0;
  xread(from_s[0], &c, 1);
  if (c == 'U') {
    waitpid(spid, nullptr, 0);
    skip("no userfaultfd in this kernel");
  }
  Wire sw;
  xread(from_s[0], &sw, sizeof sw);
  pid_t tpid = fork();
  if (tpid == 0) stall_target(to_t[0], from_t[1]);
  TInfo tinfo;
  xread(from_t[0], &tinfo, sizeof tinfo);
  xwrite(to_t[1], &sw, sizeof sw);
  xread(from_t[0], &c, 1);  // T connected and registered
  xwrite(to_s[1], &tinfo, sizeof tinfo);
  pollfd sp{from_s[0], POLLIN, 0};
  const double ts = now_s();
  if (poll(&sp, 1, 60000) != 1) die("sender never submitted");
  StallOutcome o;
  xread(from_s[0], &o, sizeof o);
  if (batch)
    expect(o.faulted, name("submitter_blocked").c_str(),
           "the module's read of the array reached the userfaultfd");
  else
    expect(o.rc == 0 && o.result == -EACCES && !o.faulted && now_s() - ts <= kLimit, "stall.source_untouched",
           "submit status %d, result %d, fault on the held page: %s", o.rc, o.result,
           o.faulted ? "yes" : "no");

  double t0 = now_s();
  xwrite(to_t[1], "D", 1);
  const bool dereg = read_within(from_t[0], kLimit);
  expect(dereg, name("target_dereg").c_str(), "region and MR deregistered in %.2fs (limit %.0fs)",
         now_s() - t0, kLimit);

  t0 = now_s();
  xwrite(to_t[1], "X", 1);
  int tst = 0;
  const bool exited = reaped_within(tpid, kLimit, &tst);
  expect(exited, name("target_exit").c_str(), "target exited in %.2fs (limit %.0fs)", now_s() - t0, kLimit);
  if (!exited) kill(tpid, SIGKILL);

  xwrite(to_s[1], "C", 1);
  expect(read_within(from_s[0], kLimit), name("sender_closed_verbs").c_str(),
         "the sender closed its QP, MR and device");
  t0 = now_s();
  const int rc = system("timeout 30 rdma link delete rxe0");
  const double took = now_s() - t0;
  expect(rc == 0 && took <= kLimit, name("link_delete").c_str(),
         "rdma link delete rxe0: status %d in %.2fs (limit %.0fs)", rc, took, kLimit);

  // The sender holds nothing of the module: it goes at once.
  kill(spid, SIGKILL);
  t0 = now_s();
  int w = 0;
  const bool gone = reaped_within(spid, kLimit, &w);
  expect(gone, name("sender_killable").c_str(), "sender reaped %.2fs after SIGKILL", now_s() - t0);
  if (!exited) reaped_within(tpid, kLimit, &tst);
  return failures() ? 1 : 0;
}

// --- memlock ------------------------------------------------------------------------

int cmd_memlock() {
  const rlim_t limit = 8 << 20;
  rlimit rl{limit, limit};
  if (setrlimit(RLIMIT_MEMLOCK, &rl)) die("setrlimit");
  if (getuid() == 0 && (setgid(65534) || setuid(65534))) die("drop root");
  const bool shim = getenv("LD_PRELOAD") != nullptr;
  std::printf("info: uid %u, RLIMIT_MEMLOCK %llu KiB, %s\n", getuid(),
              static_cast<unsigned long long>(limit >> 10), shim ? "under the shim" : "no shim");
  Device dev = open_device();
  ibv_context* ctx = dev.ctx;
  ibv_pd* pd = make_pd(ctx);

  // 40 QP create/destroy cycles: everything the shim and the module take per QP (the
  // staging arena and its MR) goes back.
  const long long pin0 = vm_pin_kb(), pp0 = kt::stat("pinned_pages");
  long long pin_live = 0, pp_live = 0;  // while a cycle's QPs exist (the shim's arenas)
  for (int i = 0; i < 40; i++) {
    Rc a, b;
    rc_open(&a, &dev, pd);
    rc_open(&b, &dev, pd);
    rc_connect(&a, b.wire);
    rc_connect(&b, a.wire);
    pin_live = std::max(pin_live, vm_pin_kb());
    pp_live = std::max(pp_live, kt::stat("pinned_pages"));
    rc_close(&a);
    rc_close(&b);
  }
  const long long pin1 = vm_pin_kb(), pp1 = kt::stat("pinned_pages");
  expect(pin1 == pin0 && pp1 == pp0, "memlock.qp_cycles",
         "40 cycles: VmPin %lld -> %lld kB (%lld while QPs lived), pinned_pages %lld -> %lld (%lld)", pin0,
         pin1, pin_live, pp0, pp1, pp_live);

  // MRs adding up to just under the limit (what VmPin already holds included).
  const size_t room = limit - static_cast<size_t>(pin1) * 1024 - 64 * 1024;
  const size_t each = (room / 4) & ~size_t{4095};
  std::vector<ibv_mr*> mrs;
  for (int i = 0; i < 4; i++) {
    void* p = mmap(nullptr, each, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ibv_mr* mr =
        p == MAP_FAILED ? nullptr : ibv_reg_mr(pd, p, each, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (!mr) std::printf("info: MR %d of %zu KiB: %s\n", i, each >> 10, strerror(errno));
    mrs.push_back(mr);
  }
  size_t ok = 0;
  for (auto* m : mrs) ok += m != nullptr;
  expect(ok == 4, "memlock.just_under_limit", "%zu/4 MRs of %zu KiB registered, VmPin %lld kB of %llu", ok,
         each >> 10, vm_pin_kb(), static_cast<unsigned long long>(limit >> 10));

  // A write from the first MR into the second, on a connected pair.
  if (ok == 4) {
    Rc a, b;
    rc_open(&a, &dev, pd);
    rc_open(&b, &dev, pd);
    rc_connect(&a, b.wire);
    rc_connect(&b, a.wire);
    memset(mrs[0]->addr, 0x5a, 4096);
    ibv_sge sge{reinterpret_cast<uintptr_t>(mrs[0]->addr), 4096, mrs[0]->lkey};
    ibv_send_wr w{}, *badw = nullptr;
    w.sg_list = &sge;
    w.num_sge = 1;
    w.opcode = IBV_WR_RDMA_WRITE;
    w.send_flags = IBV_SEND_SIGNALED;
    w.wr.rdma.rkey = mrs[1]->rkey;
    w.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(mrs[1]->addr);
    ibv_wc wc{};
    int got = 0;
    if (!ibv_post_send(a.qp, &w, &badw))
      for (int i = 0; i < 5000000 && got == 0; i++) got = ibv_poll_cq(a.cq, 1, &wc);
    const bool placed = got == 1 && wc.status == IBV_WC_SUCCESS && !memcmp(mrs[0]->addr, mrs[1]->addr, 4096);
    expect(placed, "memlock.write", "status %s, bytes %s", got == 1 ? ibv_wc_status_str(wc.status) : "none",
           placed ? "placed" : "not placed");
    rc_close(&a);
    rc_close(&b);
  }
  for (auto* m : mrs)
    if (m) ibv_dereg_mr(m);
  ibv_dealloc_pd(pd);
  unload::verbs::close_device(&dev);
  return failures() ? 1 : 0;
}

// --- counters -------------------------------------------------------------------------

// Every readable file of /sys/kernel/unload/<dir>/ but reset, by name.
std::map<std::string, unsigned long long> read_dir(const std::string& dir) {
  std::map<std::string, unsigned long long> m;
  DIR* d = opendir(sysfs_path(dir).c_str());
  if (!d) return m;
  while (const dirent* e = readdir(d)) {
    const std::string n = e->d_name;
    std::string v;
    if (n == "." || n == ".." || n == "reset" || !sysfs_read(dir + "/" + n, &v)) continue;
    m[n] = std::strtoull(v.c_str(), nullptr, 10);
  }
  closedir(d);
  return m;
}

int cmd_counters() {
  const int fd = unload_open();
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* p = mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_SHARED, fd, UNLOAD_MMAP_COUNTERS);
  if (p == MAP_FAILED) die("mmap the counters page");
  const auto s0 = read_dir("stats"), r0 = read_dir("reported");
  // Every slot a shim writes (writes[], bytes[], fences, why_not[]), the direct path's too.
  constexpr unsigned long long kBig = 1ull << 40;
  auto* slot = static_cast<volatile uint64_t*>(p);
  const size_t n = offsetof(unload_counters, reserved) / sizeof(uint64_t);
  for (size_t i = 0; i < n; i++) slot[i] = kBig + i;
  const auto s1 = read_dir("stats"), r1 = read_dir("reported");
  std::string moved;
  for (const auto& [k, v] : s1)
    if (!s0.count(k) || s0.at(k) != v) moved += " " + k;
  expect(!s1.empty() && moved.empty(), "counters.stats_unmoved", "%zu files of stats/; moved by the page:%s",
         s1.size(), moved.empty() ? " none" : moved.c_str());
  // The page reached the module: reported/ shows the claim, so the check above can fail.
  size_t grew = 0;
  for (const auto& [k, v] : r1) grew += r0.count(k) && v - r0.at(k) >= kBig;
  expect(!r1.empty() && grew == r1.size(), "counters.reported_moved",
         "%zu of %zu files of reported/ grew by 2^40 or more", grew, r1.size());
  for (size_t i = 0; i < n; i++) slot[i] = 0;
  const bool back = read_dir("reported") == r0;
  expect(back, "counters.reported_back", "reported/ %s its values once the page is zeroed again",
         back ? "has" : "does not have");
  munmap(p, page);
  close(fd);
  return failures() ? 1 : 0;
}

// --- users --------------------------------------------------------------------------

constexpr int kSessions = 3;  // user_sessions_max for the test
constexpr int kRegs = 4;      // user_registrations_max for the test

// /dev/unload opened and greeted: the fd, or -errno of the open.
int open_session() {
  const int fd = open(UNLOAD_DEVICE_PATH, O_RDWR | O_CLOEXEC);
  if (fd < 0) return -errno;
  unload_hello h{};
  h.abi_version = UNLOAD_ABI_VERSION;
  if (uioctl(fd, UNLOAD_IOC_HELLO, &h)) die("UNLOAD_IOC_HELLO");
  return fd;
}

// Opens sessions until one is refused or kSessions + 1 opened: the errno of the refusal (0: none).
int open_until_refused(std::vector<int>* fds) {
  while (fds->size() <= kSessions) {
    const int fd = open_session();
    if (fd < 0) return -fd;
    fds->push_back(fd);
  }
  return 0;
}

// A QP (twice: the second charges nothing) and regions over the sessions until one is
// refused: registrations taken, and the refusal's errno in *err. mr[] has kRegs + 1.
int register_until_refused(const std::vector<int>& fds, const Rc& rc, ibv_mr** mr, uint64_t* h, int* err) {
  *err = 0;
  if (int e = reg_qp(fds[0], rc.dev.c_str(), rc.wire.qpn)) return *err = -e, 0;
  if (int e = reg_qp(fds[0], rc.dev.c_str(), rc.wire.qpn)) return *err = -e, 1;
  int n = 1;
  for (int i = 0; i <= kRegs; i++, n++)
    if (int e = reg_mr(fds[i % fds.size()], mr[i], UNLOAD_ACCESS_LOCAL_WRITE, &h[i])) return *err = -e, n;
  return n;
}

// uid 65534: fills both bounds, tells the parent ('S'), waits for it ('G'), closes.
[[noreturn]] void users_child(int in, int out) {
  if (setgid(65534) || setuid(65534)) _exit(2);
  std::vector<int> fds;
  int err = open_until_refused(&fds);
  expect(fds.size() == kSessions && err == EMFILE, "users.sessions_bound",
         "uid 65534: %zu sessions opened, the next: %s (want %d, EMFILE)", fds.size(),
         err ? strerror(err) : "opened", kSessions);
  if (fds.empty()) _exit(1);
  Rc rc;
  rc_open(&rc);
  rc_init_only(&rc);
  static uint8_t buf[kRegs + 1][4096];
  ibv_mr* mr[kRegs + 1];
  for (int i = 0; i <= kRegs; i++)
    if (!(mr[i] = ibv_reg_mr(rc.pd, buf[i], sizeof buf[i], IBV_ACCESS_LOCAL_WRITE))) die("ibv_reg_mr");
  uint64_t h[kRegs + 1] = {};
  int n = register_until_refused(fds, rc, mr, h, &err);
  expect(n == kRegs && err == EDQUOT, "users.registrations_bound",
         "a QP (twice) and regions over %zu sessions: %d taken, the next: %s (want %d, EDQUOT)", fds.size(),
         n, err ? strerror(err) : "taken", kRegs);
  // A deregistration frees exactly one.
  const int d = dereg_region(fds[0], h[0]);
  const int again = reg_mr(fds[1 % fds.size()], mr[0], UNLOAD_ACCESS_LOCAL_WRITE, &h[0]);
  const int over = reg_mr(fds[2 % fds.size()], mr[kRegs], UNLOAD_ACCESS_LOCAL_WRITE);
  expect(!d && !again && over == -EDQUOT, "users.dereg_frees_one",
         "DEREG_REGION %d, then REG_REGION %d, and the next %s", d, again, over ? strerror(-over) : "taken");
  // A forked child shares the sessions: its exit closes its copies and frees nothing.
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  waitpid(pid, nullptr, 0);
  const int after_fork = open_session();
  expect(after_fork == -EMFILE, "users.fork_frees_nothing", "an open after a forked child's exit: %s",
         after_fork < 0 ? strerror(-after_fork) : "opened");
  if (after_fork >= 0) close(after_fork);
  char c = 'S';
  xwrite(out, &c, 1);
  xread(in, &c, 1);
  // Closing, with every registration outstanding, frees the counts.
  for (int fd : fds) close(fd);
  fds.clear();
  err = open_until_refused(&fds);
  int err2 = 0;
  n = fds.empty() ? 0 : register_until_refused(fds, rc, mr, h, &err2);
  expect(fds.size() == kSessions && err == EMFILE && n == kRegs && err2 == EDQUOT, "users.close_frees",
         "after closing: %zu sessions (%s next), %d registrations (%s next)", fds.size(),
         err ? strerror(err) : "opened", n, err2 ? strerror(err2) : "taken");
  for (int fd : fds) close(fd);
  for (ibv_mr* m : mr) ibv_dereg_mr(m);
  rc_close(&rc);
  _exit(failures() ? 1 : 0);
}

// uid 65533, while uid 65534 is at both bounds: a session, a QP and a region of its own.
[[noreturn]] void users_other() {
  if (setgid(65533) || setuid(65533)) _exit(2);
  const int fd = open_session();
  if (fd < 0) _exit(3);
  Rc rc;
  rc_open(&rc);
  rc_init_only(&rc);
  static uint8_t buf[4096];
  ibv_mr* mr = ibv_reg_mr(rc.pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
  if (!mr || reg_qp(fd, rc.dev.c_str(), rc.wire.qpn) || reg_mr(fd, mr, UNLOAD_ACCESS_LOCAL_WRITE)) _exit(4);
  _exit(0);
}

int cmd_users() {
  std::string smax, rmax;
  if (!sysfs_read("user_sessions_max", &smax) || !sysfs_read("user_registrations_max", &rmax)) {
    fail("users.tunables", "no user_sessions_max or user_registrations_max in /sys/kernel/unload");
    return 1;
  }
  if (getuid() != 0) skip("needs root (lowers the bounds, changes uid)");
  if (sysfs_write("user_sessions_max", std::to_string(kSessions)) ||
      sysfs_write("user_registrations_max", std::to_string(kRegs)))
    die("lower the bounds");
  int to_child[2], from_child[2];
  if (pipe(to_child) || pipe(from_child)) die("pipe");
  const pid_t a = fork();
  if (a == 0) {
    close(to_child[1]);
    close(from_child[0]);
    users_child(to_child[0], from_child[1]);
  }
  close(to_child[0]);
  close(from_child[1]);
  char c = 0;
  const bool full = read(from_child[0], &c, 1) == 1 && c == 'S';  // else it ended early
  if (full) {
    const pid_t b = fork();
    if (b == 0) users_other();
    int st = 0;
    waitpid(b, &st, 0);
    const int code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    expect(code == 0, "users.other_user",
           "uid 65533 while uid 65534 is at both bounds: a session, a QP and a region (exit %d: %s)", code,
           code == 0 ? "all taken" : "refused");
    // Root is counted, not bounded.
    std::vector<int> fds;
    const int err = open_until_refused(&fds);
    expect(fds.size() == kSessions + 1 && !err, "users.root_unbounded",
           "root: %zu of %d sessions opened (%s)", fds.size(), kSessions + 1,
           err ? strerror(err) : "none refused");
    for (int fd : fds) close(fd);
    c = 'G';
    xwrite(to_child[1], &c, 1);
  }
  int st = 0;
  waitpid(a, &st, 0);
  sysfs_write("user_sessions_max", smax);
  sysfs_write("user_registrations_max", rmax);
  const int code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  if (code == 77) skip("uid 65534's side cannot run here (its skip line above)");
  expect(code == 0, "users.uid_65534", "uid 65534's side: exit %d (its lines above)", code);
  return failures() ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const std::string c = argc > 1 ? argv[1] : "";
  if (c == "stall" || c == "stall_batch") {
    if (access(UNLOAD_DEVICE_PATH, F_OK)) skip("no /dev/unload (module not loaded)");
    return cmd_stall(c == "stall_batch");
  }
  if (c == "memlock") return cmd_memlock();
  if (c == "counters" || c == "users") {
    if (access(UNLOAD_DEVICE_PATH, F_OK)) skip("no /dev/unload (module not loaded)");
    return c == "counters" ? cmd_counters() : cmd_users();
  }
  std::fprintf(stderr, "usage: kmod_limits stall | stall_batch | memlock | counters | users\n");
  return 2;
}
