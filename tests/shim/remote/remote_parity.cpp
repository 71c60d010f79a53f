// The same writes between two hosts, printed so that a run on the NIC and a run on the remote path can be
// compared line by line.
//
//   remote_parity server|client [ADDR] [wr]   (server on host B, client on host A; wr: the
//                                             client posts with the ibv_qp_ex wr_* API)
//   remote_parity stream-server NAME DONE | stream-client ADDR NAME MID   (a failure stream, below)
//   remote_parity threads-server | threads-client ADDR   (threads on one channel, below)
//   remote_parity stream-server NAME DONE | late-client ADDR NAME DONE   (a channel come late)
//
// Each case gets a fresh RC QP pair, connected over a TCP side channel (port 18610). The
// client posts the case's requests and prints, in order, every completion (wr_id, status,
// and for a success its opcode and length) and its QP's state after them; the server then
// prints the receive completions of the case's immediates, its QP's state, and a checksum
// of its target bytes with how many are non-zero. Each write's source is its own, and
// writes to the same target bytes carry different bytes, so an order the NIC would not
// give shows. Result lines start with "R "; the guest script runs the pair without the
// shim and with it (UNLOAD_PATH=remote) and compares them; the wr_* client posts each list
// as one wr_start .. wr_complete batch and prints the same lines. The program's own checks are
// only what it needs to go on (completions arrive, the side channel answers).
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "check.hpp"
#include "verbs.hpp"

namespace {

namespace t = unload::test;
using t::die;

constexpr size_t kRegion = 256 * 1024;
constexpr uint32_t kPsn = 0x2000;
constexpr int kPort = 18610;

// One request of a case: where in the target region, how long, signaled, whether its rkey
// is wrong (the responder must deny it), whether it carries an immediate (the NIC's
// alone: the responder's receive completion), and whether it is an RDMA READ of those
// bytes instead of a write (the NIC's alone: the client prints what it read).
struct Wr {
  size_t off, len;
  bool signaled;
  bool bad_rkey = false;
  bool imm = false;
  bool read = false;
};
// A case: its posts, each a list of requests given to one ibv_post_send; the server QP's
// access flags; whether the server fills its target bytes before (so a read shows them);
// whether the posts go back to back, their completions collected after the last (so
// remote writes of several posts are in flight at once), or each post's after it.
struct Case {
  const char* name;
  std::vector<std::vector<Wr>> posts;
  int server_access = IBV_ACCESS_REMOTE_WRITE;
  bool prefill = false;
  bool back_to_back = false;
};

std::vector<Case> cases() {
  std::vector<Wr> list8;
  for (size_t i = 0; i < 8; ++i) list8.push_back({i * 1024, 8 + i * 60, true});
  // Eight posts over overlapping bytes, half unsignaled, then a READ of them all: the
  // writes in flight together land in order, and the read (the NIC's) sees every one.
  std::vector<std::vector<Wr>> overlapping;
  for (size_t i = 0; i < 8; ++i) overlapping.push_back({{i * 512, 2048, i % 2 == 1}});
  overlapping.push_back({{0, 8192, true, false, false, true}});
  return {
      {"one_byte", {{{0, 1, true}}}},
      {"four_kib", {{{4096, 4096, true}}}},
      {"sixty_four_kib", {{{65536, 65536, true}}}},
      {"post_list_of_8", {list8}},
      {"unsignaled_then_signaled", {{{0, 100, false}}, {{200, 300, false}}, {{1000, 64, true}}}},
      // The NIC fails the denied write (REM_ACCESS_ERR), both QPs go to ERR, and the write
      // posted after it is flushed: the remote path must end the same.
      {"denied_rkey_then_next", {{{0, 64, true}}, {{128, 64, true, true}}, {{256, 64, true}}}},
      // A path switch mid-list: NIC (immediate), remote, NIC. The remote write lands on the
      // bytes the NIC's first write placed, so it must wait for it (the fence), and the
      // last write, back on the NIC, must land after it.
      {"switch_nic_remote_nic",
       {{{0, 4096, false, false, true}, {0, 4096, false}, {2048, 4096, true, false, true}}}},
      // The server's QP without REMOTE_WRITE (its MR has it): the NIC fails the write (the
      // responder's invalid request), both QPs go to ERR and the next write is flushed. The
      // target's module must refuse it on the QP's access, and the NIC give its verdict.
      {"responder_without_remote_write", {{{0, 64, true}}, {{128, 64, true}}}, 0},
      // An RDMA READ of target bytes (the NIC's), then a write over them (remote), in one
      // list and then in two posts (the read unsignaled: the fence needs its marker): each
      // read must return the bytes from before its write, and the write land after it. The
      // list's read is 64 KiB and its write the last 4 KiB of them: the responder reads as
      // it sends, so a write placed without waiting for the read has a window to show in.
      {"fence_after_read",
       {{{0, 65536, true, false, false, true}, {61440, 4096, true}},
        {{4096, 512, false, false, false, true}},
        {{4096, 512, true}}},
       IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ,
       true},
      {"back_to_back_then_read", overlapping, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ, true, true},
      // A denied write among writes in flight: those before it placed, it denied by the
      // NIC, those after it flushed, none of them placed.
      {"back_to_back_denied",
       {{{0, 64, true}}, {{128, 64, true}}, {{256, 64, true, true}}, {{384, 64, true}}, {{512, 64, true}}},
       IBV_ACCESS_REMOTE_WRITE,
       false,
       true},
  };
}

// The byte write k of case c puts at offset off: writes to the same bytes differ.
uint8_t pattern(size_t c, size_t k, size_t off) {
  return static_cast<uint8_t>(c * 37 + k * 101 + off * 13 + (off >> 9) + 1);
}
// What a case with `prefill` holds at offset off before any write (no write's k is 77).
uint8_t prefilled(size_t c, size_t off) {
  return pattern(c, 77, off);
}

uint64_t fnv1a(const uint8_t* p, size_t n) {
  uint64_t sum = 14695981039346656037ull;
  for (size_t i = 0; i < n; ++i) sum = (sum ^ p[i]) * 1099511628211ull;
  return sum;
}

struct PeerInfo {
  uint32_t qpn, rkey;
  uint64_t addr;
  uint8_t gid[16];
};

void full_io(int fd, void* buf, size_t n, bool out) {
  auto* p = static_cast<char*>(buf);
  while (n) {
    const ssize_t r = out ? write(fd, p, n) : read(fd, p, n);
    if (r <= 0) die(out ? "write to the peer" : "read from the peer");
    p += r;
    n -= static_cast<size_t>(r);
  }
}

void sync_peer(int fd) {
  char b = 1;
  full_io(fd, &b, 1, true);
  full_io(fd, &b, 1, false);
}

int side_channel(bool server, const char* addr) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(kPort);
  if (server) {
    const int l = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sa.sin_addr.s_addr = htonl(INADDR_ANY);
    if (bind(l, reinterpret_cast<sockaddr*>(&sa), sizeof sa) || listen(l, 1)) die("listen");
    const int fd = accept(l, nullptr, nullptr);
    if (fd < 0) die("accept");
    close(l);
    return fd;
  }
  if (inet_pton(AF_INET, addr, &sa.sin_addr) != 1) die("server address");
  for (int tries = 0; tries < 1200; ++tries) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0) return fd;
    close(fd);
    usleep(100000);
  }
  die("connect to the server");
}

// This side's QP, rkey, region and GID sent over the side channel; the peer's received.
PeerInfo swap_info(int fd, const t::Device& dev, const ibv_qp* qp, const ibv_mr* mr, const void* buf) {
  PeerInfo me{qp->qp_num, mr->rkey, reinterpret_cast<uintptr_t>(buf), {}}, peer{};
  std::memcpy(me.gid, dev.gid.raw, 16);
  full_io(fd, &me, sizeof me, true);
  full_io(fd, &peer, sizeof peer, false);
  return peer;
}

// The RC path to the peer's QP (its QPN and GID), from this device's GID and port MTU.
t::RcPath path_to(const PeerInfo& peer, const t::Device& dev) {
  ibv_port_attr pa{};
  if (ibv_query_port(dev.ctx, 1, &pa)) die("ibv_query_port");
  t::RcPath path;
  path.dest_qpn = peer.qpn;
  std::memcpy(path.dgid.raw, peer.gid, 16);
  path.sgid_index = dev.gid_index;
  path.mtu = pa.active_mtu;
  path.rq_psn = kPsn;
  path.sq_psn = kPsn;
  path.hop_limit = 64;
  return path;
}

const char* state_name(ibv_qp* qp) {
  ibv_qp_attr a{};
  ibv_qp_init_attr ia{};
  if (ibv_query_qp(qp, &a, IBV_QP_STATE, &ia)) return "query-failed";
  switch (a.qp_state) {
    case IBV_QPS_RESET:
      return "RESET";
    case IBV_QPS_INIT:
      return "INIT";
    case IBV_QPS_RTR:
      return "RTR";
    case IBV_QPS_RTS:
      return "RTS";
    case IBV_QPS_SQD:
      return "SQD";
    case IBV_QPS_SQE:
      return "SQE";
    case IBV_QPS_ERR:
      return "ERR";
    default:
      return "?";
  }
}

// Every completion the client's CQ yields within `seconds`, up to `want`; then a short
// wait for any beyond it (none should come).
std::vector<ibv_wc> collect(ibv_cq* cq, size_t want, int seconds) {
  std::vector<ibv_wc> got;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (got.size() < want && std::chrono::steady_clock::now() < end) {
    ibv_wc wc[8];
    const int n = ibv_poll_cq(cq, 8, wc);
    if (n < 0) die("ibv_poll_cq");
    got.insert(got.end(), wc, wc + n);
  }
  const auto linger = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  while (std::chrono::steady_clock::now() < linger) {
    ibv_wc wc[8];
    const int n = ibv_poll_cq(cq, 8, wc);
    if (n < 0) die("ibv_poll_cq");
    got.insert(got.end(), wc, wc + n);
  }
  return got;
}

// An RC QP for the wr_* API, with make_rc_qp's caps and every opcode the cases post.
ibv_qp* make_rc_qp_ex(t::Device& dev, ibv_pd* pd, ibv_cq* cq) {
  const t::QpCaps caps;
  ibv_qp_init_attr_ex a{};
  a.qp_type = IBV_QPT_RC;
  a.send_cq = cq;
  a.recv_cq = cq;
  a.cap.max_send_wr = caps.send_wr;
  a.cap.max_recv_wr = caps.recv_wr;
  a.cap.max_send_sge = caps.send_sge;
  a.cap.max_recv_sge = caps.recv_sge;
  a.pd = pd;
  a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  a.send_ops_flags =
      IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ;
  ibv_qp* qp = ibv_create_qp_ex(dev.ctx, &a);
  if (!qp) die("ibv_create_qp_ex");
  return qp;
}

// A post's list as one wr_* batch; wr_complete's result, as ibv_post_send's.
int post_wr(ibv_qp* qp, const std::vector<ibv_send_wr>& wrs) {
  ibv_qp_ex* qx = ibv_qp_to_qp_ex(qp);
  if (!qx) die("ibv_qp_to_qp_ex");
  ibv_wr_start(qx);
  for (const ibv_send_wr& s : wrs) {
    qx->wr_id = s.wr_id;
    qx->wr_flags = s.send_flags;
    if (s.opcode == IBV_WR_RDMA_READ)
      ibv_wr_rdma_read(qx, s.wr.rdma.rkey, s.wr.rdma.remote_addr);
    else if (s.opcode == IBV_WR_RDMA_WRITE_WITH_IMM)
      ibv_wr_rdma_write_imm(qx, s.wr.rdma.rkey, s.wr.rdma.remote_addr, s.imm_data);
    else
      ibv_wr_rdma_write(qx, s.wr.rdma.rkey, s.wr.rdma.remote_addr);
    ibv_wr_set_sge(qx, s.sg_list[0].lkey, s.sg_list[0].addr, s.sg_list[0].length);
  }
  return ibv_wr_complete(qx);
}

void run_case(size_t ci, const Case& c, bool server, bool wr_api, t::Device& dev, ibv_pd* pd, int fd) {
  ibv_cq* cq = t::make_cq(dev.ctx, 64);
  ibv_qp* qp = wr_api ? make_rc_qp_ex(dev, pd, cq) : t::make_rc_qp(pd, cq, cq);
  static uint8_t* buf = t::map_zeroed(kRegion);
  std::memset(buf, 0, kRegion);
  if (server && c.prefill)
    for (size_t i = 0; i < kRegion / 2; ++i) buf[i] = prefilled(ci, i);
  ibv_mr* mr =
      t::make_mr(pd, buf, kRegion, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
  const PeerInfo peer = swap_info(fd, dev, qp, mr, buf);
  if (int e = unload::verbs::rc_to_init(qp, server ? c.server_access : IBV_ACCESS_REMOTE_WRITE))
    die("modify to INIT", -e);
  size_t imms = 0;
  for (const auto& p : c.posts)
    for (const Wr& w : p) imms += w.imm;
  if (server)  // every immediate's receive before the client may write
    for (size_t i = 0; i < imms; ++i) {
      ibv_recv_wr rw{}, *bad = nullptr;
      rw.wr_id = 1000 + i;
      if (ibv_post_recv(qp, &rw, &bad)) die("ibv_post_recv");
    }
  t::RcPath path = path_to(peer, dev);
  path.timeout = 20;  // 4.3 s: a slow TCG guest is not a lost peer
  if (int e = unload::verbs::rc_to_rtr(qp, path)) die("modify to RTR", -e);
  if (int e = unload::verbs::rc_to_rts(qp, path)) die("modify to RTS", -e);
  sync_peer(fd);  // both QPs at RTS

  if (!server) {
    uint64_t id = ci * 100;
    size_t src = 0;  // each write's source (each read's destination) apart, so they stay as written
    struct Read {
      uint64_t wr_id;
      size_t at, off, len;
    };
    std::vector<Read> reads;
    for (const auto& p : c.posts) {
      std::vector<ibv_send_wr> wrs(p.size());
      std::vector<ibv_sge> sges(p.size());
      for (size_t k = 0; k < p.size(); ++k) {
        const size_t from = kRegion / 2 + src;
        src += p[k].len;
        if (p[k].read)
          reads.push_back({id, from, p[k].off, p[k].len});
        else
          for (size_t j = 0; j < p[k].len; ++j) buf[from + j] = pattern(ci, id % 100, p[k].off + j);
        sges[k] = {reinterpret_cast<uintptr_t>(buf + from), static_cast<uint32_t>(p[k].len), mr->lkey};
        ibv_send_wr& s = wrs[k];
        s.wr_id = id++;
        s.sg_list = &sges[k];
        s.num_sge = 1;
        s.opcode = p[k].read ? IBV_WR_RDMA_READ : p[k].imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
        s.imm_data = htonl(0x5a000000u + static_cast<uint32_t>(k));
        s.send_flags = p[k].signaled ? IBV_SEND_SIGNALED : 0;
        s.wr.rdma.remote_addr = peer.addr + p[k].off;
        s.wr.rdma.rkey = p[k].bad_rkey ? peer.rkey ^ 0x5a5a00 : peer.rkey;
        s.next = k + 1 < p.size() ? &wrs[k + 1] : nullptr;
      }
      ibv_send_wr* bad = nullptr;
      const int rc = wr_api ? post_wr(qp, wrs) : ibv_post_send(qp, wrs.data(), &bad);
      std::printf("R %s: post of %zu: rc %d\n", c.name, p.size(), rc);
      size_t signaled = 0;
      for (const auto& q : c.back_to_back ? c.posts : std::vector<std::vector<Wr>>{p})
        for (const Wr& w : q) signaled += w.signaled;
      if (c.back_to_back && &p != &c.posts.back()) continue;
      // This post's signaled completions (a failure also completes what it flushes), or
      // every post's after the last.
      for (const ibv_wc& wc : collect(cq, signaled, 30)) {
        if (wc.status == IBV_WC_SUCCESS)
          std::printf("R %s: wc wr_id %llu %s opcode %d byte_len %u\n", c.name,
                      static_cast<unsigned long long>(wc.wr_id), ibv_wc_status_str(wc.status), wc.opcode,
                      wc.byte_len);
        else
          std::printf("R %s: wc wr_id %llu %s\n", c.name, static_cast<unsigned long long>(wc.wr_id),
                      ibv_wc_status_str(wc.status));
      }
    }
    // What each read returned: the bytes from before the write after it, all of them.
    for (const Read& r : reads) {
      size_t before = 0;
      for (size_t j = 0; j < r.len; ++j) before += buf[r.at + j] == prefilled(ci, r.off + j);
      std::printf("R %s: read wr_id %llu fnv1a %llu, %zu of %zu bytes from before the write\n", c.name,
                  static_cast<unsigned long long>(r.wr_id),
                  static_cast<unsigned long long>(fnv1a(buf + r.at, r.len)), before, r.len);
    }
    std::printf("R %s: client QP %s\n", c.name, state_name(qp));
  }
  sync_peer(fd);  // the client has seen every completion: the server looks at its region
  if (server) {
    for (const ibv_wc& wc : collect(cq, imms, 30))
      std::printf("R %s: server wc wr_id %llu %s opcode %d imm %#x byte_len %u\n", c.name,
                  static_cast<unsigned long long>(wc.wr_id), ibv_wc_status_str(wc.status), wc.opcode,
                  ntohl(wc.imm_data), wc.byte_len);
    const uint64_t sum = fnv1a(buf, kRegion / 2);  // the target half of the region
    size_t nonzero = 0;
    for (size_t i = 0; i < kRegion / 2; ++i) nonzero += buf[i] != 0;
    std::printf("R %s: server QP %s, region fnv1a %llu, %zu bytes written\n", c.name, state_name(qp),
                static_cast<unsigned long long>(sum), nonzero);
  }
  std::fflush(stdout);
  sync_peer(fd);
  ibv_destroy_qp(qp);
  ibv_dereg_mr(mr);
  ibv_destroy_cq(cq);
}

// The failure streams (tests/shim/remote/failures.sh): one QP pair, the client writing 64 B,
// signaled, each to its own slot, up to kDepth outstanding, while host B kills the server,
// removes its module or cuts its link. The client stops posting at its first completion in
// error, waits for every write it posted, then posts one more (the next request's fate)
// and prints the shape, not the counts (how many succeed first is timing): the statuses in
// the order they came (each run of one status named once), whether every wr_id completed
// exactly once and in order, and its QP's state. A short retry (timeout 16: 268 ms, retry
// count 2) lets the NIC give up in about a second.
constexpr uint64_t kDepth = 16;
constexpr uint64_t kMid = 64;  // successes before the client says "mid-stream"

bool exists(const char* path) {
  return access(path, F_OK) == 0;
}

void touch(const char* path) {
  if (FILE* f = std::fopen(path, "w")) std::fclose(f);
}

// One QP on each side, its region exchanged over the side channel, moved to RTR: the start
// of a stream and of a late client, each of which takes it to RTS its own way.
struct StreamPair {
  t::Device dev;
  ibv_pd* pd;
  int fd;
  ibv_cq* cq;
  ibv_qp* qp;
  uint8_t* buf;
  ibv_mr* mr;
  PeerInfo peer;
  t::RcPath path;
};

StreamPair stream_pair_to_rtr(bool server, const char* addr) {
  StreamPair s;
  s.dev = t::open_device();
  s.pd = t::make_pd(s.dev.ctx);
  s.fd = side_channel(server, addr);
  s.cq = t::make_cq(s.dev.ctx, 64);
  s.qp = t::make_rc_qp(s.pd, s.cq, s.cq);
  s.buf = t::map_zeroed(kRegion);
  s.mr = t::make_mr(s.pd, s.buf, kRegion, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  s.peer = swap_info(s.fd, s.dev, s.qp, s.mr, s.buf);
  if (int e = unload::verbs::rc_to_init(s.qp, IBV_ACCESS_REMOTE_WRITE)) die("modify to INIT", -e);
  s.path = path_to(s.peer, s.dev);
  if (int e = unload::verbs::rc_to_rtr(s.qp, s.path)) die("modify to RTR", -e);
  return s;
}

// Write `id` of a stream: 64 B, signaled, from and to its own slot; ibv_post_send's result.
int post_slot(const StreamPair& s, uint64_t id) {
  const size_t off = id % (kRegion / 2 / 64) * 64;
  std::memset(s.buf + kRegion / 2 + off, static_cast<int>(id % 255 + 1), 64);
  ibv_sge sge{reinterpret_cast<uintptr_t>(s.buf + kRegion / 2 + off), 64, s.mr->lkey};
  ibv_send_wr w{}, *bad = nullptr;
  w.wr_id = id;
  w.sg_list = &sge;
  w.num_sge = 1;
  w.opcode = IBV_WR_RDMA_WRITE;
  w.send_flags = IBV_SEND_SIGNALED;
  w.wr.rdma.remote_addr = s.peer.addr + off;
  w.wr.rdma.rkey = s.peer.rkey;
  return ibv_post_send(s.qp, &w, &bad);
}

void stream(bool server, const char* addr, const char* name, const char* file) {
  StreamPair s = stream_pair_to_rtr(server, addr);
  const int fd = s.fd;
  ibv_cq* cq = s.cq;
  ibv_qp* qp = s.qp;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 16;
  a.retry_cnt = 2;
  a.rnr_retry = 7;
  a.sq_psn = kPsn;
  a.max_rd_atomic = 1;
  if (int e = ibv_modify_qp(qp, &a,
                            IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
    die("modify to RTS", -e);
  sync_peer(fd);  // both QPs at RTS; the side channel is not used again (the link may go)

  if (server) {  // until the client is done (`file`, written by the guest script)
    while (!exists(file)) usleep(100000);
    std::printf("R %s: server QP %s\n", name, state_name(qp));
    std::fflush(stdout);
    return;
  }
  uint64_t posted = 0, completed = 0, successes = 0, extra = 0;
  bool failed = false, in_order = true, mid = false;
  std::vector<std::string> runs;
  auto take = [&](const ibv_wc& wc) {
    if (wc.wr_id != completed) in_order = false;
    ++completed;
    if (wc.status == IBV_WC_SUCCESS)
      ++successes;
    else
      failed = true;
    const char* st = wc.status == IBV_WC_SUCCESS ? "success" : ibv_wc_status_str(wc.status);
    if (runs.empty() || runs.back() != st) runs.push_back(st);
  };
  auto poll = [&]() {
    ibv_wc wc[16];
    const int n = ibv_poll_cq(cq, 16, wc);
    if (n < 0) die("ibv_poll_cq");
    for (int i = 0; i < n; ++i) take(wc[i]);
    return n;
  };
  auto post = [&](uint64_t id) { return post_slot(s, id); };
  using clock = std::chrono::steady_clock;
  const auto end = clock::now() + std::chrono::seconds(60);
  int post_rc = 0;
  while (!failed && clock::now() < end) {
    if (posted - completed < kDepth) {
      if ((post_rc = post(posted)) != 0) break;
      ++posted;
    }
    if (!poll()) usleep(200);
    if (!mid && successes >= kMid) {
      touch(file);  // host B acts now, the client writing on
      mid = true;
    }
  }
  if (!mid) touch(file);  // B waits for it whatever happened
  const auto drain = clock::now() + std::chrono::seconds(30);
  while (completed < posted && clock::now() < drain)
    if (!poll()) usleep(1000);
  const uint64_t streamed = completed;
  // The next request's fate (flushed on the NIC, behind the failure).
  const int next_rc = post_rc ? post_rc : post(posted);
  if (!next_rc) ++posted;
  const auto wait = clock::now() + std::chrono::seconds(30);
  while (completed < posted && clock::now() < wait)
    if (!poll()) usleep(1000);
  const auto linger = clock::now() + std::chrono::milliseconds(300);
  while (clock::now() < linger) {
    ibv_wc wc[16];
    const int n = ibv_poll_cq(cq, 16, wc);
    if (n < 0) die("ibv_poll_cq");
    extra += static_cast<uint64_t>(n);
  }
  std::printf("%s: %llu posted, %llu successes, %llu completed before the next, post rc %d\n", name,
              static_cast<unsigned long long>(posted), static_cast<unsigned long long>(successes),
              static_cast<unsigned long long>(streamed), post_rc);
  std::string shape;
  for (const std::string& r : runs) shape += (shape.empty() ? "" : ", ") + r;
  std::printf("R %s: statuses in order: %s\n", name, shape.c_str());
  if (in_order && completed == posted && !extra)
    std::printf("R %s: every wr_id completed once, in order\n", name);
  else
    std::printf("R %s: wr_ids: %llu posted, %llu completed, %s, %llu more\n", name,
                static_cast<unsigned long long>(posted), static_cast<unsigned long long>(completed),
                in_order ? "in order" : "out of order", static_cast<unsigned long long>(extra));
  std::printf("R %s: the next write's post rc %d\n", name, next_rc);
  std::printf("R %s: client QP %s\n", name, state_name(qp));
  std::fflush(stdout);
}
}  // namespace

// A channel that comes up while a program runs: kLateWrites writes, one at a time, then
// DONE.mid for the guest script, which opens the channel (`unloadctl probe`) and answers
// with DONE.go, then kLateWrites more; DONE ends the server (stream-server's). The client
// prints how many of each half succeeded; the script counts which went remote.
constexpr uint64_t kLateWrites = 50;

void late_client(const char* addr, const char* name, const char* done) {
  StreamPair s = stream_pair_to_rtr(false, addr);
  s.path.timeout = 20;  // 4.3 s: a slow TCG guest is not a lost peer
  if (int e = unload::verbs::rc_to_rts(s.qp, s.path)) die("modify to RTS", -e);
  sync_peer(s.fd);  // stream-server's protocol: both QPs at RTS
  uint64_t id = 0;
  auto half = [&]() {
    uint64_t ok = 0;
    for (uint64_t k = 0; k < kLateWrites; ++k, ++id) {
      if (post_slot(s, id)) die("ibv_post_send (late)");
      for (const ibv_wc& wc : collect(s.cq, 1, 30)) ok += wc.wr_id == id && wc.status == IBV_WC_SUCCESS;
    }
    return ok;
  };
  const uint64_t before = half();
  const std::string mid = std::string(done) + ".mid", go = std::string(done) + ".go";
  touch(mid.c_str());
  for (int i = 0; i < 1200 && !exists(go.c_str()); ++i) usleep(100000);
  if (!exists(go.c_str())) die("no go from the guest script");
  const uint64_t after = half();
  std::printf("R %s: %llu of %llu before the channel, %llu of %llu after, succeeded\n", name,
              static_cast<unsigned long long>(before), static_cast<unsigned long long>(kLateWrites),
              static_cast<unsigned long long>(after), static_cast<unsigned long long>(kLateWrites));
  std::fflush(stdout);
  touch(done);
  ibv_destroy_qp(s.qp);
  ibv_dereg_mr(s.mr);
  ibv_destroy_cq(s.cq);
  close(s.fd);
}

// Threads on one channel: kThreads client threads, each with its own QP and CQ (one PD
// and one source MR between them), post kThreadWrites writes each at once, in lists of
// four with up to kThreadDepth outstanding, to their own slice of one server region. Each
// thread prints how many of its completions came, whether their wr_ids came in post order
// and all succeeded; the server prints each slice's checksum. Writes to one slot overwrite
// each other, the last one's bytes staying: an order the NIC would not give shows.
constexpr int kThreads = 4;
constexpr uint64_t kThreadWrites = 120;
constexpr uint64_t kThreadDepth = 8;
constexpr size_t kSlice = 16 * 4096;

void thread_writes(int i, ibv_qp* qp, ibv_cq* cq, ibv_mr* mr, uint8_t* src, const PeerInfo& peer) {
  uint64_t posted = 0, done = 0, in_order = 0, ok = 0;
  while (done < kThreadWrites) {
    while (posted < kThreadWrites && posted - done + 4 <= kThreadDepth) {
      ibv_send_wr wrs[4];
      ibv_sge sges[4];
      for (int k = 0; k < 4; ++k, ++posted) {
        const size_t len = 8 + (posted * 97) % 4000, slot = (posted % 16) * 4096;
        uint8_t* from = src + (posted % (2 * kThreadDepth)) * 4096;  // not reused while outstanding
        for (size_t j = 0; j < len; ++j) from[j] = pattern(static_cast<size_t>(i), posted, slot + j);
        sges[k] = {reinterpret_cast<uintptr_t>(from), static_cast<uint32_t>(len), mr->lkey};
        wrs[k] = {};
        wrs[k].wr_id = posted;
        wrs[k].sg_list = &sges[k];
        wrs[k].num_sge = 1;
        wrs[k].opcode = IBV_WR_RDMA_WRITE;
        wrs[k].send_flags = IBV_SEND_SIGNALED;
        wrs[k].wr.rdma.remote_addr = peer.addr + static_cast<uint64_t>(i) * kSlice + slot;
        wrs[k].wr.rdma.rkey = peer.rkey;
        wrs[k].next = k < 3 ? &wrs[k + 1] : nullptr;
      }
      ibv_send_wr* bad = nullptr;
      if (ibv_post_send(qp, wrs, &bad)) die("ibv_post_send (threads)");
    }
    const std::vector<ibv_wc> got = collect(cq, 1, 30);
    if (got.empty()) break;  // the count printed shows what never came
    for (const ibv_wc& wc : got) {
      in_order += wc.wr_id == done;
      ok += wc.status == IBV_WC_SUCCESS;
      ++done;
    }
  }
  std::printf("R threads: thread %d: %llu of %llu completions, %llu in post order, %llu succeeded\n", i,
              static_cast<unsigned long long>(done), static_cast<unsigned long long>(kThreadWrites),
              static_cast<unsigned long long>(in_order), static_cast<unsigned long long>(ok));
}

void threads(bool server, const char* addr) {
  t::Device dev = t::open_device();
  ibv_pd* pd = t::make_pd(dev.ctx);
  const int fd = side_channel(server, addr);
  const size_t len = server ? kThreads * kSlice : kThreads * 2 * kThreadDepth * 4096;
  uint8_t* buf = t::map_zeroed(len);
  ibv_mr* mr = t::make_mr(pd, buf, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ibv_cq* cqs[kThreads];
  ibv_qp* qps[kThreads];
  PeerInfo peers[kThreads];
  for (int i = 0; i < kThreads; ++i) {
    cqs[i] = t::make_cq(dev.ctx, 64);
    qps[i] = t::make_rc_qp(pd, cqs[i], cqs[i]);
    peers[i] = swap_info(fd, dev, qps[i], mr, buf);
    if (int e = unload::verbs::rc_to_init(qps[i], IBV_ACCESS_REMOTE_WRITE)) die("modify to INIT", -e);
    t::RcPath path = path_to(peers[i], dev);
    path.timeout = 20;
    if (int e = unload::verbs::rc_to_rtr(qps[i], path)) die("modify to RTR", -e);
    if (int e = unload::verbs::rc_to_rts(qps[i], path)) die("modify to RTS", -e);
  }
  sync_peer(fd);  // every QP at RTS on both sides
  if (!server) {
    std::vector<std::thread> ts;
    for (int i = 0; i < kThreads; ++i)
      ts.emplace_back(thread_writes, i, qps[i], cqs[i], mr, buf + i * 2 * kThreadDepth * 4096, peers[i]);
    for (auto& th : ts) th.join();
  }
  sync_peer(fd);  // every client thread saw its completions: the server reads its region
  if (server)
    for (int i = 0; i < kThreads; ++i) {
      const uint8_t* s = buf + i * kSlice;
      size_t nonzero = 0;
      for (size_t j = 0; j < kSlice; ++j) nonzero += s[j] != 0;
      std::printf("R threads: slice %d fnv1a %llu, %zu bytes written, server QP %s\n", i,
                  static_cast<unsigned long long>(fnv1a(s, kSlice)), nonzero, state_name(qps[i]));
    }
  std::fflush(stdout);
  sync_peer(fd);
  for (int i = 0; i < kThreads; ++i) {
    ibv_destroy_qp(qps[i]);
    ibv_destroy_cq(cqs[i]);
  }
  ibv_dereg_mr(mr);
  close(fd);
}

int main(int argc, char** argv) {
  if (argc < 2)
    die("usage: remote_parity server|client [ADDR] [wr] | stream-server NAME FILE | stream-client ADDR NAME "
        "FILE"
        " | threads-server | threads-client ADDR | late-client ADDR NAME DONE");
  t::watchdog(500, "remote_parity");
  if (std::strcmp(argv[1], "stream-server") == 0 || std::strcmp(argv[1], "stream-client") == 0) {
    const bool server = argv[1][7] == 's';
    if (argc < (server ? 4 : 5)) die("stream-server NAME FILE | stream-client ADDR NAME FILE");
    stream(server, server ? nullptr : argv[2], argv[server ? 2 : 3], argv[server ? 3 : 4]);
    t::ok(server ? "stream server: done" : "stream client: done");
    t::stop_watchdogs();
    t::finish();
  }
  if (std::strcmp(argv[1], "late-client") == 0) {
    if (argc < 5) die("late-client ADDR NAME DONE");
    late_client(argv[2], argv[3], argv[4]);
    t::ok("late client: done");
    t::stop_watchdogs();
    t::finish();
  }
  if (std::strcmp(argv[1], "threads-server") == 0 || std::strcmp(argv[1], "threads-client") == 0) {
    const bool server = argv[1][8] == 's';
    if (!server && argc < 3) die("threads-client needs the server's address");
    threads(server, server ? nullptr : argv[2]);
    t::ok(server ? "threads server: done" : "threads client: done");
    t::stop_watchdogs();
    t::finish();
  }
  const bool server = std::strcmp(argv[1], "server") == 0;
  if (!server && argc < 3) die("the client needs the server's address");
  const bool wr_api = !server && argc > 3 && std::strcmp(argv[3], "wr") == 0;
  t::Device dev = t::open_device();
  ibv_pd* pd = t::make_pd(dev.ctx);
  const int fd = side_channel(server, server ? nullptr : argv[2]);
  const auto all = cases();
  for (size_t i = 0; i < all.size(); ++i) run_case(i, all[i], server, wr_api, dev, pd, fd);
  close(fd);
  t::ok(server ? "server: every case ran" : "client: every case ran");
  t::stop_watchdogs();
  t::finish();
}
