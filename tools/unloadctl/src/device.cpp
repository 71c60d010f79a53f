#include "device.hpp"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "error.hpp"

namespace unload::ctl {

namespace {

// 0 with the module's ABI in *abi (also on a mismatch: -EPROTO), else -errno.
int hello(int fd, uint32_t* abi) {
  unload_hello h{};
  h.abi_version = UNLOAD_ABI_VERSION;
  const int r = ioctl(fd, UNLOAD_IOC_HELLO, &h) == 0 ? 0 : -errno;
  if (r == 0 || r == -EPROTO) *abi = h.abi_version;
  return r;
}

}  // namespace

Device::Device() {
  fd_ = open(UNLOAD_DEVICE_PATH, O_RDWR | O_CLOEXEC);
  if (fd_ < 0) {
    const int e = errno;
    if (e == ENOENT) fail("no " UNLOAD_DEVICE_PATH ": is the unload module loaded? (`modprobe unload`)");
    fail(std::string("cannot open " UNLOAD_DEVICE_PATH ": ") + std::strerror(e));
  }
  const int r = hello(fd_, &abi_);
  if (r == -EPROTO)
    fail("the module speaks ABI " + std::to_string(abi_) + ", this unloadctl ABI " +
         std::to_string(UNLOAD_ABI_VERSION) + ": install matching versions");
  if (r) fail(std::string("handshake with " UNLOAD_DEVICE_PATH " failed: ") + std::strerror(-r));
}

Device::~Device() {
  if (fd_ >= 0) close(fd_);
}

std::vector<unload_session_info> Device::sessions() {
  // The list may grow between asking for its size and reading it: ask until it fits.
  std::vector<unload_session_info> v;
  for (uint32_t want = 16;;) {
    v.assign(want, unload_session_info{});
    unload_session_list l{};
    l.sessions = reinterpret_cast<uintptr_t>(v.data());
    l.count = want;
    l.entry_size = sizeof(unload_session_info);
    if (ioctl(fd_, UNLOAD_IOC_LIST_SESSIONS, &l) != 0) {
      const int e = errno;
      if (e == ENOTTY) fail("this module has no session list (UNLOAD_IOC_LIST_SESSIONS): upgrade it");
      fail(std::string("listing sessions failed: ") + std::strerror(e));
    }
    if (l.total <= l.filled || want == UNLOAD_MAX_LIST_SESSIONS) {
      v.resize(l.filled);
      return v;
    }
    want = l.total + 16 < UNLOAD_MAX_LIST_SESSIONS ? l.total + 16 : UNLOAD_MAX_LIST_SESSIONS;
  }
}

int Device::channel_probe(unload_channel_probe* p) {
  if (ioctl(fd_, UNLOAD_IOC_CHANNEL_PROBE, p) == 0) return 0;
  if (errno == ENOTTY) fail("this module has no channel (UNLOAD_IOC_CHANNEL_PROBE): upgrade it");
  return -errno;
}

uint32_t probe_module_abi() {
  const int fd = open(UNLOAD_DEVICE_PATH, O_RDWR | O_CLOEXEC);
  if (fd < 0) return 0;
  uint32_t abi = 0;
  hello(fd, &abi);
  close(fd);
  return abi;
}

}  // namespace unload::ctl
