// A deterministic RDMA WRITE workload between two hosts, for comparing wire streams.
//
//   wire_workload server [-d DEV] [-g GID] [-p PORT]          (the target, on host B)
//   wire_workload client [-d DEV] [-g GID] [-p PORT] [--flip FILE] ADDR   (the initiator, on A)
//
// --flip FILE: after each post, write the next of offload, unload, threshold, adaptive
// into FILE (/sys/kernel/unload/mode): mode changes at known points mid-run.
// The client writes a fixed list of posts (1 B to 1 MiB, fixed contents; signaled and
// unsignaled; with and without immediate; single requests and post lists) into the
// server's buffer, which sits at a fixed virtual address so every run puts the same
// RETH VA on the wire. The client checks its completions exactly (the signaled wr_ids in
// order, all successful); the server checks each immediate and every byte of its buffer.
// Each prints one "ok:" line per check, or "FAIL:" lines and exits 1; set-up errors exit 2
// (tests/support's vocabulary). DEV and GID override tests/support's device rule (by
// default the first device and its RoCE v2 IPv4 GID).
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "check.hpp"
#include "verbs.hpp"

namespace {

// Where both sides map their buffer: a fixed address makes the RETH VA the same each run.
constexpr uintptr_t kTargetAddr = 0x200000000000;
constexpr uintptr_t kSourceAddr = 0x210000000000;
constexpr uint32_t kPsn = 0x1000;
constexpr uint32_t kDoneImm = 0xd0d0d0d0;

struct Wr {
  size_t len;
  bool signaled;
  bool imm;
};

// The workload: each inner vector is one ibv_post_send.
std::vector<std::vector<Wr>> workload() {
  std::vector<std::vector<Wr>> posts;
  for (size_t len : {1, 7, 64, 200, 1024, 1025, 4096, 65536, 1048576}) {
    posts.push_back({{len, true, false}});
    posts.push_back({{len, true, true}});
    if (len <= 65536) {
      posts.push_back({{len, false, false}});
      posts.push_back({{len, false, true}});
    }
  }
  // Post lists: unsignaled heads, a signaled tail, immediates in the middle.
  posts.push_back({{1, false, false}, {64, false, true}, {4096, true, false}});
  posts.push_back({{200, false, false}, {7, false, false}, {1025, false, true}, {64, true, true}});
  posts.push_back({{65536, false, false}, {1, true, false}});
  // The last write tells the server the run is over.
  posts.push_back({{8, true, true}});
  return posts;
}

struct Layout {
  std::vector<size_t> offset;  // per write, in post order
  size_t total = 0;
  size_t imms = 0;
};

Layout layout(const std::vector<std::vector<Wr>>& posts) {
  Layout l;
  for (const auto& p : posts)
    for (const Wr& w : p) {
      l.offset.push_back(l.total);
      l.total += (w.len + 63) & ~size_t(63);
      l.imms += w.imm;
    }
  return l;
}

uint8_t pattern(size_t write, size_t j) {
  return uint8_t(write * 131 + j * 7 + (j >> 8));
}
uint32_t imm_of(size_t write) {
  return 0x5a000000u | uint32_t(write);
}

namespace t = unload::test;
using t::die;

void check(bool ok, const std::string& what) {
  if (ok)
    t::ok(what.c_str());
  else
    t::fail(what.c_str(), "does not hold");
}

struct PeerInfo {
  uint32_t qpn, psn, rkey, pad;
  uint64_t addr;
  uint8_t gid[16];
};

void full_io(int fd, void* buf, size_t n, bool out) {
  auto* p = static_cast<char*>(buf);
  while (n) {
    ssize_t r = out ? write(fd, p, n) : read(fd, p, n);
    if (r <= 0) die(out ? "write to the peer" : "read from the peer");
    p += r;
    n -= size_t(r);
  }
}

// The TCP side channel: the server listens, the client retries until it is there.
int connect_peer(bool server, const char* addr, int port) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(uint16_t(port));
  if (server) {
    int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sa.sin_addr.s_addr = htonl(INADDR_ANY);
    if (bind(l, reinterpret_cast<sockaddr*>(&sa), sizeof sa) || listen(l, 1)) die("listen");
    std::printf("listening on %d\n", port);
    std::fflush(stdout);
    int fd = accept(l, nullptr, nullptr);
    if (fd < 0) die("accept");
    close(l);
    return fd;
  }
  if (inet_pton(AF_INET, addr, &sa.sin_addr) != 1) die("server address");
  for (int tries = 0; tries < 600; ++tries) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0) return fd;
    close(fd);
    usleep(100000);
  }
  die("connect to the server");
}

void* map_at(uintptr_t at, size_t len) {
  void* p = mmap(reinterpret_cast<void*>(at), len, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  if (p == MAP_FAILED || p != reinterpret_cast<void*>(at)) die("map the buffer at its fixed address");
  return p;
}

ibv_wc poll_one(ibv_cq* cq) {
  ibv_wc wc{};
  int n;
  while ((n = ibv_poll_cq(cq, 1, &wc)) == 0) {
  }
  if (n < 0) die("ibv_poll_cq");
  return wc;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) die("usage: wire_workload server|client [-d DEV] [-g GID] [-p PORT] [ADDR]");
  const bool server = std::strcmp(argv[1], "server") == 0;
  if (!server && std::strcmp(argv[1], "client") != 0) die("the first argument is server or client");
  const char* dev_name = nullptr;
  const char* addr = nullptr;
  const char* flip = nullptr;
  int gid_index = -1, port = 18600;
  for (int i = 2; i < argc; ++i) {
    if (!std::strcmp(argv[i], "-d") && i + 1 < argc)
      dev_name = argv[++i];
    else if (!std::strcmp(argv[i], "-g") && i + 1 < argc)
      gid_index = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "-p") && i + 1 < argc)
      port = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--flip") && i + 1 < argc)
      flip = argv[++i];
    else if (!server && !addr)
      addr = argv[i];
    else
      die("unknown argument");
  }
  if (!server && !addr) die("the client needs the server's address");

  const auto posts = workload();
  const Layout lay = layout(posts);

  t::Device dev = t::open_device(dev_name, gid_index);
  ibv_context* ctx = dev.ctx;
  ibv_pd* pd = t::make_pd(ctx);
  ibv_cq* cq = t::make_cq(ctx, 512);
  t::QpCaps caps;
  caps.send_wr = 128;
  caps.recv_wr = 128;
  ibv_qp* qp = t::make_rc_qp(pd, cq, cq, caps);

  auto* buf = static_cast<uint8_t*>(map_at(server ? kTargetAddr : kSourceAddr, lay.total));
  ibv_mr* mr = ibv_reg_mr(pd, buf, lay.total, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (!mr) die("ibv_reg_mr");

  ibv_port_attr pa{};
  if (ibv_query_port(ctx, 1, &pa)) die("ibv_query_port");
  PeerInfo me{qp->qp_num, kPsn, mr->rkey, 0, uintptr_t(buf), {}}, peer{};
  std::memcpy(me.gid, dev.gid.raw, 16);
  int fd = connect_peer(server, addr, port);
  full_io(fd, &me, sizeof me, true);
  full_io(fd, &peer, sizeof peer, false);

  if (int e = unload::verbs::rc_to_init(qp, IBV_ACCESS_REMOTE_WRITE)) die("modify to INIT", -e);
  if (server) {
    // Every immediate's receive is posted before the client may write (no RNR on the wire).
    for (size_t i = 0; i < lay.imms; ++i) {
      ibv_recv_wr rw{}, *bad;
      rw.wr_id = i;
      if (ibv_post_recv(qp, &rw, &bad)) die("ibv_post_recv");
    }
  }
  t::RcPath path;
  path.dest_qpn = peer.qpn;
  std::memcpy(path.dgid.raw, peer.gid, 16);
  path.sgid_index = dev.gid_index;
  path.mtu = pa.active_mtu;
  path.rq_psn = peer.psn;
  path.sq_psn = kPsn;
  path.hop_limit = 64;
  // A long retransmission timeout (4.3 s): a TCG guest on a shared host can be slow to
  // ack, and a retransmission is a timing artefact on the wire, not a difference.
  path.timeout = 20;
  if (int e = unload::verbs::rc_to_rtr(qp, path)) die("modify to RTR", -e);
  if (int e = unload::verbs::rc_to_rts(qp, path)) die("modify to RTS", -e);
  // Both QPs are ready before the first write.
  char go = 1;
  full_io(fd, &go, 1, true);
  full_io(fd, &go, 1, false);

  if (server) {
    size_t want = 0, w = 0;
    bool imms_ok = true;
    for (const auto& p : posts)
      for (const Wr& wr : p) {
        if (wr.imm) {
          const ibv_wc wc = poll_one(cq);
          const uint32_t expect = w + 1 == lay.offset.size() ? kDoneImm : imm_of(w);
          if (wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM ||
              ntohl(wc.imm_data) != expect || wc.wr_id != want || wc.byte_len != wr.len) {
            std::printf("immediate %zu: status %d opcode %d imm %#x wr_id %llu len %u\n", want, wc.status,
                        wc.opcode, ntohl(wc.imm_data), static_cast<unsigned long long>(wc.wr_id),
                        wc.byte_len);
            imms_ok = false;
          }
          ++want;
        }
        ++w;
      }
    check(imms_ok, "server: " + std::to_string(lay.imms) + " immediates in order with their lengths");
    std::vector<uint8_t> expect(lay.total, 0);
    w = 0;
    for (const auto& p : posts)
      for (const Wr& wr : p) {
        for (size_t j = 0; j < wr.len; ++j) expect[lay.offset[w] + j] = pattern(w, j);
        ++w;
      }
    size_t first_bad = lay.total;
    for (size_t i = 0; i < lay.total && first_bad == lay.total; ++i)
      if (buf[i] != expect[i]) first_bad = i;
    uint64_t sum = 14695981039346656037ull;  // FNV-1a: a checksum to compare runs by
    for (size_t i = 0; i < lay.total; ++i) sum = (sum ^ buf[i]) * 1099511628211ull;
    check(first_bad == lay.total,
          "server: " + std::to_string(lay.total) + " target bytes as written, fnv1a " + std::to_string(sum) +
              (first_bad == lay.total ? "" : ", first wrong byte at " + std::to_string(first_bad)));
  } else {
    size_t w = 0;
    uint64_t next_id = 0;
    std::vector<uint64_t> expect_ids, got_ids;
    bool status_ok = true;
    unsigned flips = 0;
    for (const auto& p : posts) {
      std::vector<ibv_send_wr> wrs(p.size());
      std::vector<ibv_sge> sges(p.size());
      for (size_t k = 0; k < p.size(); ++k, ++w) {
        for (size_t j = 0; j < p[k].len; ++j) buf[lay.offset[w] + j] = pattern(w, j);
        sges[k] = {uintptr_t(buf + lay.offset[w]), uint32_t(p[k].len), mr->lkey};
        ibv_send_wr& s = wrs[k];
        s.wr_id = next_id++;
        s.sg_list = &sges[k];
        s.num_sge = 1;
        s.opcode = p[k].imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
        s.imm_data = htonl(w + 1 == lay.offset.size() ? kDoneImm : imm_of(w));
        s.send_flags = p[k].signaled ? IBV_SEND_SIGNALED : 0;
        s.wr.rdma.remote_addr = peer.addr + lay.offset[w];
        s.wr.rdma.rkey = peer.rkey;
        s.next = k + 1 < p.size() ? &wrs[k + 1] : nullptr;
        if (p[k].signaled) expect_ids.push_back(s.wr_id);
      }
      ibv_send_wr* bad = nullptr;
      if (ibv_post_send(qp, wrs.data(), &bad)) die("ibv_post_send");
      // Wait for the post's signaled completions (an unsignaled tail is covered later).
      for (const Wr& wr : p)
        if (wr.signaled) {
          const ibv_wc wc = poll_one(cq);
          got_ids.push_back(wc.wr_id);
          status_ok &= wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_WRITE;
        }
      if (flip) {
        static const char* const modes[] = {"offload", "unload", "threshold", "adaptive"};
        FILE* f = std::fopen(flip, "w");
        if (!f || std::fputs(modes[flips++ % 4], f) < 0 || std::fclose(f)) die("write the mode");
      }
    }
    ibv_wc extra[4];
    const int more = ibv_poll_cq(cq, 4, extra);
    if (flip) std::printf("client: %u mode changes through %s\n", flips, flip);
    check(status_ok, "client: every completion IBV_WC_SUCCESS / IBV_WC_RDMA_WRITE");
    check(got_ids == expect_ids && more == 0,
          "client: exactly the " + std::to_string(expect_ids.size()) + " signaled wr_ids, in order");
  }
  // The client waits until the server has checked before tearing down.
  full_io(fd, &go, 1, true);
  full_io(fd, &go, 1, false);
  close(fd);
  ibv_destroy_qp(qp);
  ibv_dereg_mr(mr);
  ibv_destroy_cq(cq);
  ibv_dealloc_pd(pd);
  unload::verbs::close_device(&dev);
  t::finish();
}
