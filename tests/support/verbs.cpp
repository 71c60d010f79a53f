// The test programs' verbs set-up (see verbs.hpp).
#include "verbs.hpp"

#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <string>

namespace unload::test {

Device open_device(const char* name, int gid_index) {
  Device d;
  const int rc = verbs::open_device(&d, name, gid_index);
  if (rc == -ENODEV || rc == -ENOENT) skip(verbs::open_error(rc));
  if (rc) die(verbs::open_error(rc), rc);
  return d;
}

ibv_pd* make_pd(ibv_context* ctx) {
  ibv_pd* pd = ibv_alloc_pd(ctx);
  if (!pd) die("ibv_alloc_pd");
  return pd;
}

ibv_cq* make_cq(ibv_context* ctx, int cqe, ibv_comp_channel* ch) {
  ibv_cq* cq = ibv_create_cq(ctx, cqe, nullptr, ch, 0);
  if (!cq) die("ibv_create_cq");
  return cq;
}

ibv_qp* make_rc_qp(ibv_pd* pd, ibv_cq* scq, ibv_cq* rcq, const QpCaps& caps) {
  ibv_qp_init_attr a{};
  a.send_cq = scq;
  a.recv_cq = rcq;
  a.qp_type = IBV_QPT_RC;
  a.sq_sig_all = caps.sig_all;
  a.cap.max_send_wr = caps.send_wr;
  a.cap.max_recv_wr = caps.recv_wr;
  a.cap.max_send_sge = caps.send_sge;
  a.cap.max_recv_sge = caps.recv_sge;
  a.cap.max_inline_data = caps.inline_data;
  ibv_qp* qp = ibv_create_qp(pd, &a);
  if (!qp) die("ibv_create_qp");
  return qp;
}

uint8_t* map_zeroed(size_t len) {
  const size_t pg = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* p =
      mmap(nullptr, (len + pg - 1) / pg * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) die("mmap");
  return static_cast<uint8_t*>(p);
}

ibv_mr* make_mr(ibv_pd* pd, void* p, size_t len, int access) {
  ibv_mr* mr = ibv_reg_mr(pd, p, len, access);
  if (!mr) die("ibv_reg_mr");
  return mr;
}

RcPath loopback_path(const Device& d, uint32_t dest_qpn) {
  RcPath p;
  p.dest_qpn = dest_qpn;
  p.dgid = d.gid;
  p.sgid_index = d.gid_index;
  p.port = d.port;
  return p;
}

void connect(ibv_qp* qp, int access, const RcPath& p) {
  const char* step = "";
  if (int rc = verbs::rc_connect(qp, access, p, &step)) die(step, rc);
}

static uint64_t now_ms() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000 + static_cast<uint64_t>(ts.tv_nsec) / 1000000;
}

int poll_n(ibv_cq* cq, int n, ibv_wc* wcs, unsigned seconds) {
  const uint64_t end = now_ms() + uint64_t{seconds} * 1000;
  int got = 0, bad = 0;
  ibv_wc one[16];
  while (got < n) {
    const int want = n - got < 16 ? n - got : 16;
    const int k = ibv_poll_cq(cq, want, wcs ? wcs + got : one);
    if (k < 0) die("ibv_poll_cq");
    for (int i = 0; i < k; i++) bad += (wcs ? wcs[got + i] : one[i]).status != IBV_WC_SUCCESS;
    got += k;
    if (k == 0) {
      if (now_ms() > end) hang("poll_n", std::to_string(got) + " of " + std::to_string(n) + " completions");
      usleep(50);
    }
  }
  return bad;
}

}  // namespace unload::test
