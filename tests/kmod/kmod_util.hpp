// Helpers of the kmod sandbox tests: /dev/unload, sysfs, and an RC QP on rxe.
#pragma once

#include <infiniband/verbs.h>
#include <sys/ioctl.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "unload.h"

namespace kt {

// Exit codes: 0 pass, 1 fail, 77 skip.
[[noreturn]] void skip(const char* why);
[[noreturn]] void die(const char* what);

// One line per check: "check <name>: <figure> ... ok|FAIL". Returns ok.
bool check(bool ok, const char* name, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
int failures();

// sysfs
std::string sysfs_path(const std::string& name);  // "mode" or "stats/sessions"
bool sysfs_read(const std::string& name, std::string* out);
long long stat(const std::string& name);                             // stats/<name>, -1 if unreadable
int sysfs_write(const std::string& name, const std::string& value);  // 0 or errno
long long vmstat(const char* key);                                   // /proc/vmstat counter, -1 if absent
long long foll_pins_outstanding();                                   // acquired - released

// /dev/unload
int unload_open();                                 // with HELLO done; skip if absent
int uioctl(int fd, unsigned long cmd, void* arg);  // 0 or -errno
int reg_qp(int fd, const char* dev, uint32_t qpn, unload_qp_reg* out = nullptr);
// An MR of this process, as the shim registers it (its device, keys, address, length).
int reg_mr(int fd, const ibv_mr* mr, uint32_t access, uint64_t* handle = nullptr);
// Any claim, for the negative cases.
int reg_region(int fd, const char* dev, const void* addr, uint64_t len, uint32_t lkey, uint32_t rkey,
               uint32_t access, uint64_t* handle = nullptr);
int dereg_region(int fd, uint64_t handle);

// An RC QP on the first RDMA device, port 1, on its RoCE v2 IPv4 GID.
struct Wire {
  uint32_t qpn;
  uint32_t psn;
  uint8_t gid[16];
};

struct Rc {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
  int gid_index = -1;
  std::string dev;
  Wire wire{};
};

// Opens the device (skip when there is none) and, if pd is given, uses it.
void rc_open(Rc* rc, ibv_context* ctx = nullptr, ibv_pd* pd = nullptr);
constexpr int kAllAccess = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_LOCAL_WRITE;
void rc_connect(Rc* rc, const Wire& peer, int access = kAllAccess);  // INIT -> RTR -> RTS
void rc_init_only(Rc* rc, int access = kAllAccess);                  // RESET -> INIT
void rc_close(Rc* rc);

// Exact-size pipe I/O.
void xwrite(int fd, const void* p, size_t n);
void xread(int fd, void* p, size_t n);

}  // namespace kt
