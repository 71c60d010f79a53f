#include "kmod_util.hpp"

#include "rc_qp.hpp"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <string.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

namespace kt {

static int g_failures = 0;

void skip(const char* why) {
  std::printf("skip: %s\n", why);
  std::fflush(stdout);
  std::exit(77);
}

void die(const char* what) {
  std::printf("FAIL: %s: %s\n", what, strerror(errno));
  std::fflush(stdout);
  std::exit(1);
}

bool check(bool ok, const char* name, const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  std::printf("check %-40s %s ... %s\n", name, buf, ok ? "ok" : "FAIL");
  std::fflush(stdout);
  if (!ok) g_failures++;
  return ok;
}

int failures() {
  return g_failures;
}

std::string sysfs_path(const std::string& name) {
  return "/sys/kernel/unload/" + name;
}

bool sysfs_read(const std::string& name, std::string* out) {
  std::ifstream f(sysfs_path(name));
  if (!f) return false;
  std::stringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  while (!out->empty() && out->back() == '\n') out->pop_back();
  return true;
}

long long stat(const std::string& name) {
  std::string s;
  if (!sysfs_read("stats/" + name, &s)) return -1;
  return std::strtoll(s.c_str(), nullptr, 10);
}

int sysfs_write(const std::string& name, const std::string& value) {
  int fd = open(sysfs_path(name).c_str(), O_WRONLY);
  if (fd < 0) return errno;
  ssize_t n = write(fd, value.data(), value.size());
  int err = n < 0 ? errno : 0;
  close(fd);
  return err;
}

long long vmstat(const char* key) {
  std::ifstream f("/proc/vmstat");
  std::string k;
  long long v;
  while (f >> k >> v)
    if (k == key) return v;
  return -1;
}

static long long foll_pins_now() {
  long long a = vmstat("nr_foll_pin_acquired"), r = vmstat("nr_foll_pin_released");
  return a < 0 || r < 0 ? -1 : a - r;
}

// rxe releases the pins of a dead process's MRs from deferred work, which a loaded TCG
// guest can hold back for well over 300 ms: wait until the count has not moved for 1 s
// (at most 15 s).
long long foll_pins_outstanding() {
  long long v = foll_pins_now();
  int still = 0;
  for (int i = 0; i < 300 && still < 20; i++) {
    usleep(50000);
    long long w = foll_pins_now();
    still = w == v ? still + 1 : 0;
    v = w;
  }
  return v;
}

int uioctl(int fd, unsigned long cmd, void* arg) {
  return ioctl(fd, cmd, arg) == 0 ? 0 : -errno;
}

int unload_open() {
  int fd = open(UNLOAD_DEVICE_PATH, O_RDWR | O_CLOEXEC);
  if (fd < 0) skip("no /dev/unload (module not loaded)");
  unload_hello h{};
  h.abi_version = UNLOAD_ABI_VERSION;
  if (uioctl(fd, UNLOAD_IOC_HELLO, &h)) die("UNLOAD_IOC_HELLO");
  return fd;
}

int reg_qp(int fd, const char* dev, uint32_t qpn, unload_qp_reg* out) {
  unload_qp_reg r{};
  snprintf(r.ibdev, sizeof r.ibdev, "%s", dev);
  r.qp_num = qpn;
  int ret = uioctl(fd, UNLOAD_IOC_REG_QP, &r);
  if (out) *out = r;
  return ret;
}

int reg_region(int fd, const char* dev, const void* addr, uint64_t len, uint32_t lkey, uint32_t rkey,
               uint32_t access, uint64_t* handle) {
  unload_region_reg r{};
  snprintf(r.ibdev, sizeof r.ibdev, "%s", dev);
  r.addr = reinterpret_cast<uintptr_t>(addr);
  r.length = len;
  r.lkey = lkey;
  r.rkey = rkey;
  r.access = access;
  int ret = uioctl(fd, UNLOAD_IOC_REG_REGION, &r);
  if (handle) *handle = r.handle;
  return ret;
}

int reg_mr(int fd, const ibv_mr* mr, uint32_t access, uint64_t* handle) {
  return reg_region(fd, ibv_get_device_name(mr->context->device), mr->addr, mr->length, mr->lkey, mr->rkey,
                    access, handle);
}

int dereg_region(int fd, uint64_t handle) {
  unload_region_dereg d{};
  d.handle = handle;
  return uioctl(fd, UNLOAD_IOC_DEREG_REGION, &d);
}

void rc_open(Rc* rc, ibv_context* ctx, ibv_pd* pd) {
  if (!ctx) {
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (!list || n == 0) skip("no RDMA device");
    ctx = ibv_open_device(list[0]);
    if (!ctx) die("ibv_open_device");
    ibv_free_device_list(list);
  }
  rc->ctx = ctx;
  rc->dev = ibv_get_device_name(ctx->device);
  rc->pd = pd ? pd : ibv_alloc_pd(ctx);
  if (!rc->pd) die("ibv_alloc_pd");
  rc->cq = ibv_create_cq(ctx, 64, nullptr, nullptr, 0);
  if (!rc->cq) die("ibv_create_cq");
  ibv_qp_init_attr ia{};
  ia.send_cq = rc->cq;
  ia.recv_cq = rc->cq;
  ia.qp_type = IBV_QPT_RC;
  ia.cap.max_send_wr = 16;
  ia.cap.max_recv_wr = 16;
  ia.cap.max_send_sge = 1;
  ia.cap.max_recv_sge = 1;
  rc->qp = ibv_create_qp(rc->pd, &ia);
  if (!rc->qp) die("ibv_create_qp");
  ibv_port_attr pa{};
  if (ibv_query_port(ctx, 1, &pa)) die("ibv_query_port");
  for (int i = 0; i < pa.gid_tbl_len && rc->gid_index < 0; i++) {
    ibv_gid_entry e{};
    if (ibv_query_gid_ex(ctx, 1, static_cast<uint32_t>(i), &e, 0)) continue;
    static const uint8_t v4[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (e.gid_type == IBV_GID_TYPE_ROCE_V2 && memcmp(e.gid.raw, v4, 12) == 0) {
      rc->gid_index = i;
      memcpy(rc->wire.gid, e.gid.raw, 16);
    }
  }
  if (rc->gid_index < 0) skip("no RoCE v2 IPv4 GID on port 1");
  rc->wire.qpn = rc->qp->qp_num;
  rc->wire.psn = static_cast<uint32_t>(random()) & 0xffffff;
}

void rc_init_only(Rc* rc, int access) {
  if (unload::test::rc_to_init(rc->qp, access)) die("modify INIT");
}

void rc_connect(Rc* rc, const Wire& peer, int access) {
  rc_init_only(rc, access);
  unload::test::RcPath p;
  p.dest_qpn = peer.qpn;
  memcpy(p.dgid.raw, peer.gid, 16);
  p.sgid_index = rc->gid_index;
  p.rq_psn = peer.psn;
  p.sq_psn = rc->wire.psn;
  if (unload::test::rc_to_rtr(rc->qp, p)) die("modify RTR");
  if (unload::test::rc_to_rts(rc->qp, p)) die("modify RTS");
}

void rc_close(Rc* rc) {
  if (rc->qp) ibv_destroy_qp(rc->qp);
  if (rc->cq) ibv_destroy_cq(rc->cq);
  rc->qp = nullptr;
  rc->cq = nullptr;
}

void xwrite(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n) {
    ssize_t k = write(fd, c, n);
    if (k <= 0) die("pipe write");
    c += k;
    n -= static_cast<size_t>(k);
  }
}

void xread(int fd, void* p, size_t n) {
  char* c = static_cast<char*>(p);
  while (n) {
    ssize_t k = read(fd, c, n);
    if (k <= 0) die("pipe read");
    c += k;
    n -= static_cast<size_t>(k);
  }
}

}  // namespace kt
