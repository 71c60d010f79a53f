// The semantics programs' common set-up (see fixture.hpp).
#include "fixture.hpp"

#include <cstring>

#include <time.h>
#include <unistd.h>

#include <cstdarg>

#include "check.hpp"
#include "verbs.hpp"

namespace sem {

namespace t = unload::test;

void out(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::vprintf(fmt, ap);
  va_end(ap);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

Env open_env() {
  const t::Device d = t::open_device();
  Env e;
  e.ctx = d.ctx;
  e.pd = t::make_pd(d.ctx);
  e.gid_index = d.gid_index;
  e.gid = d.gid;
  return e;
}

ibv_cq* make_cq(Env& e, int cqe, ibv_comp_channel* ch) {
  return t::make_cq(e.ctx, cqe, ch);
}

ibv_qp* make_qp(Env& e, ibv_cq* scq, ibv_cq* rcq, const QpCaps& caps) {
  t::QpCaps c;
  c.send_wr = caps.send_wr;
  c.recv_wr = caps.recv_wr;
  c.send_sge = caps.send_sge;
  c.recv_sge = caps.recv_sge;
  c.inline_data = caps.inline_data;
  c.sig_all = caps.sig_all;
  return t::make_rc_qp(e.pd, scq, rcq, c);
}

void connect(Env& e, ibv_qp* qp, uint32_t dest, ibv_mtu mtu) {
  t::RcPath p;
  p.dest_qpn = dest;
  p.dgid = e.gid;
  p.sgid_index = e.gid_index;
  p.mtu = mtu;
  p.min_rnr_timer = 1;
  t::connect(qp, t::kAllAccess, p);
}

void connect_pair(Env& e, ibv_qp* a, ibv_qp* b, ibv_mtu mtu) {
  connect(e, a, b->qp_num, mtu);
  connect(e, b, a->qp_num, mtu);
}

uint8_t* alloc(size_t len) {
  return t::map_zeroed(len);
}

ibv_mr* reg(Env& e, void* p, size_t len, int access) {
  return t::make_mr(e.pd, p, len, access);
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
               uint32_t rkey, unsigned flags, ibv_wr_opcode op) {
  ibv_sge sg{reinterpret_cast<uintptr_t>(src), len, lkey};
  ibv_send_wr wr{}, *bad = nullptr;
  wr.wr_id = wr_id;
  wr.opcode = op;
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

RandomWrite random_write(std::mt19937_64& rng, uint32_t short_max, uint32_t long_max, uint8_t* src,
                         std::vector<uint8_t>& shadow) {
  RandomWrite w;
  w.len =
      rng() % 2 ? 1 + static_cast<uint32_t>(rng() % short_max) : 1 + static_cast<uint32_t>(rng() % long_max);
  w.off = rng() % (shadow.size() - w.len);
  for (uint32_t i = 0; i < w.len; ++i) src[i] = static_cast<uint8_t>(rng());
  std::memcpy(&shadow[w.off], src, w.len);
  return w;
}

}  // namespace sem
