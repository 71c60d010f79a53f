// The device and GID rule and the RC connection (see verbs_env.hpp).
#include "verbs_env.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace unload::verbs {

int roce_v2_ipv4_gid(ibv_context* ctx, uint8_t port) {
  ibv_port_attr pa{};
  if (ibv_query_port(ctx, port, &pa)) return -ENOENT;
  static const uint8_t v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  for (int i = 0; i < pa.gid_tbl_len; i++) {
    ibv_gid_entry e{};
    if (ibv_query_gid_ex(ctx, port, static_cast<uint32_t>(i), &e, 0)) continue;
    if (e.gid_type == IBV_GID_TYPE_ROCE_V2 && !memcmp(e.gid.raw, v4mapped, 12)) return i;
  }
  return -ENOENT;
}

static int env_gid(int* out) {
  const char* s = std::getenv("UNLOAD_TEST_GID");
  if (!s || !*s) return 0;
  char* end = nullptr;
  const long v = std::strtol(s, &end, 10);
  if (*end || v < 0 || v > 0xffff) return -EINVAL;
  *out = static_cast<int>(v);
  return 0;
}

int open_device(Device* d, const char* name, int gid_index, uint8_t port) {
  *d = Device{};
  if (!name || !*name) name = std::getenv("UNLOAD_TEST_DEV");
  if (name && !*name) name = nullptr;
  if (gid_index < 0) {
    if (int rc = env_gid(&gid_index)) return rc;
  }
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (!list) return -ENODEV;  // no verbs support here at all: no device either
  ibv_device* dev = nullptr;
  for (int i = 0; i < n && !dev; i++)
    if (!name || !std::strcmp(ibv_get_device_name(list[i]), name)) dev = list[i];
  int rc = 0;
  if (!dev) {
    rc = -ENODEV;
  } else if (!(d->ctx = ibv_open_device(dev))) {
    rc = errno ? -errno : -ENODEV;
  } else {
    d->name = ibv_get_device_name(dev);
  }
  ibv_free_device_list(list);
  if (rc) return rc;
  d->port = port;
  d->gid_index = gid_index >= 0 ? gid_index : roce_v2_ipv4_gid(d->ctx, port);
  if (d->gid_index < 0) {
    rc = d->gid_index;
  } else if (int q = ibv_query_gid(d->ctx, port, d->gid_index, &d->gid)) {
    rc = q > 0 ? -q : -EINVAL;
  }
  if (rc) close_device(d);
  return rc;
}

void close_device(Device* d) {
  if (d->ctx) ibv_close_device(d->ctx);
  *d = Device{};
}

const char* open_error(int err) {
  switch (err) {
    case -ENODEV:
      return "no RDMA device (or not the one UNLOAD_TEST_DEV names)";
    case -ENOENT:
      return "no RoCE v2 IPv4 GID on the port (UNLOAD_TEST_GID chooses one)";
    case -EINVAL:
      return "UNLOAD_TEST_GID is not a GID index, or the GID cannot be read";
    default:
      return "cannot open the RDMA device";
  }
}

int rc_connect(ibv_qp* qp, int access, const RcPath& p, const char** step) {
  const char* at = "modify to INIT";
  int rc = rc_to_init(qp, access, ibv_modify_qp, p.port);
  if (!rc) {
    at = "modify to RTR";
    rc = rc_to_rtr(qp, p);
  }
  if (!rc) {
    at = "modify to RTS";
    rc = rc_to_rts(qp, p);
  }
  if (rc && step) *step = at;
  return rc > 0 ? -rc : rc;
}

}  // namespace unload::verbs
