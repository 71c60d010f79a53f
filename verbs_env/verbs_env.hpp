// The one rule by which the test programs and the verbs benchmark choose their RDMA device
// and GID, and the RC connection they all make; error-returning (0 or a negative errno),
// so product code (bench/verbs) links it as well as the tests' dying wrappers (verbs.hpp).
//
// The rule, each step an override of the next:
//   device  the caller's name (a command-line flag), else $UNLOAD_TEST_DEV, else the first
//           device ibv_get_device_list reports (rxe0 in the sandbox);
//   GID     the caller's index, else $UNLOAD_TEST_GID, else the first RoCE v2 GID of the
//           port whose address is IPv4-mapped (::ffff:a.b.c.d).
// Why RoCE v2 over IPv4: it is what rxe speaks on the sandbox's 192.0.2.0/24 links (the
// only addresses test traffic may use), it reaches a QP of the same device as well as a
// peer on the link, and a fixed index names a different GID depending on which addresses
// the netdev has. A device or GID asked for and absent is an error, never a fallback.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <string>

#include "rc_qp.hpp"

namespace unload::verbs {

struct Device {
  ibv_context* ctx = nullptr;
  std::string name;
  uint8_t port = 1;
  int gid_index = -1;
  ibv_gid gid{};
};

// Opens the device and chooses its GID by the rule above. `name` null or empty and
// `gid_index` < 0 leave those to the environment and the defaults. 0, or -ENODEV (no
// such device, or none at all), -ENOENT (no RoCE v2 IPv4 GID), -EINVAL (a malformed
// $UNLOAD_TEST_GID), or the verbs call's negative errno. On error nothing stays open.
int open_device(Device* d, const char* name = nullptr, int gid_index = -1, uint8_t port = 1);
void close_device(Device* d);

// The first RoCE v2 IPv4-mapped GID of `port`: its index, or -ENOENT.
int roce_v2_ipv4_gid(ibv_context* ctx, uint8_t port);

// What open_device's error means, for a message ("no RDMA device", ...).
const char* open_error(int err);

// RESET -> INIT (these access flags) -> RTR -> RTS along p: 0 or a negative errno, with
// *step (if given) naming the transition that failed.
int rc_connect(ibv_qp* qp, int access, const RcPath& p, const char** step = nullptr);

}  // namespace unload::verbs
