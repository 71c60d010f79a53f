// The test programs' verbs set-up: the device by the one rule (verbs_env.hpp), CQs, RC QPs,
// registered memory, the RESET -> RTS connection and bounded completion polling. Every
// helper either succeeds or ends the program in the vocabulary of check.hpp: no device or
// no RoCE v2 IPv4 GID is a skip (77), any other set-up error a die (2), a completion that
// never comes a watchdog (3).
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>

#include "check.hpp"
#include "rc_qp.hpp"
#include "verbs_env.hpp"

namespace unload::test {

using verbs::Device;
using verbs::RcPath;

// The device and its GID by the rule of verbs_env.hpp ($UNLOAD_TEST_DEV, $UNLOAD_TEST_GID,
// else the first device and its RoCE v2 IPv4 GID); `name` and `gid_index` (a program's own
// flags) override the environment.
Device open_device(const char* name = nullptr, int gid_index = -1);

ibv_pd* make_pd(ibv_context* ctx);
ibv_cq* make_cq(ibv_context* ctx, int cqe, ibv_comp_channel* ch = nullptr);

struct QpCaps {
  uint32_t send_wr = 64;
  uint32_t recv_wr = 16;
  uint32_t send_sge = 1;
  uint32_t recv_sge = 1;
  uint32_t inline_data = 0;
  bool sig_all = false;
};
ibv_qp* make_rc_qp(ibv_pd* pd, ibv_cq* scq, ibv_cq* rcq, const QpCaps& caps = {});

// Page-aligned zeroed anonymous memory (never freed: the programs are short).
uint8_t* map_zeroed(size_t len);
ibv_mr* make_mr(ibv_pd* pd, void* p, size_t len, int access);
constexpr int kAllAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

// The path to a QP `dest_qpn` on device `d` itself (both ends in this process).
RcPath loopback_path(const Device& d, uint32_t dest_qpn);
// RESET -> INIT (access) -> RTR -> RTS along p.
void connect(ibv_qp* qp, int access, const RcPath& p);

// Polls until `n` completions arrived, storing them in wcs[0..n) (wcs may be null). Past
// `seconds` the watchdog fires (exit 3). Returns how many completed in error.
int poll_n(ibv_cq* cq, int n, ibv_wc* wcs = nullptr, unsigned seconds = 60);

}  // namespace unload::test
