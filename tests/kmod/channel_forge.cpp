// A peer that is not a module (channel_forge.hpp).
#include "channel_forge.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <openssl/hmac.h>
#include <poll.h>
#include <sys/random.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "kmod_util.hpp"
#include "unload.h"

namespace kt {

WireHello good_hello() {
  WireHello h{kMagic, kVersion, 0, 32, 4096, {0, 0}, {}};
  if (getrandom(h.nonce, sizeof h.nonce, 0) != sizeof h.nonce) die("getrandom");
  return h;
}

WireHdr hdr(uint8_t type, uint64_t id, uint32_t total, uint32_t off, uint32_t seg) {
  return WireHdr{kMagic, kVersion, type, 0, 0, id, total, off, seg, 0, 0};
}

int next_event(Forged* f, int ms, int* status) {
  pollfd p{f->ec->fd, POLLIN, 0};
  if (poll(&p, 1, ms) != 1) return -1;
  rdma_cm_event* ev;
  if (rdma_get_cm_event(f->ec, &ev)) return -1;
  const int type = ev->event;
  if (status) *status = ev->status;
  if (type == RDMA_CM_EVENT_ESTABLISHED && ev->param.conn.private_data) {
    f->reply_len = static_cast<uint8_t>(std::min<size_t>(ev->param.conn.private_data_len, sizeof f->reply));
    memcpy(&f->reply, ev->param.conn.private_data, f->reply_len);
  }
  rdma_ack_cm_event(ev);
  return type;
}

int forge_open(Forged* f, const char* peer, const WireHello& hello, uint8_t hello_len) {
  f->ec = rdma_create_event_channel();
  if (!f->ec || rdma_create_id(f->ec, &f->id, nullptr, RDMA_PS_TCP)) die("rdma_create_id");
  sockaddr_in dst{};
  dst.sin_family = AF_INET;
  dst.sin_port = htons(UNLOAD_CHANNEL_PORT);
  inet_pton(AF_INET, peer, &dst.sin_addr);
  if (rdma_resolve_addr(f->id, nullptr, reinterpret_cast<sockaddr*>(&dst), 2000) ||
      next_event(f, 5000) != RDMA_CM_EVENT_ADDR_RESOLVED)
    die("rdma_resolve_addr", -EHOSTUNREACH);
  if (rdma_resolve_route(f->id, 2000) || next_event(f, 5000) != RDMA_CM_EVENT_ROUTE_RESOLVED)
    die("rdma_resolve_route", -EHOSTUNREACH);
  ibv_qp_init_attr qa{};
  qa.cap.max_send_wr = qa.cap.max_recv_wr = 4;
  qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
  qa.qp_type = IBV_QPT_RC;
  qa.sq_sig_all = 1;
  if (rdma_create_qp(f->id, nullptr, &qa)) die("rdma_create_qp");
  f->mr = ibv_reg_mr(f->id->pd, f->buf, sizeof f->buf, IBV_ACCESS_LOCAL_WRITE);
  if (!f->mr) die("ibv_reg_mr");
  ibv_sge sge{reinterpret_cast<uintptr_t>(f->buf[1]), 4096, f->mr->lkey};
  ibv_recv_wr rwr{}, *bad;
  rwr.sg_list = &sge;
  rwr.num_sge = 1;
  if (ibv_post_recv(f->id->qp, &rwr, &bad)) die("ibv_post_recv");
  f->hello = hello;
  rdma_conn_param cp{};
  cp.private_data = &f->hello;
  cp.private_data_len = hello_len;
  cp.retry_count = 7;
  cp.rnr_retry_count = 7;
  if (rdma_connect(f->id, &cp)) die("rdma_connect");
  return next_event(f, 5000);
}

void forge_close(Forged* f) {
  rdma_disconnect(f->id);
  if (f->id->qp) rdma_destroy_qp(f->id);
  if (f->mr) ibv_dereg_mr(f->mr);
  while (next_event(f, 0) >= 0) {
  }
  rdma_destroy_id(f->id);
  rdma_destroy_event_channel(f->ec);
}

bool forge_send(Forged* f, const WireHdr& h, const void* payload, uint32_t len) {
  memcpy(f->buf[0], &h, sizeof h);
  if (len > sizeof h) memcpy(f->buf[0] + sizeof h, payload, len - sizeof h);
  ibv_sge sge{reinterpret_cast<uintptr_t>(f->buf[0]), len, f->mr->lkey};
  ibv_send_wr wr{}, *bad;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  if (ibv_post_send(f->id->qp, &wr, &bad)) return false;
  ibv_wc wc;
  for (int i = 0; i < 5000; i++) {
    int n = ibv_poll_cq(f->id->send_cq, 1, &wc);
    if (n) return n == 1 && wc.status == IBV_WC_SUCCESS;
    usleep(1000);
  }
  return false;
}

int forge_recv(Forged* f, int ms) {
  ibv_wc wc{};
  for (int i = 0; i < ms; i++) {
    const int n = ibv_poll_cq(f->id->recv_cq, 1, &wc);
    if (n) return n == 1 && wc.status == IBV_WC_SUCCESS ? static_cast<int>(wc.byte_len) : -1;
    usleep(1000);
  }
  return -1;
}

std::string sandbox_key() {
  const char* path = getenv("UNLOAD_CHAN_KEY_FILE");
  if (!path) return {};
  std::ifstream in(path);
  std::string hex;
  in >> hex;
  std::string key;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) key += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return key;
}

namespace {

// The IPv4-mapped GID of a sockaddr_in, and its port as the wire has it.
void gid_port(const sockaddr* sa, uint8_t gid[16], uint8_t port[2]) {
  const auto* sin = reinterpret_cast<const sockaddr_in*>(sa);
  memset(gid, 0, 16);
  gid[10] = gid[11] = 0xff;
  memcpy(gid + 12, &sin->sin_addr.s_addr, 4);
  memcpy(port, &sin->sin_port, 2);
}

// HMAC-SHA256(key, label, Ni, Nr, GID_i, GID_r, port_i, port_r): channel_auth.c's input.
void proof_of(const Forged* f, const std::string& key, bool responder, uint8_t out[32]) {
  static const char kInit[] = "unload channel v3 initiator";
  static const char kResp[] = "unload channel v3 responder";
  uint8_t msg[sizeof kInit + 32 + 32 + 16 + 16 + 4];
  uint8_t gid_i[16], gid_r[16], port_i[2], port_r[2];
  gid_port(rdma_get_local_addr(f->id), gid_i, port_i);
  gid_port(rdma_get_peer_addr(f->id), gid_r, port_r);
  size_t n = 0;
  auto put = [&](const void* p, size_t len) {
    memcpy(msg + n, p, len);
    n += len;
  };
  put(responder ? kResp : kInit, sizeof kInit);  // both labels one length, NUL included
  put(f->hello.nonce, 32);
  put(f->reply.hello.nonce, 32);
  put(gid_i, 16);
  put(gid_r, 16);
  put(port_i, 2);
  put(port_r, 2);
  unsigned int len = 32;
  if (!HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), msg, n, out, &len) || len != 32)
    die("HMAC");
}

}  // namespace

void initiator_proof(const Forged* f, const std::string& key, uint8_t out[32]) {
  proof_of(f, key, false, out);
}

bool responder_proof_holds(const Forged* f, const std::string& key) {
  uint8_t want[32];
  proof_of(f, key, true, want);
  return f->reply_len == sizeof f->reply && !memcmp(want, f->reply.proof, 32);
}

bool forge_send_auth(Forged* f, const uint8_t proof[32]) {
  return forge_send(f, hdr(kAuth, 0, 32, 0, 32), proof, sizeof(WireHdr) + 32);
}

}  // namespace kt
