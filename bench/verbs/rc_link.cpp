#include "rc_link.hpp"

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

// RoCE v2 over IPv4 is what rxe on a dummy netdev with an IPv4 address speaks; its GID
// is the IPv4-mapped IPv6 address (::ffff:a.b.c.d).
static int find_ipv4_gid(ibv_context* ctx, uint8_t port) {
  ibv_port_attr pa{};
  if (ibv_query_port(ctx, port, &pa)) return 0;
  for (int i = 0; i < pa.gid_tbl_len; i++) {
    ibv_gid_entry e{};
    if (ibv_query_gid_ex(ctx, port, static_cast<uint32_t>(i), &e, 0)) continue;
    static const uint8_t v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (e.gid_type == IBV_GID_TYPE_ROCE_V2 && !memcmp(e.gid.raw, v4mapped, 12)) return i;
  }
  return 0;
}

RcLink::~RcLink() {
  if (qp) ibv_destroy_qp(qp);
  if (mr) ibv_dereg_mr(mr);
  if (cq) ibv_destroy_cq(cq);
  if (pd) ibv_dealloc_pd(pd);
  if (ctx) ibv_close_device(ctx);
  if (buf) munmap(buf, buf_len);
}

static ibv_context* open_named(const std::string& name, std::string& device) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (!list) return nullptr;
  ibv_context* ctx = nullptr;
  for (int i = 0; i < n && !ctx; i++) {
    if (name.empty() || name == ibv_get_device_name(list[i])) {
      ctx = ibv_open_device(list[i]);
      device = ibv_get_device_name(list[i]);
    }
  }
  ibv_free_device_list(list);
  return ctx;
}

int RcLink::connect(const LinkOptions& opt, int sock, std::string& error) {
  ctx = open_named(opt.device, device_name);
  if (!ctx) {
    error = opt.device.empty() ? "no RDMA device" : "no RDMA device " + opt.device;
    return -ENODEV;
  }
  gid_index = opt.gid_index >= 0 ? opt.gid_index : find_ipv4_gid(ctx, opt.port);

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
  cq = pd ? ibv_create_cq(ctx, 256, nullptr, nullptr, 0) : nullptr;
  mr = cq ? ibv_reg_mr(pd, buf, buf_len,
                       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)
          : nullptr;
  if (!mr) {
    error = "PD, CQ or MR";
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
  ibv_gid gid{};
  if (ibv_query_gid(ctx, opt.port, gid_index, &gid)) {
    error = "ibv_query_gid";
    return -EINVAL;
  }
  memcpy(me.gid, gid.raw, 16);
  me.addr = reinterpret_cast<uintptr_t>(buf);
  me.length = buf_len;
  me.rkey = mr->rkey;
  int rc = sock_send(sock, &me, sizeof(me));
  if (!rc) rc = sock_recv(sock, &peer, sizeof(peer));
  if (rc) {
    error = "exchange with the peer";
    return rc;
  }

  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = opt.port;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) {
    error = "modify to INIT";
    return -EINVAL;
  }
  a = {};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = peer.qpn;
  a.rq_psn = peer.psn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  memcpy(a.ah_attr.grh.dgid.raw, peer.gid, 16);
  a.ah_attr.grh.sgid_index = static_cast<uint8_t>(gid_index);
  a.ah_attr.grh.hop_limit = 1;
  a.ah_attr.port_num = opt.port;
  if (ibv_modify_qp(qp, &a,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) {
    error = "modify to RTR";
    return -EINVAL;
  }
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = me.psn;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 1;
  if (ibv_modify_qp(qp, &a,
                    IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                        IBV_QP_MAX_QP_RD_ATOMIC)) {
    error = "modify to RTS";
    return -EINVAL;
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
