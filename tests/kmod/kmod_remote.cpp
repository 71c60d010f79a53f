// The remote path's two halves (UNLOAD_SUBMIT_REMOTE, UNLOAD_URING_REMOTE): writes sent by host A's module and placed by host B's under the responder's checks, in order, every refusal placing nothing.
//
//   kmod_remote          on both hosts of scripts/sandbox --hosts 2 (UNLOAD_HOST says which)
//
// B opens the responder: an RC QP and a target region registered with its module; A the
// sender, connected to it. Then B's QP goes to ERR, and A's. They swap their QP numbers and keys through files in
// UNLOAD_PAIR_DIR. A submits remote writes and checks each result; B then checks every
// byte of its region (placed where A says, nothing else) and its module's counts. One line
// per check with its figure; exit 0 pass, 1 fail, 2 set-up, 3 hang, 77 skip.
#include <fcntl.h>
#include <liburing.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "kmod_util.hpp"

using namespace kt;

namespace {

constexpr size_t kLen = 256 * 1024;  // each side's region
std::string pair_dir;

// What one side tells the other: its QP (for the connection) and its region.
struct Info {
  Wire wire;
  uint32_t rkey;
  uint64_t addr;
};

void put_file(const char* name, const void* p, size_t n) { pair_put(pair_dir, name, p, n); }
void get_file(const char* name, void* p, size_t n) { pair_get(pair_dir, name, p, n); }

// The byte A writes at offset i of B's region in write w: B recomputes it.
uint8_t pattern(size_t w, size_t i) { return static_cast<uint8_t>(0x11 * (w + 1) + i * 7); }

// The writes A sends: where in B's region, how long; and the ones B must never see.
struct Case {
  const char* name;
  size_t off, len;
  bool inline_req;
  bool placed;  // expected
};
const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      {"one_byte", 0, 1, false, true},
      {"eight_bytes", 64, 8, false, true},
      {"inline_32", 128, 32, true, true},
      {"one_segment", 4096, 4000, false, true},
      {"segments_64k", 65536, 65536, false, true},
      {"bad_rkey", 8192, 64, false, false},
      {"out_of_bounds", kLen - 32, 64, false, false},
  };
  return c;
}

void to_error(ibv_qp* qp) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  if (int r = ibv_modify_qp(qp, &a, IBV_QP_STATE)) die("ibv_modify_qp to ERR", -r);
}

// One remote write of n bytes of pattern `w` from A's region start to `off` in B's.
int send_one(const Rc& rc, int fd, uint8_t* src, const ibv_mr* smr, const Info& b, size_t w, size_t off,
             size_t n);

int submit_remote(int fd, unload_direct_req* r) {
  unload_submit s{};
  s.reqs = reinterpret_cast<uintptr_t>(r);
  s.count = 1;
  s.flags = UNLOAD_SUBMIT_REMOTE;
  const int ret = uioctl(fd, UNLOAD_IOC_SUBMIT, &s);
  return ret ? -1000 + ret : r->result;
}

void run_sender(Rc& rc, int fd, uint8_t* src, ibv_mr* smr, const Info& b) {
  for (size_t w = 0; w < cases().size(); w++) {
    const Case& c = cases()[w];
    const size_t from = c.off + c.len <= kLen ? c.off : kLen - c.len;  // inside A's own region
    for (size_t i = 0; i < c.len; i++) src[from + i] = pattern(w, i);
    unload_direct_req r{};
    r.qp_num = rc.qp->qp_num;
    r.rkey = std::strcmp(c.name, "bad_rkey") ? b.rkey : b.rkey ^ 0x5a5a00;
    r.remote_addr = b.addr + c.off;
    r.length = static_cast<uint32_t>(c.len);
    r.iov = reinterpret_cast<uintptr_t>(src + from);
    if (c.inline_req)
      r.flags = UNLOAD_REQ_INLINE;
    else
      r.lkey = smr->lkey;
    const int res = submit_remote(fd, &r);
    const int want = c.placed ? 0 : -EACCES;
    expect(res == want, c.name, "result %d (want %d)", res, want);
  }
  // Malformed: a reserved field set is refused before anything is sent.
  unload_direct_req r{};
  r.qp_num = rc.qp->qp_num;
  r.rkey = b.rkey;
  r.remote_addr = b.addr;
  r.length = 8;
  r.iov = reinterpret_cast<uintptr_t>(src);
  r.lkey = smr->lkey;
  r.reserved = 1;
  int res = submit_remote(fd, &r);
  expect(res == -EINVAL, "reserved_set", "result %d (want %d)", res, -EINVAL);
  // A QP this session never registered is no sender.
  r.reserved = 0;
  r.result = 0;  // an input too: the module wrote the last verdict there
  r.qp_num = rc.qp->qp_num + 1000;
  res = submit_remote(fd, &r);
  expect(res == -EACCES, "unregistered_sender", "result %d (want %d)", res, -EACCES);
}

int send_one(const Rc& rc, int fd, uint8_t* src, const ibv_mr* smr, const Info& b, size_t w, size_t off,
             size_t n) {
  for (size_t i = 0; i < n; i++) src[i] = pattern(w, i);
  unload_direct_req r{};
  r.qp_num = rc.qp->qp_num;
  r.rkey = b.rkey;
  r.remote_addr = b.addr + off;
  r.length = static_cast<uint32_t>(n);
  r.iov = reinterpret_cast<uintptr_t>(src);
  r.lkey = smr->lkey;
  return submit_remote(fd, &r);
}

// Where the writes refused for a QP's state would have gone: B checks they did not.
constexpr size_t kAfterErrOff = 200 * 1024;

// UNLOAD_URING_REMOTE: writes queued without waiting, 144 KiB to 200 KiB of both regions.
constexpr size_t kAsyncSlots = 32, kAsyncSlotOff = 144 * 1024;  // a 64 B slot each
constexpr size_t kOrdered = 8, kOrderedOff = 147 * 1024;        // one word, written 8 times
constexpr size_t kOrderedSrc = 148 * 1024;                      // their sources
constexpr size_t kEpochOff = 150 * 1024;                        // the epoch cases' slots
// The epoch cases, in submission order: slot, bad rkey, epoch, the result A must get, placed.
struct EpochCase {
  const char* name;
  bool bad_rkey;
  uint32_t epoch;
  int want;
};
const EpochCase kEpochCases[] = {
    {"async_before_refusal", false, 2, 0},
    {"async_refused", true, 2, -EACCES},
    {"async_cancelled_behind", false, 2, -ECANCELED},
    {"async_cancelled_last", false, 2, -ECANCELED},
};
// Submitted after the epoch cases were reaped: the failed epoch stays failed, the next runs.
const EpochCase kAfterCases[] = {
    {"async_failed_epoch_again", false, 2, -ECANCELED},
    {"async_next_epoch", false, 3, 0},
};
constexpr size_t kEpochCount = std::size(kEpochCases) + std::size(kAfterCases);
bool epoch_placed(size_t k) {
  return k < std::size(kEpochCases) ? kEpochCases[k].want == 0 : kAfterCases[k - std::size(kEpochCases)].want == 0;
}
size_t async_placed() {
  size_t n = kAsyncSlots + kOrdered;
  for (size_t k = 0; k < kEpochCount; k++) n += epoch_placed(k);
  return n;
}

// Queue one write (user_data tag) on the ring; nothing goes to the kernel until submit.
void queue_remote(io_uring* ring, int fd, unload_direct_req* r, uint32_t epoch, uint64_t tag,
                  uint32_t reserved = 0) {
  io_uring_sqe* sqe = io_uring_get_sqe(ring);
  if (!sqe) die("io_uring_get_sqe", -EBUSY);
  io_uring_prep_rw(IORING_OP_URING_CMD, sqe, fd, nullptr, 0, 0);
  sqe->cmd_op = UNLOAD_URING_REMOTE;
  const unload_uring_remote u{reinterpret_cast<uintptr_t>(r), epoch, reserved};
  memcpy(sqe->cmd, &u, sizeof u);
  sqe->user_data = tag;
}

// Submit what is queued in one call and reap n completions: tag -> res.
std::map<uint64_t, int> submit_reap(io_uring* ring, unsigned n) {
  const int sub = io_uring_submit(ring);
  if (sub < 0) die("io_uring_submit", sub);
  std::map<uint64_t, int> res;
  for (unsigned i = 0; i < n; i++) {
    io_uring_cqe* cqe;
    __kernel_timespec ts{30, 0};
    if (io_uring_wait_cqe_timeout(ring, &cqe, &ts)) hang("a remote write's completion", "none in 30 s");
    res[cqe->user_data] = cqe->res;
    io_uring_cqe_seen(ring, cqe);
  }
  return res;
}

unload_direct_req async_req(const Rc& rc, const ibv_mr* smr, const Info& b, uint8_t* src, size_t src_off,
                            size_t off, size_t n) {
  unload_direct_req r{};
  r.qp_num = rc.qp->qp_num;
  r.rkey = b.rkey;
  r.remote_addr = b.addr + off;
  r.length = static_cast<uint32_t>(n);
  r.iov = reinterpret_cast<uintptr_t>(src + src_off);
  r.lkey = smr->lkey;
  return r;
}

// Writes queued without waiting: placed in order, and a refusal ends its epoch in order.
void run_sender_async(Rc& rc, int fd, uint8_t* src, ibv_mr* smr, const Info& b) {
  io_uring ring;
  if (int r = io_uring_queue_init(64, &ring, 0)) die("io_uring_queue_init", r);
  // 32 slots, then one word 8 times: one submission, epoch 1.
  std::vector<unload_direct_req> reqs;
  reqs.reserve(kAsyncSlots + kOrdered);
  for (size_t j = 0; j < kAsyncSlots; j++) {
    const size_t off = kAsyncSlotOff + 64 * j;
    for (size_t i = 0; i < 64; i++) src[off + i] = pattern(100 + j, i);
    reqs.push_back(async_req(rc, smr, b, src, off, off, 64));
  }
  for (size_t k = 0; k < kOrdered; k++) {
    for (size_t i = 0; i < 8; i++) src[kOrderedSrc + 8 * k + i] = pattern(200 + k, i);
    reqs.push_back(async_req(rc, smr, b, src, kOrderedSrc + 8 * k, kOrderedOff, 8));
  }
  for (size_t t = 0; t < reqs.size(); t++) queue_remote(&ring, fd, &reqs[t], 1, t);
  auto res = submit_reap(&ring, static_cast<unsigned>(reqs.size()));
  size_t ok = 0;
  for (size_t t = 0; t < reqs.size(); t++) ok += res.count(t) && res[t] == 0;
  expect(ok == reqs.size(), "async_placed", "%zu of %zu completed 0", ok, reqs.size());

  // The epoch cases: a refusal mid-queue cancels what follows it in its epoch.
  unload_direct_req er[kEpochCount];
  for (size_t k = 0; k < kEpochCount; k++) {
    const size_t off = kEpochOff + 64 * k;
    for (size_t i = 0; i < 64; i++) src[off + i] = pattern(300 + k, i);
    er[k] = async_req(rc, smr, b, src, off, off, 64);
  }
  for (size_t k = 0; k < std::size(kEpochCases); k++) {
    if (kEpochCases[k].bad_rkey) er[k].rkey ^= 0x5a5a00;
    queue_remote(&ring, fd, &er[k], kEpochCases[k].epoch, 1000 + k);
  }
  res = submit_reap(&ring, std::size(kEpochCases));
  for (size_t k = 0; k < std::size(kEpochCases); k++)
    expect(res[1000 + k] == kEpochCases[k].want, kEpochCases[k].name, "result %d (want %d)", res[1000 + k],
           kEpochCases[k].want);
  for (size_t a = 0; a < std::size(kAfterCases); a++) {
    const size_t k = std::size(kEpochCases) + a;
    queue_remote(&ring, fd, &er[k], kAfterCases[a].epoch, 1000 + k);
    res = submit_reap(&ring, 1);
    expect(res[1000 + k] == kAfterCases[a].want, kAfterCases[a].name, "result %d (want %d)", res[1000 + k],
           kAfterCases[a].want);
  }

  // Malformed: a reserved field of the command is refused at once, nothing queued.
  unload_direct_req bad = async_req(rc, smr, b, src, kEpochOff, kEpochOff, 8);
  queue_remote(&ring, fd, &bad, 4, 7, 1);
  res = submit_reap(&ring, 1);
  expect(res[7] == -EINVAL, "async_reserved_set", "result %d (want %d)", res[7], -EINVAL);
  io_uring_queue_exit(&ring);
}

// What the async writes leave in B's region.
void async_want(std::vector<uint8_t>& want) {
  for (size_t j = 0; j < kAsyncSlots; j++)
    for (size_t i = 0; i < 64; i++) want[kAsyncSlotOff + 64 * j + i] = pattern(100 + j, i);
  for (size_t i = 0; i < 8; i++) want[kOrderedOff + i] = pattern(200 + kOrdered - 1, i);
  for (size_t k = 0; k < kEpochCount; k++)
    if (epoch_placed(k))
      for (size_t i = 0; i < 64; i++) want[kEpochOff + 64 * k + i] = pattern(300 + k, i);
}

// B's responder goes to ERR between A's writes: the next one is refused, as a responder
// NIC in ERR drops it; then A's own QP goes to ERR, and its module refuses to send.
void run_sender_errors(Rc& rc, int fd, uint8_t* src, ibv_mr* smr, const Info& b) {
  const char one = 1;
  put_file("remote.A.phase1", &one, 1);
  char err;
  get_file("remote.B.err", &err, 1);
  int res = send_one(rc, fd, src, smr, b, 90, kAfterErrOff, 64);
  expect(res == -EACCES, "responder_in_error", "result %d (want %d)", res, -EACCES);
  to_error(rc.qp);
  res = send_one(rc, fd, src, smr, b, 91, kAfterErrOff + 64, 64);
  expect(res == -EACCES, "sender_in_error", "result %d (want %d)", res, -EACCES);
}

void check_target(const uint8_t* tgt) {
  std::vector<uint8_t> want(kLen, 0);
  for (size_t w = 0; w < cases().size(); w++) {
    const Case& c = cases()[w];
    if (!c.placed) continue;
    for (size_t i = 0; i < c.len; i++) want[c.off + i] = pattern(w, i);
  }
  async_want(want);
  size_t bad = 0, first = kLen;
  for (size_t i = 0; i < kLen; i++)
    if (tgt[i] != want[i] && bad++ == 0) first = i;
  expect(bad == 0, "target_bytes", "%zu of %zu bytes differ (first at %zu)", bad, kLen, first);
  size_t placed = async_placed();
  for (const Case& c : cases()) placed += c.placed;
  const long long n = stat("remote_placed_writes");
  expect(n == static_cast<long long>(placed), "placed_counted", "stats/remote_placed_writes %lld (want %zu)", n,
         placed);
}

}  // namespace

// A process that exits with kExitWrites remote writes queued, each its own epoch, to a
// target gone silent (B's link down). The process is reaped at once whatever happens (io_uring
// lets it go), but its session, pins and commands live until the last command completes: that
// must be the write on the wire (one ACK timeout), not each in turn (a connect's 5 s apiece,
// minutes), and none of the others may be sent later.
constexpr int kExitWrites = 64;
constexpr double kExitBound = 30;  // s: the rest cancelled, not sent one by one

// One side's fresh QP and region for the exit case, connected to the other's.
struct ExitPair {
  Rc rc;
  int fd = -1;
  void* mem = nullptr;
  ibv_mr* mr = nullptr;
  Info theirs{};
};

void exit_pair_open(ExitPair* e, bool sender) {
  rc_open(&e->rc);
  e->fd = unload_open();
  if (posix_memalign(&e->mem, 4096, kLen)) die("posix_memalign", -ENOMEM);
  memset(e->mem, 0, kLen);
  e->mr = ibv_reg_mr(e->rc.pd, e->mem, kLen, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (!e->mr) die("ibv_reg_mr");
  if (int r = reg_mr(e->fd, e->mr, kRegionRw)) die("REG_REGION", r);
  const Info mine{e->rc.wire, e->mr->rkey, reinterpret_cast<uintptr_t>(e->mem)};
  put_file(sender ? "exit.A.info" : "exit.B.info", &mine, sizeof mine);
  get_file(sender ? "exit.B.info" : "exit.A.info", &e->theirs, sizeof e->theirs);
  rc_connect(&e->rc, e->theirs.wire);
  if (int r = reg_qp(e->fd, e->rc.dev.c_str(), e->rc.qp->qp_num)) die("REG_QP", r);
}

// A's child: queue the writes once B is silent, tell the parent when, and exit at once.
[[noreturn]] void exit_sender(int tell) {
  ExitPair e;
  exit_pair_open(&e, true);
  const char one = 1;
  put_file("exit.A.ready", &one, 1);
  char c;
  get_file("exit.B.silent", &c, 1);
  io_uring ring;
  if (int r = io_uring_queue_init(kExitWrites, &ring, 0)) die("io_uring_queue_init", r);
  std::vector<unload_direct_req> reqs(kExitWrites);
  auto* src = static_cast<uint8_t*>(e.mem);
  for (int i = 0; i < kExitWrites; i++) {
    reqs[i] = async_req(e.rc, e.mr, e.theirs, src, 64 * i, 64 * i, 64);
    queue_remote(&ring, e.fd, &reqs[i], 100 + i, i);
  }
  const int sub = io_uring_submit(&ring);
  const double t = now_s();
  xwrite(tell, &t, sizeof t);
  _exit(sub == kExitWrites ? 0 : 2);
}

// The module's reference count (/sys/module/unload/refcnt), -1 if unreadable.
long long module_refcnt() {
  FILE* f = fopen("/sys/module/unload/refcnt", "re");
  long long n = -1;
  if (f) {
    if (fscanf(f, "%lld", &n) != 1) n = -1;
    fclose(f);
  }
  return n;
}

void exit_case_sender() {
  int p[2];
  if (pipe(p)) die("pipe");
  const pid_t pid = fork();
  if (pid == 0) {
    close(p[0]);
    exit_sender(p[1]);
  }
  close(p[1]);
  const long long sessions = stat("sessions");  // ours; the child's comes and goes
  const long long refcnt = module_refcnt();
  double queued = 0;
  xread(p[0], &queued, sizeof queued);
  close(p[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  while (stat("sessions") > sessions && now_s() - queued < 2 * kExitBound) usleep(100000);
  const double took = now_s() - queued;
  expect(WIFEXITED(st) && WEXITSTATUS(st) == 0 && took < kExitBound && stat("sessions") == sessions,
         "exit_with_writes_queued",
         "status %d: %d writes queued to a silent target, the process's session gone %.1f s later (at most "
         "%.0f; sent one by one they would take minutes)",
         st, kExitWrites, took, kExitBound);
  // The write that was on the wire still holds the module until its ack wait ends (its
  // QP's timeout): the sandbox's rmmod follows this program.
  // On 6.12 the ring's own teardown holds the session's file until then too, whatever the
  // count says: wait out the longest ack wait (15 s) as well.
  for (int i = 0; i < 300 && module_refcnt() > refcnt; i++) usleep(100000);
  while (now_s() - queued < 16) usleep(100000);
  const char one = 1;
  put_file("exit.A.gone", &one, 1);
}

void exit_case_target() {
  ExitPair e;
  exit_pair_open(&e, false);
  char c;
  get_file("exit.A.ready", &c, 1);
  const long long placed = stat("remote_placed_writes");
  const char* link = "ip link set dev \"$(ip -o -4 addr show | awk -v a=\"$UNLOAD_HOST_ADDR/\" "
                     "'index($4, a) == 1 { print $2; exit }')\" ";
  if (system((std::string(link) + "down").c_str())) die("ip link set down");
  const char one = 1;
  put_file("exit.B.silent", &one, 1);
  get_file("exit.A.gone", &c, 1);
  if (system((std::string(link) + "up").c_str())) die("ip link set up");
  sleep(3);  // a write still on its way lands now
  // The one on the wire when the process went may land (the channel carries it on, as a
  // NIC's packet already sent may); none of those queued behind it.
  expect(stat("remote_placed_writes") <= placed + 1, "exit_nothing_queued_placed_later",
         "placed %lld (was %lld, at most one more)", stat("remote_placed_writes"), placed);
  ibv_dereg_mr(e.mr);
  free(e.mem);
  rc_close(&e.rc);
  close(e.fd);
}

int main() {
  const char* host = getenv("UNLOAD_HOST");
  const char* dir = getenv("UNLOAD_PAIR_DIR");
  if (!host || !dir) skip("not in a two-host sandbox (UNLOAD_HOST, UNLOAD_PAIR_DIR unset)");
  pair_dir = dir;
  const bool sender = std::strcmp(host, "A") == 0;
  watchdog(600, "the remote writes");

  Rc rc;
  rc_open(&rc);
  const int fd = unload_open();
  void* mem = nullptr;
  if (posix_memalign(&mem, 4096, kLen)) die("posix_memalign", -ENOMEM);
  auto* buf = static_cast<uint8_t*>(mem);
  memset(buf, 0, kLen);
  ibv_mr* mr = ibv_reg_mr(rc.pd, buf, kLen, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (!mr) die("ibv_reg_mr");
  if (int r = reg_mr(fd, mr, kRegionRw)) die("REG_REGION", r);

  Info mine{rc.wire, mr->rkey, reinterpret_cast<uintptr_t>(buf)}, theirs{};
  put_file(sender ? "remote.A.info" : "remote.B.info", &mine, sizeof mine);
  get_file(sender ? "remote.B.info" : "remote.A.info", &theirs, sizeof theirs);
  rc_connect(&rc, theirs.wire);
  if (int r = reg_qp(fd, rc.dev.c_str(), rc.qp->qp_num)) die("REG_QP", r);
  const char ready = 1;
  put_file(sender ? "remote.A.ready" : "remote.B.ready", &ready, 1);
  char peer_ready;
  get_file(sender ? "remote.B.ready" : "remote.A.ready", &peer_ready, 1);

  if (sender) {
    run_sender(rc, fd, buf, mr, theirs);
    run_sender_async(rc, fd, buf, mr, theirs);
    run_sender_errors(rc, fd, buf, mr, theirs);
    put_file("remote.A.done", &ready, 1);
    exit_case_sender();
  } else {
    char phase;
    get_file("remote.A.phase1", &phase, 1);
    to_error(rc.qp);
    put_file("remote.B.err", &ready, 1);
    get_file("remote.A.done", &phase, 1);
    check_target(buf);
    exit_case_target();
  }
  ibv_dereg_mr(mr);
  free(mem);
  rc_close(&rc);
  close(fd);
  finish();
}
