// notify_queued: ibv_req_notify_cq right after posting a write whose completion is still to come: the
// completion channel's fd wakes (poll(2) with a timeout) and the completion is there.
//
//   sem_notify_queued [ROUNDS]
//
// A send CQ with a completion channel. Round r ("post, arm, wait"): a signaled 4 MiB
// write is posted (the NIC usually takes long enough that its completion comes after the
// arming that follows; when it does not, rxe fires no event either, and semantics.sh runs
// the program again), the CQ is armed, and the program waits on the channel's fd (5 s); then
// takes the event if any and polls. A path that completes the write before the post
// returns must still wake an armed waiter for a completion it has queued. Then ("arm,
// post, wait") the usual order, with a 64 B write. Printed per round: event or not, the
// completions.
#include <poll.h>

#include <cstring>

#include "fixture.hpp"

using namespace sem;

namespace {

constexpr size_t kBig = 4 << 20;

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 3;
  Env e = open_env();
  ibv_comp_channel* ch = ibv_create_comp_channel(e.ctx);
  if (!ch) die("ibv_create_comp_channel");
  ibv_cq* cq = make_cq(e, 16, ch);
  ibv_cq* rcq = make_cq(e, 16);
  Pair p = make_pair(e, cq, rcq, kBig, kBig);
  watchdog(90, "notify_queued did not finish");
  unsigned events = 0;
  auto wait_event = [&](int ms) -> bool {
    pollfd pf{ch->fd, POLLIN, 0};
    if (::poll(&pf, 1, ms) != 1) return false;
    ibv_cq* ecq;
    void* ectx;
    if (ibv_get_cq_event(ch, &ecq, &ectx)) die("ibv_get_cq_event");
    ++events;
    return ecq == cq;
  };
  auto round = [&](const char* name, int r, bool arm_first, uint32_t len) {
    fill(p.src, len, 300u + static_cast<unsigned>(r));
    if (arm_first && ibv_req_notify_cq(cq, 0)) die("ibv_req_notify_cq");
    const int rc = post_write(p.s, static_cast<uint64_t>(r), p.src, len, p.smr->lkey,
                              reinterpret_cast<uintptr_t>(p.dst), p.dmr->rkey, IBV_SEND_SIGNALED);
    if (!arm_first && ibv_req_notify_cq(cq, 0)) die("ibv_req_notify_cq");
    const bool ev = wait_event(5000);
    std::vector<ibv_wc> wcs;
    collect(cq, wcs, rc ? 0 : 1, 10000);
    collect_extra(cq, wcs, 20);
    out("%s round %d (%u B): post_rc %d, event %s, completions %s, target %s", name, r, len, rc,
        ev ? "yes" : "NONE within 5 s", describe(wcs).c_str(),
        std::memcmp(p.dst, p.src, len) == 0 ? "right" : "WRONG");
  };
  for (int r = 0; r < rounds; ++r) round("post, arm, wait:", r, false, kBig);
  for (int r = 0; r < rounds; ++r) round("arm, post, wait:", 100 + r, true, 64);
  ibv_ack_cq_events(cq, events);
  out("qp %s/%s", qp_state(p.s), qp_state(p.r));
  return 0;
}
