// The semantics programs' common set-up: the device, loopback RC pairs in one process,
// registered buffers, completion collection and the normalised outcome lines.
//
// Every program prints a deterministic outcome (statuses and wr_ids in order, QP states,
// checksums as verdicts) that the sandbox script diffs between the run without the shim
// and each path forced under it. Built on tests/support (its vocabulary, exit codes, device
// rule and watchdogs): 0 the program ran to its end (whatever the outcome says), 2 set-up
// failure, 3 the watchdog fired (a hang), 77 a capability is missing (one "skip: <reason>"
// line).
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "check.hpp"

#undef ibv_reg_mr

namespace sem {

// tests/support's: "setup: <what>: <errno>" on stderr, exit 2; "skip: <why>", exit 77.
using unload::test::die;
using unload::test::skip;

// Prints a line of the outcome (printf format) and flushes it, so a watchdog or a crash
// later leaves what came before.
void out(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// tests/support's watchdogs. watchdog(seconds, what, note = nullptr): a hang fails instead
// of blocking: after `seconds` it prints "FAIL: watchdog: <what> (<note()>)" and exits 3.
// stall_watchdog(seconds, what, progress, note = nullptr): a thread samples `progress()`
// every second and fires when it has not changed for `seconds` (for long runs whose
// duration depends on the machine's load). stop_watchdogs(): once it returns, neither
// calls progress() or note() again; call it before the state those read goes away.
using unload::test::stall_watchdog;
using unload::test::stop_watchdogs;
using unload::test::watchdog;

struct Env {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  int gid_index = 1;
  ibv_gid gid{};
};

// The device and GID by the tests' one rule (verbs_env/verbs_env.hpp: UNLOAD_TEST_DEV,
// UNLOAD_TEST_GID, else the first device and its RoCE v2 IPv4 GID). Skips when there is none.
Env open_env();

struct QpCaps {
  uint32_t send_wr = 64;
  uint32_t recv_wr = 16;
  uint32_t send_sge = 4;
  uint32_t recv_sge = 1;
  uint32_t inline_data = 0;
  bool sig_all = false;
};

ibv_cq* make_cq(Env& e, int cqe, ibv_comp_channel* ch = nullptr);
ibv_qp* make_qp(Env& e, ibv_cq* scq, ibv_cq* rcq, const QpCaps& caps = {});
// INIT -> RTR -> RTS towards `dest` (rnr_retry 7: a SEND without a receive waits).
void connect(Env& e, ibv_qp* qp, uint32_t dest, ibv_mtu mtu = IBV_MTU_1024);
void connect_pair(Env& e, ibv_qp* a, ibv_qp* b, ibv_mtu mtu = IBV_MTU_1024);

// Page-aligned zeroed memory (never freed: the programs are short).
uint8_t* alloc(size_t len);
ibv_mr* reg(Env& e, void* p, size_t len, int access);
constexpr int kRemote = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

// A sender QP and its responder, a source region on the sender's side and a target region
// (remote read/write) the sender writes to.
struct Pair {
  ibv_qp* s = nullptr;
  ibv_qp* r = nullptr;
  uint8_t* src = nullptr;
  uint8_t* dst = nullptr;
  size_t src_len = 0, dst_len = 0;
  ibv_mr* smr = nullptr;
  ibv_mr* dmr = nullptr;
};
// `sender`: made by the caller (e.g. with ibv_create_qp_ex), else like the responder.
Pair make_pair(Env& e, ibv_cq* scq, ibv_cq* rcq, size_t src_len, size_t dst_len, const QpCaps& caps = {},
               ibv_qp* sender = nullptr, ibv_mtu mtu = IBV_MTU_1024);

// One request of one SGE, an RDMA WRITE unless `op` says otherwise (a send, a READ: the
// remote address and rkey then as that opcode reads them); returns ibv_post_send's value.
int post_write(ibv_qp* qp, uint64_t wr_id, const void* src, uint32_t len, uint32_t lkey, uint64_t raddr,
               uint32_t rkey, unsigned flags, ibv_wr_opcode op = IBV_WR_RDMA_WRITE);

// Polls `cq` until `want` completions were collected in `got` or `timeout_ms` passed;
// returns how many it collected. `max_per_poll` bounds the array handed to ibv_poll_cq.
int collect(ibv_cq* cq, std::vector<ibv_wc>& got, size_t want, int timeout_ms, int max_per_poll = 16);
// What arrives on `cq` within `ms` (nothing is expected): extra completions.
int collect_extra(ibv_cq* cq, std::vector<ibv_wc>& got, int ms);

// "wr_id:STATUS" for each, space-separated (statuses as short names, e.g. SUCCESS,
// REM_ACCESS_ERR, WR_FLUSH_ERR).
std::string describe(const std::vector<ibv_wc>& wcs, size_t from = 0);
const char* status_name(ibv_wc_status s);
const char* qp_state(ibv_qp* qp);  // RESET .. ERR, or "?"

uint64_t fnv(const void* p, size_t n);
// A byte pattern that differs per seed and position.
void fill(uint8_t* p, size_t n, uint64_t seed);
uint8_t pattern_byte(uint64_t seed, size_t i);

// One write of a random stream, drawn from rng in a fixed order (a short or a long length,
// up to short_max or long_max; an offset in shadow; the payload), its payload put at src
// and mirrored into shadow: a program's seed gives the writes it always gave.
struct RandomWrite {
  uint32_t len;
  size_t off;
};
RandomWrite random_write(std::mt19937_64& rng, uint32_t short_max, uint32_t long_max, uint8_t* src,
                         std::vector<uint8_t>& shadow);

uint64_t now_ms();  // for bounded waits only, never printed
void sleep_ms(unsigned ms);

}  // namespace sem
