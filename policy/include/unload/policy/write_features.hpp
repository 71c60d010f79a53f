// What the runtime knows about a write when it asks the policy for a path.
#pragma once

#include <cstdint>

#include "unload/policy/path.hpp"

namespace unload::policy {

struct WriteFeatures {
  uint32_t length;       // payload bytes, the sum of the SGEs
  uint32_t sge_count;    // scattered payloads cost the CPU paths more than one buffer
  uint32_t rkey;         // target region ...
  uint64_t remote_addr;  // ... and address: (rkey, page) is what the hotness sketch counts
  uint64_t now_ns;       // caller's monotonic clock (the library never reads one), or 0
  PathSet eligible;      // paths the runtime can take for this write; offload is implied
  bool peer_local;       // the peer QP is on this host
  bool nic_outstanding;  // the QP has NIC requests in flight: going direct costs a fence
};

// Target pages are counted at 4 KiB granularity, the NIC translation unit for most regions.
inline constexpr unsigned kTargetPageShift = 12;

}  // namespace unload::policy
