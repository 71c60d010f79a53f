// The same writes between two hosts, printed so that a run on the NIC and a run on the remote path can be compared line by line.
//
//   remote_parity server|client [ADDR]      (server on host B, client on host A)
//
// Each case gets a fresh RC QP pair, connected over a TCP side channel (port 18610). The
// client posts the case's requests and prints, in order, every completion (wr_id, status,
// and for a success its opcode and length) and its QP's state after them; the server then
// prints the receive completions of the case's immediates, its QP's state, and a checksum
// of its target bytes with how many are non-zero. Each write's source is its own, and
// writes to the same target bytes carry different bytes, so an order the NIC would not
// give shows. Result lines start with "R "; the guest script runs the pair without the
// shim and with it (UNLOAD_PATH=remote) and compares them. The program's own checks are
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
#include <vector>

#include "check.hpp"
#include "verbs.hpp"

namespace {

namespace t = unload::test;
using t::die;

constexpr size_t kRegion = 256 * 1024;
constexpr uint32_t kPsn = 0x2000;
constexpr int kPort = 18610;

// One write of a case: where in the target region, how long, signaled, whether its rkey
// is wrong (the responder must deny it), and whether it carries an immediate (the NIC's
// alone: the responder's receive completion).
struct Wr {
  size_t off, len;
  bool signaled;
  bool bad_rkey = false;
  bool imm = false;
};
// A case: its posts, each a list of writes given to one ibv_post_send.
struct Case {
  const char* name;
  std::vector<std::vector<Wr>> posts;
};

std::vector<Case> cases() {
  std::vector<Wr> list8;
  for (size_t i = 0; i < 8; ++i) list8.push_back({i * 1024, 8 + i * 60, true});
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
  };
}

// The byte write k of case c puts at offset off: writes to the same bytes differ.
uint8_t pattern(size_t c, size_t k, size_t off) {
  return static_cast<uint8_t>(c * 37 + k * 101 + off * 13 + (off >> 9) + 1);
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

void run_case(size_t ci, const Case& c, bool server, t::Device& dev, ibv_pd* pd, int fd) {
  ibv_cq* cq = t::make_cq(dev.ctx, 64);
  ibv_qp* qp = t::make_rc_qp(pd, cq, cq);
  static uint8_t* buf = t::map_zeroed(kRegion);
  std::memset(buf, 0, kRegion);
  ibv_mr* mr = t::make_mr(pd, buf, kRegion, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  PeerInfo me{qp->qp_num, mr->rkey, reinterpret_cast<uintptr_t>(buf), {}}, peer{};
  std::memcpy(me.gid, dev.gid.raw, 16);
  full_io(fd, &me, sizeof me, true);
  full_io(fd, &peer, sizeof peer, false);
  ibv_port_attr pa{};
  if (ibv_query_port(dev.ctx, 1, &pa)) die("ibv_query_port");
  if (int e = unload::verbs::rc_to_init(qp, IBV_ACCESS_REMOTE_WRITE)) die("modify to INIT", -e);
  size_t imms = 0;
  for (const auto& p : c.posts)
    for (const Wr& w : p) imms += w.imm;
  if (server)  // every immediate's receive before the client may write
    for (size_t i = 0; i < imms; ++i) {
      ibv_recv_wr rw{}, *bad = nullptr;
      rw.wr_id = 1000 + i;
      if (ibv_post_recv(qp, &rw, &bad)) die("ibv_post_recv");
    }
  t::RcPath path;
  path.dest_qpn = peer.qpn;
  std::memcpy(path.dgid.raw, peer.gid, 16);
  path.sgid_index = dev.gid_index;
  path.mtu = pa.active_mtu;
  path.rq_psn = kPsn;
  path.sq_psn = kPsn;
  path.hop_limit = 64;
  path.timeout = 20;  // 4.3 s: a slow TCG guest is not a lost peer
  if (int e = unload::verbs::rc_to_rtr(qp, path)) die("modify to RTR", -e);
  if (int e = unload::verbs::rc_to_rts(qp, path)) die("modify to RTS", -e);
  sync_peer(fd);  // both QPs at RTS

  if (!server) {
    uint64_t id = ci * 100;
    size_t src = 0;  // each write's source bytes apart, so they stay as written
    for (const auto& p : c.posts) {
      std::vector<ibv_send_wr> wrs(p.size());
      std::vector<ibv_sge> sges(p.size());
      for (size_t k = 0; k < p.size(); ++k) {
        const size_t from = kRegion / 2 + src;
        src += p[k].len;
        for (size_t j = 0; j < p[k].len; ++j) buf[from + j] = pattern(ci, id % 100, p[k].off + j);
        sges[k] = {reinterpret_cast<uintptr_t>(buf + from), static_cast<uint32_t>(p[k].len), mr->lkey};
        ibv_send_wr& s = wrs[k];
        s.wr_id = id++;
        s.sg_list = &sges[k];
        s.num_sge = 1;
        s.opcode = p[k].imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
        s.imm_data = htonl(0x5a000000u + static_cast<uint32_t>(k));
        s.send_flags = p[k].signaled ? IBV_SEND_SIGNALED : 0;
        s.wr.rdma.remote_addr = peer.addr + p[k].off;
        s.wr.rdma.rkey = p[k].bad_rkey ? peer.rkey ^ 0x5a5a00 : peer.rkey;
        s.next = k + 1 < p.size() ? &wrs[k + 1] : nullptr;
      }
      ibv_send_wr* bad = nullptr;
      const int rc = ibv_post_send(qp, wrs.data(), &bad);
      std::printf("R %s: post of %zu: rc %d\n", c.name, p.size(), rc);
      size_t signaled = 0;
      for (const Wr& w : p) signaled += w.signaled;
      // This post's signaled completions (a failure also completes what it flushes).
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
    std::printf("R %s: client QP %s\n", c.name, state_name(qp));
  }
  sync_peer(fd);  // the client has seen every completion: the server looks at its region
  if (server) {
    for (const ibv_wc& wc : collect(cq, imms, 30))
      std::printf("R %s: server wc wr_id %llu %s opcode %d imm %#x byte_len %u\n", c.name,
                  static_cast<unsigned long long>(wc.wr_id), ibv_wc_status_str(wc.status), wc.opcode,
                  ntohl(wc.imm_data), wc.byte_len);
    uint64_t sum = 14695981039346656037ull;  // FNV-1a over the target half of the region
    size_t nonzero = 0;
    for (size_t i = 0; i < kRegion / 2; ++i) {
      sum = (sum ^ buf[i]) * 1099511628211ull;
      nonzero += buf[i] != 0;
    }
    std::printf("R %s: server QP %s, region fnv1a %llu, %zu bytes written\n", c.name, state_name(qp),
                static_cast<unsigned long long>(sum), nonzero);
  }
  std::fflush(stdout);
  sync_peer(fd);
  ibv_destroy_qp(qp);
  ibv_dereg_mr(mr);
  ibv_destroy_cq(cq);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) die("usage: remote_parity server|client [ADDR]");
  const bool server = std::strcmp(argv[1], "server") == 0;
  if (!server && argc < 3) die("the client needs the server's address");
  t::watchdog(500, "remote_parity");
  t::Device dev = t::open_device();
  ibv_pd* pd = t::make_pd(dev.ctx);
  const int fd = side_channel(server, server ? nullptr : argv[2]);
  const auto all = cases();
  for (size_t i = 0; i < all.size(); ++i) run_case(i, all[i], server, dev, pd, fd);
  close(fd);
  t::ok(server ? "server: every case ran" : "client: every case ran");
  t::stop_watchdogs();
  t::finish();
}
