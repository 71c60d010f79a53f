// Helpers of the kmod sandbox tests: /dev/unload, sysfs, and an RC QP on the test device.
// The vocabulary, exit codes and device rule are tests/support's (check.hpp, verbs.hpp).
#pragma once

#include <infiniband/verbs.h>
#include <sys/ioctl.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "check.hpp"
#include "unload.h"
#include "verbs.hpp"

namespace kt {

using namespace unload::test;

// sysfs
std::string sysfs_path(const std::string& name);  // "mode" or "stats/sessions"
bool sysfs_read(const std::string& name, std::string* out);
long long stat(const std::string& name);                             // stats/<name>, -1 if unreadable
int sysfs_write(const std::string& name, const std::string& value);  // 0 or errno
long long vmstat(const char* key);                                   // /proc/vmstat counter, -1 if absent
long long foll_pins_outstanding();                                   // acquired - released
long long vm_pin_kb();  // this process's VmPin (/proc/self/status), -1 if absent

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

// An RC QP on the test device (tests/support's rule), port 1.
struct Wire {
  uint32_t qpn;
  uint32_t psn;
  uint8_t gid[16];
};

struct Rc {
  Device device;
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
  int gid_index = -1;
  std::string dev;
  Wire wire{};
};

// On device d (its context and GID), else on the test device opened anew (skip when there
// is none); on pd if given, else a new PD.
void rc_open(Rc* rc, const Device* d = nullptr, ibv_pd* pd = nullptr);
void rc_connect(Rc* rc, const Wire& peer, int access = kAllAccess);  // INIT -> RTR -> RTS
void rc_init_only(Rc* rc, int access = kAllAccess);                  // RESET -> INIT
void rc_close(Rc* rc);

// Two RC QPs of this process connected to each other on the test device (one PD), a
// source MR on a and a target MR on b, both QPs and both regions registered in one
// session `fd`: the smallest direct pair.
struct SelfPair {
  Rc a, b;
  int fd = -1;
  uint8_t* src = nullptr;  // a's source MR, registered
  ibv_mr* smr = nullptr;
  uint8_t* tgt = nullptr;  // b's target MR, registered
  ibv_mr* tmr = nullptr;
  size_t len = 0;
};
constexpr uint32_t kRegionRw = UNLOAD_ACCESS_LOCAL_WRITE | UNLOAD_ACCESS_REMOTE_WRITE;
void pair_open(SelfPair* p, size_t len, int tgt_access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
void pair_close(SelfPair* p);
// A direct write from a's source at src_off to raddr of rkey's region.
unload_direct_req pair_req(const SelfPair& p, size_t src_off, uint32_t rkey, uint64_t raddr, uint64_t len);
int submit(int fd, unload_direct_req* reqs, uint32_t n);  // UNLOAD_IOC_SUBMIT: 0 or -errno
int submit_one(int fd, unload_direct_req r);               // its result, or -1000 + the ioctl's

// The calling thread on CPU `cpu` only (when there is such a CPU): a racer must run beside
// what it races, not after it.
void pin_cpu(int cpu);

// CLOCK_MONOTONIC in seconds, for the liveness bounds some checks assert.
double now_s();

// Two hosts' exchange through the directory both may write (UNLOAD_PAIR_DIR): a file of n
// bytes written whole (a temp file renamed), and read once it is there (a hang after seconds).
void pair_put(const std::string& dir, const char* name, const void* p, size_t n);
void pair_get(const std::string& dir, const char* name, void* p, size_t n, int seconds = 300);

// Exact-size pipe I/O.
void xwrite(int fd, const void* p, size_t n);
void xread(int fd, void* p, size_t n);

}  // namespace kt
