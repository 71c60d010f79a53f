// The parity matrix: one plain verbs program (no /dev/unload of its own), run once per
// case under the shim with UNLOAD_MODE=offload (the NIC does everything: the reference)
// and once with UNLOAD_MODE=unload (a paired local peer: every write is offered to the
// module first, which places it or refuses it, and a refused write is posted to the NIC).
// parity_test.sh compares the "outcome" lines of the two runs: they must be identical.
// Nothing here says what the outcome should be; rxe says it.
//
//   kmod_parity <case>     prints "outcome <key> <value>" and "info ..." lines
//
// Each case: two RC QPs of this process connected to each other on one device (the responder
// as the case wants it), a target MR over a canary-filled block, a control write (which
// in unload mode goes direct: the pair is live), the write under test, then the next
// request. Recorded: the completion status of each, both QPs' states after, and a hash
// and changed-byte count of every target block. The device is tests/support's (its rule,
// rxe0 in the sandbox). Exit 0 ran, 2 usage or set-up, 77 skip.
#include <dlfcn.h>
#include <infiniband/verbs.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "check.hpp"
#include "verbs.hpp"

namespace {

namespace t = unload::test;
using t::die;
using t::skip;

void outcome(const char* key, const std::string& v) {
  std::printf("outcome %s %s\n", key, v.c_str());
}

constexpr size_t kBlock = 64 * 1024;
constexpr size_t kOff = 4096 + 64;  // the MR starts here in the block
constexpr size_t kLen = 32 * 1024;  // MR length
constexpr uint8_t kFill = 0xc3;

using Dev = t::Device;

struct Qp {
  Dev* dev;
  ibv_pd* pd;
  ibv_cq* cq;
  ibv_qp* qp;
};

Qp make_qp(Dev* d, ibv_pd* pd) {
  Qp q{d, pd, t::make_cq(d->ctx, 512), nullptr};
  t::QpCaps caps;
  caps.send_wr = 256;
  caps.recv_wr = 4;
  caps.send_sge = 2;
  q.qp = t::make_rc_qp(pd, q.cq, q.cq, caps);
  return q;
}

// RESET -> INIT (with these access flags) -> RTR -> RTS, to the peer's QPN and GID; both
// directions start at PSN 0x100 unless rq_psn says otherwise.
void connect(Qp* q, const Qp& peer, int access, uint32_t rq_psn = 0x100) {
  t::RcPath p = t::loopback_path(*q->dev, peer.qp->qp_num);
  p.dgid = peer.dev->gid;
  p.rq_psn = rq_psn;
  p.sq_psn = 0x100;
  t::connect(q->qp, access, p);
}

constexpr int kRemote = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;

const char* state_name(int s) {
  static const char* n[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
  return s >= 0 && s <= 6 ? n[s] : "?";
}

int qp_state(const Qp& q) {
  ibv_qp_attr a{};
  ibv_qp_init_attr ia{};
  if (ibv_query_qp(q.qp, &a, IBV_QP_STATE, &ia)) return -1;
  return a.qp_state;
}

// The responder's state settles a little after the requester's completion: wait until
// it leaves RTS (at most ~3 s; the same wait in both runs), then report it. When the last
// write on the pair succeeded the responder accepted it in RTS and stays there: no wait.
std::string settled_state(const Qp& q, const std::string& last) {
  int s = qp_state(q);
  for (int i = 0; i < 300 && s == IBV_QPS_RTS && last != "success"; i++) {
    usleep(10000);
    s = qp_state(q);
  }
  return state_name(s);
}

// The source: an MR of the sender's PD.
struct Src {
  uint8_t* buf;
  ibv_mr* mr;
};

Src make_src(ibv_pd* pd) {
  Src s{static_cast<uint8_t*>(
            mmap(nullptr, kBlock, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)),
        nullptr};
  if (s.buf == MAP_FAILED) die("mmap");
  for (size_t i = 0; i < kBlock; i++) s.buf[i] = static_cast<uint8_t>(i * 7 + 1);
  s.mr = ibv_reg_mr(pd, s.buf, kBlock, IBV_ACCESS_LOCAL_WRITE);
  if (!s.mr) die("source MR");
  return s;
}

struct Target {
  uint8_t* block;  // kBlock bytes, the MR over [kOff, kOff + kLen)
  ibv_mr* mr;
  uint64_t addr() const { return reinterpret_cast<uintptr_t>(block + kOff); }
};

Target make_target(ibv_pd* pd, int access) {
  Target t{static_cast<uint8_t*>(
               mmap(nullptr, kBlock, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)),
           nullptr};
  if (t.block == MAP_FAILED) die("mmap");
  memset(t.block, kFill, kBlock);
  t.mr = ibv_reg_mr(pd, t.block + kOff, kLen, access);
  if (!t.mr) die("target MR");
  return t;
}

// Hash and changed bytes of a target block.
std::string digest(const Target& t) {
  uint64_t h = 1469598103934665603ULL;
  size_t changed = 0;
  for (size_t i = 0; i < kBlock; i++) {
    h = (h ^ t.block[i]) * 1099511628211ULL;
    changed += t.block[i] != kFill;
  }
  char b[64];
  snprintf(b, sizeof b, "changed=%zu fnv=%016llx", changed, static_cast<unsigned long long>(h));
  return b;
}

// One signaled RDMA WRITE, waited for: its completion status.
// How long write1 waits for a completion.
std::chrono::milliseconds g_write_wait{120000};

// Posts one signaled RDMA WRITE from src + src_off: ibv_post_send's value.
int post1(const Qp& s, const Src& src, uint32_t lkey, uint64_t src_off, uint32_t rkey, uint64_t raddr,
          uint32_t len) {
  ibv_sge sge{reinterpret_cast<uintptr_t>(src.buf) + src_off, len, lkey};
  ibv_send_wr w{}, *bad = nullptr;
  w.wr_id = 1;
  w.sg_list = &sge;
  w.num_sge = 1;
  w.opcode = IBV_WR_RDMA_WRITE;
  w.send_flags = IBV_SEND_SIGNALED;
  w.wr.rdma.rkey = rkey;
  w.wr.rdma.remote_addr = raddr;
  return ibv_post_send(s.qp, &w, &bad);
}

std::string write1(const Qp& s, const Src& src, uint32_t lkey, uint64_t src_off, uint32_t rkey,
                   uint64_t raddr, uint32_t len) {
  if (int rc = post1(s, src, lkey, src_off, rkey, raddr, len)) return std::string("post_error=") + strerror(rc);
  ibv_wc wc{};
  // A hang guard (rxe completes or flushes everything else within a few seconds): past
  // g_write_wait the outcome says so instead of the test timing out.
  const auto deadline = std::chrono::steady_clock::now() + g_write_wait;
  for (int i = 0;; i++) {
    int n = ibv_poll_cq(s.cq, 1, &wc);
    if (n < 0) return "poll_error";
    if (n == 1) return ibv_wc_status_str(wc.status);
    if (std::chrono::steady_clock::now() > deadline) return "no_completion";
    if (i > 1000) usleep(100);
  }
}

// The common frame: the control write, the write under test, the next request, states.
struct Frame {
  Dev d0;
  ibv_pd* pd = nullptr;
  Qp s{}, r{};
  Src src{};
  Target t{};
};

void setup(Frame* f, int responder_access) {
  f->d0 = t::open_device();
  f->pd = t::make_pd(f->d0.ctx);
  f->s = make_qp(&f->d0, f->pd);
  f->r = make_qp(&f->d0, f->pd);
  f->src = make_src(f->pd);
  f->t = make_target(f->pd, kRemote);
  connect(&f->s, f->r, kRemote);
  connect(&f->r, f->s, responder_access);
}

void control(Frame* f, const char* key) {
  outcome(key, write1(f->s, f->src, f->src.mr->lkey, 0, f->t.mr->rkey, f->t.addr() + 128, 256));
}

void finish(Frame* f, std::vector<const Target*> extra = {}) {
  const std::string next = write1(f->s, f->src, f->src.mr->lkey, 512, f->t.mr->rkey, f->t.addr() + 1024, 64);
  outcome("next", next);
  outcome("sender_state", state_name(qp_state(f->s)));
  outcome("responder_state", settled_state(f->r, next));
  outcome("target", digest(f->t));
  int i = 0;
  for (const Target* t : extra) outcome(("target" + std::to_string(++i)).c_str(), digest(*t));
}

// --- cases ---------------------------------------------------------------------------

// The report: the responder QP allows local writes only.
int case_qp_no_remote_write() {
  Frame f;
  setup(&f, IBV_ACCESS_LOCAL_WRITE);
  outcome("write", write1(f.s, f.src, f.src.mr->lkey, 0, f.t.mr->rkey, f.t.addr(), 64));
  finish(&f);
  return 0;
}

// Two verbs contexts of one device: their first PDs have the same handle. The write
// names an MR of context 1's PD while the responder QP is on context 2's PD.
int case_two_contexts() {
  Frame f;
  f.d0 = t::open_device();
  Dev d0b = t::open_device(f.d0.name.c_str());
  ibv_pd* pd1 = t::make_pd(f.d0.ctx);
  ibv_pd* pd2 = t::make_pd(d0b.ctx);
  std::printf("info: pd handles %u and %u\n", pd1->handle, pd2->handle);
  f.pd = pd1;
  f.s = make_qp(&f.d0, pd1);
  f.r = make_qp(&d0b, pd2);
  f.src = make_src(pd1);
  Target other = make_target(pd2, kRemote);  // on the responder's PD: the control target
  f.t = make_target(pd1, kRemote);           // on the sender's PD, same handle
  connect(&f.s, f.r, kRemote);
  connect(&f.r, f.s, kRemote);
  outcome("control", write1(f.s, f.src, f.src.mr->lkey, 0, other.mr->rkey, other.addr() + 128, 256));
  outcome("write", write1(f.s, f.src, f.src.mr->lkey, 0, f.t.mr->rkey, f.t.addr(), 64));
  const std::string next = write1(f.s, f.src, f.src.mr->lkey, 512, other.mr->rkey, other.addr() + 1024, 64);
  outcome("next", next);
  outcome("sender_state", state_name(qp_state(f.s)));
  outcome("responder_state", settled_state(f.r, next));
  outcome("target_other_pd", digest(f.t));
  outcome("target_responder_pd", digest(other));
  return 0;
}

// Two devices, each with its own connected pair: equal QPNs, and target MRs with equal
// rkeys. Writes on rxe0's pair must land in rxe0's MR only; an address of rxe1's MR
// with that rkey is out of bounds on rxe0.
int case_two_devices() {
  Dev d0 = t::open_device(), d1;
  // The second device: the sandbox's other rxe (--rxe 2), by name.
  const char* second = d0.name == "rxe1" ? "rxe0" : "rxe1";
  if (unload::verbs::open_device(&d1, second)) skip("needs a second device, rxe1 (--rxe 2)");
  ibv_pd* p0 = ibv_alloc_pd(d0.ctx);
  ibv_pd* p1 = ibv_alloc_pd(d1.ctx);
  Qp s0 = make_qp(&d0, p0), r0 = make_qp(&d0, p0);
  Qp s1 = make_qp(&d1, p1), r1 = make_qp(&d1, p1);
  Src src0 = make_src(p0), src1 = make_src(p1);
  Target t0{}, t1{};
  // rxe keys are (pool index << 8 | random 8 bits): register on both in step until the
  // keys agree, releasing the misses.
  bool equal = false;
  for (int i = 0; i < 4096 && !equal; i++) {
    Target a = make_target(p0, kRemote), b = make_target(p1, kRemote);
    equal = a.mr->rkey == b.mr->rkey;
    if (equal) {
      t0 = a;
      t1 = b;
    } else {
      ibv_dereg_mr(a.mr);
      ibv_dereg_mr(b.mr);
      munmap(a.block, kBlock);
      munmap(b.block, kBlock);
    }
  }
  std::printf("info: qpns rxe0 %u/%u rxe1 %u/%u, rkeys %s\n", s0.qp->qp_num, r0.qp->qp_num, s1.qp->qp_num,
              r1.qp->qp_num, equal ? "equal" : "never equal");
  outcome("qpns_equal", s0.qp->qp_num == s1.qp->qp_num && r0.qp->qp_num == r1.qp->qp_num ? "yes" : "no");
  outcome("rkeys_equal", equal ? "yes" : "no");
  if (!equal) return 0;
  connect(&s0, r0, kRemote);
  connect(&r0, s0, kRemote);
  connect(&s1, r1, kRemote);
  connect(&r1, s1, kRemote);
  outcome("control0", write1(s0, src0, src0.mr->lkey, 0, t0.mr->rkey, t0.addr() + 128, 256));
  outcome("control1", write1(s1, src1, src1.mr->lkey, 4096, t1.mr->rkey, t1.addr() + 256, 512));
  outcome("target0", digest(t0));
  outcome("target1", digest(t1));
  // rxe0's pair, rkey K, an address inside rxe1's MR only.
  outcome("write", write1(s0, src0, src0.mr->lkey, 0, t0.mr->rkey, t1.addr() + 8, 64));
  const std::string next = write1(s0, src0, src0.mr->lkey, 512, t0.mr->rkey, t0.addr() + 1024, 64);
  outcome("next", next);
  outcome("sender0_state", state_name(qp_state(s0)));
  outcome("responder0_state", settled_state(r0, next));
  outcome("sender1_state", state_name(qp_state(s1)));
  outcome("responder1_state", state_name(qp_state(r1)));
  outcome("target0_after", digest(t0));
  outcome("target1_after", digest(t1));
  return 0;
}

// ibv_rereg_mr drops REMOTE_WRITE from the target MR (rxe without rereg fails it alike
// in both runs: reported, then the write goes to the unchanged MR).
int case_rereg_drop_remote_write() {
  Frame f;
  setup(&f, kRemote);
  control(&f, "control");
  int rc = ibv_rereg_mr(f.t.mr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0, IBV_ACCESS_LOCAL_WRITE);
  outcome("rereg", rc == 0 ? "ok" : "failed");
  if (rc) std::printf("info: rereg-unsupported (%d)\n", rc);
  outcome("write", write1(f.s, f.src, f.src.mr->lkey, 0, f.t.mr->rkey, f.t.addr() + 2048, 64));
  finish(&f);
  return 0;
}

// The target MR is deregistered between writes of a stream.
int case_dereg_during_traffic() {
  Frame f;
  setup(&f, kRemote);
  std::string st;
  for (int i = 0; i < 16; i++) {
    std::string s = write1(f.s, f.src, f.src.mr->lkey, i * 64, f.t.mr->rkey, f.t.addr() + i * 512, 256);
    if (s != st) outcome(("stream" + std::to_string(i)).c_str(), s);
    st = s;
  }
  const uint32_t rkey = f.t.mr->rkey;
  if (ibv_dereg_mr(f.t.mr)) die("ibv_dereg_mr");
  outcome("write", write1(f.s, f.src, f.src.mr->lkey, 0, rkey, f.t.addr(), 64));
  const std::string next = write1(f.s, f.src, f.src.mr->lkey, 512, rkey, f.t.addr() + 1024, 64);
  outcome("next", next);
  outcome("sender_state", state_name(qp_state(f.s)));
  outcome("responder_state", settled_state(f.r, next));
  outcome("target", digest(f.t));
  return 0;
}

// The target MR is deregistered through libibverbs itself, past the shim, so the module
// is not told: the destroy must not wait on the MR the module keeps for the pair beyond
// its reaper (a leaked reference would hang it), and the next write meets an invalid rkey.
int case_dereg_unannounced() {
  Frame f;
  setup(&f, kRemote);
  control(&f, "control");
  void* verbs = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_NOLOAD);
  auto* real_dereg =
      verbs ? reinterpret_cast<int (*)(ibv_mr*)>(dlvsym(verbs, "ibv_dereg_mr", "IBVERBS_1.1")) : nullptr;
  if (!real_dereg) skip("libibverbs' own ibv_dereg_mr not found");
  const uint32_t rkey = f.t.mr->rkey;
  const auto t0 = std::chrono::steady_clock::now();
  outcome("dereg", real_dereg(f.t.mr) ? "failed" : "ok");
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
  std::printf("info dereg took %lld ms\n", static_cast<long long>(ms));
  const std::string write = write1(f.s, f.src, f.src.mr->lkey, 0, rkey, f.t.addr(), 64);
  outcome("write", write);
  outcome("sender_state", state_name(qp_state(f.s)));
  outcome("responder_state", settled_state(f.r, write));
  outcome("target", digest(f.t));
  return 0;
}

// Between two submissions, the responder QP drops REMOTE_WRITE from its access flags
// (RTS -> RTS): the kept pair's access must be read anew.
int case_responder_drops_remote_write() {
  Frame f;
  setup(&f, kRemote);
  control(&f, "control");
  ibv_qp_attr a{};
  a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE;
  outcome("modify", ibv_modify_qp(f.r.qp, &a, IBV_QP_ACCESS_FLAGS) ? "failed" : "ok");
  outcome("write", write1(f.s, f.src, f.src.mr->lkey, 0, f.t.mr->rkey, f.t.addr(), 64));
  finish(&f);
  return 0;
}

// Between two submissions, the responder QP is reset and reconnected, same AV, expecting
// a PSN 0x1000 ahead of any the sender has sent: the kept pair's PSNs must be read anew.
// rxe's responder takes the write for a duplicate and its requester never completes it
// (none within 120 s in our runs), so the outcome is "no completion within 3 s".
int case_responder_reconnected_ahead() {
  Frame f;
  setup(&f, kRemote);
  control(&f, "control");
  g_write_wait = std::chrono::milliseconds(3000);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RESET;
  outcome("reset", ibv_modify_qp(f.r.qp, &a, IBV_QP_STATE) ? "failed" : "ok");
  connect(&f.r, f.s, kRemote, 0x1100);
  outcome("write", write1(f.s, f.src, f.src.mr->lkey, 0, f.t.mr->rkey, f.t.addr(), 64));
  finish(&f);
  return 0;
}

// Between two submissions, the responder QP is destroyed: the destroy must not wait on
// the module's kept pair (a leaked reference would hang it). No write follows: rxe 6.1
// never completes a write to a destroyed QP (no retry error within 120 s, either path).
int case_responder_destroyed() {
  Frame f;
  setup(&f, kRemote);
  control(&f, "control");
  const auto t0 = std::chrono::steady_clock::now();
  outcome("destroy", ibv_destroy_qp(f.r.qp) ? "failed" : "ok");
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
  std::printf("info destroy took %lld ms\n", static_cast<long long>(ms));
  outcome("sender_state", state_name(qp_state(f.s)));
  outcome("target", digest(f.t));
  return 0;
}

// The responder's own NIC request fails and rxe moves its QP to ERR by itself, with no
// event and before the responder polls: `remote`, a write to the sender with an rkey it
// never gave (the sender's QP goes to ERR too, as the target of a bad request); `local`, a
// write from an lkey the responder does not hold (only the responder's QP). The sender's
// next write then meets a QP in ERR, which only the completion the responder has not polled
// yet would tell its shim. rxe never completes a write to a responder in ERR (none within
// 20 s in our runs), so the outcome there is "no completion within 3 s".
int case_responder_request_failed(bool remote) {
  Frame f;
  setup(&f, kRemote);
  control(&f, "control");
  g_write_wait = std::chrono::milliseconds(3000);
  Src rsrc = make_src(f.pd);
  const int rc = post1(f.r, rsrc, remote ? rsrc.mr->lkey : rsrc.mr->lkey ^ 0x55aa00, 0,
                       remote ? f.src.mr->rkey ^ 0x5a5a00 : f.src.mr->lkey, reinterpret_cast<uintptr_t>(f.src.buf), 64);
  outcome("responder_post", rc ? "failed" : "ok");
  // Not polled: wait until the failure moved the QP(s) (the same wait in every run).
  const Qp& moved = remote ? f.s : f.r;
  for (int i = 0; i < 300 && qp_state(moved) == IBV_QPS_RTS; i++) usleep(10000);
  outcome("moved_state", state_name(qp_state(moved)));
  outcome("write", write1(f.s, f.src, f.src.mr->lkey, 0, f.t.mr->rkey, f.t.addr(), 64));
  ibv_wc wc{};
  std::string rst = "no_completion";
  for (int i = 0; i < 3000; i++) {
    const int n = ibv_poll_cq(f.r.cq, 1, &wc);
    if (n == 1) {
      rst = ibv_wc_status_str(wc.status);
      break;
    }
    usleep(1000);
  }
  outcome("responder_request", rst);
  finish(&f);
  return 0;
}

// Bounds edges: one write just outside (or wrapping around) the MR.
int case_bounds(const std::string& edge) {
  Frame f;
  setup(&f, kRemote);
  control(&f, "control");
  const uint64_t a = f.t.addr(), e = a + kLen;
  uint64_t raddr;
  uint32_t len = 8;
  if (edge == "before_start")
    raddr = a - 1;
  else if (edge == "past_end")
    raddr = e - 7;
  else if (edge == "at_end") {
    raddr = e;
    len = 1;
  } else if (edge == "wrap_2^64-8")
    raddr = ~0ULL - 7;
  else if (edge == "wrap_2^64-1") {
    raddr = ~0ULL;
    len = 2;
  } else if (edge == "len_region+1") {
    raddr = a;
    len = kLen + 1;
  } else if (edge == "zero_addr")
    raddr = 0;
  else if (edge == "last_byte_ok") {
    raddr = e - 1;
    len = 1;
  } else if (edge == "whole_region_ok") {
    raddr = a;
    len = kLen;
  } else
    return 2;
  outcome("write", write1(f.s, f.src, f.src.mr->lkey, 0, f.t.mr->rkey, raddr, len));
  finish(&f);
  return 0;
}

// 10k writes with random rkeys (never the process's own MRs').
int case_rkey_sweep(int n) {
  Frame f;
  setup(&f, kRemote);
  control(&f, "control");
  std::mt19937 rng(4242);
  std::map<std::string, int> hist;
  std::string first;
  int posted = 0, done = 0;
  while (done < n) {
    while (posted < n && posted - done < 128) {
      uint32_t rkey;
      do rkey = static_cast<uint32_t>(rng());
      while (rkey == f.t.mr->rkey || rkey == f.src.mr->rkey);
      ibv_sge sge{reinterpret_cast<uintptr_t>(f.src.buf), 64, f.src.mr->lkey};
      ibv_send_wr w{}, *bad = nullptr;
      w.wr_id = static_cast<uint64_t>(posted);
      w.sg_list = &sge;
      w.num_sge = 1;
      w.opcode = IBV_WR_RDMA_WRITE;
      w.send_flags = IBV_SEND_SIGNALED;
      w.wr.rdma.rkey = rkey;
      w.wr.rdma.remote_addr = f.t.addr() + (rng() % (kLen - 64));
      if (ibv_post_send(f.s.qp, &w, &bad)) die("post");
      posted++;
    }
    ibv_wc wc[32];
    int k = ibv_poll_cq(f.s.cq, 32, wc);
    if (k < 0) die("poll");
    for (int i = 0; i < k; i++, done++) {
      hist[ibv_wc_status_str(wc[i].status)]++;
      if (first.empty()) first = ibv_wc_status_str(wc[i].status);
    }
  }
  outcome("first", first);
  std::string h;
  for (auto& [k, v] : hist) h += k + "=" + std::to_string(v) + ";";
  outcome("statuses", h);
  finish(&f);
  return 0;
}

// The sender's SGE names a bad lkey, or an address outside its MR.
int case_bad_lkey(bool outside) {
  Frame f;
  setup(&f, kRemote);
  control(&f, "control");
  if (outside)
    outcome("write", write1(f.s, f.src, f.src.mr->lkey, kBlock - 16, f.t.mr->rkey, f.t.addr(), 64));
  else
    outcome("write", write1(f.s, f.src, f.src.mr->lkey ^ 0x55aa00, 0, f.t.mr->rkey, f.t.addr(), 64));
  finish(&f);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const std::string c = argc > 1 ? argv[1] : "";
  if (c == "qp_no_remote_write") return case_qp_no_remote_write();
  if (c == "two_contexts") return case_two_contexts();
  if (c == "two_devices") return case_two_devices();
  if (c == "rereg_drop_remote_write") return case_rereg_drop_remote_write();
  if (c == "dereg_during_traffic") return case_dereg_during_traffic();
  if (c == "dereg_unannounced") return case_dereg_unannounced();
  if (c == "responder_drops_remote_write") return case_responder_drops_remote_write();
  if (c == "responder_reconnected_ahead") return case_responder_reconnected_ahead();
  if (c == "responder_destroyed") return case_responder_destroyed();
  if (c == "responder_request_failed:remote") return case_responder_request_failed(true);
  if (c == "responder_request_failed:local") return case_responder_request_failed(false);
  if (c.rfind("bounds:", 0) == 0) return case_bounds(c.substr(7));
  if (c == "rkey_sweep") return case_rkey_sweep(argc > 2 ? atoi(argv[2]) : 10000);
  if (c == "bad_lkey") return case_bad_lkey(false);
  if (c == "lkey_outside_mr") return case_bad_lkey(true);
  std::fprintf(stderr, "usage: kmod_parity <case>\n");
  return 2;
}
