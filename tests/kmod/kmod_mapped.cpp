// The mapped path's kernel half (UNLOAD_IOC_MAP), one check group per command:
//   kmod_mapped grant    who gets a mapping and what it is: refused without the peer's
//                        /proc/<pid>/mem open for writing, for an unknown rkey, a region or
//                        a responder QP without remote write; granted, it maps the region's
//                        pages (a write through it is in the responder's buffer, its first
//                        fault maps every page), shared,
//                        never executable, not inherited by a child, not pinnable by an MR.
//   kmod_mapped revoke   each change a responder NIC would refuse after revokes a mapping
//                        before the call returns: its word is cleared and a write through it
//                        lands in the sink, never in the region. The region deregistered, the
//                        responder QP registered again (a state change), the sender QP
//                        unregistered, a violation poisoning the pair, UNLOAD_IOC_UNMAP, the
//                        responder's session closed, the device removed (rdma link delete).
//   kmod_mapped ptrace   a sender process of another user, without ptrace rights over the
//                        responder, cannot open its mem file and never gets a mapping; one
//                        of the same user gets it and places a write in the responder.
//   kmod_mapped proc_ns tmpfs|fuse
//                        a mapper of another user (uid 65534) in its own user and mount
//                        namespaces, /proc over-mounted (a tmpfs with a file where
//                        /proc/self/mem was, or a FUSE server that never answers), calls MAP:
//                        refused at once; then root's grant, a write through it, an
//                        unregistration and a close all complete and the write lands, while
//                        the mapper holds its mount; the hung-task detector (its timeout
//                        lowered to 10 s) stays quiet. Run first after the module's load:
//                        the module once learnt procfs's mem file at its first grant.
//   kmod_mapped race     ROUNDS rounds (default 10000): the responder deregisters its region
//                        while the sender streams writes through its mapping as the UAPI
//                        prescribes (word, copy, word), frees it to a canary, registers it
//                        again: no write reaches the region after its deregistration
//                        returned, and every write the protocol called placed is there.
// One line per check; exit 0 pass, 1 fail, 77 skip.
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/klog.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "kmod_util.hpp"

using namespace kt;

namespace {

const uint64_t* g_status = nullptr;  // the sender session's status page

int mem_fd_of(pid_t pid, int flags) {
  return open(("/proc/" + std::to_string(pid) + "/mem").c_str(), flags | O_CLOEXEC);
}

int map_ioctl(int fd, uint32_t qpn, uint32_t rkey, int mem_fd, unload_map* out) {
  unload_map m{};
  m.qp_num = qpn;
  m.rkey = rkey;
  m.mem_fd = mem_fd;
  const int ret = uioctl(fd, UNLOAD_IOC_MAP, &m);
  *out = m;
  return ret;
}

const uint64_t* map_status(int fd) {
  void* p = mmap(nullptr, UNLOAD_STATUS_SIZE, PROT_READ, MAP_SHARED, fd, UNLOAD_MMAP_STATUS);
  if (p == MAP_FAILED) die("mmap status page");
  return static_cast<const uint64_t*>(p);
}

bool word_is(const uint64_t* status, const unload_map& m) {
  return __atomic_load_n(&status[m.slot], __ATOMIC_ACQUIRE) == m.cookie;
}

uint8_t* map_region(int fd, const unload_map& m, int prot = PROT_READ | PROT_WRITE, int flags = MAP_SHARED) {
  void* p = mmap(nullptr, m.mmap_length, prot, flags, fd, static_cast<off_t>(m.mmap_offset));
  return p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
}

// The byte at iova + off through mapping `base`.
uint8_t* at(uint8_t* base, const unload_map& m, uint64_t off) { return base + m.page_offset + off; }

// --- grant --------------------------------------------------------------------------

int cmd_grant() {
  SelfPair p;
  pair_open(&p, 1 << 16);
  g_status = map_status(p.fd);
  const uint32_t qpn = p.a.wire.qpn;
  unload_map m{};

  int ret = map_ioctl(p.fd, qpn, p.tmr->rkey, -1, &m);
  expect(ret == -EPERM && m.peer_pid == static_cast<uint32_t>(getpid()), "grant.needs_mem_fd",
         "MAP without a mem fd: %d (want %d), peer_pid %u (want %d)", ret, -EPERM, m.peer_pid, getpid());
  int ro = mem_fd_of(getpid(), O_RDONLY);
  ret = map_ioctl(p.fd, qpn, p.tmr->rkey, ro, &m);
  expect(ret == -EPERM, "grant.mem_fd_read_only", "MAP with the mem file open read-only: %d (want %d)", ret,
         -EPERM);
  close(ro);
  int null = open("/dev/null", O_RDWR | O_CLOEXEC);
  ret = map_ioctl(p.fd, qpn, p.tmr->rkey, null, &m);
  expect(ret == -EPERM, "grant.other_file", "MAP with /dev/null as the mem fd: %d (want %d)", ret, -EPERM);
  close(null);

  const int mem = mem_fd_of(getpid(), O_RDWR);
  if (mem < 0) die("open /proc/self/mem");
  ret = map_ioctl(p.fd, qpn, p.tmr->rkey ^ 0x55, mem, &m);
  expect(ret == -EACCES, "grant.unknown_rkey", "MAP of an rkey no region has: %d (want %d)", ret, -EACCES);
  unload_map bad{};
  bad.qp_num = qpn;
  bad.rkey = p.tmr->rkey;
  bad.mem_fd = mem;
  bad.reserved[0] = 1;
  ret = uioctl(p.fd, UNLOAD_IOC_MAP, &bad);
  expect(ret == -EINVAL, "grant.reserved", "MAP with a reserved field set: %d (want %d)", ret, -EINVAL);
  // The source region (local write only) is no target.
  ret = map_ioctl(p.fd, qpn, p.smr->rkey, mem, &m);
  expect(ret == -EACCES, "grant.region_without_remote_write", "MAP of a region without REMOTE_WRITE: %d", ret);

  // A grant whose answer cannot be written back is withdrawn: its caller never learnt the
  // slot, so nothing would ever unmap it before close.
  auto* ro_req = static_cast<unload_map*>(
      mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (ro_req == MAP_FAILED) die("mmap a request page");
  *ro_req = unload_map{};
  ro_req->qp_num = qpn;
  ro_req->rkey = p.tmr->rkey;
  ro_req->mem_fd = mem;
  if (mprotect(ro_req, 4096, PROT_READ)) die("mprotect the request page");
  ret = uioctl(p.fd, UNLOAD_IOC_MAP, ro_req);
  int words = 0;
  for (uint32_t i = 0; i < UNLOAD_MAX_MAPPINGS; i++) words += __atomic_load_n(&g_status[i], __ATOMIC_ACQUIRE) != 0;
  expect(ret == -EFAULT && words == 0, "grant.unanswered_withdrawn",
         "MAP with its request on a read-only page: %d (want %d), %d live words after (want 0)", ret, -EFAULT,
         words);
  munmap(ro_req, 4096);

  unload_qp_reg rb{};  // the responder QP's busy slot (registered again before the grant)
  if (reg_qp(p.fd, p.b.dev.c_str(), p.b.wire.qpn, &rb)) die("REG_QP again");
  ret = map_ioctl(p.fd, qpn, p.tmr->rkey, mem, &m);
  expect(ret == 0 && word_is(g_status, m) && m.iova == reinterpret_cast<uintptr_t>(p.tgt) && m.length == p.len &&
             m.mmap_length == p.len && m.page_offset == 0,
         "grant.granted", "MAP: %d, word %s, iova %s, length %llu, mmap_length %llu", ret,
         word_is(g_status, m) ? "= cookie" : "!= cookie", m.iova == reinterpret_cast<uintptr_t>(p.tgt) ? "ok" : "wrong",
         static_cast<unsigned long long>(m.length), static_cast<unsigned long long>(m.mmap_length));
  if (ret) finish();

  uint8_t* x = map_region(p.fd, m, PROT_READ | PROT_WRITE | PROT_EXEC);
  expect(!x, "grant.never_exec", "mmap with PROT_EXEC: %s", x ? "mapped" : "refused");
  uint8_t* priv = map_region(p.fd, m, PROT_READ | PROT_WRITE, MAP_PRIVATE);
  expect(!priv, "grant.shared_only", "mmap MAP_PRIVATE: %s", priv ? "mapped" : "refused");
  void* half = mmap(nullptr, m.mmap_length / 2, PROT_READ | PROT_WRITE, MAP_SHARED, p.fd,
                    static_cast<off_t>(m.mmap_offset));
  expect(half == MAP_FAILED, "grant.whole_only", "mmap of half the region: %s",
         half == MAP_FAILED ? "refused" : "mapped");
  const int other = unload_open();
  void* foreign = mmap(nullptr, m.mmap_length, PROT_READ | PROT_WRITE, MAP_SHARED, other,
                       static_cast<off_t>(m.mmap_offset));
  expect(foreign == MAP_FAILED, "grant.own_session_only", "mmap through another session: %s",
         foreign == MAP_FAILED ? "refused" : "mapped");
  close(other);

  uint8_t* map = map_region(p.fd, m);
  if (!map) die("mmap the mapping");
  rusage r0{}, r1{}, r2{};
  getrusage(RUSAGE_THREAD, &r0);
  memset(at(map, m, 4000), 0x5a, 300);  // across a page boundary
  getrusage(RUSAGE_THREAD, &r1);
  bool placed = true;
  for (int i = 0; i < 300; i++) placed &= p.tgt[4000 + i] == 0x5a;
  expect(placed && p.tgt[3999] == 0 && p.tgt[4300] == 0, "grant.places", "300 bytes written at +4000 through the mapping: %s",
         placed ? "in the responder's buffer, nothing around them" : "not in the responder's buffer");
  // The first touch maps the whole window (these 16 pages): the other pages fault no more.
  for (size_t off = 8192; off < p.len; off += 4096) *at(map, m, off) = 0x33;
  getrusage(RUSAGE_THREAD, &r2);
  bool landed = true;
  for (size_t off = 8192; off < p.len; off += 4096) landed &= p.tgt[off] == 0x33;
  expect(r1.ru_minflt - r0.ru_minflt == 1 && r2.ru_minflt == r1.ru_minflt && landed,
         "grant.one_fault_maps_it",
         "faults: %ld writing across pages 0 and 1 (want 1), %ld writing the other %zu pages (want 0), their "
         "bytes %s",
         r1.ru_minflt - r0.ru_minflt, r2.ru_minflt - r1.ru_minflt, p.len / 4096 - 2,
         landed ? "in the responder's buffer" : "not in the responder's buffer");

  // The responder QP's busy byte: raised by its registration, and what its owner stores
  // in its busy page the sender's read-only view shows.
  auto* own = static_cast<uint8_t*>(mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, p.fd, UNLOAD_MMAP_BUSY));
  auto* view = static_cast<const uint8_t*>(
      mmap(nullptr, 4096, PROT_READ, MAP_SHARED, p.fd, static_cast<off_t>(m.busy_offset)));
  void* view_rw = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, p.fd, static_cast<off_t>(m.busy_offset));
  if (own == MAP_FAILED || view == MAP_FAILED) die("mmap the busy page or its view");
  const bool raised = own[rb.busy_slot] == 1 && view[m.busy_slot] == 1;
  own[rb.busy_slot] = 0;
  const bool shown = view[m.busy_slot] == 0;
  expect(m.busy_offset && rb.busy_slot == m.busy_slot && raised && shown && view_rw == MAP_FAILED, "grant.busy_view",
         "the responder's busy byte: slot %u / %u, raised by REG_QP %s, its 0 shown %s, the view writable %s",
         rb.busy_slot, m.busy_slot, raised ? "yes" : "no", shown ? "yes" : "no", view_rw == MAP_FAILED ? "no" : "yes");
  munmap(const_cast<uint8_t*>(view), 4096);
  munmap(own, 4096);

  // Every slot a session has: each grant's word in the status words (the last one in
  // their last page), the one past them refused, and each word cleared by its unmap.
  void* one_page = mmap(nullptr, 4096, PROT_READ, MAP_SHARED, p.fd, UNLOAD_MMAP_STATUS);
  expect(UNLOAD_STATUS_SIZE == 4096 || one_page == MAP_FAILED, "grant.status_whole_only",
         "mmap of 4096 of the status words' %d bytes: %s", UNLOAD_STATUS_SIZE,
         one_page == MAP_FAILED ? "refused" : "mapped");
  if (one_page != MAP_FAILED) munmap(one_page, 4096);
  std::vector<unload_map> more;
  int refused = 0;
  for (uint32_t i = 1; i <= UNLOAD_MAX_MAPPINGS && refused == 0; i++) {
    unload_map g{};
    refused = map_ioctl(p.fd, qpn, p.tmr->rkey, mem, &g);
    if (refused == 0) more.push_back(g);
  }
  uint32_t standing = word_is(g_status, m), top = m.slot;
  for (const unload_map& g : more) {
    standing += word_is(g_status, g);
    top = std::max(top, g.slot);
  }
  expect(more.size() + 1 == UNLOAD_MAX_MAPPINGS && refused == -ENOSPC && standing == UNLOAD_MAX_MAPPINGS &&
             top == UNLOAD_MAX_MAPPINGS - 1,
         "grant.every_slot",
         "%zu grants (want %u), the next %d (want %d), %u words shown, the highest slot %u", more.size() + 1,
         UNLOAD_MAX_MAPPINGS, refused, -ENOSPC, standing, top);
  uint32_t cleared = 0;
  for (const unload_map& g : more) {
    unload_unmap u{};
    u.slot = g.slot;
    u.cookie = g.cookie;
    cleared += uioctl(p.fd, UNLOAD_IOC_UNMAP, &u) == 0 && !word_is(g_status, g);
  }
  expect(cleared == more.size() && word_is(g_status, m), "grant.every_slot_unmapped",
         "%u of %zu words cleared by UNLOAD_IOC_UNMAP, the first grant's %s", cleared, more.size(),
         word_is(g_status, m) ? "standing" : "gone");

  ibv_mr* pinned = ibv_reg_mr(p.a.pd, map, 4096, IBV_ACCESS_LOCAL_WRITE);
  expect(!pinned, "grant.not_pinnable", "ibv_reg_mr on the mapping: %s", pinned ? "registered" : "refused");
  if (pinned) ibv_dereg_mr(pinned);

  const pid_t pid = fork();
  if (pid == 0) {
    signal(SIGSEGV, SIG_DFL);
    *at(map, m, 0) = 1;  // not mapped in the child: SIGSEGV
    _exit(0);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  expect(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV && p.tgt[0] == 0, "grant.not_inherited",
         "a forked child's write at the mapping's address: %s",
         WIFSIGNALED(st) ? strsignal(WTERMSIG(st)) : "no signal");

  // The responder QP without remote write: modify its access (RTS allows it).
  ibv_qp_attr attr{};
  attr.qp_access_flags = IBV_ACCESS_LOCAL_WRITE;
  if (ibv_modify_qp(p.b.qp, &attr, IBV_QP_ACCESS_FLAGS) == 0) {
    unload_map m2{};
    ret = map_ioctl(p.fd, qpn, p.tmr->rkey, mem, &m2);
    expect(ret == -EACCES, "grant.responder_without_remote_write", "MAP with the responder QP's access %s: %d",
           "LOCAL_WRITE only", ret);
  } else {
    skip_check("grant.responder_without_remote_write", "the driver refuses to modify an RTS QP's access flags");
  }
  munmap(map, m.mmap_length);
  close(mem);
  pair_close(&p);
  finish();
}

// --- revoke ---------------------------------------------------------------------------

// A sender session (QP a, its source) and a responder session (QP b, its target) of this
// process, and a mapping of b's target into the sender.
struct Split {
  Rc a, b;
  int fa = -1, fb = -1;
  uint8_t* tgt = nullptr;
  ibv_mr* tmr = nullptr;
  uint64_t tgt_handle = 0;
  const uint64_t* status = nullptr;
  int mem = -1;
  static constexpr size_t kLen = 1 << 14;
};

void split_open(Split* s) {
  rc_open(&s->a);
  rc_open(&s->b, &s->a.device, s->a.pd);
  rc_connect(&s->a, s->b.wire);
  rc_connect(&s->b, s->a.wire);
  s->fa = unload_open();
  s->fb = unload_open();
  s->tgt = map_zeroed(Split::kLen);
  s->tmr = make_mr(s->a.pd, s->tgt, Split::kLen, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (reg_qp(s->fa, s->a.dev.c_str(), s->a.wire.qpn) || reg_qp(s->fb, s->b.dev.c_str(), s->b.wire.qpn) ||
      reg_mr(s->fb, s->tmr, kRegionRw, &s->tgt_handle))
    die("split pair: REG_QP / REG_REGION");
  s->status = map_status(s->fa);
  s->mem = mem_fd_of(getpid(), O_RDWR);
  if (s->mem < 0) die("open /proc/self/mem");
}

void split_close(Split* s) {
  close(s->mem);
  if (s->fa >= 0) close(s->fa);
  if (s->fb >= 0) close(s->fb);
  rc_close(&s->a);
  rc_close(&s->b);
  ibv_dereg_mr(s->tmr);
  munmap(s->tgt, Split::kLen);
  ibv_dealloc_pd(s->a.pd);
  ibv_close_device(s->a.ctx);  // every verbs object gone: a device removal need not wait
}

// After `revoke` ran: the word is cleared and a write through the old mapping misses the
// region (it lands in the sink, where it reads back).
void expect_revoked(Split* s, const char* name, const char* how, int (*revoke)(Split*, const unload_map&)) {
  unload_map m{};
  int ret = map_ioctl(s->fa, s->a.wire.qpn, s->tmr->rkey, s->mem, &m);
  uint8_t* map = ret ? nullptr : map_region(s->fa, m);
  if (!map) {
    fail(name, ("no mapping to revoke: MAP " + std::to_string(ret)).c_str());
    return;
  }
  memset(s->tgt, 0, Split::kLen);
  *at(map, m, 64) = 1;  // faulted in: a live PTE the revocation must zap
  const bool before = s->tgt[64] == 1 && word_is(s->status, m);
  const int r = revoke(s, m);
  const bool word = word_is(s->status, m);
  *at(map, m, 128) = 7;
  const bool sink = *at(map, m, 128) == 7;
  expect(before && r == 0 && !word && s->tgt[128] == 0 && sink, name,
         "%s (returned %d): word %s, a write after it %s", how, r, word ? "still set" : "cleared",
         s->tgt[128] ? "reached the region" : (sink ? "landed in the sink" : "vanished"));
  munmap(map, m.mmap_length);
}

int cmd_revoke() {
  Split s;
  split_open(&s);
  expect_revoked(&s, "revoke.unmap", "UNLOAD_IOC_UNMAP", [](Split* x, const unload_map& m) {
    unload_unmap u{};
    u.slot = m.slot;
    u.cookie = m.cookie;
    return uioctl(x->fa, UNLOAD_IOC_UNMAP, &u);
  });
  expect_revoked(&s, "revoke.dereg_region", "DEREG_REGION of the target", [](Split* x, const unload_map&) {
    const int r = dereg_region(x->fb, x->tgt_handle);
    return r ? r : reg_mr(x->fb, x->tmr, kRegionRw, &x->tgt_handle);
  });
  expect_revoked(&s, "revoke.responder_registered_again", "REG_QP of the responder QP again",
                 [](Split* x, const unload_map&) { return reg_qp(x->fb, x->b.dev.c_str(), x->b.wire.qpn); });
  expect_revoked(&s, "revoke.sender_unregistered", "UNREG_QP of the sender QP", [](Split* x, const unload_map&) {
    unload_qp_reg r{};
    snprintf(r.ibdev, sizeof r.ibdev, "%s", x->a.dev.c_str());
    r.qp_num = x->a.wire.qpn;
    const int ret = uioctl(x->fa, UNLOAD_IOC_UNREG_QP, &r);
    return ret ? ret : reg_qp(x->fa, x->a.dev.c_str(), x->a.wire.qpn);
  });
  expect_revoked(&s, "revoke.responder_session_closed", "close of the responder's session",
                 [](Split* x, const unload_map&) {
                   close(x->fb);
                   x->fb = -1;
                   return 0;
                 });
  split_close(&s);

  // A violation (a direct write out of the region's bounds) poisons both QPs.
  Split v;
  split_open(&v);
  expect_revoked(&v, "revoke.poisoned", "a direct write past the region's end", [](Split* x, const unload_map&) {
    static uint8_t src[64];
    unload_direct_req r{};
    r.qp_num = x->a.wire.qpn;
    r.rkey = x->tmr->rkey;
    r.remote_addr = reinterpret_cast<uintptr_t>(x->tgt) + Split::kLen - 8;
    r.length = sizeof src;
    r.iov = reinterpret_cast<uintptr_t>(src);
    r.flags = UNLOAD_REQ_INLINE;
    const int ret = submit_one(x->fa, r);
    return ret == -EACCES ? 0 : (ret ? ret : -1);
  });
  split_close(&v);

  // Last: the device goes. rxe's removal waits for this process to close its verbs
  // objects after the clients' removal (ours among them) ran, so it runs beside us.
  Split d;
  split_open(&d);
  static pid_t deleter = -1;
  static std::string dev;
  dev = d.a.dev;
  expect_revoked(&d, "revoke.device_removed", "rdma link delete, beside", [](Split* x, const unload_map& m) {
    deleter = fork();
    if (deleter == 0) {
      execlp("rdma", "rdma", "link", "delete", dev.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    for (int i = 0; i < 1000 && word_is(x->status, m); i++) usleep(10000);
    return word_is(x->status, m) ? -ETIMEDOUT : 0;
  });
  split_close(&d);
  int st = 0;
  if (deleter > 0) waitpid(deleter, &st, 0);
  expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "revoke.device_removed_completes",
         "rdma link delete exited %d once the verbs objects were closed", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
  finish();
}

// --- ptrace -----------------------------------------------------------------------------

// A child process (of uid `uid`) with QP a connected to the parent's b: does it get a
// mapping of the parent's target, and does a write through it reach the parent?
struct ChildResult {
  int open_errno;  // opening the parent's mem for writing
  int map_no_fd;   // MAP without a mem fd
  int map_own_fd;  // MAP with its own mem file
  int map_ret;     // MAP with the parent's mem file (when it opened)
};

ChildResult sender_child(uid_t uid, Rc* b, int fd, ibv_mr* tmr) {
  int down[2], up[2];
  if (pipe(down) || pipe(up)) die("pipe");
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    if (uid) {
      rlimit rl{8 << 20, 8 << 20};
      if (setrlimit(RLIMIT_MEMLOCK, &rl) || setgid(uid) || setuid(uid)) _exit(2);
    }
    Rc a;
    rc_open(&a);
    xwrite(up[1], &a.wire, sizeof a.wire);
    Wire bw;
    xread(down[0], &bw, sizeof bw);
    rc_connect(&a, bw);
    const int own_fd = unload_open();
    if (reg_qp(own_fd, a.dev.c_str(), a.wire.qpn)) _exit(2);
    ChildResult r{};
    const int mem = mem_fd_of(parent, O_RDWR);
    r.open_errno = mem < 0 ? errno : 0;
    unload_map m{};
    r.map_no_fd = map_ioctl(own_fd, a.wire.qpn, tmr->rkey, -1, &m);
    const int own = mem_fd_of(getpid(), O_RDWR);
    r.map_own_fd = map_ioctl(own_fd, a.wire.qpn, tmr->rkey, own, &m);
    r.map_ret = mem < 0 ? -EBADF : map_ioctl(own_fd, a.wire.qpn, tmr->rkey, mem, &m);
    if (r.map_ret == 0) {
      uint8_t* map = map_region(own_fd, m);
      if (map) memset(at(map, m, 100), 0x77, 10);
    }
    xwrite(up[1], &r, sizeof r);
    _exit(0);
  }
  Wire aw;
  xread(up[0], &aw, sizeof aw);
  rc_connect(b, aw);
  if (reg_qp(fd, b->dev.c_str(), b->wire.qpn)) die("REG_QP of the responder");
  xwrite(down[1], &b->wire, sizeof b->wire);
  ChildResult r{};
  xread(up[0], &r, sizeof r);
  waitpid(pid, nullptr, 0);
  close(down[0]);
  close(down[1]);
  close(up[0]);
  close(up[1]);
  return r;
}

int cmd_ptrace() {
  if (getuid() != 0) skip("needs root to run a sender as another user");
  for (const uid_t uid : {uid_t{65534}, uid_t{0}}) {
    Rc b;
    rc_open(&b);
    const int fd = unload_open();
    uint8_t* tgt = map_zeroed(1 << 14);
    ibv_mr* tmr = make_mr(b.pd, tgt, 1 << 14, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (reg_mr(fd, tmr, kRegionRw)) die("REG_REGION");
    const ChildResult r = sender_child(uid, &b, fd, tmr);
    if (uid) {
      expect(r.open_errno != 0 && r.map_no_fd == -EPERM && r.map_own_fd == -EPERM && r.map_ret != 0 && tgt[100] == 0,
             "ptrace.other_user_refused",
             "uid %u: open of the responder's mem %s, MAP without it %d, with its own mem file %d; nothing placed",
             uid, r.open_errno ? strerror(r.open_errno) : "succeeded", r.map_no_fd, r.map_own_fd);
    } else {
      const bool placed = tgt[100] == 0x77 && tgt[109] == 0x77;
      expect(r.open_errno == 0 && r.map_ret == 0 && placed, "ptrace.same_user_granted",
             "uid 0: open of the responder's mem %s, MAP %d, write through it %s",
             r.open_errno ? strerror(r.open_errno) : "ok", r.map_ret, placed ? "placed" : "not placed");
    }
    close(fd);
    rc_close(&b);
    ibv_dereg_mr(tmr);
    munmap(tgt, 1 << 14);
  }
  finish();
}

// --- proc_ns ----------------------------------------------------------------------------

bool write_file(const char* path, const std::string& text) {
  const int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool done = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  return done;
}

std::string read_line(const char* path) {
  char buf[64] = {};
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  const ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  std::string s(buf, n > 0 ? static_cast<size_t>(n) : 0);
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

// How many times `what` is in the kernel log (root), or -1.
int klog_count(const char* what) {
  const int size = klogctl(10 /* SYSLOG_ACTION_SIZE_BUFFER */, nullptr, 0);
  if (size <= 0) return -1;
  std::string buf(static_cast<size_t>(size), '\0');
  const int n = klogctl(3 /* SYSLOG_ACTION_READ_ALL */, buf.data(), size);
  if (n < 0) return -1;
  buf.resize(static_cast<size_t>(n));
  int count = 0;
  for (size_t at = buf.find(what); at != std::string::npos; at = buf.find(what, at + 1)) count++;
  return count;
}

// Reads one report of `n` bytes within `seconds`: false on timeout or end of file.
bool read_within(int fd, void* p, size_t n, double seconds) {
  pollfd pf{fd, POLLIN, 0};
  if (poll(&pf, 1, static_cast<int>(seconds * 1000)) != 1) return false;
  return read(fd, p, n) == static_cast<ssize_t>(n);
}

struct NsReport {
  int stage;  // 1: namespaces and mount made, MAP next; 2: MAP returned
  int map_ret;
  double map_s;
};

// The sandbox runs its guest's command chrooted under PID 1's root
// (scripts/lib/guest/sandbox-init), and the kernel makes no user namespace for a chrooted
// process. Root, in a mount namespace of its own, makes its root that namespace's root
// as switch_root does (the mount moved onto "/"), as a host's processes have it. True when
// done or not needed.
bool unchroot() {
  struct stat own {}, init {};
  if (stat("/", &own) || stat("/proc/1/root/", &init)) return false;
  if (own.st_dev == init.st_dev && own.st_ino == init.st_ino) return true;
  char esc[] = "/tmp/unload-unchroot.XXXXXX";
  if (unshare(CLONE_NEWNS)) return false;
  const int old = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);  // the new namespace's mount
  if (old < 0 || !mkdtemp(esc)) return false;
  // Rooted in a directory below the working one, ".." climbs past the old root.
  if (fchdir(old) || chroot(esc)) return false;
  for (int i = 0; i < 64; i++)
    if (chdir("..")) return false;
  if (chroot(".") || mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr)) return false;
  if (fchdir(old) || mount(".", "/", nullptr, MS_MOVE, nullptr) || chroot(".") || chdir("/")) return false;
  rmdir(esc);
  close(old);
  return true;
}

// The mapper: uid 65534, its own self pair, then a user and a mount namespace with /proc
// over-mounted, and MAP on its pair. It then holds its mount (and, for FUSE, the server
// that never answers) until killed. Exits 10 when it cannot make the namespaces.
[[noreturn]] void ns_mapper(const char* how, int up) {
  if (!unchroot()) _exit(16);
  rlimit rl{8 << 20, 8 << 20};
  if (setrlimit(RLIMIT_MEMLOCK, &rl) || setgroups(0, nullptr) || setgid(65534) || setuid(65534)) _exit(2);
  prctl(PR_SET_DUMPABLE, 1);  // the uid change made its /proc/self root's: its maps are written there
  SelfPair p;
  pair_open(&p, 1 << 16);
  if (unshare(CLONE_NEWUSER | CLONE_NEWNS)) _exit(10);
  if (!write_file("/proc/self/setgroups", "deny") || !write_file("/proc/self/uid_map", "0 65534 1") ||
      !write_file("/proc/self/gid_map", "0 65534 1"))
    _exit(11);
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr)) _exit(12);
  int mem_fd = -1;
  if (!strcmp(how, "tmpfs")) {
    if (mount("unload-test", "/proc", "tmpfs", 0, nullptr)) _exit(13);
    mkdir("/proc/self", 0755);
    mem_fd = open("/proc/self/mem", O_CREAT | O_RDWR | O_CLOEXEC, 0600);  // what a lookup would find
  } else {
    const int fuse = open("/dev/fuse", O_RDWR | O_CLOEXEC);
    if (fuse < 0) _exit(14);
    const std::string opts = "fd=" + std::to_string(fuse) + ",rootmode=40000,user_id=0,group_id=0";
    if (mount("unload-test", "/proc", "fuse", MS_NOSUID | MS_NODEV, opts.c_str())) _exit(15);
    // /dev/fuse is never read: every request on this /proc waits for an answer.
    mem_fd = fuse;  // a file open for writing, not a mem file: the check looks at it
  }
  NsReport r{1, 0, 0};
  xwrite(up, &r, sizeof r);
  unload_map m{};
  const double t0 = now_s();
  r.map_ret = map_ioctl(p.fd, p.a.wire.qpn, p.tmr->rkey, mem_fd, &m);
  r.map_s = now_s() - t0;
  r.stage = 2;
  xwrite(up, &r, sizeof r);
  for (;;) pause();
}

struct VictimReport {
  int step;  // 1 paired, 2 MAP returned, 3 written, 4 unregistered, 5 closed
  int map_ret;
  bool placed;
};

// Another user (root, this process's own) on the mapped path: a grant, a write through it,
// the responder's unregistration (which walks every session's pairs) and a close.
[[noreturn]] void ns_victim(int up) {
  SelfPair p;
  pair_open(&p, 1 << 16);
  VictimReport v{1, 0, false};
  xwrite(up, &v, sizeof v);
  const int mem = mem_fd_of(getpid(), O_RDWR);
  unload_map m{};
  v.map_ret = map_ioctl(p.fd, p.a.wire.qpn, p.tmr->rkey, mem, &m);
  v.step = 2;
  xwrite(up, &v, sizeof v);
  if (v.map_ret == 0) {
    if (uint8_t* map = map_region(p.fd, m)) {
      memset(at(map, m, 64), 0x5a, 16);
      v.placed = p.tgt[64] == 0x5a && p.tgt[79] == 0x5a;
    }
  }
  v.step = 3;
  xwrite(up, &v, sizeof v);
  unload_qp_reg u{};
  snprintf(u.ibdev, sizeof u.ibdev, "%s", p.b.dev.c_str());
  u.qp_num = p.b.wire.qpn;
  uioctl(p.fd, UNLOAD_IOC_UNREG_QP, &u);
  v.step = 4;
  xwrite(up, &v, sizeof v);
  close(mem);
  pair_close(&p);
  v.step = 5;
  xwrite(up, &v, sizeof v);
  _exit(0);
}

int cmd_proc_ns(const std::string& how) {
  if (how != "tmpfs" && how != "fuse") die("proc_ns tmpfs | fuse", -EINVAL);
  if (getuid() != 0) skip("needs root to run the mapper as another user");
  if (how == "fuse") {
    if (access("/dev/fuse", F_OK)) skip("no /dev/fuse (fuse not loaded)");
    chmod("/dev/fuse", 0666);
  }
  write_file("/proc/sys/kernel/unprivileged_userns_clone", "1");  // Debian's switch
  const char* hung_path = "/proc/sys/kernel/hung_task_timeout_secs";
  const std::string hung_was = read_line(hung_path);
  const bool hung_on = !hung_was.empty() && write_file(hung_path, "10");
  const int hung_before = klog_count("blocked for more than");
  const std::string name = "proc_ns." + how;

  int up[2];
  if (pipe(up)) die("pipe");
  const pid_t mapper = fork();
  if (mapper < 0) die("fork");
  if (mapper == 0) {
    close(up[0]);
    ns_mapper(how.c_str(), up[1]);
  }
  close(up[1]);
  NsReport r{};
  if (!read_within(up[0], &r, sizeof r, 120)) {
    int st = 0;
    waitpid(mapper, &st, 0);
    if (WIFEXITED(st) && WEXITSTATUS(st) >= 10)
      skip(("the mapper could not make its namespaces and mount (exit " + std::to_string(WEXITSTATUS(st)) +
            "): unprivileged user namespaces or " + how + " mounts are off here")
               .c_str());
    die("the mapper's set-up", -EIO);
  }
  const double mounted_at = now_s();
  // Its MAP: refused at once, whatever its /proc shows.
  const bool mapped = read_within(up[0], &r, sizeof r, 20) && r.stage == 2;
  expect(mapped && r.map_ret == -EPERM, (name + ".mapper_refused").c_str(),
         "the mapper's MAP under its own /proc: %s, %d (want %d) in %.2f s", mapped ? "returned" : "still blocked after 20 s",
         r.map_ret, -EPERM, r.map_s);

  int vup[2];
  if (pipe(vup)) die("pipe");
  const pid_t victim = fork();
  if (victim < 0) die("fork");
  if (victim == 0) {
    close(vup[0]);
    ns_victim(vup[1]);
  }
  close(vup[1]);
  VictimReport v{};
  const double t0 = now_s();
  while (v.step < 5 && read_within(vup[0], &v, sizeof v, 120 - (now_s() - t0))) {
  }
  static const char* const steps[] = {"nothing", "pairing", "MAP", "the write", "UNREG_QP", "close"};
  expect(v.step == 5 && v.map_ret == 0 && v.placed, (name + ".others_mapped").c_str(),
         "root's pair beside it: %s (MAP %d, its write %s)",
         v.step == 5 ? "every step through to its close" :
                       (std::string("blocked in ") + steps[v.step < 5 ? v.step + 1 : 5] + " after 120 s").c_str(),
         v.map_ret, v.placed ? "placed" : "not placed");

  // The mapper still holds its mount: the detector looks at every task past its timeout.
  if (hung_on) {
    while (now_s() - mounted_at < 13) usleep(200000);
    const int hung_after = klog_count("blocked for more than");
    expect(hung_before >= 0 && hung_after == hung_before, (name + ".no_task_blocked").c_str(),
           "hung-task reports in the kernel log: %d before, %d %.0f s after the mount (timeout 10 s)", hung_before,
           hung_after, now_s() - mounted_at);
  } else {
    skip_check((name + ".no_task_blocked").c_str(), "no hung-task detector in this kernel");
  }

  kill(mapper, SIGKILL);
  waitpid(mapper, nullptr, 0);
  // A victim stuck behind the mapper goes on once the mapper is gone; else it is killed.
  while (v.step < 5 && read_within(vup[0], &v, sizeof v, 30)) {
  }
  if (v.step < 5) kill(victim, SIGKILL);
  waitpid(victim, nullptr, 0);
  close(up[0]);
  close(vup[0]);
  if (hung_on) write_file(hung_path, hung_was);
  finish();
}

// --- race -------------------------------------------------------------------------------

int cmd_race(int rounds) {
  SelfPair p;
  pair_open(&p, 1 << 16);
  const uint64_t* status = map_status(p.fd);
  const int mem = mem_fd_of(getpid(), O_RDWR);
  if (mem < 0) die("open /proc/self/mem");
  // A target of its own, registered anew each round (the pair's stays as it is).
  const size_t len = 1 << 16;
  uint8_t* buf = map_zeroed(len);
  ibv_mr* mr = nullptr;
  uint64_t handle = 0;
  const size_t kSlots = len / 8;
  constexpr uint8_t kCanary = 0xcc;
  std::atomic<int> ready{-1}, mapped{-1}, revoked{-1}, done{-1};
  std::atomic<uint32_t> rkey{0};
  std::atomic<bool> stop{false};
  std::vector<long> passed(rounds, -2);
  long granted = 0, stale_writes = 0;
  std::thread sender([&] {
    pin_cpu(1);
    for (int r = 0; r < rounds && !stop; r++) {
      while (ready.load(std::memory_order_acquire) < r && !stop) sched_yield();
      unload_map m{};
      uint8_t* map = nullptr;
      if (map_ioctl(p.fd, p.a.wire.qpn, rkey.load(), mem, &m) == 0) map = map_region(p.fd, m);
      mapped.store(r, std::memory_order_release);
      long last = -1;
      if (map) {
        granted++;
        auto* slots = reinterpret_cast<volatile uint64_t*>(at(map, m, 0));
        // Until the revocation: it lands mid-stream in every round.
        for (size_t i = 0; !stop; i++) {
          if (!word_is(status, m)) break;
          slots[i % kSlots] = i + 1;
          __atomic_thread_fence(__ATOMIC_SEQ_CST);
          if (__atomic_load_n(&status[m.slot], __ATOMIC_RELAXED) != m.cookie) break;
          last = static_cast<long>(i);
        }
      }
      while (revoked.load(std::memory_order_acquire) < r && !stop) sched_yield();
      // The region is deregistered and its memory reused: writes through the old mapping.
      if (map) {
        auto* slots = reinterpret_cast<volatile uint64_t*>(at(map, m, 0));
        for (size_t i = 0; i < kSlots; i += 61) slots[i] = 0xdeadbeef;
        stale_writes += (kSlots + 60) / 61;
        munmap(map, m.mmap_length);
      }
      passed[r] = last;
      done.store(r, std::memory_order_release);
    }
  });
  pin_cpu(0);
  const double t0 = now_s();
  int canary_broken = 0, missing = 0, first_bad = -1;
  std::vector<uint64_t> snap(kSlots);
  for (int r = 0; r < rounds; r++) {
    memset(buf, 0, len);
    mr = make_mr(p.a.pd, buf, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (reg_mr(p.fd, mr, kRegionRw, &handle)) die("REG_REGION");
    rkey.store(mr->rkey);
    ready.store(r, std::memory_order_release);
    while (mapped.load(std::memory_order_acquire) < r) sched_yield();
    for (long spin = random() % 20000; spin > 0; spin--) asm volatile("" ::: "memory");
    if (dereg_region(p.fd, handle)) die("DEREG_REGION");
    memcpy(snap.data(), buf, len);
    ibv_dereg_mr(mr);
    memset(buf, kCanary, len);
    revoked.store(r, std::memory_order_release);
    while (done.load(std::memory_order_acquire) < r) sched_yield();
    bool intact = true;
    for (size_t i = 0; i < len; i++) intact &= buf[i] == kCanary;
    // Slot j holds write i + 1 for the last i = j (mod kSlots) written; every write the
    // protocol called placed, up to passed[r], must be there (or a later one over it).
    long absent = 0;
    const long last = passed[r], n = static_cast<long>(kSlots);
    for (long j = 0; j < n && j <= last; j++) {
      const long want = j + (last - j) / n * n + 1;
      absent += snap[j] < static_cast<uint64_t>(want);
    }
    canary_broken += !intact;
    missing += absent != 0;
    if ((!intact || absent) && first_bad < 0) first_bad = r;
  }
  stop = true;
  sender.join();
  long placed = 0;
  for (long v : passed) placed += v + 1;
  expect(canary_broken == 0, "race.nothing_after_revocation",
         "%d rounds (%ld mapped) in %.1f s: %d with a write in the region after its deregistration returned "
         "(first #%d); %ld stale writes through revoked mappings",
         rounds, granted, now_s() - t0, canary_broken, first_bad, stale_writes);
  expect(missing == 0 && granted > rounds / 2, "race.placed_when_valid",
         "%ld writes the protocol called placed, in %d rounds %s", placed, missing,
         missing ? "missing some" : "all present at the deregistration");
  close(mem);
  munmap(buf, len);
  pair_close(&p);
  finish();
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const std::string c = argc > 1 ? argv[1] : "";
  if (access(UNLOAD_DEVICE_PATH, F_OK)) skip("no /dev/unload (module not loaded)");
  if (c == "grant") return cmd_grant();
  if (c == "revoke") return cmd_revoke();
  if (c == "ptrace") return cmd_ptrace();
  if (c == "proc_ns") return cmd_proc_ns(argc > 2 ? argv[2] : "");
  if (c == "race") return cmd_race(argc > 2 ? atoi(argv[2]) : 10000);
  std::fprintf(stderr, "usage: kmod_mapped grant | revoke | ptrace | proc_ns tmpfs|fuse | race [ROUNDS]\n");
  return 2;
}
