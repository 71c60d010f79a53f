// The link to the kernel module. Everything here is a syscall except kmod_tunables and
// kmod_count, which only read the control page and add to the counters page.
#include "kmod.hpp"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "unload.h"
#include "unload/policy/resident_set.hpp"

namespace unload::rt {

namespace {
constexpr unload_control no_control() {
  unload_control c{};
  c.seq = ~uint32_t{0};
  return c;
}
}  // namespace
constinit const unload_control kNoControl = no_control();
Kmod g_kmod;
std::atomic<bool> g_have_kmod{false};

static_assert(sizeof(unload_tunables) == sizeof(policy::Tunables),
              "control page tunables = policy::Tunables");
// Without the module the runtime starts where the module does.
#define UNLOAD_SAME_DEFAULT(name, min, max, def) \
  static_assert(policy::kDefaultTunables.name == (def), #name ": policy default = the module's");
UNLOAD_TUNABLE_RANGES(UNLOAD_SAME_DEFAULT)
#undef UNLOAD_SAME_DEFAULT
namespace range_max {
#define UNLOAD_RANGE_MAX(name, min, max, def) constexpr uint64_t name = (max);
UNLOAD_TUNABLE_RANGES(UNLOAD_RANGE_MAX)
#undef UNLOAD_RANGE_MAX
}  // namespace range_max
static_assert(range_max::target_xlate_pages == policy::ResidentSet::kMaxPages,
              "target_xlate_pages: the module's range = the resident set's size");
static_assert(policy::kDefaultTunables.mode == UNLOAD_MODE_DEFAULT, "mode: policy default = the module's");

const char* kmod_open() {
  const int fd = open(UNLOAD_DEVICE_PATH, O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return "no /dev/unload";
    // The module's per-user bound, or this process's RLIMIT_NOFILE: either way, the NIC.
    if (errno == EMFILE) return "too many sessions for this user (sysfs user_sessions_max) or open files";
    return std::strerror(errno);
  }
  unload_hello h{};
  h.abi_version = UNLOAD_ABI_VERSION;
  if (ioctl(fd, UNLOAD_IOC_HELLO, &h) != 0) {
    const int e = errno;
    close(fd);
    return e == EPROTO ? "ABI version mismatch" : std::strerror(e);
  }
  void* ctl = mmap(nullptr, h.control_size, PROT_READ, MAP_SHARED, fd, UNLOAD_MMAP_CONTROL);
  void* cnt = mmap(nullptr, h.counters_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, UNLOAD_MMAP_COUNTERS);
  if (ctl == MAP_FAILED || cnt == MAP_FAILED) {
    if (ctl != MAP_FAILED) munmap(ctl, h.control_size);
    if (cnt != MAP_FAILED) munmap(cnt, h.counters_size);
    close(fd);
    return "cannot map the control or counters page";
  }
  // The mapped engine's validity words; a module without them has no mapped path.
  void* st = mmap(nullptr, UNLOAD_STATUS_SIZE, PROT_READ, MAP_SHARED, fd, UNLOAD_MMAP_STATUS);
  g_kmod.status = st == MAP_FAILED ? nullptr : static_cast<const uint64_t*>(st);
  void* busy = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, UNLOAD_MMAP_BUSY);
  g_kmod.busy = busy == MAP_FAILED ? nullptr : static_cast<uint8_t*>(busy);
  g_kmod.fd = fd;
  __atomic_store_n(&g_kmod.ctl, static_cast<const unload_control*>(ctl), __ATOMIC_RELEASE);
  g_kmod.cnt = static_cast<unload_counters*>(cnt);
  g_kmod.max_iov = h.max_iov;
  g_kmod.ctl_size = h.control_size;
  g_kmod.cnt_size = h.counters_size;
  g_kmod.session++;
  return nullptr;
}

void kmod_leave_inherited() {
  if (g_kmod.fd < 0) return;
  munmap(const_cast<unload_control*>(g_kmod.ctl), g_kmod.ctl_size);
  munmap(g_kmod.cnt, g_kmod.cnt_size);
  if (g_kmod.status) munmap(const_cast<uint64_t*>(g_kmod.status), UNLOAD_STATUS_SIZE);
  if (g_kmod.busy) munmap(g_kmod.busy, 4096);
  close(g_kmod.fd);
  const uint32_t session = g_kmod.session;
  g_kmod = Kmod{};
  g_kmod.session = session;
}

uint32_t kmod_tunables(policy::Tunables& t, uint32_t seq) {
  const unload_control* c = g_kmod.ctl;
  for (;;) {
    const uint32_t s = __atomic_load_n(&c->seq, __ATOMIC_ACQUIRE);
    if (s == seq) return s;
    if (s & 1) continue;
    policy::Tunables copy;
    std::memcpy(&copy, const_cast<const unload_tunables*>(&c->tunables), sizeof copy);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (__atomic_load_n(&c->seq, __ATOMIC_RELAXED) != s) continue;
    t = copy;
    return s;
  }
}

uint64_t kmod_channels_up() {
  return __atomic_load_n(&g_kmod.ctl->channels_up, __ATOMIC_ACQUIRE);
}

void kmod_count(policy::Path p, uint64_t n, uint64_t bytes) {
  // The page's direct slot holds the mapped path's writes (unload_counters): the module
  // counts its own copies itself.
  const unsigned i = p == policy::Path::unload_mapped ? unsigned{UNLOAD_PATH_DIRECT} : policy::index_of(p);
  __atomic_fetch_add(&g_kmod.cnt->writes[i], n, __ATOMIC_RELAXED);
  __atomic_fetch_add(&g_kmod.cnt->bytes[i], bytes, __ATOMIC_RELAXED);
}

void kmod_count_fence() {
  __atomic_fetch_add(&g_kmod.cnt->fences, 1, __ATOMIC_RELAXED);
}

void kmod_count_why(unsigned why, uint64_t n) {
  if (why < UNLOAD_WHY_COUNT) __atomic_fetch_add(&g_kmod.cnt->why_not[why], n, __ATOMIC_RELAXED);
}

int kmod_map(uint32_t qpn, uint32_t handle, uint32_t rkey, int mem_fd, unload_map* m) {
  *m = unload_map{};
  m->qp_num = qpn;
  m->qp_handle = handle;
  m->rkey = rkey;
  m->mem_fd = mem_fd;
  return ioctl(g_kmod.fd, UNLOAD_IOC_MAP, m) != 0 ? -errno : 0;
}

void kmod_unmap(uint32_t slot, uint64_t cookie) {
  unload_unmap u{};
  u.slot = slot;
  u.cookie = cookie;
  ioctl(g_kmod.fd, UNLOAD_IOC_UNMAP, &u);
}

namespace {

// A REG_QP-shaped request naming QP `qpn` of ctx's device.
unload_qp_reg qp_req(ibv_context* ctx, uint32_t qpn) {
  unload_qp_reg r{};
  std::memcpy(r.ibdev, ctx->device->name, strnlen(ctx->device->name, sizeof r.ibdev - 1));
  r.qp_num = qpn;
  return r;
}

}  // namespace

int kmod_unreg_qp(ibv_context* ctx, uint32_t qpn) {
  unload_qp_reg r = qp_req(ctx, qpn);
  return ioctl(g_kmod.fd, UNLOAD_IOC_UNREG_QP, &r) != 0 ? -errno : 0;
}

int kmod_reg_qp(ibv_context* ctx, uint32_t qpn, uint32_t* peer_flags, uint32_t* handle,
                uint32_t* busy_slot) {
  unload_qp_reg r = qp_req(ctx, qpn);
  if (ioctl(g_kmod.fd, UNLOAD_IOC_REG_QP, &r) != 0) return -errno;
  *peer_flags = r.peer_flags;
  *handle = r.handle;
  *busy_slot = r.busy_slot;
  return 0;
}

int kmod_qp_changed(ibv_context* ctx, uint32_t qpn) {
  unload_qp_reg r = qp_req(ctx, qpn);
  return ioctl(g_kmod.fd, UNLOAD_IOC_QP_CHANGED, &r) != 0 ? -errno : 0;
}

int kmod_reg_region(const ibv_mr* mr, uint64_t addr, uint64_t iova, uint64_t length, int access,
                    uint64_t* handle) {
  unload_region_reg r{};
  const size_t n = strnlen(mr->context->device->name, sizeof r.ibdev - 1);
  std::memcpy(r.ibdev, mr->context->device->name, n);
  r.addr = addr;
  if (iova != addr) {
    r.flags = UNLOAD_REGION_IOVA;
    r.iova = iova;
  }
  r.length = length;
  r.lkey = mr->lkey;
  r.rkey = mr->rkey;
  r.access = static_cast<uint32_t>(access) &
             (UNLOAD_ACCESS_LOCAL_WRITE | UNLOAD_ACCESS_REMOTE_WRITE | UNLOAD_ACCESS_REMOTE_READ);
  if (ioctl(g_kmod.fd, UNLOAD_IOC_REG_REGION, &r) != 0) return -errno;
  *handle = static_cast<uint64_t>(g_kmod.session) << 32 | r.handle;
  return 0;
}

int kmod_dereg_region(uint64_t handle) {
  if (handle >> 32 != g_kmod.session) return -ESTALE;
  unload_region_dereg r{};
  r.handle = static_cast<uint32_t>(handle);
  return ioctl(g_kmod.fd, UNLOAD_IOC_DEREG_REGION, &r) != 0 ? -errno : 0;
}

int kmod_arena_alloc(size_t length, void** addr, size_t* out_len, uint32_t* id) {
  unload_arena a{};
  a.length = length;
  if (ioctl(g_kmod.fd, UNLOAD_IOC_ARENA_ALLOC, &a) != 0) return -errno;
  void* p = mmap(nullptr, a.length, PROT_READ | PROT_WRITE, MAP_SHARED, g_kmod.fd,
                 static_cast<off_t>(a.mmap_offset));
  if (p == MAP_FAILED) {
    const int e = errno;
    kmod_arena_free(a.id);
    return -e;
  }
  *addr = p;
  *out_len = a.length;
  *id = a.id;
  return 0;
}

int kmod_arena_free(uint32_t id) {
  unload_arena a{};
  a.id = id;
  return ioctl(g_kmod.fd, UNLOAD_IOC_ARENA_FREE, &a) != 0 ? -errno : 0;
}

int kmod_submit(unload_direct_req* reqs, uint32_t n, uint32_t flags) {
  unload_submit s{};
  s.reqs = reinterpret_cast<uintptr_t>(reqs);
  s.count = n;
  s.flags = UNLOAD_SUBMIT_STOP | flags;
  if (ioctl(g_kmod.fd, UNLOAD_IOC_SUBMIT, &s) != 0) return -errno;
  return static_cast<int>(s.done);
}

int kmod_probe_channel(ibv_context* ctx, uint8_t port, const ibv_gid& dgid, bool existing_only) {
  unload_channel_probe p{};
  p.flags = existing_only ? UNLOAD_PROBE_EXISTING : 0;
  std::memcpy(p.ibdev, ctx->device->name, strnlen(ctx->device->name, sizeof p.ibdev - 1));
  p.port = port;
  std::memcpy(p.peer_gid, dgid.raw, sizeof p.peer_gid);
  return ioctl(g_kmod.fd, UNLOAD_IOC_CHANNEL_PROBE, &p) != 0 ? -errno : 0;
}

}  // namespace unload::rt
