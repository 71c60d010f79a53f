// Direct copies between two real processes on rxe through /dev/unload: placement,
// canaries, ordering, inline sources, the denials that are not RNIC violations (counted, root-only, and
// one uniform result), impersonation, deregistration mid-stream (nothing lands after; the
// NIC judges an rkey the module does not know, so the pair is not poisoned), peer exit.
// The violations themselves, against the NIC's own outcome, are kmod_parity's. One line
// per check. Exit 0 pass, 1 fail, 77 skip.
#include <errno.h>
#include <liburing.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <random>
#include <span>
#include <thread>
#include <vector>

#include "kmod_util.hpp"

using namespace kt;

namespace {

constexpr size_t kBlock = 1 << 20;                          // shared target block
constexpr size_t kR1Off = 4096 + 100, kR1Len = 256 * 1024;  // PD1, remote write
constexpr size_t kR2Off = 512 * 1024, kR2Len = 16 * 1024;   // PD2, remote write
constexpr size_t kR3Off = 768 * 1024, kR3Len = 16 * 1024;   // PD1, no remote write
constexpr uint8_t kFill = 0xa5;

struct TargetInfo {
  Wire wire;
  uint32_t rkey1, rkey2, rkey3;
  uint32_t unreg_rkey;  // a real MR of T never registered with the module
  uint64_t handle1;     // region 1's handle in T's session
};

constexpr size_t kSrcLen = 1 << 20;
uint8_t* g_src;  // S's source buffer, an MR registered with the module
uint32_t g_src_lkey;
uint8_t* g_block;  // shared with T; T registered its regions over it
std::vector<uint8_t> g_shadow;
int g_fd;  // S's session
Rc g_s;    // S's main QP
TargetInfo g_t;

uint64_t r1() {
  return reinterpret_cast<uintptr_t>(g_block + kR1Off);
}

// T: registers its regions, connects, then obeys one-byte commands.
[[noreturn]] void target_main(int in, int out) {
  Rc t;
  rc_open(&t);
  ibv_pd* pd2 = ibv_alloc_pd(t.ctx);
  static uint8_t spare[4096];
  ibv_mr* m1 = ibv_reg_mr(t.pd, g_block + kR1Off, kR1Len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ibv_mr* m2 = ibv_reg_mr(pd2, g_block + kR2Off, kR2Len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ibv_mr* m3 = ibv_reg_mr(t.pd, g_block + kR3Off, kR3Len, IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* m4 = ibv_reg_mr(t.pd, spare, sizeof spare, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (!pd2 || !m1 || !m2 || !m3 || !m4) die("target MRs");
  int fd = unload_open();
  uint64_t h1 = 0;
  if (reg_mr(fd, m1, UNLOAD_ACCESS_LOCAL_WRITE | UNLOAD_ACCESS_REMOTE_WRITE, &h1) ||
      reg_mr(fd, m2, UNLOAD_ACCESS_LOCAL_WRITE | UNLOAD_ACCESS_REMOTE_WRITE) ||
      reg_mr(fd, m3, UNLOAD_ACCESS_LOCAL_WRITE))
    die("target REG_REGION");
  TargetInfo ti{t.wire, m1->rkey, m2->rkey, m3->rkey, m4->rkey, h1};
  xwrite(out, &ti, sizeof ti);
  Wire s;
  xread(in, &s, sizeof s);
  rc_connect(&t, s);
  if (reg_qp(fd, t.dev.c_str(), t.wire.qpn)) die("target REG_QP");
  char c = 'R';
  xwrite(out, &c, 1);
  for (;;) {
    xread(in, &c, 1);
    if (c == 'D') {  // deregister region 1
      if (dereg_region(fd, h1)) die("DEREG_REGION");
    } else if (c == 'X') {
      _exit(0);  // everything is released by the exit
    }
    xwrite(out, &c, 1);
  }
}

unload_direct_req make_req(uint32_t qpn, uint32_t rkey, uint64_t raddr, uint64_t len, const void* src) {
  unload_direct_req r{};
  r.qp_num = qpn;
  r.rkey = rkey;
  r.remote_addr = raddr;
  r.length = len;
  r.iov = reinterpret_cast<uintptr_t>(src);
  r.lkey = g_src_lkey;
  return r;
}

// One request on S's session, outside the shadow bookkeeping: its result.
int submit_one(unload_direct_req r) {
  int ret = submit(g_fd, &r, 1);
  return ret ? -1000 + ret : r.result;
}

// Apply accepted requests to the shadow (contiguous sources only).
void shadow_apply(const unload_direct_req& r) {
  if (r.result != 0) return;
  size_t off = r.remote_addr - reinterpret_cast<uintptr_t>(g_block);
  if (r.iov_count == 0) {
    memcpy(&g_shadow[off], reinterpret_cast<const void*>(r.iov), r.length);
  } else {
    const auto* v = reinterpret_cast<const unload_iov*>(r.iov);
    for (uint32_t i = 0; i < r.iov_count; i++) {
      memcpy(&g_shadow[off], reinterpret_cast<const void*>(v[i].addr), v[i].len);
      off += v[i].len;
    }
  }
}

size_t shadow_diff() {
  size_t d = 0;
  for (size_t i = 0; i < kBlock; i++) d += g_block[i] != g_shadow[i];
  return d;
}

// Canary bytes: outside the three regions.
size_t canary_diff() {
  size_t d = 0;
  for (size_t i = 0; i < kBlock; i++) {
    bool inside = (i >= kR1Off && i < kR1Off + kR1Len) || (i >= kR2Off && i < kR2Off + kR2Len) ||
                  (i >= kR3Off && i < kR3Off + kR3Len);
    if (!inside) d += g_block[i] != kFill;
  }
  return d;
}

// Submit one request, return its result (or the batch's ioctl error, below -1000).
int one(unload_direct_req r, int fd = -1) {
  int ret = submit(fd < 0 ? g_fd : fd, &r, 1);
  if (ret) return -1000 + ret;
  shadow_apply(r);
  return r.result;
}

std::map<std::string, long long> deny_stats() {
  static const char* names[] = {"disabled", "invalid",      "qp_unregistered", "qp_not_owned",
                                "qp_state", "peer_unknown", "peer_unpaired",   "rkey",
                                "pd",       "access",       "bounds",          "length",
                                "fault",    "lkey",         "source",          "poisoned"};
  std::map<std::string, long long> m;
  for (const char* n : names) m[n] = stat(std::string("direct_denied_") + n);
  return m;
}

void test_integrity(std::mt19937_64& rng) {
  std::span<uint8_t> src(g_src, 70000);
  for (auto& b : src) b = static_cast<uint8_t>(rng());
  const long long w0 = stat("writes_direct"), b0 = stat("bytes_direct");
  long long accepted = 0, bytes = 0, notok = 0, checks_bad = 0;
  std::vector<unload_direct_req> batch;
  std::vector<unload_iov> iovs(16 * 4);
  for (int n = 0; n < 2000; n++) {
    uint64_t len = (n % 10 == 0) ? 1 + rng() % 65536 : 1 + rng() % 4096;
    uint64_t off = rng() % (kR1Len - len + 1);
    const uint8_t* s = &src[rng() % (src.size() - len)];
    auto r = make_req(g_s.wire.qpn, g_t.rkey1, r1() + off, len, s);
    if (n % 7 == 0 && len >= 4) {  // three segments
      unload_iov* v = &iovs[batch.size() * 4];
      uint64_t a = len / 3, b = len / 3;
      v[0] = {reinterpret_cast<uintptr_t>(s), a, g_src_lkey, 0};
      v[1] = {reinterpret_cast<uintptr_t>(s + a), b, g_src_lkey, 0};
      v[2] = {reinterpret_cast<uintptr_t>(s + a + b), len - a - b, g_src_lkey, 0};
      r.iov = reinterpret_cast<uintptr_t>(v);
      r.iov_count = 3;
      r.lkey = 0;
    }
    batch.push_back(r);
    if (batch.size() == 16 || n == 1999) {
      if (submit(g_fd, batch.data(), static_cast<uint32_t>(batch.size()))) notok++;
      for (auto& q : batch) {
        if (q.result == 0) {
          accepted++;
          bytes += static_cast<long long>(q.length);
        } else {
          notok++;
        }
        shadow_apply(q);
      }
      batch.clear();
      if (n % 200 == 199 && shadow_diff()) checks_bad++;
    }
  }
  size_t diff = shadow_diff(), canary = canary_diff();
  expect(accepted == 2000 && notok == 0, "direct.ioctl_accepted", "%lld/2000", accepted);
  expect(diff == 0 && checks_bad == 0, "direct.bytes_exact", "%zu bytes differ", diff);
  expect(canary == 0, "direct.canaries", "%zu canary bytes changed", canary);
  long long dw = stat("writes_direct") - w0, db = stat("bytes_direct") - b0;
  expect(dw == accepted && db == bytes, "direct.stats", "writes_direct +%lld bytes_direct +%lld", dw, db);

  // io_uring: small batches run at issue, large ones are punted to io-wq.
  io_uring ring;
  if (io_uring_queue_init(8, &ring, 0)) {
    expect(false, "uring.init", "io_uring_queue_init failed");
    return;
  }
  long long uacc = 0, ufail = 0;
  for (int round = 0; round < 40; round++) {
    uint32_t count = round % 2 ? 4 : 64;
    std::vector<unload_direct_req> reqs;
    for (uint32_t i = 0; i < count; i++) {
      uint64_t len = 1 + rng() % 2048, off = rng() % (kR1Len - len + 1);
      reqs.push_back(make_req(g_s.wire.qpn, g_t.rkey1, r1() + off, len, &src[rng() % (src.size() - len)]));
    }
    io_uring_sqe* sqe = io_uring_get_sqe(&ring);
    io_uring_prep_rw(IORING_OP_URING_CMD, sqe, g_fd, nullptr, 0, 0);
    sqe->cmd_op = UNLOAD_URING_SUBMIT;
    unload_uring_submit us{reinterpret_cast<uintptr_t>(reqs.data()), count, 0};
    memcpy(sqe->cmd, &us, sizeof us);
    io_uring_submit(&ring);
    io_uring_cqe* cqe;
    __kernel_timespec ts{10, 0};
    if (io_uring_wait_cqe_timeout(&ring, &cqe, &ts)) {
      std::printf("uring: no completion for a batch of %u\n", count);
      ufail++;
      break;
    }
    if (cqe->res != static_cast<int>(count)) {
      std::printf("uring: res %d for a batch of %u\n", cqe->res, count);
      ufail++;
    }
    io_uring_cqe_seen(&ring, cqe);
    for (auto& q : reqs) {
      uacc += q.result == 0;
      shadow_apply(q);
    }
  }
  io_uring_queue_exit(&ring);
  expect(ufail == 0 && uacc == 20 * 64 + 20 * 4, "uring.accepted", "%lld/%d, %lld bad cqes", uacc,
         20 * 64 + 20 * 4, ufail);
  diff = shadow_diff();
  expect(diff == 0 && canary_diff() == 0, "uring.bytes_exact", "%zu bytes differ", diff);
}

// UNLOAD_SUBMIT_STOP: a batch stops after its first refused request, which counts in
// `done`, and leaves the ones after it unplaced; without the flag each runs on its own.
// An unknown flag is -EINVAL with nothing processed.
void test_submit_stop(std::mt19937_64& rng) {
  std::span<uint8_t> src(g_src + 300000, 3 * 64);  // in S's registered source
  for (auto& b : src) b = static_cast<uint8_t>(rng());
  auto batch = [&](uint64_t base) {
    std::vector<unload_direct_req> r;
    for (int i = 0; i < 3; i++)
      r.push_back(make_req(g_s.wire.qpn, g_t.rkey1, r1() + base + 64 * i, 64, &src[64 * i]));
    r[1].length = 0;  // refused (length), no violation: the pair stays usable
    return r;
  };
  auto run = [&](std::vector<unload_direct_req>& r, uint32_t flags, unload_submit* s) {
    *s = unload_submit{};
    s->reqs = reinterpret_cast<uintptr_t>(r.data());
    s->count = static_cast<uint32_t>(r.size());
    s->flags = flags;
    const int ret = uioctl(g_fd, UNLOAD_IOC_SUBMIT, s);
    for (uint32_t i = 0; i < s->done && i < r.size(); i++) shadow_apply(r[i]);
    return ret;
  };
  unload_submit s;
  auto stop = batch(8192);
  int ret = run(stop, UNLOAD_SUBMIT_STOP, &s);
  expect(ret == 0 && s.done == 2 && s.accepted == 1 && stop[0].result == 0 && stop[1].result == -EACCES &&
             stop[2].result == 0 && shadow_diff() == 0,
         "submit.stop", "ret %d done %u accepted %u results %d/%d/%d, %zu bytes differ", ret, s.done,
         s.accepted, stop[0].result, stop[1].result, stop[2].result, shadow_diff());
  auto each = batch(8192 + 4096);
  ret = run(each, 0, &s);
  expect(ret == 0 && s.done == 3 && s.accepted == 2 && each[2].result == 0 && shadow_diff() == 0,
         "submit.each", "ret %d done %u accepted %u, %zu bytes differ", ret, s.done, s.accepted,
         shadow_diff());
  auto bad = batch(8192 + 8192);
  ret = run(bad, 1U << 7, &s);
  expect(ret == -EINVAL && shadow_diff() == 0, "submit.bad_flags", "ret %d (want %d)", ret, -EINVAL);
}

// Inline requests (UNLOAD_REQ_INLINE): the source is plain memory, read in with the batch
// as the NIC reads inline data at post time; malformed ones are -EINVAL, an unreadable
// one refused (fault) with nothing placed.
void test_inline(std::mt19937_64& rng) {
  std::vector<uint8_t> buf(3 * UNLOAD_MAX_INLINE);  // never registered
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  auto inl = [&](uint64_t off, uint64_t len, const void* src) {
    unload_direct_req r = make_req(g_s.wire.qpn, g_t.rkey1, r1() + off, len, src);
    r.lkey = 0;
    r.flags = UNLOAD_REQ_INLINE;
    return r;
  };
  std::vector<unload_direct_req> batch = {
      inl(40000, 300, &buf[0]), make_req(g_s.wire.qpn, g_t.rkey1, r1() + 41000, 64, g_src + 5000),
      inl(42000, UNLOAD_MAX_INLINE, &buf[300]), inl(44000, 1, &buf[2000])};
  const int ret = submit(g_fd, batch.data(), static_cast<uint32_t>(batch.size()));
  int bad = 0;
  for (auto& r : batch) {
    bad += r.result != 0;
    shadow_apply(r);
  }
  for (auto& b : buf) b = static_cast<uint8_t>(~b);  // free once the submission returned
  expect(ret == 0 && bad == 0 && shadow_diff() == 0, "inline.placed_from_unregistered_memory",
         "ret %d, %d refused, %zu bytes differ", ret, bad, shadow_diff());

  // A lone small one: read into the submission itself, not an allocation (copy.c).
  unload_direct_req small = inl(45000, 48, &buf[100]);
  const int rs = one(small);
  shadow_apply(small);
  expect(rs == 0 && shadow_diff() == 0, "inline.small_placed", "result %d, %zu bytes differ", rs, shadow_diff());

  unload_direct_req too_long = inl(46000, UNLOAD_MAX_INLINE + 1, &buf[0]);
  unload_direct_req with_lkey = inl(46000, 8, &buf[0]);
  with_lkey.lkey = g_src_lkey;
  unload_direct_req with_iov = inl(46000, 8, &buf[0]);
  with_iov.iov_count = 1;
  unload_direct_req unknown_flag = inl(46000, 8, &buf[0]);
  unknown_flag.flags |= 1U << 1;
  const int r1_ = one(too_long), r2_ = one(with_lkey), r3_ = one(with_iov), r4_ = one(unknown_flag);
  expect(r1_ == -EINVAL && r2_ == -EINVAL && r3_ == -EINVAL && r4_ == -EINVAL && shadow_diff() == 0,
         "inline.malformed_invalid", "too long %d, lkey %d, iov %d, unknown flag %d (want %d)", r1_, r2_, r3_,
         r4_, -EINVAL);

  void* hole = mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (hole == MAP_FAILED) die("mmap");
  const long long f0 = stat("direct_denied_fault");
  const int rf = one(inl(46000, 64, hole));
  const long long f1 = stat("direct_denied_fault");
  munmap(hole, 4096);
  expect(rf == -EACCES && f1 == f0 + 1 && shadow_diff() == 0, "inline.unreadable_refused",
         "result %d, fault +%lld, %zu bytes differ", rf, f1 - f0, shadow_diff());
}

void test_ordering() {
  // A poller on another CPU watches the last 8 bytes; when they turn up, every earlier
  // byte must be there already.
  constexpr size_t kLen = 16384;
  uint8_t* dst = g_block + kR1Off + 4096;  // not 8-aligned: byte-wise tail
  std::span<uint8_t> src(g_src + 100000, kLen);
  long long violations = 0, rounds = 0;
  for (int aligned = 0; aligned < 2; aligned++) {
    uint8_t* d =
        aligned ? reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(dst) + 7) & ~uintptr_t{7}) : dst;
    for (int round = 0; round < 100; round++, rounds++) {
      uint8_t v = static_cast<uint8_t>(round * 2 + 1);
      memset(src.data(), v, kLen);
      memset(d, 0, kLen);
      memset(&g_shadow[d - g_block], 0, kLen);
      std::atomic<bool> go{false};
      std::thread poller([&] {
        go = true;
        volatile uint8_t* last = d + kLen - 1;
        while (*last != v) {
        }
        std::atomic_thread_fence(std::memory_order_acquire);
        for (size_t i = 0; i < kLen; i++)
          if (d[i] != v) {
            violations++;
            break;
          }
      });
      while (!go) {
      }
      if (one(make_req(g_s.wire.qpn, g_t.rkey1, reinterpret_cast<uintptr_t>(d), kLen, src.data())) != 0) {
        violations++;
        *(d + kLen - 1) = v;  // let the poller go
      }
      poller.join();
    }
  }
  expect(violations == 0, "direct.ordering_last_bytes_last", "%lld violations in %lld rounds", violations,
         rounds);
}

// Refusals that are no RNIC violation (the request is not for the direct path): each is
// -EACCES (or -EINVAL when malformed), counted under its reason, places nothing and
// leaves the pair usable.
void test_denials(std::mt19937_64& rng) {
  uint8_t* src = g_src + 200000;
  for (int i = 0; i < 256; i++) src[i] = static_cast<uint8_t>(rng());
  auto before = deny_stats();
  std::map<std::string, long long> wanted;
  const uint32_t q = g_s.wire.qpn;
  struct Case {
    const char* name;
    unload_direct_req req;
    int result;
    const char* stat;
  };
  const uint64_t a1 = r1();
  std::vector<Case> cases = {
      {"length_0", make_req(q, g_t.rkey1, a1, 0, src), -EACCES, "length"},
      {"length_huge", make_req(q, g_t.rkey1, a1, 1ULL << 40, src), -EACCES, "length"},
      {"length_2^64-1", make_req(q, g_t.rkey1, a1, ~0ULL, src), -EACCES, "length"},
      {"impersonate_peer_qp", make_req(g_t.wire.qpn, g_t.rkey1, a1, 8, src), -EACCES, "qp_unregistered"},
      {"unknown_qp", make_req(0xfffff0, g_t.rkey1, a1, 8, src), -EACCES, "qp_unregistered"},
  };
  auto list_fault = make_req(q, g_t.rkey1, a1, 64, src);  // a segment list it cannot read
  list_fault.iov = 16;
  list_fault.iov_count = 2;
  list_fault.lkey = 0;
  cases.push_back({"segment_list_fault", list_fault, -EACCES, "fault"});
  auto unknown_lkey = make_req(q, g_t.rkey1, a1, 8, src);
  unknown_lkey.lkey = g_src_lkey ^ 0x5a5a00;
  cases.push_back({"source_lkey_unregistered", unknown_lkey, -EACCES, "source"});
  auto bad_flags = make_req(q, g_t.rkey1, a1, 8, src);
  bad_flags.flags = 1;
  cases.push_back({"invalid_flags", bad_flags, -EINVAL, "invalid"});
  unload_iov short_iov[2] = {{reinterpret_cast<uintptr_t>(src), 4, g_src_lkey, 0},
                             {reinterpret_cast<uintptr_t>(src + 4), 3, g_src_lkey, 0}};
  auto bad_iov = make_req(q, g_t.rkey1, a1, 8, src);
  bad_iov.iov = reinterpret_cast<uintptr_t>(short_iov);
  bad_iov.iov_count = 2;
  bad_iov.lkey = 0;
  cases.push_back({"invalid_iov_sum", bad_iov, -EINVAL, "invalid"});
  auto many_iov = bad_iov;
  many_iov.iov_count = UNLOAD_MAX_IOV + 1;
  cases.push_back({"invalid_iov_count", many_iov, -EINVAL, "invalid"});

  // QPs of S that are not properly paired.
  Rc s2, s3, s4, s5;
  rc_open(&s5, &g_s.device, g_s.pd);  // exists, never registered
  rc_open(&s2, &g_s.device, g_s.pd);
  rc_connect(&s2, s5.wire);  // peer QP registered by nobody
  rc_open(&s3, &g_s.device, g_s.pd);
  rc_connect(&s3, g_t.wire);  // one-sided: T's QP is connected to S's main QP
  rc_open(&s4, &g_s.device, g_s.pd);
  rc_init_only(&s4);  // not RTS
  for (Rc* r : {&s2, &s3, &s4})
    if (reg_qp(g_fd, r->dev.c_str(), r->wire.qpn)) die("REG_QP of a test QP");
  cases.push_back(
      {"peer_unregistered", make_req(s2.wire.qpn, g_t.rkey1, a1, 8, src), -EACCES, "peer_unknown"});
  cases.push_back(
      {"peer_not_paired", make_req(s3.wire.qpn, g_t.rkey1, a1, 8, src), -EACCES, "peer_unpaired"});
  cases.push_back({"qp_not_rts", make_req(s4.wire.qpn, g_t.rkey1, a1, 8, src), -EACCES, "qp_state"});

  for (auto& c : cases) {
    auto b = deny_stats();
    int result = one(c.req);
    long long d = deny_stats()[c.stat] - b[c.stat];
    wanted[c.stat]++;
    expect(result == c.result && d == 1, (std::string("deny.") + c.name).c_str(),
           "result %d (want %d), direct_denied_%s +%lld", result, c.result, c.stat, d);
  }

  // Disabled by sysfs.
  std::string dm;
  sysfs_read("direct_max", &dm);
  sysfs_write("direct_max", "0");
  int got = one(make_req(q, g_t.rkey1, a1, 8, src));
  sysfs_write("direct_max", dm);
  expect(got == -EACCES, "deny.direct_max_0", "result %d", got);
  sysfs_write("enabled", "0");
  int got2 = one(make_req(q, g_t.rkey1, a1, 8, src));
  sysfs_write("enabled", "1");
  expect(got2 == -EACCES, "deny.enabled_0", "result %d", got2);
  wanted["disabled"] += 2;
  int small = one(make_req(q, g_t.rkey1, a1, 8, src));
  expect(small == 0, "deny.pair_still_usable", "result %d (none of these poisons)", small);

  // Registering another process's QP, same uid.
  int r = reg_qp(g_fd, g_s.dev.c_str(), g_t.wire.qpn);
  expect(r == -EPERM, "impersonate.reg_peer_qp_same_uid", "REG_QP -> %d", r);
  // Registering T's MR as S's region: not S's MR.
  r = reg_region(g_fd, g_s.dev.c_str(), reinterpret_cast<void*>(a1), kR1Len, g_t.rkey1, g_t.rkey1,
                 UNLOAD_ACCESS_REMOTE_WRITE);
  expect(r == -ESRCH, "impersonate.reg_peer_mr", "REG_REGION -> %d", r);

  // Another uid: cannot register S's or T's QP, cannot submit on them.
  pid_t pid = fork();
  if (pid == 0) {
    if (setgid(65534) || setuid(65534)) _exit(2);
    int fd = unload_open();
    int a = reg_qp(fd, g_s.dev.c_str(), g_s.wire.qpn);
    int b = reg_qp(fd, g_s.dev.c_str(), g_t.wire.qpn);
    unload_direct_req rq = make_req(g_s.wire.qpn, g_t.rkey1, a1, 8, src);
    int c = submit(fd, &rq, 1);
    // Not root: the reasons are not readable.
    FILE* f = fopen("/sys/kernel/unload/stats/direct_denied_rkey", "r");
    if (f) fclose(f);
    _exit(a == -EPERM && b == -EPERM && c == 0 && rq.result == -EACCES && !f ? 0 : 1);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  wanted["qp_unregistered"]++;
  expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "impersonate.other_uid",
         "child status %d (REG_QP EPERM x2, submit refused, reasons unreadable)", WEXITSTATUS(st));

  // A child inheriting S's session fd (another mm) cannot submit through it.
  pid = fork();
  if (pid == 0) {
    unload_direct_req rq = make_req(q, g_t.rkey1, a1, 8, src);
    _exit(submit(g_fd, &rq, 1) == -EPERM ? 0 : 1);
  }
  waitpid(pid, &st, 0);
  expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "impersonate.inherited_fd", "child status %d",
         WEXITSTATUS(st));

  auto after = deny_stats();
  size_t stat_bad = 0;
  for (auto& [name, v] : after) {
    long long d = v - before[name];
    if (d != wanted[name]) {
      stat_bad++;
      expect(false, ("deny.stat." + name).c_str(), "+%lld (want +%lld)", d, wanted[name]);
    }
  }
  expect(stat_bad == 0, "deny.stats_counted", "%zu of %zu reasons off", stat_bad, after.size());
  size_t diff = shadow_diff();
  expect(diff == 0 && canary_diff() == 0, "deny.nothing_written", "%zu bytes differ", diff);
  for (Rc* x : {&s2, &s3, &s4, &s5}) rc_close(x);
}

// The module's own violation checks, on pairs of S's own QPs (S is its own peer): a
// source outside its lkey's MR, a responder QP without remote write, a target MR on
// another PD. Each: a valid write is placed, the violation is -EACCES counted under its
// reason, and the pair is poisoned (the valid write after is refused, nothing placed).
void test_self_pair_violations() {
  static uint8_t tgt[3][8192] __attribute__((aligned(4096)));
  ibv_pd* other_pd = ibv_alloc_pd(g_s.ctx);
  struct V {
    const char* name;
    const char* reason;
    int responder_access;
    bool target_other_pd;
    bool source_outside;
  } vs[] = {
      {"lkey_outside_mr", "lkey", kAllAccess, false, true},
      {"responder_qp_no_remote_write", "access", IBV_ACCESS_LOCAL_WRITE, false, false},
      {"target_mr_other_pd", "pd", kAllAccess, true, false},
  };
  int i = 0;
  for (const V& v : vs) {
    uint8_t* t = tgt[i++];
    memset(t, kFill, 8192);
    ibv_mr* mr = ibv_reg_mr(v.target_other_pd ? other_pd : g_s.pd, t, 8192,
                            IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    uint64_t h = 0;
    if (!mr || reg_mr(g_fd, mr, UNLOAD_ACCESS_LOCAL_WRITE | UNLOAD_ACCESS_REMOTE_WRITE, &h))
      die("self-pair target MR");
    Rc a, b;
    rc_open(&a, &g_s.device, g_s.pd);
    rc_open(&b, &g_s.device, g_s.pd);
    rc_connect(&a, b.wire);
    rc_connect(&b, a.wire, v.responder_access);
    if (reg_qp(g_fd, a.dev.c_str(), a.wire.qpn) || reg_qp(g_fd, b.dev.c_str(), b.wire.qpn))
      die("self-pair REG_QP");
    uint8_t* src = g_src + 400000;
    memset(src, 0x77, 64);
    auto ok_req = make_req(a.wire.qpn, mr->rkey, reinterpret_cast<uintptr_t>(t), 64, src);
    auto bad = make_req(a.wire.qpn, mr->rkey, reinterpret_cast<uintptr_t>(t) + 64, 64,
                        v.source_outside ? g_src + kSrcLen - 16 : src);
    auto after = make_req(a.wire.qpn, mr->rkey, reinterpret_cast<uintptr_t>(t) + 128, 64, src);
    // The MR other_pd / no-remote-write cases refuse even the "valid" write: count it.
    auto b0 = deny_stats();
    int r0 = submit_one(ok_req);
    int r1 = submit_one(bad);
    int r2 = submit_one(after);
    auto b1 = deny_stats();
    size_t placed = 0;
    for (int k = 0; k < 8192; k++) placed += t[k] != kFill;
    const bool first_ok = v.source_outside;  // only then is the first write valid
    const long long want_reason = 1, got_reason = b1[v.reason] - b0[v.reason];
    const long long poisoned = b1["poisoned"] - b0["poisoned"];
    expect((first_ok ? r0 == 0 && placed == 64 : r0 == -EACCES && placed == 0) && r1 == -EACCES &&
               r2 == -EACCES && got_reason == want_reason && poisoned == 2 - (first_ok ? 1 : 0),
           (std::string("violation.") + v.name).c_str(),
           "results %d/%d/%d, direct_denied_%s +%lld, poisoned +%lld, %zu bytes placed", r0, r1, r2, v.reason,
           got_reason, poisoned, placed);
    rc_close(&a);
    rc_close(&b);
    dereg_region(g_fd, h);
    ibv_dereg_mr(mr);
  }
  ibv_dealloc_pd(other_pd);
}

// A submission reads the sender QP again only when it may have moved (kmod/pairs.c,
// unload_pair_still): after a registration since the pair was read, or while either QP's
// busy byte is up. Each case on a fresh self-pair whose first write was placed with both
// bytes down (the pair kept): the sender then moves to ERR, once by its own NIC request
// failing with its byte raised first (as the shim does before any NIC post), once by a
// modify it registers again (as the shim does at every modify) with its byte lowered
// after. Either way the next write is refused as the NIC path flushes it: nothing placed.
void test_quiet_sender() {
  static uint8_t tgt[2][4096] __attribute__((aligned(4096)));
  auto* busy = static_cast<uint8_t*>(mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, g_fd, UNLOAD_MMAP_BUSY));
  if (busy == MAP_FAILED) die("mmap the busy page");
  const char* names[] = {"quiet.own_request_failed", "quiet.modified_registered"};
  for (int c = 0; c < 2; c++) {
    uint8_t* t = tgt[c];
    memset(t, kFill, sizeof tgt[c]);
    ibv_mr* mr = ibv_reg_mr(g_s.pd, t, sizeof tgt[c], IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    uint64_t h = 0;
    if (!mr || reg_mr(g_fd, mr, kRegionRw, &h)) die("quiet target MR");
    Rc a, b;
    rc_open(&a, &g_s.device, g_s.pd);
    rc_open(&b, &g_s.device, g_s.pd);
    rc_connect(&a, b.wire);
    rc_connect(&b, a.wire);
    unload_qp_reg ra, rb;
    if (reg_qp(g_fd, a.dev.c_str(), a.wire.qpn, &ra) || reg_qp(g_fd, b.dev.c_str(), b.wire.qpn, &rb))
      die("quiet REG_QP");
    busy[ra.busy_slot] = busy[rb.busy_slot] = 0;
    uint8_t* src = g_src + 500000;
    memset(src, 0x5a, 64);
    const auto base = reinterpret_cast<uintptr_t>(t);
    const int r0 = submit_one(make_req(a.wire.qpn, mr->rkey, base, 64, src));
    if (c == 0) {
      busy[ra.busy_slot] = 1;
      ibv_sge sge{reinterpret_cast<uintptr_t>(src), 64, g_src_lkey ^ 0x5500};  // no such lkey
      ibv_send_wr wr{}, *bad = nullptr;
      wr.wr_id = 7;
      wr.sg_list = &sge;
      wr.num_sge = 1;
      wr.opcode = IBV_WR_RDMA_WRITE;
      wr.send_flags = IBV_SEND_SIGNALED;
      wr.wr.rdma.remote_addr = base + 1024;
      wr.wr.rdma.rkey = mr->rkey;
      if (ibv_post_send(a.qp, &wr, &bad)) die("post the failing NIC write");
      ibv_wc wc{};
      for (double end = now_s() + 10; ibv_poll_cq(a.cq, 1, &wc) == 0;)
        if (now_s() > end) die("no completion for the failing NIC write");
      if (wc.status == IBV_WC_SUCCESS) die("the NIC write with a bad lkey succeeded");
    } else {
      ibv_qp_attr at{};
      at.qp_state = IBV_QPS_ERR;
      if (ibv_modify_qp(a.qp, &at, IBV_QP_STATE) || reg_qp(g_fd, a.dev.c_str(), a.wire.qpn, &ra))
        die("modify to ERR and register again");
      busy[ra.busy_slot] = 0;
    }
    auto d0 = deny_stats();
    const int r1 = submit_one(make_req(a.wire.qpn, mr->rkey, base + 2048, 64, src));
    const long long qp_state = deny_stats()["qp_state"] - d0["qp_state"];
    size_t placed = 0;
    for (size_t k = 2048; k < sizeof tgt[c]; k++) placed += t[k] != kFill;
    expect(r0 == 0 && r1 == -EACCES && qp_state == 1 && placed == 0, names[c],
           "first write %d, after the sender's move %d (direct_denied_qp_state +%lld), %zu bytes placed after", r0,
           r1, qp_state, placed);
    rc_close(&a);
    rc_close(&b);
    dereg_region(g_fd, h);
    ibv_dereg_mr(mr);
  }
  munmap(busy, 4096);
}

// A QP's busy byte is not the next registration's: bytes are taken in turn around the
// page, so one a shim thread may still lower after the QP's unregistration is reused last.
void test_busy_slot_reuse() {
  Rc x;
  rc_open(&x, &g_s.device, g_s.pd);
  unload_qp_reg r1, r2, u{};
  snprintf(u.ibdev, sizeof u.ibdev, "%s", x.dev.c_str());
  u.qp_num = x.wire.qpn;
  const int a = reg_qp(g_fd, x.dev.c_str(), x.wire.qpn, &r1);
  const int b = uioctl(g_fd, UNLOAD_IOC_UNREG_QP, &u);
  const int c = reg_qp(g_fd, x.dev.c_str(), x.wire.qpn, &r2);
  expect(a == 0 && b == 0 && c == 0 && r1.busy_slot != r2.busy_slot, "busy.slot_not_reused",
         "REG_QP %d (byte %u), UNREG_QP %d, REG_QP %d (byte %u)", a, r1.busy_slot, b, c, r2.busy_slot);
  uioctl(g_fd, UNLOAD_IOC_UNREG_QP, &u);
  rc_close(&x);
}

// T deregisters region 1 while S streams into it: nothing lands after. An rkey the module
// no longer knows is the NIC's to judge (it may be a memory window, or a new MR): each
// request to it is refused, and the pair is not poisoned.
void test_dereg_mid_stream(int to_t, int from_t) {
  std::span<uint8_t> src(g_src + 300000, 4096);
  std::fill(src.begin(), src.end(), 0x3c);
  auto before = deny_stats();
  std::atomic<bool> stop{false};
  std::atomic<long long> acc{0}, after_deny_acc{0}, rkey_denied{0}, other{0};
  std::thread streamer([&] {
    bool denied = false;
    while (!stop) {
      unload_direct_req rq[8];
      for (auto& x : rq) x = make_req(g_s.wire.qpn, g_t.rkey1, r1() + 8192, 4096, src.data());
      if (submit(g_fd, rq, 8)) {
        other++;
        continue;
      }
      for (auto& x : rq) {
        if (x.result == 0) {
          acc++;
          if (denied) after_deny_acc++;
          shadow_apply(x);
        } else if (x.result == -EACCES) {
          denied = true;
          rkey_denied++;
        } else {
          other++;
        }
      }
      if (denied && rkey_denied > 100) stop = true;
    }
  });
  usleep(20000);
  const long long pinned0 = stat("pinned_pages");
  char c = 'D';
  xwrite(to_t, &c, 1);
  xread(from_t, &c, 1);
  const long long pinned1 = stat("pinned_pages");
  streamer.join();
  size_t diff = shadow_diff();
  expect(after_deny_acc == 0 && other == 0 && rkey_denied > 0, "dereg.mid_stream",
         "%lld placed before, %lld after, %lld denied rkey, %lld other", acc.load(), after_deny_acc.load(),
         rkey_denied.load(), other.load());
  expect(pinned0 - pinned1 >= static_cast<long long>(kR1Len / 4096), "dereg.unpinned",
         "pinned_pages %lld -> %lld", pinned0, pinned1);
  expect(diff == 0 && canary_diff() == 0, "dereg.bytes_exact", "%zu bytes differ", diff);
  auto after = deny_stats();
  long long rk = after["rkey"] - before["rkey"], po = after["poisoned"] - before["poisoned"];
  expect(rk == rkey_denied && po == 0, "dereg.rkey_not_poison",
         "direct_denied_rkey +%lld (want %lld), direct_denied_poisoned +%lld (want 0)", rk,
         rkey_denied.load(), po);
  // The pair stands (T's other target regions are on another PD or read-only: no write).
  unload_qp_reg rq;
  int r = reg_qp(g_fd, g_s.dev.c_str(), g_s.wire.qpn, &rq);
  expect(r == 0 && !(rq.peer_flags & UNLOAD_PEER_POISONED) && (rq.peer_flags & UNLOAD_PEER_PAIRED),
         "dereg.pair_kept", "REG_QP flags 0x%x", rq.peer_flags);
}

}  // namespace

int main() {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (access(UNLOAD_DEVICE_PATH, F_OK)) skip("no /dev/unload (module not loaded)");
  const long long pins0 = foll_pins_outstanding();
  g_block =
      static_cast<uint8_t*>(mmap(nullptr, kBlock, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  if (g_block == MAP_FAILED) die("mmap");
  memset(g_block, kFill, kBlock);
  g_shadow.assign(g_block, g_block + kBlock);
  int to_t[2], from_t[2];
  if (pipe(to_t) || pipe(from_t)) die("pipe");
  pid_t tpid = fork();
  if (tpid == 0) target_main(to_t[0], from_t[1]);

  std::mt19937_64 rng(12345);
  rc_open(&g_s);
  g_fd = unload_open();
  g_src = static_cast<uint8_t*>(
      mmap(nullptr, kSrcLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ibv_mr* smr = ibv_reg_mr(g_s.pd, g_src, kSrcLen, IBV_ACCESS_LOCAL_WRITE);
  if (g_src == MAP_FAILED || !smr) die("source MR");
  g_src_lkey = smr->lkey;
  uint64_t sh = 0;
  int rr = reg_mr(g_fd, smr, UNLOAD_ACCESS_LOCAL_WRITE, &sh);
  expect(rr == 0 && sh != 0, "region.source_registered", "REG_REGION -> %d handle %llu", rr,
         static_cast<unsigned long long>(sh));
  xread(from_t[0], &g_t, sizeof g_t);
  xwrite(to_t[1], &g_s.wire, sizeof g_s.wire);
  rc_connect(&g_s, g_t.wire);
  char c;
  xread(from_t[0], &c, 1);
  unload_qp_reg rq;
  int r = reg_qp(g_fd, g_s.dev.c_str(), g_s.wire.qpn, &rq);
  expect(r == 0 && rq.state == IBV_QPS_RTS && rq.dest_qp_num == g_t.wire.qpn &&
             (rq.peer_flags & (UNLOAD_PEER_LOCAL | UNLOAD_PEER_PAIRED)) ==
                 (UNLOAD_PEER_LOCAL | UNLOAD_PEER_PAIRED),
         "qp.registered_paired", "ret %d state %u dest 0x%x flags 0x%x", r, rq.state, rq.dest_qp_num,
         rq.peer_flags);

  std::printf("info: foll pins outstanding %lld at start, %lld connected\n", pins0, foll_pins_outstanding());
  test_integrity(rng);
  std::printf("info: foll pins outstanding %lld\n", foll_pins_outstanding());
  test_ordering();
  test_submit_stop(rng);
  test_inline(rng);
  test_denials(rng);
  std::printf("info: foll pins outstanding %lld\n", foll_pins_outstanding());
  test_self_pair_violations();
  test_quiet_sender();
  test_busy_slot_reuse();
  test_dereg_mid_stream(to_t[1], from_t[0]);  // region 1 gone: last
  std::printf("info: foll pins outstanding %lld\n", foll_pins_outstanding());

  // The peer exits: its session, QPs and regions go; writes are refused.
  c = 'X';
  xwrite(to_t[1], &c, 1);
  int st;
  waitpid(tpid, &st, 0);
  uint8_t* src = g_src;
  int got = one(make_req(g_s.wire.qpn, g_t.rkey2, reinterpret_cast<uintptr_t>(g_block + kR2Off), 8, src));
  expect(got == -EACCES && shadow_diff() == 0, "peer.exited", "result %d", got);

  close(g_fd);
  ibv_dereg_mr(smr);
  rc_close(&g_s);
  ibv_dealloc_pd(g_s.pd);
  ibv_close_device(g_s.ctx);
  long long sess = stat("sessions"), pinned = stat("pinned_pages");
  long long pins1 = foll_pins_outstanding();
  expect(sess == 0 && pinned == 0, "lifecycle.released", "sessions %lld pinned_pages %lld", sess, pinned);
  // rxe itself leaves the odd FOLL_PIN outstanding for a while (ibv_rc_pingpong alone
  // does), so the exact pin balance of the module is checked by kmod_lifecycle.
  std::printf("info: foll pins outstanding %lld -> %lld (rxe included)\n", pins0, pins1);
  finish();
}
