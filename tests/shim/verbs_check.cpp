// Our own verbs test program for the shim (run on rxe in the sandbox, with and without
// LD_PRELOAD). Loopback RC pairs inside one process. Built twice: verbs_check links
// libibverbs; verbs_dlopen (UNLOAD_DLOPEN) dlopens it and takes every entry point with
// dlsym, as transport modules and language bindings do.
//
//   verbs_check integrity [writes] [seed]   random sizes/paths on 4 QPs sharing one CQ
//                                           sized exactly, selective signaling; checks
//                                           every completion and the target checksums
//   verbs_check order [writes] [seed]       data-then-flag; a reader thread counts
//                                           violations (flag seen before its data)
//   verbs_check errors                      bad rkey, out of bounds, no remote write,
//                                           bad lkey, QP in error: prints statuses and
//                                           QP states (compare runs with and without)
//   verbs_dlopen basic [writes]             64-byte signaled writes, checked
//   verbs_check event [writes] [fd]         a send CQ with a completion channel: waits
//                                           with ibv_get_cq_event (fd: poll(2) on the
//                                           channel fd first); a lost wake-up fails
//   verbs_check threads [threads] [writes] [shared]
//                                           a QP per thread, separate CQs or one shared
//                                           CQ; checks completions and checksums
//   verbs_check fork [writes]               fork() after registration: the child exits,
//                                           the parent keeps writing, checked
//   verbs_check cqex [writes]               an ibv_create_cq_ex send CQ polled with
//                                           start_poll/next_poll/end_poll
//   verbs_check wrapi [writes] [seed] [noabort]
//                                           writes built with the ibv_qp_ex wr_* API in
//                                           batches of 1-3, some aborted (noabort: none);
//                                           checks completions and checksums (an aborted
//                                           write must place nothing)
//   verbs_check linger [destroy|keep]       writes on a loopback pair, then closes the
//                                           device (destroy: after destroying every object;
//                                           keep: leaving them to the close), prints
//                                           "closed" and sleeps 60 s: the device must be
//                                           removable meanwhile
//   verbs_check switch [rounds]             retunes /sys/kernel/unload/mode itself: data
//                                           posted in offload mode, then an 8-byte flag in
//                                           unload mode (direct); once the flag's post
//                                           returns, the data must be in place
//
// Environment: UNLOAD_TEST_DEV (rxe0), UNLOAD_TEST_GID (1). Exit 0 on success.
#include <infiniband/verbs.h>

#include <dlfcn.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "rc_qp.hpp"

#undef ibv_reg_mr

namespace {

// The entry points used, linked or taken with dlsym.
struct Verbs {
  decltype(&::ibv_get_device_list) get_device_list;
  decltype(&::ibv_get_device_name) get_device_name;
  decltype(&::ibv_open_device) open_device;
  decltype(&::ibv_alloc_pd) alloc_pd;
  decltype(&::ibv_create_cq) create_cq;
  decltype(&::ibv_create_qp) create_qp;
  decltype(&::ibv_modify_qp) modify_qp;
  decltype(&::ibv_query_qp) query_qp;
  decltype(&::ibv_query_gid) query_gid;
  decltype(&::ibv_reg_mr) reg_mr;
  decltype(&::ibv_wc_status_str) wc_status_str;
} V;

void load_verbs() {
#ifdef UNLOAD_DLOPEN
  void* h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    std::fprintf(stderr, "dlopen: %s\n", dlerror());
    std::exit(2);
  }
#define L(f)                                                   \
  V.f = reinterpret_cast<decltype(V.f)>(dlsym(h, "ibv_" #f));  \
  if (!V.f) {                                                  \
    std::fprintf(stderr, "dlsym ibv_" #f ": %s\n", dlerror()); \
    std::exit(2);                                              \
  }
#else
#define L(f) V.f = &::ibv_##f;
#endif
  L(get_device_list)
  L(get_device_name) L(open_device) L(alloc_pd) L(create_cq) L(create_qp) L(modify_qp) L(query_qp)
      L(query_gid) L(reg_mr) L(wc_status_str)
#undef L
}

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "verbs_check: %s: %s\n", what, std::strerror(errno));
  std::exit(2);
}

struct Env {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  int gid_index = 1;
  ibv_gid gid{};
};

Env open_env() {
  load_verbs();
  Env e;
  const char* want = std::getenv("UNLOAD_TEST_DEV") ? std::getenv("UNLOAD_TEST_DEV") : "rxe0";
  if (const char* g = std::getenv("UNLOAD_TEST_GID")) e.gid_index = std::atoi(g);
  int n = 0;
  ibv_device** list = V.get_device_list(&n);
  for (int i = 0; list && i < n; ++i)
    if (std::strcmp(V.get_device_name(list[i]), want) == 0) e.ctx = V.open_device(list[i]);
  if (!e.ctx) die("open device");
  e.pd = V.alloc_pd(e.ctx);
  if (!e.pd) die("alloc_pd");
  if (V.query_gid(e.ctx, 1, e.gid_index, &e.gid)) die("query_gid");
  return e;
}

// The capacities of every QP here.
ibv_qp_cap qp_cap(uint32_t depth) {
  ibv_qp_cap cap{};
  cap.max_send_wr = depth;
  cap.max_recv_wr = 16;
  cap.max_send_sge = 4;
  cap.max_recv_sge = 1;
  return cap;
}

ibv_qp* make_qp(Env& e, ibv_cq* scq, ibv_cq* rcq, uint32_t depth) {
  ibv_qp_init_attr a{};
  a.send_cq = scq;
  a.recv_cq = rcq;
  a.qp_type = IBV_QPT_RC;
  a.cap = qp_cap(depth);
  ibv_qp* qp = V.create_qp(e.pd, &a);
  if (!qp) die("create_qp");
  return qp;
}

void connect(Env& e, ibv_qp* qp, uint32_t dest) {
  unload::test::RcPath p;
  p.dest_qpn = dest;
  p.dgid = e.gid;
  p.sgid_index = e.gid_index;
  if (unload::test::rc_to_init(qp, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_LOCAL_WRITE,
                               V.modify_qp))
    die("INIT");
  if (unload::test::rc_to_rtr(qp, p, V.modify_qp)) die("RTR");
  if (unload::test::rc_to_rts(qp, p, V.modify_qp)) die("RTS");
}

ibv_mr* reg(Env& e, void* p, size_t len, int access) {
  ibv_mr* mr = V.reg_mr(e.pd, p, len, access);
  if (!mr) die("reg_mr");
  return mr;
}

uint64_t fnv(const uint8_t* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// ------------------------------------------------------------------ integrity

int integrity(long writes, uint64_t seed) {
  Env e = open_env();
  constexpr int kQps = 4;
  constexpr uint32_t kDepth = 64;  // send queue depth
  constexpr uint32_t kMaxLen = 4096;
  constexpr size_t kTarget = 1 << 20;
  // The send CQ is sized exactly: at most kDepth signaled requests per QP outstanding.
  ibv_cq* scq = V.create_cq(e.ctx, kQps * kDepth, nullptr, nullptr, 0);
  ibv_cq* rcq = V.create_cq(e.ctx, 16, nullptr, nullptr, 0);
  if (!scq || !rcq) die("create_cq");
  struct Q {
    ibv_qp *s, *r;
    std::vector<uint8_t> src, dst, shadow;
    ibv_mr *smr, *dmr;
    uint64_t posted = 0, completed = 0;  // requests; completed: all below are done
    std::deque<uint64_t> signaled;       // signaled request indices in post order
    uint32_t unsignaled_run = 0;
  } q[kQps];
  std::mt19937_64 rng(seed);
  for (auto& x : q) {
    x.s = make_qp(e, scq, rcq, kDepth);
    x.r = make_qp(e, rcq, rcq, kDepth);
    x.src.resize(size_t{kDepth} * kMaxLen);
    x.dst.assign(kTarget, 0);
    x.shadow.assign(kTarget, 0);
    x.smr = reg(e, x.src.data(), x.src.size(), IBV_ACCESS_LOCAL_WRITE);
    x.dmr = reg(e, x.dst.data(), x.dst.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  }
  for (auto& x : q) {
    connect(e, x.s, x.r->qp_num);
    connect(e, x.r, x.s->qp_num);
  }

  long errors = 0, order_errors = 0, completions = 0, signaled_total = 0;
  auto poll = [&](bool block) {
    ibv_wc wc[16];
    for (;;) {
      const int n = ibv_poll_cq(scq, 16, wc);
      if (n < 0) die("poll_cq");
      for (int i = 0; i < n; ++i) {
        ++completions;
        const int qi = static_cast<int>(wc[i].wr_id >> 40);
        const uint64_t k = wc[i].wr_id & ((1ull << 40) - 1);
        if (qi < 0 || qi >= kQps || wc[i].qp_num != q[qi].s->qp_num) {
          ++errors;
          continue;
        }
        Q& x = q[qi];
        if (wc[i].status != IBV_WC_SUCCESS || wc[i].opcode != IBV_WC_RDMA_WRITE) {
          std::fprintf(stderr, "completion %s opcode %d\n", V.wc_status_str(wc[i].status), wc[i].opcode);
          ++errors;
        }
        if (x.signaled.empty() || x.signaled.front() != k) {
          ++order_errors;
          continue;
        }
        x.signaled.pop_front();
        x.completed = k + 1;
      }
      if (n > 0 || !block) return;
    }
  };
  for (long w = 0; w < writes; ++w) {
    Q& x = q[rng() % kQps];
    const uint64_t k = x.posted;
    // The send queue slot (and the source slot) of request k - kDepth must be free.
    while (k >= x.completed + kDepth) {
      if (x.signaled.empty()) {
        std::fprintf(stderr, "stuck\n");
        return 1;
      }
      poll(true);
    }
    const uint32_t len =
        rng() % 2 ? 1 + static_cast<uint32_t>(rng() % 256) : 1 + static_cast<uint32_t>(rng() % kMaxLen);
    const size_t off = rng() % (kTarget - len);
    uint8_t* s = &x.src[(k % kDepth) * kMaxLen];
    for (uint32_t i = 0; i < len; ++i) s[i] = static_cast<uint8_t>(rng());
    std::memcpy(&x.shadow[off], s, len);
    const bool sig = rng() % 4 == 0 || x.unsignaled_run >= kDepth / 2 - 1;
    x.unsignaled_run = sig ? 0 : x.unsignaled_run + 1;
    // Scatter some requests over two SGEs.
    ibv_sge sg[2];
    int nsge = 1;
    sg[0] = {reinterpret_cast<uintptr_t>(s), len, x.smr->lkey};
    if (len > 1 && rng() % 4 == 0) {
      sg[0].length = len / 2;
      sg[1] = {reinterpret_cast<uintptr_t>(s + len / 2), len - len / 2, x.smr->lkey};
      nsge = 2;
    }
    ibv_send_wr wr{}, *bad = nullptr;
    wr.wr_id = (uint64_t(&x - q) << 40) | k;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.sg_list = sg;
    wr.num_sge = nsge;
    wr.send_flags = sig ? IBV_SEND_SIGNALED : 0;
    wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(&x.dst[off]);
    wr.wr.rdma.rkey = x.dmr->rkey;
    if (sig) {
      x.signaled.push_back(k);
      ++signaled_total;
    }
    if (ibv_post_send(x.s, &wr, &bad)) die("post_send");
    x.posted++;
    poll(false);
  }
  // A final signaled zero-length write per QP drains everything before it.
  for (auto& x : q) {
    ibv_send_wr wr{}, *bad = nullptr;
    wr.wr_id = (uint64_t(&x - q) << 40) | x.posted;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(x.dst.data());
    wr.wr.rdma.rkey = x.dmr->rkey;
    x.signaled.push_back(x.posted++);
    ++signaled_total;
    while (x.posted > x.completed + kDepth) poll(true);
    if (ibv_post_send(x.s, &wr, &bad)) die("post_send");
  }
  for (auto& x : q)
    while (!x.signaled.empty()) poll(true);
  int mismatches = 0;
  for (auto& x : q)
    if (fnv(x.dst.data(), kTarget) != fnv(x.shadow.data(), kTarget)) ++mismatches;
  std::printf(
      "integrity: writes %ld signaled %ld completions %ld errors %ld order_errors %ld "
      "checksum_mismatches %d\n",
      writes, signaled_total, completions, errors, order_errors, mismatches);
  return errors || order_errors || mismatches || completions != signaled_total;
}

// ------------------------------------------------------------------ order

int order(long writes, uint64_t seed) {
  Env e = open_env();
  constexpr uint32_t kDepth = 64, kMaxLen = 2048;
  ibv_cq* cq = V.create_cq(e.ctx, 256, nullptr, nullptr, 0);
  if (!cq) die("create_cq");
  ibv_qp* s = make_qp(e, cq, cq, kDepth);
  ibv_qp* r = make_qp(e, cq, cq, kDepth);
  std::vector<uint64_t> src(kDepth * (kMaxLen / 8 + 1));
  static uint64_t dst[kMaxLen / 8 + 1];
  ibv_mr* smr = reg(e, src.data(), src.size() * 8, IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* dmr = reg(e, dst, sizeof dst, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  connect(e, s, r->qp_num);
  connect(e, r, s->qp_num);
  volatile uint64_t* flag = &dst[kMaxLen / 8];
  std::atomic<bool> stop{false};
  std::atomic<long> violations{0}, observed{0};
  std::vector<uint32_t> lens(static_cast<size_t>(writes) + 1);
  std::mt19937_64 rng(seed);
  for (auto& l : lens) l = 8 * (rng() % 2 ? 1 + rng() % 8 : 1 + rng() % (kMaxLen / 8));
  std::thread reader([&] {
    uint64_t last = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      const uint64_t f = __atomic_load_n(flag, __ATOMIC_ACQUIRE);
      if (f == last) continue;
      last = f;
      observed++;
      // Data of write f (and maybe newer) must be there: every word >= f.
      for (uint32_t i = 0; i < lens[f] / 8; ++i)
        if (__atomic_load_n(&dst[i], __ATOMIC_RELAXED) < f) {
          violations++;
          break;
        }
    }
  });
  // Two requests per step (data, then flag, 8 bytes), the flag signaled every 8 steps.
  uint64_t posted = 0, completed = 0;
  std::deque<uint64_t> sig;
  for (uint64_t k = 1; k <= static_cast<uint64_t>(writes); ++k) {
    while (posted + 2 > completed + kDepth) {
      ibv_wc wc;
      const int n = ibv_poll_cq(cq, 1, &wc);
      if (n < 0 || (n == 1 && wc.status != IBV_WC_SUCCESS)) die("completion");
      if (n == 1) {
        completed = wc.wr_id + 1;
        sig.pop_front();
      }
    }
    uint64_t* d = &src[(k % (kDepth / 2)) * (kMaxLen / 8 + 1)];
    for (uint32_t i = 0; i < lens[k] / 8; ++i) d[i] = k;
    d[kMaxLen / 8] = k;
    ibv_sge sd{reinterpret_cast<uintptr_t>(d), lens[k], smr->lkey};
    ibv_sge sf{reinterpret_cast<uintptr_t>(&d[kMaxLen / 8]), 8, smr->lkey};
    ibv_send_wr wf{}, wd{}, *bad;
    wd.wr_id = posted;
    wd.opcode = IBV_WR_RDMA_WRITE;
    wd.sg_list = &sd;
    wd.num_sge = 1;
    wd.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(dst);
    wd.wr.rdma.rkey = dmr->rkey;
    wd.next = &wf;
    wf.wr_id = posted + 1;
    wf.opcode = IBV_WR_RDMA_WRITE;
    wf.sg_list = &sf;
    wf.num_sge = 1;
    wf.send_flags = k % 8 == 0 || k == static_cast<uint64_t>(writes) ? IBV_SEND_SIGNALED : 0;
    wf.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(flag);
    wf.wr.rdma.rkey = dmr->rkey;
    if (wf.send_flags) sig.push_back(posted + 1);
    if (ibv_post_send(s, &wd, &bad)) die("post_send");
    posted += 2;
  }
  while (!sig.empty()) {
    ibv_wc wc;
    const int n = ibv_poll_cq(cq, 1, &wc);
    if (n < 0 || (n == 1 && wc.status != IBV_WC_SUCCESS)) die("completion");
    if (n == 1) sig.pop_front();
  }
  while (*flag != static_cast<uint64_t>(writes)) {
  }
  stop = true;
  reader.join();
  std::printf("order: writes %ld flags_observed %ld violations %ld\n", writes, observed.load(),
              violations.load());
  return violations.load() != 0;
}

// ------------------------------------------------------------------ errors

const char* state_name(int s) {
  static const char* n[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
  return s >= 0 && s <= 6 ? n[s] : "?";
}

int errors_case(Env& e, const char* name, int target_access, int how) {
  ibv_cq* cq = V.create_cq(e.ctx, 16, nullptr, nullptr, 0);
  ibv_qp* s = make_qp(e, cq, cq, 16);
  ibv_qp* r = make_qp(e, cq, cq, 16);
  static char src[4096], dst[4096];
  ibv_mr* smr = reg(e, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* dmr = reg(e, dst, sizeof dst, target_access);
  connect(e, s, r->qp_num);
  connect(e, r, s->qp_num);
  if (how == 4) {  // QP in error before the post
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_ERR;
    if (V.modify_qp(s, &a, IBV_QP_STATE)) die("modify ERR");
  }
  ibv_sge sg{reinterpret_cast<uintptr_t>(src), 64, smr->lkey};
  if (how == 3) sg.lkey = smr->lkey + 0x1000;  // bad lkey
  ibv_send_wr wr{}, *bad = nullptr;
  wr.wr_id = 1234;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.sg_list = &sg;
  wr.num_sge = 1;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(dst);
  wr.wr.rdma.rkey = dmr->rkey;
  if (how == 1) wr.wr.rdma.rkey = dmr->rkey + 0x1000;       // bad rkey
  if (how == 2) wr.wr.rdma.remote_addr += sizeof dst - 32;  // out of bounds
  // A good unsignaled write first: it completes silently before the failing one.
  ibv_sge sg0{reinterpret_cast<uintptr_t>(src), 16, smr->lkey};
  ibv_send_wr w0{};
  w0.wr_id = 1;
  w0.opcode = IBV_WR_RDMA_WRITE;
  w0.sg_list = &sg0;
  w0.num_sge = 1;
  w0.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(dst);
  w0.wr.rdma.rkey = dmr->rkey;
  w0.next = &wr;
  const int prc = ibv_post_send(s, how == 4 ? &wr : &w0, &bad);
  std::string got;
  ibv_wc wc[4];
  int total = 0;
  for (int spin = 0; spin < 2000000 && total < 4; ++spin) {
    const int n = ibv_poll_cq(cq, 4 - total, wc + total);
    if (n < 0) die("poll");
    total += n;
    if (total && spin > 200000) break;
  }
  for (int i = 0; i < total; ++i)
    got += std::string(" wr_id=") + std::to_string(wc[i].wr_id) + " status=" + V.wc_status_str(wc[i].status);
  ibv_qp_attr a{};
  ibv_qp_init_attr ia{};
  V.query_qp(s, &a, IBV_QP_STATE, &ia);
  const int ss = a.qp_state;
  V.query_qp(r, &a, IBV_QP_STATE, &ia);
  std::printf("%s: post=%d completions=%d%s sender=%s responder=%s\n", name, prc, total, got.c_str(),
              state_name(ss), state_name(a.qp_state));
  return 0;
}

int errors() {
  Env e = open_env();
  const int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  errors_case(e, "good", rw, 0);
  errors_case(e, "bad_rkey", rw, 1);
  errors_case(e, "out_of_bounds", rw, 2);
  errors_case(e, "no_remote_write", IBV_ACCESS_LOCAL_WRITE, 0);
  errors_case(e, "bad_lkey", rw, 3);
  errors_case(e, "qp_in_error", rw, 4);
  return 0;
}

// ------------------------------------------------------------------ basic

int basic(long writes) {
  Env e = open_env();
  ibv_cq* cq = V.create_cq(e.ctx, 16, nullptr, nullptr, 0);
  if (!cq) die("create_cq");
  ibv_qp* s = make_qp(e, cq, cq, 16);
  ibv_qp* r = make_qp(e, cq, cq, 16);
  static char src[64], dst[64];
  ibv_mr* smr = reg(e, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* dmr = reg(e, dst, sizeof dst, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  connect(e, s, r->qp_num);
  connect(e, r, s->qp_num);
  for (long k = 0; k < writes; ++k) {
    std::memset(src, static_cast<int>(k & 0x7f), sizeof src);
    ibv_sge sg{reinterpret_cast<uintptr_t>(src), sizeof src, smr->lkey};
    ibv_send_wr wr{}, *bad;
    wr.wr_id = static_cast<uint64_t>(k) * 7 + 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.sg_list = &sg;
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(dst);
    wr.wr.rdma.rkey = dmr->rkey;
    if (ibv_post_send(s, &wr, &bad)) die("post_send");
    ibv_wc wc;
    int n;
    while ((n = ibv_poll_cq(cq, 1, &wc)) == 0) {
    }
    if (n < 0 || wc.status != IBV_WC_SUCCESS || wc.wr_id != wr.wr_id || wc.qp_num != s->qp_num) {
      std::printf("basic: bad completion %d wr_id %" PRIu64 "\n", n, wc.wr_id);
      return 1;
    }
    if (std::memcmp(src, dst, sizeof dst) != 0) {
      std::printf("basic: data mismatch\n");
      return 1;
    }
  }
  std::printf("basic: %ld writes ok\n", writes);
  return 0;
}

#ifndef UNLOAD_DLOPEN
// ------------------------------------------------------------------ helpers of the modes below

// A loopback pair with one source and one target region, for the modes below.
struct Pair {
  ibv_qp *s, *r;
  std::vector<uint8_t> src, dst, shadow;
  ibv_mr *smr, *dmr;
};

// `sender`: the sending QP, made by the caller (else an RC QP like the receiver's).
void make_pair(Env& e, Pair& p, ibv_cq* scq, ibv_cq* rcq, uint32_t depth, size_t src_len, size_t dst_len,
               ibv_qp* sender = nullptr) {
  p.s = sender ? sender : make_qp(e, scq, rcq, depth);
  p.r = make_qp(e, rcq, rcq, depth);
  p.src.assign(src_len, 0);
  p.dst.assign(dst_len, 0);
  p.shadow.assign(dst_len, 0);
  p.smr = reg(e, p.src.data(), p.src.size(), IBV_ACCESS_LOCAL_WRITE);
  p.dmr = reg(e, p.dst.data(), p.dst.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  connect(e, p.s, p.r->qp_num);
  connect(e, p.r, p.s->qp_num);
}

// Posts write k of a random stream on `p`: random length (mostly small, so every path
// is taken), random offset, payload from source slot k % slots, mirrored in the shadow.
void post_random(Pair& p, std::mt19937_64& rng, uint64_t wr_id, uint64_t k, uint32_t slots, uint32_t max_len,
                 bool sig) {
  const uint32_t len =
      rng() % 2 ? 1 + static_cast<uint32_t>(rng() % 64) : 1 + static_cast<uint32_t>(rng() % max_len);
  const size_t off = rng() % (p.dst.size() - len);
  uint8_t* s = &p.src[(k % slots) * max_len];
  for (uint32_t i = 0; i < len; ++i) s[i] = static_cast<uint8_t>(rng());
  std::memcpy(&p.shadow[off], s, len);
  ibv_sge sg{reinterpret_cast<uintptr_t>(s), len, p.smr->lkey};
  ibv_send_wr wr{}, *bad = nullptr;
  wr.wr_id = wr_id;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.sg_list = &sg;
  wr.num_sge = 1;
  wr.send_flags = sig ? IBV_SEND_SIGNALED : 0;
  wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(&p.dst[off]);
  wr.wr.rdma.rkey = p.dmr->rkey;
  if (ibv_post_send(p.s, &wr, &bad)) die("post_send");
}

bool same(const Pair& p) {
  return fnv(p.dst.data(), p.dst.size()) == fnv(p.shadow.data(), p.shadow.size());
}

// ------------------------------------------------------------------ event

int event(long writes, bool use_fd) {
  Env e = open_env();
  constexpr uint32_t kDepth = 32, kMaxLen = 512;
  ibv_comp_channel* ch = ibv_create_comp_channel(e.ctx);
  if (!ch) die("create_comp_channel");
  ibv_cq* cq = V.create_cq(e.ctx, kDepth, nullptr, ch, 0);
  ibv_cq* rcq = V.create_cq(e.ctx, 16, nullptr, nullptr, 0);
  if (!cq || !rcq) die("create_cq");
  Pair p;
  make_pair(e, p, cq, rcq, kDepth, size_t{kDepth} * kMaxLen, 1 << 16);
  std::mt19937_64 rng(5);
  if (ibv_req_notify_cq(cq, 0)) die("req_notify_cq");
  uint64_t events = 0;
  long bad = 0;
  // As ibv_rc_pingpong -e does: post, sleep on the channel, and only after the event
  // re-arm and poll. So every signaled completion, NIC-made or shim-made, must fire the
  // event itself. A lost wake-up is a 60 s timeout (poll(2) on the fd, or SIGALRM).
  for (uint64_t k = 0; k < static_cast<uint64_t>(writes); ++k) {
    const bool s = k % 3 == 2 || k + 1 == static_cast<uint64_t>(writes);
    post_random(p, rng, k, k, kDepth, kMaxLen, s);
    if (!s) continue;
    for (bool found = false; !found;) {
      if (use_fd) {
        pollfd pf{ch->fd, POLLIN, 0};
        if (::poll(&pf, 1, 60000) != 1) {
          std::printf("event: lost wake-up (fd) at %" PRIu64 "\n", k);
          return 1;
        }
      } else {
        alarm(60);
      }
      ibv_cq* ecq;
      void* ectx;
      if (ibv_get_cq_event(ch, &ecq, &ectx)) die("get_cq_event");
      alarm(0);
      if (ecq != cq) ++bad;
      ++events;
      if (ibv_req_notify_cq(cq, 0)) die("req_notify_cq");
      ibv_wc wc[4];
      int n;
      while ((n = ibv_poll_cq(cq, 4, wc)) > 0)
        for (int i = 0; i < n; ++i) {
          if (wc[i].status != IBV_WC_SUCCESS || wc[i].wr_id != k || found || wc[i].qp_num != p.s->qp_num ||
              wc[i].opcode != IBV_WC_RDMA_WRITE)
            ++bad;
          found = true;
        }
      if (n < 0) die("poll_cq");
    }
  }
  ibv_ack_cq_events(cq, static_cast<unsigned>(events));
  const bool ok = same(p);
  // ibv_destroy_cq waits for every event to be acknowledged: exact accounting or a hang.
  if (ibv_destroy_qp(p.s) || ibv_destroy_cq(cq)) die("destroy");
  std::printf("event: writes %ld bad_completions %ld checksum %s events>0 %d\n", writes, bad,
              ok ? "ok" : "MISMATCH", events > 0);
  std::fprintf(stderr, "event: %" PRIu64 " events\n", events);
  return bad || !ok || events == 0;
}

// ------------------------------------------------------------------ threads

int threads(int nthreads, long writes, bool shared) {
  Env e = open_env();
  constexpr uint32_t kDepth = 32, kMaxLen = 1024;
  ibv_cq* rcq = V.create_cq(e.ctx, 16, nullptr, nullptr, 0);
  ibv_cq* scq_shared =
      shared ? V.create_cq(e.ctx, static_cast<int>(kDepth) * nthreads, nullptr, nullptr, 0) : nullptr;
  struct T {
    Pair p;
    ibv_cq* cq;
    std::atomic<uint64_t> completed{0};  // every request below it completed
    std::atomic<uint64_t> next_sig{0};   // the next signaled k whose completion is due
    std::atomic<long> bad{0};
  };
  std::vector<T> ts(static_cast<size_t>(nthreads));
  for (auto& t : ts) {
    t.cq = shared ? scq_shared : V.create_cq(e.ctx, kDepth, nullptr, nullptr, 0);
    if (!t.cq || !rcq) die("create_cq");
    make_pair(e, t.p, t.cq, rcq, kDepth, size_t{kDepth} * kMaxLen, 1 << 18);
  }
  // Signaled: every 4th request and the last. A completion is checked against the
  // signaled sequence of its QP (completions of a send queue come in post order).
  auto sig_of = [&](uint64_t k) { return k % 4 == 3 || k + 1 == static_cast<uint64_t>(writes); };
  auto next_sig_after = [&](uint64_t k) {
    for (uint64_t j = k + 1;; ++j)
      if (sig_of(j)) return j;
  };
  std::atomic<long> stray{0};
  auto poll_cq = [&](ibv_cq* cq) {
    ibv_wc wc[8];
    const int n = ibv_poll_cq(cq, 8, wc);
    if (n < 0) die("poll_cq");
    for (int i = 0; i < n; ++i) {
      const size_t ti = wc[i].wr_id >> 40;
      const uint64_t k = wc[i].wr_id & ((1ull << 40) - 1);
      if (ti >= ts.size()) {
        ++stray;
        continue;
      }
      T& t = ts[ti];
      // With a shared CQ two pollers may take two completions of one QP: the later one
      // can be recorded first, so the check is "one of the due ones", then the max.
      if (wc[i].status != IBV_WC_SUCCESS || wc[i].qp_num != t.p.s->qp_num || !sig_of(k)) {
        ++t.bad;
        continue;
      }
      uint64_t c = t.completed.load();
      while (c < k + 1 && !t.completed.compare_exchange_weak(c, k + 1)) {
      }
      if (!shared) {
        if (k != t.next_sig.load()) ++t.bad;
        t.next_sig.store(next_sig_after(k));
      }
    }
  };
  std::vector<std::thread> th;
  for (int i = 0; i < nthreads; ++i)
    th.emplace_back([&, i] {
      T& t = ts[static_cast<size_t>(i)];
      std::mt19937_64 rng(static_cast<uint64_t>(i) * 7919 + 1);
      t.next_sig.store(next_sig_after(~0ull));
      for (uint64_t k = 0; k < static_cast<uint64_t>(writes); ++k) {
        while (k >= t.completed.load() + kDepth) poll_cq(t.cq);
        post_random(t.p, rng, (uint64_t(i) << 40) | k, k, kDepth, kMaxLen, sig_of(k));
        poll_cq(t.cq);
      }
      while (t.completed.load() < static_cast<uint64_t>(writes)) poll_cq(t.cq);
    });
  for (auto& x : th) x.join();
  long bad = stray.load(), mism = 0;
  for (auto& t : ts) {
    bad += t.bad.load();
    mism += !same(t.p);
  }
  std::printf("threads: %d x %ld writes, %s CQ, bad_completions %ld checksum_mismatches %ld\n", nthreads,
              writes, shared ? "shared" : "separate", bad, mism);
  return bad || mism;
}

// ------------------------------------------------------------------ fork

int fork_check(long writes) {
  Env e = open_env();
  constexpr uint32_t kDepth = 16, kMaxLen = 512;
  ibv_cq* cq = V.create_cq(e.ctx, kDepth, nullptr, nullptr, 0);
  if (!cq) die("create_cq");
  Pair p;
  make_pair(e, p, cq, cq, kDepth, size_t{kDepth} * kMaxLen, 1 << 16);
  std::mt19937_64 rng(3);
  long bad = 0;
  auto run = [&](uint64_t from, uint64_t to) {
    for (uint64_t k = from; k < to; ++k) {
      post_random(p, rng, k, k, kDepth, kMaxLen, true);
      ibv_wc wc;
      int n;
      while ((n = ibv_poll_cq(cq, 1, &wc)) == 0) {
      }
      if (n < 0 || wc.status != IBV_WC_SUCCESS || wc.wr_id != k) ++bad;
    }
  };
  run(0, static_cast<uint64_t>(writes));
  const pid_t child = fork();
  if (child < 0) die("fork");
  if (child == 0) {
    // The child touches the registered buffers (copy-on-write) and leaves.
    std::memset(p.src.data(), 0x5a, p.src.size());
    std::memset(p.dst.data(), 0x5a, p.dst.size());
    std::exit(0);
  }
  run(static_cast<uint64_t>(writes), 2 * static_cast<uint64_t>(writes));  // while the child lives
  int st = 0;
  if (waitpid(child, &st, 0) != child) die("waitpid");
  run(2 * static_cast<uint64_t>(writes), 3 * static_cast<uint64_t>(writes));
  const bool ok = same(p);
  std::printf("fork: writes %ld bad_completions %ld child_exit %d checksum %s\n", 3 * writes, bad,
              WIFEXITED(st) ? WEXITSTATUS(st) : -1, ok ? "ok" : "MISMATCH");
  return bad || !ok || !WIFEXITED(st) || WEXITSTATUS(st) != 0;
}

// ------------------------------------------------------------------ cqex

int cqex(long writes) {
  Env e = open_env();
  constexpr uint32_t kDepth = 32, kMaxLen = 512;
  ibv_cq_init_attr_ex ca{};
  ca.cqe = kDepth;
  ca.wc_flags = IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_BYTE_LEN;
  ibv_cq_ex* cqx = ibv_create_cq_ex(e.ctx, &ca);
  if (!cqx) die("create_cq_ex");
  ibv_cq* cq = ibv_cq_ex_to_cq(cqx);
  Pair p;
  make_pair(e, p, cq, cq, kDepth, size_t{kDepth} * kMaxLen, 1 << 16);
  std::mt19937_64 rng(9);
  long bad = 0;
  std::deque<uint64_t> sig;
  uint64_t completed = 0;
  // One completion per start_poll/end_poll: rxe (rdma-core 44) loses its place in the CQ
  // when end_poll follows a next_poll that found nothing, with or without the shim.
  auto drain = [&] {
    ibv_poll_cq_attr pa{};
    for (;;) {
      const int rc = ibv_start_poll(cqx, &pa);
      if (rc == ENOENT) return;
      if (rc) die("start_poll");
      // wr_id and status only: rxe (rdma-core 44) reads opcode and qp_num back as 0.
      if (cqx->status != IBV_WC_SUCCESS || sig.empty() || cqx->wr_id != sig.front()) {
        if (bad++ < 3)
          std::fprintf(stderr, "cqex: wr_id %" PRIu64 " (want %" PRIu64 ") status %d\n", cqx->wr_id,
                       sig.empty() ? 0 : sig.front(), cqx->status);
        if (bad > 100) std::exit(1);
      } else {
        sig.pop_front();
        completed = cqx->wr_id + 1;
      }
      ibv_end_poll(cqx);
    }
  };
  for (uint64_t k = 0; k < static_cast<uint64_t>(writes); ++k) {
    while (k >= completed + kDepth) drain();
    const bool s = k % 2 == 0 || k + 1 == static_cast<uint64_t>(writes);
    if (s) sig.push_back(k);
    post_random(p, rng, k, k, kDepth, kMaxLen, s);
    drain();
  }
  while (!sig.empty()) drain();
  const bool ok = same(p);
  std::printf("cqex: writes %ld bad_completions %ld checksum %s\n", writes, bad, ok ? "ok" : "MISMATCH");
  return bad || !ok;
}

// ------------------------------------------------------------------ wrapi

int wrapi(long writes, uint64_t seed, bool aborts) {
  Env e = open_env();
  constexpr uint32_t kDepth = 64, kMaxLen = 512;
  ibv_cq* cq = ibv_create_cq(e.ctx, 2 * kDepth, nullptr, nullptr, 0);
  if (!cq) die("create_cq");
  ibv_qp_init_attr_ex a{};
  a.send_cq = cq;
  a.recv_cq = cq;
  a.qp_type = IBV_QPT_RC;
  a.cap = qp_cap(kDepth);
  a.pd = e.pd;
  a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  a.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_SEND;
  ibv_qp* sender = ibv_create_qp_ex(e.ctx, &a);
  if (!sender) die("create_qp_ex");
  ibv_qp_ex* qx = ibv_qp_to_qp_ex(sender);
  if (!qx) die("qp_to_qp_ex");
  Pair p;
  make_pair(e, p, cq, cq, kDepth, size_t{kDepth} * kMaxLen, 1 << 16, sender);

  std::mt19937_64 rng(seed);
  long bad = 0, aborted = 0;
  std::deque<uint64_t> sig;
  uint64_t completed = 0;  // every wr_id below this one completed
  auto drain = [&] {
    ibv_wc wc[16];
    const int n = ibv_poll_cq(cq, 16, wc);
    if (n < 0) die("poll_cq");
    for (int i = 0; i < n; ++i) {
      if (wc[i].status != IBV_WC_SUCCESS || sig.empty() || wc[i].wr_id != sig.front() ||
          wc[i].opcode != IBV_WC_RDMA_WRITE) {
        if (bad++ < 3)
          std::fprintf(stderr, "wrapi: wr_id %" PRIu64 " (want %" PRIu64 ") status %s opcode %d\n",
                       wc[i].wr_id, sig.empty() ? 0 : sig.front(), V.wc_status_str(wc[i].status),
                       wc[i].opcode);
        if (bad > 100) std::exit(1);
      } else {
        sig.pop_front();
        completed = wc[i].wr_id + 1;
      }
    }
  };
  struct Placed {
    size_t off;
    const uint8_t* from;
    uint32_t len;
  };
  const uint64_t total = static_cast<uint64_t>(writes);
  for (uint64_t k = 0; k < total;) {
    const uint64_t b = std::min<uint64_t>(1 + rng() % 3, total - k);
    while (k + b > completed + kDepth - 4) drain();
    const bool abort = rng() % 16 == 0 && aborts;
    std::vector<Placed> placed;
    std::vector<uint64_t> signaled;
    ibv_wr_start(qx);
    for (uint64_t j = k; j < k + b; ++j) {
      const uint32_t len =
          rng() % 2 ? 1 + static_cast<uint32_t>(rng() % 64) : 1 + static_cast<uint32_t>(rng() % kMaxLen);
      const size_t off = rng() % (p.dst.size() - len);
      uint8_t* src = &p.src[(j % kDepth) * kMaxLen];
      for (uint32_t i = 0; i < len; ++i) src[i] = static_cast<uint8_t>(rng());
      const bool s = j % 4 == 0 || j + 1 == total;
      qx->wr_id = j;
      qx->wr_flags = s ? IBV_SEND_SIGNALED : 0;
      ibv_wr_rdma_write(qx, p.dmr->rkey, reinterpret_cast<uintptr_t>(&p.dst[off]));
      // One SGE: rxe (rdma-core 44, kernel 6.1) placed wrong bytes for two-SGE writes built
      // with wr_set_sge_list in our runs, with or without the shim.
      ibv_wr_set_sge(qx, p.smr->lkey, reinterpret_cast<uintptr_t>(src), len);
      placed.push_back({off, src, len});
      if (s) signaled.push_back(j);
    }
    if (abort) {
      ibv_wr_abort(qx);
      ++aborted;
      continue;  // the same wr_ids again: nothing of this batch was posted
    }
    if (int rc = ibv_wr_complete(qx)) {
      std::fprintf(stderr, "wrapi: wr_complete: %s\n", std::strerror(rc));
      return 1;
    }
    for (const Placed& x : placed) std::memcpy(&p.shadow[x.off], x.from, x.len);
    sig.insert(sig.end(), signaled.begin(), signaled.end());
    k += b;
  }
  while (!sig.empty()) drain();
  const bool ok = same(p);
  std::printf("wrapi: writes %ld aborted_batches %ld bad_completions %ld checksum %s\n", writes, aborted, bad,
              ok ? "ok" : "MISMATCH");
  return bad || !ok;
}

// ------------------------------------------------------------------ linger

int linger(bool destroy) {
  Env e = open_env();
  ibv_cq* cq = ibv_create_cq(e.ctx, 16, nullptr, nullptr, 0);
  if (!cq) die("create_cq");
  Pair p;
  make_pair(e, p, cq, cq, 32, 64, 4096);
  std::mt19937_64 rng(1);
  for (uint64_t k = 0; k < 20; ++k) post_random(p, rng, k, k, 1, 32, true);
  for (int got = 0; got < 20;) {
    ibv_wc wc;
    const int n = ibv_poll_cq(cq, 1, &wc);
    if (n < 0 || (n == 1 && wc.status != IBV_WC_SUCCESS)) die("linger: completion");
    got += n;
  }
  if (destroy) {
    if (ibv_destroy_qp(p.s) || ibv_destroy_qp(p.r)) die("destroy_qp");
    if (ibv_dereg_mr(p.smr) || ibv_dereg_mr(p.dmr)) die("dereg_mr");
    if (ibv_destroy_cq(cq)) die("destroy_cq");
    if (ibv_dealloc_pd(e.pd)) die("dealloc_pd");
  }
  if (ibv_close_device(e.ctx)) die("close_device");
  std::printf("closed\n");
  std::fflush(stdout);
  sleep(60);
  return 0;
}

// ------------------------------------------------------------------ switch

bool set_mode(const char* mode) {
  FILE* f = std::fopen("/sys/kernel/unload/mode", "w");
  if (!f) return false;
  const bool ok = std::fputs(mode, f) >= 0;
  return std::fclose(f) == 0 && ok;
}

int switch_check(long rounds) {
  char saved[32] = "adaptive";
  if (FILE* f = std::fopen("/sys/kernel/unload/mode", "r")) {
    if (!std::fgets(saved, sizeof saved, f)) std::strcpy(saved, "adaptive");
    std::fclose(f);
  }
  if (!set_mode(saved)) {
    std::printf("SKIP: /sys/kernel/unload/mode is not writable (module not loaded, or not root)\n");
    return 77;
  }
  Env e = open_env();
  constexpr uint32_t kChunks = 4, kChunk = 64 * 1024;
  ibv_cq* cq = V.create_cq(e.ctx, 64, nullptr, nullptr, 0);
  if (!cq) die("create_cq");
  Pair p;
  make_pair(e, p, cq, cq, 32, size_t{kChunks} * kChunk + 8, size_t{kChunks} * kChunk + 8);
  long violations = 0, bad = 0, placed = 0;  // placed: rounds whose flag went direct
  for (long i = 1; i <= rounds; ++i) {
    const uint8_t v = static_cast<uint8_t>(i);
    std::memset(p.src.data(), v, p.src.size());
    if (!set_mode("offload")) die("set mode offload");
    for (uint32_t c = 0; c < kChunks; ++c) {
      ibv_sge sg{reinterpret_cast<uintptr_t>(&p.src[c * kChunk]), kChunk, p.smr->lkey};
      ibv_send_wr wr{}, *badwr = nullptr;
      wr.wr_id = static_cast<uint64_t>(i) * 10 + c;
      wr.opcode = IBV_WR_RDMA_WRITE;
      wr.sg_list = &sg;
      wr.num_sge = 1;
      wr.send_flags = c + 1 == kChunks ? IBV_SEND_SIGNALED : 0;
      wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(&p.dst[c * kChunk]);
      wr.wr.rdma.rkey = p.dmr->rkey;
      if (ibv_post_send(p.s, &wr, &badwr)) die("post data");
    }
    if (!set_mode("unload")) die("set mode unload");
    ibv_sge fs{reinterpret_cast<uintptr_t>(&p.src[kChunks * kChunk]), 8, p.smr->lkey};
    ibv_send_wr fw{}, *badwr = nullptr;
    fw.wr_id = static_cast<uint64_t>(i) * 10 + 9;
    fw.opcode = IBV_WR_RDMA_WRITE;
    fw.sg_list = &fs;
    fw.num_sge = 1;
    fw.send_flags = IBV_SEND_SIGNALED;
    fw.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(&p.dst[kChunks * kChunk]);
    fw.wr.rdma.rkey = p.dmr->rkey;
    if (ibv_post_send(p.s, &fw, &badwr)) die("post flag");
    // The flag is in place once a direct post returns; the data before it must be too.
    if (p.dst[kChunks * kChunk] == v && ++placed)
      for (uint32_t k = 0; k < kChunks * kChunk; k += 4096)
        if (p.dst[k] != v) {
          ++violations;
          break;
        }
    // Completions: the data's, then the flag's, in post order.
    const uint64_t want[2] = {static_cast<uint64_t>(i) * 10 + kChunks - 1, static_cast<uint64_t>(i) * 10 + 9};
    for (int got = 0; got < 2;) {
      ibv_wc wc;
      const int n = ibv_poll_cq(cq, 1, &wc);
      if (n < 0) die("poll_cq");
      if (n == 0) continue;
      if (wc.status != IBV_WC_SUCCESS || wc.wr_id != want[got]) ++bad;
      ++got;
    }
  }
  set_mode(saved);
  std::printf("switch: rounds %ld flags_in_place_at_return %ld violations %ld bad_completions %ld\n", rounds,
              placed, violations, bad);
  return violations || bad || placed == 0;
}
#endif  // !UNLOAD_DLOPEN
}  // namespace

int main(int argc, char** argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  const long n = argc > 2 ? std::atol(argv[2]) : 0;
  const uint64_t seed = argc > 3 ? std::strtoull(argv[3], nullptr, 0) : 1;
  if (cmd == "integrity") return integrity(n ? n : 100000, seed);
  if (cmd == "order") return order(n ? n : 20000, seed);
  if (cmd == "errors") return errors();
  if (cmd == "basic") return basic(n ? n : 100);
#ifndef UNLOAD_DLOPEN
  if (cmd == "event") return event(n ? n : 2000, argc > 3 && std::string(argv[3]) == "fd");
  if (cmd == "threads")
    return threads(n ? static_cast<int>(n) : 4, argc > 3 ? std::atol(argv[3]) : 20000,
                   argc > 4 && std::string(argv[4]) == "shared");
  if (cmd == "fork") return fork_check(n ? n : 200);
  if (cmd == "cqex") return cqex(n ? n : 2000);
  if (cmd == "linger") return linger(argc > 2 && std::string(argv[2]) == "destroy");
  if (cmd == "switch") return switch_check(n ? n : 50);
  if (cmd == "wrapi") return wrapi(n ? n : 5000, seed, !(argc > 4 && std::string(argv[4]) == "noabort"));
#endif
  std::fprintf(
      stderr,
      "usage: %s integrity|order|errors|basic|event|threads|fork|cqex|wrapi|switch|linger [n] [...]\n",
      argv[0]);
  return 2;
}
