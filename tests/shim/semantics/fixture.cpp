// The semantics programs' common set-up (see fixture.hpp).
#include "fixture.hpp"

#include "rc_qp.hpp"

#include <signal.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstdarg>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

namespace sem {

void die(const char* what) {
  std::fflush(stdout);
  std::fprintf(stderr, "setup: %s: %s\n", what, std::strerror(errno));
  std::exit(2);
}

void skip(const char* why) {
  std::printf("skip: %s\n", why);
  std::fflush(stdout);
  std::exit(77);
}

void out(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::vprintf(fmt, ap);
  va_end(ap);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

namespace {

const char* g_wd_what = "";
std::string (*g_wd_note)() = nullptr;

void on_alarm(int) {
  // Diagnostics only: the run has failed already.
  std::string line = std::string("TIMEOUT: ") + g_wd_what;
  if (g_wd_note) line += " (" + g_wd_note() + ")";
  line += "\n";
  std::fflush(stdout);
  ssize_t w = write(1, line.data(), line.size());
  (void)w;
  _exit(3);
}

}  // namespace

void watchdog(unsigned seconds, const char* what, std::string (*note)()) {
  g_wd_what = what;
  g_wd_note = note;
  signal(SIGALRM, on_alarm);
  alarm(seconds);
}

namespace {

// What stops the stall watchdog: its progress() reads the program's state, which must
// outlive every sample. It samples only under g_stall_mu with g_stall_stop false, so once
// stop_watchdogs has set the flag under the lock, no sample runs or will run.
// Never destroyed: the detached thread may still be leaving a wait at exit.
std::mutex& g_stall_mu = *new std::mutex;
std::condition_variable& g_stall_cv = *new std::condition_variable;
bool g_stall_stop = false;  // guarded by g_stall_mu

}  // namespace

void stall_watchdog(unsigned seconds, const char* what, uint64_t (*progress)(), std::string (*note)()) {
  std::thread([=] {
    std::unique_lock<std::mutex> lk(g_stall_mu);
    uint64_t last = progress();
    unsigned still = 0;
    while (!g_stall_cv.wait_for(lk, std::chrono::seconds(1), [] { return g_stall_stop; })) {
      const uint64_t now = progress();
      still = now == last ? still + 1 : 0;
      last = now;
      if (still >= seconds) {
        g_wd_what = what;
        g_wd_note = note;
        on_alarm(0);
      }
    }
  }).detach();
}

void stop_watchdogs() {
  alarm(0);
  {
    std::lock_guard<std::mutex> lk(g_stall_mu);
    g_stall_stop = true;
  }
  g_stall_cv.notify_all();
}

Env open_env() {
  Env e;
  const char* want = std::getenv("UNLOAD_TEST_DEV") ? std::getenv("UNLOAD_TEST_DEV") : "rxe0";
  if (const char* g = std::getenv("UNLOAD_TEST_GID")) e.gid_index = std::atoi(g);
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  for (int i = 0; list && i < n; ++i)
    if (std::strcmp(ibv_get_device_name(list[i]), want) == 0) e.ctx = ibv_open_device(list[i]);
  if (list) ibv_free_device_list(list);
  if (!e.ctx) skip("no RDMA device named by UNLOAD_TEST_DEV (rxe0)");
  e.pd = ibv_alloc_pd(e.ctx);
  if (!e.pd) die("ibv_alloc_pd");
  if (ibv_query_gid(e.ctx, 1, e.gid_index, &e.gid)) die("ibv_query_gid");
  return e;
}

ibv_cq* make_cq(Env& e, int cqe, ibv_comp_channel* ch) {
  ibv_cq* cq = ibv_create_cq(e.ctx, cqe, nullptr, ch, 0);
  if (!cq) die("ibv_create_cq");
  return cq;
}

ibv_qp* make_qp(Env& e, ibv_cq* scq, ibv_cq* rcq, const QpCaps& caps) {
  ibv_qp_init_attr a{};
  a.send_cq = scq;
  a.recv_cq = rcq;
  a.qp_type = IBV_QPT_RC;
  a.sq_sig_all = caps.sig_all;
  a.cap.max_send_wr = caps.send_wr;
  a.cap.max_recv_wr = caps.recv_wr;
  a.cap.max_send_sge = caps.send_sge;
  a.cap.max_recv_sge = caps.recv_sge;
  a.cap.max_inline_data = caps.inline_data;
  ibv_qp* qp = ibv_create_qp(e.pd, &a);
  if (!qp) die("ibv_create_qp");
  return qp;
}

void connect(Env& e, ibv_qp* qp, uint32_t dest, ibv_mtu mtu) {
  unload::test::RcPath p;
  p.dest_qpn = dest;
  p.dgid = e.gid;
  p.sgid_index = e.gid_index;
  p.mtu = mtu;
  p.min_rnr_timer = 1;
  if (unload::test::rc_to_init(qp, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_LOCAL_WRITE))
    die("modify INIT");
  if (unload::test::rc_to_rtr(qp, p)) die("modify RTR");
  if (unload::test::rc_to_rts(qp, p)) die("modify RTS");
}

void connect_pair(Env& e, ibv_qp* a, ibv_qp* b, ibv_mtu mtu) {
  connect(e, a, b->qp_num, mtu);
  connect(e, b, a->qp_num, mtu);
}

uint8_t* alloc(size_t len) {
  const size_t pg = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* p =
      mmap(nullptr, (len + pg - 1) / pg * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) die("mmap");
  return static_cast<uint8_t*>(p);
}

ibv_mr* reg(Env& e, void* p, size_t len, int access) {
  ibv_mr* mr = ibv_reg_mr(e.pd, p, len, access);
  if (!mr) die("ibv_reg_mr");
  return mr;
}

Pair make_pair(Env& e, ibv_cq* scq, ibv_cq* rcq, size_t src_len, size_t dst_len, const QpCaps& caps,
               ibv_qp* sender, ibv_mtu mtu) {
  Pair p;
  p.s = sender ? sender : make_qp(e, scq, rcq, caps);
  p.r = make_qp(e, rcq, rcq, caps);
  p.src_len = src_len;
  p.dst_len = dst_len;
  p.src = alloc(src_len);
  p.dst = alloc(dst_len);
  p.smr = reg(e, p.src, src_len, IBV_ACCESS_LOCAL_WRITE);
  p.dmr = reg(e, p.dst, dst_len, kRemote);
  connect_pair(e, p.s, p.r, mtu);
  return p;
}

int post_write(ibv_qp* qp, uint64_t wr_id, const void* src, uint32_t len, uint32_t lkey, uint64_t raddr,
               uint32_t rkey, unsigned flags) {
  ibv_sge sg{reinterpret_cast<uintptr_t>(src), len, lkey};
  ibv_send_wr wr{}, *bad = nullptr;
  wr.wr_id = wr_id;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.sg_list = &sg;
  wr.num_sge = 1;
  wr.send_flags = flags;
  wr.wr.rdma.remote_addr = raddr;
  wr.wr.rdma.rkey = rkey;
  return ibv_post_send(qp, &wr, &bad);
}

uint64_t now_ms() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000 + static_cast<uint64_t>(ts.tv_nsec) / 1000000;
}

void sleep_ms(unsigned ms) {
  usleep(ms * 1000);
}

int collect(ibv_cq* cq, std::vector<ibv_wc>& got, size_t want, int timeout_ms, int max_per_poll) {
  const uint64_t end = now_ms() + static_cast<uint64_t>(timeout_ms);
  int n = 0;
  std::vector<ibv_wc> wc(static_cast<size_t>(max_per_poll));
  while (got.size() < want) {
    const int k = ibv_poll_cq(cq, max_per_poll, wc.data());
    if (k < 0) die("ibv_poll_cq");
    for (int i = 0; i < k; ++i) got.push_back(wc[static_cast<size_t>(i)]);
    n += k;
    if (k == 0) {
      if (now_ms() > end) break;
      usleep(50);
    }
  }
  return n;
}

int collect_extra(ibv_cq* cq, std::vector<ibv_wc>& got, int ms) {
  const uint64_t end = now_ms() + static_cast<uint64_t>(ms);
  int n = 0;
  ibv_wc wc[16];
  while (now_ms() < end) {
    const int k = ibv_poll_cq(cq, 16, wc);
    if (k < 0) die("ibv_poll_cq");
    for (int i = 0; i < k; ++i) got.push_back(wc[i]);
    n += k;
    if (k == 0) usleep(200);
  }
  return n;
}

const char* status_name(ibv_wc_status s) {
  switch (s) {
    case IBV_WC_SUCCESS:
      return "SUCCESS";
    case IBV_WC_LOC_LEN_ERR:
      return "LOC_LEN_ERR";
    case IBV_WC_LOC_QP_OP_ERR:
      return "LOC_QP_OP_ERR";
    case IBV_WC_LOC_EEC_OP_ERR:
      return "LOC_EEC_OP_ERR";
    case IBV_WC_LOC_PROT_ERR:
      return "LOC_PROT_ERR";
    case IBV_WC_WR_FLUSH_ERR:
      return "WR_FLUSH_ERR";
    case IBV_WC_MW_BIND_ERR:
      return "MW_BIND_ERR";
    case IBV_WC_BAD_RESP_ERR:
      return "BAD_RESP_ERR";
    case IBV_WC_LOC_ACCESS_ERR:
      return "LOC_ACCESS_ERR";
    case IBV_WC_REM_INV_REQ_ERR:
      return "REM_INV_REQ_ERR";
    case IBV_WC_REM_ACCESS_ERR:
      return "REM_ACCESS_ERR";
    case IBV_WC_REM_OP_ERR:
      return "REM_OP_ERR";
    case IBV_WC_RETRY_EXC_ERR:
      return "RETRY_EXC_ERR";
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return "RNR_RETRY_EXC_ERR";
    case IBV_WC_REM_ABORT_ERR:
      return "REM_ABORT_ERR";
    case IBV_WC_GENERAL_ERR:
      return "GENERAL_ERR";
    default:
      return "OTHER_ERR";
  }
}

std::string describe(const std::vector<ibv_wc>& wcs, size_t from) {
  std::string s;
  for (size_t i = from; i < wcs.size(); ++i) {
    if (!s.empty()) s += ' ';
    s += std::to_string(wcs[i].wr_id) + ":" + status_name(wcs[i].status);
  }
  return s.empty() ? "-" : s;
}

const char* qp_state(ibv_qp* qp) {
  static const char* n[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
  ibv_qp_attr a{};
  ibv_qp_init_attr ia{};
  if (ibv_query_qp(qp, &a, IBV_QP_STATE, &ia)) return "?";
  return a.qp_state <= IBV_QPS_ERR ? n[a.qp_state] : "?";
}

uint64_t fnv(const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

uint8_t pattern_byte(uint64_t seed, size_t i) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + i * 0xBF58476D1CE4E5B9ull;
  x ^= x >> 31;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 29;
  return static_cast<uint8_t>(x);
}

void fill(uint8_t* p, size_t n, uint64_t seed) {
  for (size_t i = 0; i < n; ++i) p[i] = pattern_byte(seed, i);
}

}  // namespace sem
