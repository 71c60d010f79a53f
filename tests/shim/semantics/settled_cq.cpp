// settled_cq: writes long enough in a row to settle on the NIC, then writes of another shape, a bad
// rkey and the writes behind it; completions, bytes at the target and both QP states as the NIC has them.
//
//   sem_settled_cq [WRITES]
//
// One pair; the responder never posts, so the sender is the only QP its send CQ serves.
// WRITES (200) signaled 64 B writes, each polled before the next: in the default mode with
// the CPU's copies off (the nic column) the sender settles on the NIC and the CQ's polls
// pass straight through (libunload/src/poll.cpp, cq_go_through; semantics.sh checks the
// statistics). Then 70 signaled 8 B writes one by one (past a consult of the policy), a
// write with a bad rkey, and three more writes posted at once. Printed: the runs' statuses
// (wr_ids in order or the first out of place), the error and the flushes, the target's
// digest and both QP states.
#include <string>

#include "fixture.hpp"

using namespace sem;

namespace {

constexpr uint32_t kSlots = 64, kSlot = 64;

// `n` writes of `len` bytes from wr_id `first`, each polled before the next: "N SUCCESS in
// order" or the first completion out of place.
std::string run(ibv_cq* cq, Pair& p, uint64_t first, uint32_t n, uint32_t len) {
  for (uint32_t i = 0; i < n; ++i) {
    const uint64_t id = first + i;
    const uint32_t slot = static_cast<uint32_t>(id % kSlots);
    uint8_t* src = p.src + size_t{slot} * kSlot;
    fill(src, len, id);
    const uint64_t raddr = reinterpret_cast<uintptr_t>(p.dst) + size_t{slot} * kSlot;
    if (post_write(p.s, id, src, len, p.smr->lkey, raddr, p.dmr->rkey, IBV_SEND_SIGNALED))
      die("ibv_post_send");
    std::vector<ibv_wc> got;
    if (collect(cq, got, 1, 20000) != 1) return "write " + std::to_string(id) + ": no completion";
    if (got[0].wr_id != id || got[0].status != IBV_WC_SUCCESS)
      return "write " + std::to_string(id) + ": " + describe(got);
  }
  return std::to_string(n) + " SUCCESS in order";
}

}  // namespace

int main(int argc, char** argv) {
  const uint32_t writes = argc > 1 ? static_cast<uint32_t>(std::strtoul(argv[1], nullptr, 0)) : 200;
  watchdog(240, "settled_cq");
  Env e = open_env();
  ibv_cq* scq = make_cq(e, 64);
  ibv_cq* rcq = make_cq(e, 16);
  Pair p = make_pair(e, scq, rcq, size_t{kSlots} * kSlot, size_t{kSlots} * kSlot);
  out("settled: %s", run(scq, p, 0, writes, 64).c_str());
  out("another shape: %s", run(scq, p, writes, 70, 8).c_str());

  // A bad rkey, polled; then three writes posted at once, which the NIC flushes.
  const uint64_t bad_id = writes + 70;
  if (post_write(p.s, bad_id, p.src, 8, p.smr->lkey, reinterpret_cast<uintptr_t>(p.dst),
                 p.dmr->rkey ^ 0x5a5a00, IBV_SEND_SIGNALED))
    die("ibv_post_send (bad rkey)");
  std::vector<ibv_wc> got;
  collect(scq, got, 1, 20000);
  out("bad rkey: %s", describe(got).c_str());
  got.clear();
  for (uint64_t id = bad_id + 1; id <= bad_id + 3; ++id) {
    const int rc = post_write(p.s, id, p.src + kSlot, 8, p.smr->lkey,
                              reinterpret_cast<uintptr_t>(p.dst) + (id % kSlots) * kSlot, p.dmr->rkey,
                              IBV_SEND_SIGNALED);
    if (rc) out("post %llu: %d", static_cast<unsigned long long>(id), rc);
  }
  collect(scq, got, 3, 20000);
  collect_extra(scq, got, 200);
  out("behind it: %s", describe(got).c_str());
  out("target: %016llx", static_cast<unsigned long long>(fnv(p.dst, p.dst_len)));
  out("states: sender %s, responder %s", qp_state(p.s), qp_state(p.r));
  return 0;
}
