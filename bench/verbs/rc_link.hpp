// One reliable-connected QP per side of a forked client/server pair, over a real verbs
// device: the fixture of the write-latency benchmarks.
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace unload::bench {

// Send queue depth: ib_write_bw's default tx depth, so the bandwidth benchmark keeps as
// many writes in flight as perftest does.
constexpr int kMaxSendWr = 128;

struct LinkOptions {
  // Empty and -1: the tests' device rule (verbs_env/verbs_env.hpp: $UNLOAD_TEST_DEV,
  // $UNLOAD_TEST_GID, else the first device and its RoCE v2 IPv4 GID).
  std::string device;
  int gid_index = -1;
  uint8_t port = 1;
  size_t buffer_bytes = 1 << 20;  // the local buffer both sides register
  uint32_t max_inline = 0;        // asked for at QP creation (the device may cap it)
};

// What one side tells the other to connect and to be written to.
struct PeerInfo {
  uint32_t qpn;
  uint32_t psn;
  uint8_t gid[16];
  uint64_t addr;
  uint64_t length;
  uint32_t rkey;
  uint32_t reserved;
};

// A connected RC endpoint. Errors are negative errnos from connect(); the object owns
// every verbs resource it made and frees them in reverse order.
class RcLink {
 public:
  RcLink() = default;
  RcLink(const RcLink&) = delete;
  RcLink& operator=(const RcLink&) = delete;
  ~RcLink();

  // Open, create and connect over the control socket `sock` (a socketpair end shared
  // with the peer process); returns 0 or a negative errno, with `error` saying where.
  int connect(const LinkOptions& opt, int sock, std::string& error);

  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  // The CQ's completion channel: the event-driven rows (BM_Write_Event) arm the CQ and
  // sleep in ibv_get_cq_event; the others never arm it, so it costs them nothing.
  ibv_comp_channel* channel = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
  ibv_mr* mr = nullptr;
  uint8_t* buf = nullptr;
  size_t buf_len = 0;
  uint32_t max_inline = 0;  // what the QP really got
  PeerInfo peer{};
  std::string device_name;
  int gid_index = 0;
};

// Blocking whole-buffer transfers on the control socket; 0 or a negative errno.
int sock_send(int fd, const void* p, size_t n);
int sock_recv(int fd, void* p, size_t n);

// Post one RDMA WRITE of `len` bytes from the local buffer at `local_off` to the peer's
// buffer at `remote_off`. 0 or a negative errno.
int post_write(RcLink& l, size_t local_off, size_t remote_off, uint32_t len, bool signaled, bool inline_data,
               uint64_t wr_id);

// Poll until `n` completions arrived; 0, or -EIO on an error completion.
int poll_n(RcLink& l, int n);

}  // namespace unload::bench
