// The shim's instructions a write, counted (scripts/bench --count): a fixed run of signaled
// RDMA WRITEs of one shape from --qps QPs to as many QPs of this process on the same
// device, under `valgrind --tool=callgrind --collect-atstart=no`. Callgrind collects only
// inside the verbs calls, in three passes of their own, each one dump:
//   post   the writes' ibv_post_send (their completions busy-polled, not collected);
//   poll   the same writes again, every ibv_poll_cq collected, empty or not;
//   empty  as many polls of the quiet CQ, so the poll pass's empty polls can be taken out.
// The counts each pass made go to --out as "name value" lines; count_report.py reads both
// and takes the provider's instructions out. Counts, never timings: a write's instructions
// do not depend on how fast anything ran, apart from how many polls found nothing, which
// are counted and taken out.
//
// The warm-up (uncounted) is 200 writes and at least 4 a QP.
//
// --poller=thread: every poll (each pass's and the warm-up's) is made by a thread of its
// own, as in a program with a completion thread; the posting thread waits for each
// write's completion there before its next post.
//
// --signal_every=N (one QP, N up to its 16 send slots): one write in N signaled, the others
// not, as a stream (ib_write_bw) has them; a signaled write's completion is waited for,
// which also frees the unsignaled ones' slots before it.
//
// --kernel (run without valgrind) counts instead what the writes cost outside the process,
// over one pass of --writes writes (post and busy-poll each): the system calls this process
// entered (tracepoint raw_syscalls:sys_enter), its context switches, and the packets the
// device sent (rxe's hw_counters/sent_pkts: the request and its acknowledgement on one
// device's loopback). A counter the kernel does not offer is left out of --out.
//
//   bench_write_count --out=FILE [--qps=N] [--writes=N] [--warmup=N] [--bytes=N] [--kernel]
//                     [--targets=same|random] [--footprint_mib=N] [--device=NAME] [--gid=N]
//                     [--poller=same|thread] [--signal_every=N]
#include "verbs_env.hpp"

#include <infiniband/verbs.h>
#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <valgrind/callgrind.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace uv = unload::verbs;

namespace {

struct Options {
  std::string out, device;
  int gid = -1;
  uint32_t qps = 1, writes = 1000, bytes = 8, footprint_mib = 16;
  int64_t warmup = -1;  // -1: 200, and at least 4 writes a QP
  bool random_targets = false;
  bool kernel = false;  // count system calls, context switches and packets, not instructions
  bool poll_thread = false;  // polls made by a thread of their own (--poller=thread)
  uint32_t signal_every = 1;
};

[[noreturn]] void die(const char* what, int err = errno) {
  std::fprintf(stderr, "bench_write_count: %s: %s\n", what, std::strerror(err > 0 ? err : -err));
  std::exit(2);
}

[[noreturn]] void usage(const char* arg) {
  std::fprintf(stderr, "bench_write_count: bad argument '%s' (see the file's header)\n", arg);
  std::exit(2);
}

bool take(const char* arg, const char* name, const char** v) {
  const size_t n = std::strlen(name);
  if (std::strncmp(arg, name, n) != 0 || arg[n] != '=') return false;
  *v = arg + n + 1;
  return true;
}

uint32_t number(const char* arg, const char* v, uint32_t lo, uint32_t hi) {
  char* end = nullptr;
  errno = 0;
  const unsigned long x = std::strtoul(v, &end, 10);
  if (errno || end == v || *end || x < lo || x > hi) usage(arg);
  return static_cast<uint32_t>(x);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    const char* v = nullptr;
    if (take(a, "--out", &v)) o.out = v;
    else if (take(a, "--device", &v)) o.device = v;
    else if (take(a, "--gid", &v)) o.gid = static_cast<int>(number(a, v, 0, 255));
    else if (take(a, "--qps", &v)) o.qps = number(a, v, 1, 4096);
    else if (take(a, "--writes", &v)) o.writes = number(a, v, 1, 1u << 24);
    else if (take(a, "--warmup", &v)) o.warmup = number(a, v, 0, 1u << 24);
    else if (take(a, "--bytes", &v)) o.bytes = number(a, v, 1, 1u << 20);
    else if (take(a, "--footprint_mib", &v)) o.footprint_mib = number(a, v, 1, 1024);
    else if (!std::strcmp(a, "--kernel")) o.kernel = true;
    else if (take(a, "--poller", &v) && !std::strcmp(v, "same"))
      o.poll_thread = false;
    else if (take(a, "--poller", &v) && !std::strcmp(v, "thread"))
      o.poll_thread = true;
    else if (take(a, "--targets", &v) && !std::strcmp(v, "same")) o.random_targets = false;
    else if (take(a, "--targets", &v) && !std::strcmp(v, "random")) o.random_targets = true;
    else if (take(a, "--signal_every", &v))
      o.signal_every = number(a, v, 1, 16);
    else usage(a);
  }
  if (o.out.empty()) usage("--out is required");
  // Over several QPs a QP could take only unsignaled writes and run out of send slots.
  if (o.signal_every > 1 && o.qps > 1) usage("--signal_every with --qps above 1");
  // Each QP's memos (the route's shape, the lanes) arm at its first writes: a run over
  // many QPs counts their steady writes only once every QP wrote a few.
  if (o.warmup < 0) o.warmup = std::max<int64_t>(200, int64_t{4} * o.qps);
  return o;
}

void* map(size_t len) {
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) die("mmap");
  return p;
}

// A number in a sysfs or tracefs file; -1 when it cannot be read.
int64_t read_number(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "r");
  if (!f) return -1;
  long long v = -1;
  if (std::fscanf(f, "%lld", &v) != 1) v = -1;
  std::fclose(f);
  return v;
}

// The counters of --kernel, one perf group (enabled and disabled by one call each) over
// this process and the threads it makes; a counter the kernel refuses stays closed (-1).
class KernelCounters {
 public:
  KernelCounters() {
    int64_t id = read_number("/sys/kernel/tracing/events/raw_syscalls/sys_enter/id");
    if (id < 0) id = read_number("/sys/kernel/debug/tracing/events/raw_syscalls/sys_enter/id");
    if (id >= 0) syscalls_ = open_counter(PERF_TYPE_TRACEPOINT, static_cast<uint64_t>(id), -1);
    switches_ = open_counter(PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CONTEXT_SWITCHES, syscalls_);
  }
  ~KernelCounters() {
    if (syscalls_ >= 0) close(syscalls_);
    if (switches_ >= 0) close(switches_);
  }

  void start() { group(PERF_EVENT_IOC_ENABLE); }
  void stop() { group(PERF_EVENT_IOC_DISABLE); }

  // The system calls counted, less the one that stopped the count; -1 when not counted.
  int64_t syscalls() const { return syscalls_ >= 0 ? value(syscalls_) - 1 : -1; }
  int64_t switches() const { return switches_ >= 0 ? value(switches_) : -1; }

 private:
  static int open_counter(uint32_t type, uint64_t config, int leader) {
    perf_event_attr a{};
    a.size = sizeof a;
    a.type = type;
    a.config = config;
    a.disabled = leader < 0;  // a member follows its leader
    a.inherit = 1;
    return static_cast<int>(syscall(SYS_perf_event_open, &a, 0, -1, leader, 0));
  }
  void group(unsigned long op) const {
    const int fd = syscalls_ >= 0 ? syscalls_ : switches_;
    if (fd >= 0) ioctl(fd, op, syscalls_ >= 0 ? PERF_IOC_FLAG_GROUP : 0);
  }
  static int64_t value(int fd) {
    uint64_t v = 0;
    return read(fd, &v, sizeof v) == static_cast<ssize_t>(sizeof v) ? static_cast<int64_t>(v) : -1;
  }

  int syscalls_ = -1;
  int switches_ = -1;
};

// Runs work on the polling thread: this one (--poller=same) or a thread of its own, handed
// each piece and waited for.
class Poller {
 public:
  explicit Poller(bool own_thread) {
    if (own_thread) thread_ = std::thread([this] { serve(); });
  }
  ~Poller() {
    if (!thread_.joinable()) return;
    run(nullptr);
    thread_.join();
  }
  // Runs f there (nullptr: the thread ends).
  void run(std::function<void()> f) {
    if (!thread_.joinable()) {
      if (f) f();
      return;
    }
    std::unique_lock<std::mutex> l(mu_);
    work_ = std::move(f);
    stop_ = !work_;
    given_ = true;
    cv_.notify_all();
    cv_.wait(l, [this] { return !given_; });
  }

 private:
  void serve() {
    std::unique_lock<std::mutex> l(mu_);
    for (;;) {
      cv_.wait(l, [this] { return given_; });
      if (!stop_) work_();
      given_ = false;
      cv_.notify_all();
      if (stop_) return;
    }
  }
  std::thread thread_;
  std::mutex mu_;  // guards work_, given_ and stop_
  std::condition_variable cv_;
  std::function<void()> work_;
  bool given_ = false, stop_ = false;
};

class Run {
 public:
  explicit Run(const Options& o) : o_(o), poller_(o.poll_thread) {}

  void setup() {
    if (int rc = uv::open_device(&d_, o_.device.c_str(), o_.gid)) die(uv::open_error(rc), rc);
    pd_ = ibv_alloc_pd(d_.ctx);
    if (!pd_) die("ibv_alloc_pd");
    const int depth = 16;
    scq_ = ibv_create_cq(d_.ctx, depth * static_cast<int>(o_.qps), nullptr, nullptr, 0);
    rcq_ = ibv_create_cq(d_.ctx, 16, nullptr, nullptr, 0);
    if (!scq_ || !rcq_) die("ibv_create_cq");
    src_len_ = o_.bytes;
    dst_len_ = o_.random_targets ? size_t{o_.footprint_mib} << 20 : (size_t{o_.bytes} + 4095) / 4096 * 4096;
    src_ = static_cast<uint8_t*>(map(src_len_));
    std::memset(src_, 0x5a, src_len_);
    dst_ = static_cast<uint8_t*>(map(dst_len_));
    smr_ = ibv_reg_mr(pd_, src_, src_len_, IBV_ACCESS_LOCAL_WRITE);
    dmr_ = ibv_reg_mr(pd_, dst_, dst_len_, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (!smr_ || !dmr_) die("ibv_reg_mr");
    for (uint32_t i = 0; i < o_.qps; ++i) {
      ibv_qp_init_attr a{};
      a.send_cq = scq_;
      a.recv_cq = rcq_;
      a.qp_type = IBV_QPT_RC;
      a.cap.max_send_wr = depth;
      a.cap.max_recv_wr = 1;
      a.cap.max_send_sge = 1;
      a.cap.max_recv_sge = 1;
      ibv_qp* s = ibv_create_qp(pd_, &a);
      ibv_qp* t = ibv_create_qp(pd_, &a);
      if (!s || !t) die("ibv_create_qp");
      const char* step = "";
      if (int rc = uv::rc_connect(s, 0, loopback(t->qp_num), &step)) die(step, rc);
      if (int rc = uv::rc_connect(t, IBV_ACCESS_REMOTE_WRITE, loopback(s->qp_num), &step)) die(step, rc);
      senders_.push_back(s);
    }
  }

  // Writes [first, first + n) of the run's sequence; `collect` says which calls callgrind counts.
  void writes(uint64_t first, uint64_t n, bool collect_post, bool collect_poll) {
    for (uint64_t i = first; i < first + n; ++i) {
      ibv_sge sg{reinterpret_cast<uintptr_t>(src_), o_.bytes, smr_->lkey};
      ibv_send_wr w{};
      w.wr_id = i;
      w.sg_list = &sg;
      w.num_sge = 1;
      w.opcode = IBV_WR_RDMA_WRITE;
      const bool signaled = (i + 1) % o_.signal_every == 0;
      w.send_flags = signaled ? IBV_SEND_SIGNALED : 0;
      w.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(dst_) + target(i);
      w.wr.rdma.rkey = dmr_->rkey;
      ibv_send_wr* bad = nullptr;
      ibv_qp* qp = senders_[i % senders_.size()];
      if (collect_post) CALLGRIND_TOGGLE_COLLECT;
      const int rc = ibv_post_send(qp, &w, &bad);
      if (collect_post) CALLGRIND_TOGGLE_COLLECT;
      if (rc) die("ibv_post_send", rc);
      ++posted_;
      if (signaled) poller_.run([this, collect_poll] { wait_one(collect_poll); });
    }
  }

  // n polls of the quiet CQ, collected.
  void empty_polls(uint64_t n) {
    poller_.run([this, n] { empty_polls_here(n); });
  }

  uint64_t polls = 0, empty = 0;  // of the collected polls

  // The packets the device has sent (rxe's counter); -1 when it has none. The kernel keeps
  // a read for the counters' `lifespan` (10 ms by default) and answers the same value
  // within it: a read waits that out first.
  int64_t packets_sent() const {
    usleep(50'000);
    return read_number("/sys/class/infiniband/" + d_.name + "/ports/" + std::to_string(d_.port) +
                       "/hw_counters/sent_pkts");
  }

 private:
  void empty_polls_here(uint64_t n) {
    ibv_wc wc;
    for (uint64_t i = 0; i < n; ++i) {
      CALLGRIND_TOGGLE_COLLECT;
      const int got = ibv_poll_cq(scq_, 1, &wc);
      CALLGRIND_TOGGLE_COLLECT;
      if (got != 0) die("a completion on the quiet CQ", EPROTO);
    }
  }

  uv::RcPath loopback(uint32_t qpn) const {
    uv::RcPath p;
    p.dest_qpn = qpn;
    p.dgid = d_.gid;
    p.sgid_index = d_.gid_index;
    p.port = d_.port;
    return p;
  }

  // The target of write i: the first page, or a pseudo-random page of the footprint (the
  // same sequence in every pass and every run).
  size_t target(uint64_t i) const {
    if (!o_.random_targets) return 0;
    uint64_t x = (i + 1) * 0x9e3779b97f4a7c15ull;
    x ^= x >> 31;
    const size_t pages = dst_len_ / 4096 - (o_.bytes + 4095) / 4096 + 1;
    return (x % pages) * 4096;
  }

  void wait_one(bool collect) {
    ibv_wc wc;
    for (;;) {
      if (collect) CALLGRIND_TOGGLE_COLLECT;
      const int got = ibv_poll_cq(scq_, 1, &wc);
      if (collect) CALLGRIND_TOGGLE_COLLECT;
      if (got < 0) die("ibv_poll_cq", EIO);
      if (collect) {
        ++polls;
        if (got == 0) ++empty;
      }
      if (got == 0) continue;
      if (wc.status != IBV_WC_SUCCESS) die(ibv_wc_status_str(wc.status), EIO);
      return;
    }
  }

  const Options& o_;
  uv::Device d_;
  ibv_pd* pd_ = nullptr;
  ibv_cq* scq_ = nullptr;
  ibv_cq* rcq_ = nullptr;
  ibv_mr* smr_ = nullptr;
  ibv_mr* dmr_ = nullptr;
  uint8_t* src_ = nullptr;
  uint8_t* dst_ = nullptr;
  size_t src_len_ = 0, dst_len_ = 0;
  std::vector<ibv_qp*> senders_;
  uint64_t posted_ = 0;
  Poller poller_;
};

}  // namespace

void write_head(FILE* f, const Options& o) {
  std::fprintf(f, "writes %u\nqps %u\nbytes %u\ntargets %s\npoller %s\nsignal_every %u\n", o.writes, o.qps,
               o.bytes, o.random_targets ? "random" : "same", o.poll_thread ? "thread" : "same",
               o.signal_every);
}

// --kernel: one pass of writes, counted from outside the process.
int count_kernel(const Options& o, Run& r) {
  if (RUNNING_ON_VALGRIND) usage("--kernel (under valgrind, which makes system calls of its own)");
  KernelCounters k;
  const int64_t sent0 = r.packets_sent();
  k.start();
  r.writes(static_cast<uint64_t>(o.warmup), o.writes, false, false);
  k.stop();
  const int64_t sent1 = r.packets_sent();
  FILE* f = std::fopen(o.out.c_str(), "w");
  if (!f) die(o.out.c_str());
  write_head(f, o);
  if (k.syscalls() >= 0) std::fprintf(f, "kernel_syscalls %lld\n", static_cast<long long>(k.syscalls()));
  if (k.switches() >= 0) std::fprintf(f, "kernel_switches %lld\n", static_cast<long long>(k.switches()));
  if (sent0 >= 0 && sent1 >= sent0) std::fprintf(f, "kernel_packets %lld\n", static_cast<long long>(sent1 - sent0));
  if (std::fclose(f)) die(o.out.c_str());
  return 0;
}

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  Run r(o);
  r.setup();
  const auto warmup = static_cast<uint64_t>(o.warmup);
  r.writes(0, warmup, false, false);
  if (o.kernel) return count_kernel(o, r);
  CALLGRIND_ZERO_STATS;
  r.writes(warmup, o.writes, true, false);
  CALLGRIND_DUMP_STATS_AT("post");
  r.writes(warmup + o.writes, o.writes, false, true);
  CALLGRIND_DUMP_STATS_AT("poll");
  r.empty_polls(o.writes);
  CALLGRIND_DUMP_STATS_AT("empty");
  FILE* f = std::fopen(o.out.c_str(), "w");
  if (!f) die(o.out.c_str());
  write_head(f, o);
  std::fprintf(f, "poll_calls %llu\npoll_empty %llu\nempty_calls %u\n", static_cast<unsigned long long>(r.polls),
               static_cast<unsigned long long>(r.empty), o.writes);
  if (std::fclose(f)) die(o.out.c_str());
  return 0;
}
