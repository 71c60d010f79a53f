#include "rc_link.hpp"

#include "verbs_env.hpp"

#include <arpa/inet.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

namespace unload::bench {

int sock_send(int fd, const void* p, size_t n) {
  auto* c = static_cast<const char*>(p);
  while (n) {
    ssize_t r = ::send(fd, c, n, MSG_NOSIGNAL);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return r < 0 ? -errno : -EPIPE;
    c += r;
    n -= static_cast<size_t>(r);
  }
  return 0;
}

int sock_recv(int fd, void* p, size_t n) {
  auto* c = static_cast<char*>(p);
  while (n) {
    ssize_t r = ::recv(fd, c, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return r < 0 ? -errno : -EPIPE;
    c += r;
    n -= static_cast<size_t>(r);
  }
  return 0;
}

RcLink::~RcLink() {
  if (qp) ibv_destroy_qp(qp);
  if (mr) ibv_dereg_mr(mr);
  if (cq) ibv_destroy_cq(cq);
  if (channel) ibv_destroy_comp_channel(channel);
  if (pd) ibv_dealloc_pd(pd);
  if (ctx) ibv_close_device(ctx);
  if (buf) munmap(buf, buf_len);
}

int RcLink::connect(const LinkOptions& opt, int sock, std::string& error) {
  // The tests' device rule (verbs_env/verbs_env.hpp), the flags overriding it.
  verbs::Device dev;
  if (int rc = verbs::open_device(&dev, opt.device.c_str(), opt.gid_index, opt.port)) {
    error = verbs::open_error(rc);
    if (!opt.device.empty()) error += " (" + opt.device + ")";
    return rc;
  }
  ctx = dev.ctx;
  device_name = dev.name;
  gid_index = dev.gid_index;

  buf_len = opt.buffer_bytes;
  void* p = mmap(nullptr, buf_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    buf = nullptr;
    error = "mmap of the buffer";
    return -ENOMEM;
  }
  buf = static_cast<uint8_t*>(p);
  memset(buf, 0, buf_len);

  pd = ibv_alloc_pd(ctx);
  channel = pd ? ibv_create_comp_channel(ctx) : nullptr;
  cq = channel ? ibv_create_cq(ctx, 256, nullptr, channel, 0) : nullptr;
  mr = cq ? ibv_reg_mr(pd, buf, buf_len,
                       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)
          : nullptr;
  if (!mr) {
    error = "PD, completion channel, CQ or MR";
    return -ENOMEM;
  }
  ibv_qp_init_attr ia{};
  ia.send_cq = cq;
  ia.recv_cq = cq;
  ia.qp_type = IBV_QPT_RC;
  ia.cap.max_send_wr = kMaxSendWr;
  ia.cap.max_recv_wr = 16;
  ia.cap.max_send_sge = 1;
  ia.cap.max_recv_sge = 1;
  ia.cap.max_inline_data = opt.max_inline;
  qp = ibv_create_qp(pd, &ia);
  if (!qp && opt.max_inline) {
    ia.cap.max_inline_data = 0;
    qp = ibv_create_qp(pd, &ia);
  }
  if (!qp) {
    error = "ibv_create_qp";
    return -errno;
  }
  max_inline = ia.cap.max_inline_data;

  PeerInfo me{};
  me.qpn = qp->qp_num;
  me.psn = std::random_device{}() & 0xffffff;
  memcpy(me.gid, dev.gid.raw, 16);
  me.addr = reinterpret_cast<uintptr_t>(buf);
  me.length = buf_len;
  me.rkey = mr->rkey;
  int rc = sock_send(sock, &me, sizeof(me));
  if (!rc) rc = sock_recv(sock, &peer, sizeof(peer));
  if (rc) {
    error = "exchange with the peer";
    return rc;
  }

  verbs::RcPath path;
  path.dest_qpn = peer.qpn;
  memcpy(path.dgid.raw, peer.gid, 16);
  path.sgid_index = gid_index;
  path.rq_psn = peer.psn;
  path.sq_psn = me.psn;
  path.port = opt.port;
  const char* step = "";
  if (int e = verbs::rc_connect(qp, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ, path, &step)) {
    error = step;
    return e;
  }
  // Both sides are connected before either writes.
  char token = 1;
  rc = sock_send(sock, &token, 1);
  if (!rc) rc = sock_recv(sock, &token, 1);
  if (rc) error = "connect barrier";
  return rc;
}

int post_write(RcLink& l, size_t local_off, size_t remote_off, uint32_t len, bool signaled, bool inline_data,
               uint64_t wr_id) {
  ibv_sge sge{};
  sge.addr = reinterpret_cast<uintptr_t>(l.buf + local_off);
  sge.length = len;
  sge.lkey = l.mr->lkey;
  ibv_send_wr wr{};
  ibv_send_wr* bad = nullptr;
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = 0;
  if (signaled) wr.send_flags |= IBV_SEND_SIGNALED;
  if (inline_data) wr.send_flags |= IBV_SEND_INLINE;
  wr.wr.rdma.remote_addr = l.peer.addr + remote_off;
  wr.wr.rdma.rkey = l.peer.rkey;
  return -ibv_post_send(l.qp, &wr, &bad);
}

int poll_n(RcLink& l, int n) {
  ibv_wc wc[16];
  while (n > 0) {
    int got = ibv_poll_cq(l.cq, n < 16 ? n : 16, wc);
    if (got < 0) return -EIO;
    for (int i = 0; i < got; i++)
      if (wc[i].status != IBV_WC_SUCCESS) return -EIO;
    n -= got;
  }
  return 0;
}

}  // namespace unload::bench
