// Helpers of the kmod sandbox tests (see kmod_util.hpp).
#include "kmod_util.hpp"

#include <arpa/inet.h>
#include <sched.h>
#include <sys/mman.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

namespace kt {

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
long long vm_pin_kb() {
  std::ifstream f("/proc/self/status");
  std::string k;
  while (f >> k) {
    long long v;
    if (k == "VmPin:" && f >> v) return v;
  }
  return -1;
}

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

void rc_open(Rc* rc, const Device* d, ibv_pd* pd) {
  rc->device = d ? *d : open_device();
  rc->ctx = rc->device.ctx;
  rc->dev = rc->device.name;
  rc->gid_index = rc->device.gid_index;
  rc->pd = pd ? pd : make_pd(rc->ctx);
  rc->cq = make_cq(rc->ctx, 64);
  QpCaps caps;
  caps.send_wr = 16;
  rc->qp = make_rc_qp(rc->pd, rc->cq, rc->cq, caps);
  memcpy(rc->wire.gid, rc->device.gid.raw, 16);
  rc->wire.qpn = rc->qp->qp_num;
  rc->wire.psn = static_cast<uint32_t>(random()) & 0xffffff;
}

void rc_init_only(Rc* rc, int access) {
  if (int e = unload::verbs::rc_to_init(rc->qp, access)) die("modify INIT", -e);
}

void rc_connect(Rc* rc, const Wire& peer, int access) {
  RcPath p;
  p.dest_qpn = peer.qpn;
  memcpy(p.dgid.raw, peer.gid, 16);
  p.sgid_index = rc->gid_index;
  p.rq_psn = peer.psn;
  p.sq_psn = rc->wire.psn;
  connect(rc->qp, access, p);
}

void rc_close(Rc* rc) {
  if (rc->qp) ibv_destroy_qp(rc->qp);
  if (rc->cq) ibv_destroy_cq(rc->cq);
  rc->qp = nullptr;
  rc->cq = nullptr;
}

void pair_put(const std::string& dir, const char* name, const void* p, size_t n) {
  const std::string tmp = dir + "/." + name, path = dir + "/" + name;
  int fd = open(tmp.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
  if (fd < 0) die(tmp.c_str());
  xwrite(fd, p, n);
  close(fd);
  if (rename(tmp.c_str(), path.c_str())) die(path.c_str());
}

void pair_get(const std::string& dir, const char* name, void* p, size_t n, int seconds) {
  const std::string path = dir + "/" + name;
  for (int i = 0; i < seconds * 10; i++) {
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      xread(fd, p, n);
      close(fd);
      return;
    }
    usleep(100000);
  }
  hang(("waiting for the peer's " + std::string(name)).c_str(), "no file");
}

double now_s() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
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

// --- a pair in one process -------------------------------------------------------

void pair_open(SelfPair* p, size_t len, int tgt_access) {
  rc_open(&p->a);
  rc_open(&p->b, &p->a.device, p->a.pd);
  rc_connect(&p->a, p->b.wire);
  rc_connect(&p->b, p->a.wire);
  p->fd = unload_open();
  p->len = len;
  p->src = map_zeroed(len);
  p->tgt = map_zeroed(len);
  p->smr = make_mr(p->a.pd, p->src, len, IBV_ACCESS_LOCAL_WRITE);
  p->tmr = make_mr(p->a.pd, p->tgt, len, tgt_access);
  if (reg_mr(p->fd, p->smr, UNLOAD_ACCESS_LOCAL_WRITE) || reg_mr(p->fd, p->tmr, kRegionRw) ||
      reg_qp(p->fd, p->a.dev.c_str(), p->a.wire.qpn) || reg_qp(p->fd, p->b.dev.c_str(), p->b.wire.qpn))
    die("self pair: REG_REGION / REG_QP");
}

void pair_close(SelfPair* p) {
  close(p->fd);
  rc_close(&p->a);
  rc_close(&p->b);
  ibv_dereg_mr(p->smr);
  ibv_dereg_mr(p->tmr);
  munmap(p->src, p->len);
  munmap(p->tgt, p->len);
}

unload_direct_req pair_req(const SelfPair& p, size_t src_off, uint32_t rkey, uint64_t raddr, uint64_t len) {
  unload_direct_req r{};
  r.qp_num = p.a.wire.qpn;
  r.rkey = rkey;
  r.remote_addr = raddr;
  r.length = len;
  r.iov = reinterpret_cast<uintptr_t>(p.src + src_off);
  r.lkey = p.smr->lkey;
  return r;
}

int submit(int fd, unload_direct_req* reqs, uint32_t n) {
  unload_submit s{};
  s.reqs = reinterpret_cast<uintptr_t>(reqs);
  s.count = n;
  return uioctl(fd, UNLOAD_IOC_SUBMIT, &s);
}

int submit_one(int fd, unload_direct_req r) {
  const int ret = submit(fd, &r, 1);
  return ret ? -1000 + ret : r.result;
}

void pin_cpu(int cpu) {
  if (cpu >= sysconf(_SC_NPROCESSORS_ONLN)) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  sched_setaffinity(0, sizeof set, &set);
}

}  // namespace kt
