// /dev/unload for the tool: a session of its own (the ABI handshake) and the list of
// the live sessions the caller may see (UNLOAD_IOC_LIST_SESSIONS), a probe of a peer's
// module through the channel (UNLOAD_IOC_CHANNEL_PROBE).
#pragma once

#include <cstdint>
#include <vector>

#include "unload.h"

namespace unload::ctl {

class Device {
 public:
  // Opens /dev/unload and says hello; fails (exit 1) with the reason.
  Device();
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  uint32_t module_abi() const { return abi_; }
  // Every session the module lets this caller see, except the tool's own.
  std::vector<unload_session_info> sessions();
  // UNLOAD_IOC_CHANNEL_PROBE: 0 or -errno, *p filled as far as the probe went.
  int channel_probe(unload_channel_probe* p);

 private:
  int fd_ = -1;
  uint32_t abi_ = 0;
};

// The module's ABI version from a hello, or 0 when /dev/unload cannot be opened.
uint32_t probe_module_abi();

}  // namespace unload::ctl
