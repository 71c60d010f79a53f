// peer_gone: the responder's target goes away after a write whose completion the program has not polled;
// the program arms the CQ, waits on the channel and writes there again: it sees the NIC's
// status for that write, whatever request of the shim's met the stale target first.
//
//   sem_peer_gone [killed]
//
// Under the shim a direct write's completion is queued, so the arming posts a hidden
// wake-up marker to the write's target. Were the marker refused (RETRY_EXC_ERR from a dead
// peer, a NAK), the program's next write would be flushed by the NIC and must carry the
// cause (the merger does; host test MergeCarryRxeCannotFailAMarker). rxe cannot make that
// happen: a dead peer's requests retry there for ever (QP destroyed or in ERR: no completion
// in 20 s, with or without the shim), and a zero-length write's rkey is not checked. So the
// target's MR is deregistered: the marker passes, the second write gets REM_ACCESS_ERR from
// the NIC in every run. The wait on the channel (1 s) is not printed (rxe fires no event for
// a completion already in the CQ; the marker's completion does). Printed: the completions
// of both writes and the sender's state. `killed` is the case as a program meets it: the
// responder QP goes (as at its process's exit) instead of the MR; where the NIC never
// completes the second write (rxe 6.1 and 6.12), that is a skip, not a pass.
#include <poll.h>

#include <string>

#include "fixture.hpp"

using namespace sem;

int main(int argc, char** argv) {
  const bool killed = argc > 1 && std::string(argv[1]) == "killed";
  Env e = open_env();
  ibv_comp_channel* ch = ibv_create_comp_channel(e.ctx);
  if (!ch) die("ibv_create_comp_channel");
  ibv_cq* cq = make_cq(e, 16, ch);
  ibv_cq* rcq = make_cq(e, 16);
  Pair p = make_pair(e, cq, rcq, 4096, 4096);
  watchdog(60, "peer_gone did not finish");
  fill(p.src, 4096, 5);
  const uintptr_t dst = reinterpret_cast<uintptr_t>(p.dst);
  if (post_write(p.s, 1, p.src, 64, p.smr->lkey, dst, p.dmr->rkey, IBV_SEND_SIGNALED)) die("ibv_post_send 1");
  // The first write is done at the responder before it goes: its bytes are there.
  const uint64_t end = now_ms() + 5000;
  while (p.dst[63] != p.src[63] && now_ms() < end) sleep_ms(1);
  sleep_ms(50);  // and its ACK back (rxe; not polled: the completion stays queued)
  const uint32_t rkey = p.dmr->rkey;
  if (killed ? ibv_destroy_qp(p.r) != 0 : ibv_dereg_mr(p.dmr) != 0) die("take the target away");
  if (ibv_req_notify_cq(cq, 0)) die("ibv_req_notify_cq");
  pollfd pf{ch->fd, POLLIN, 0};
  unsigned events = 0;
  if (::poll(&pf, 1, 1000) == 1) {
    ibv_cq* ecq;
    void* ectx;
    if (ibv_get_cq_event(ch, &ecq, &ectx)) die("ibv_get_cq_event");
    ++events;
  }
  std::vector<ibv_wc> wcs;
  collect(cq, wcs, 1, 5000);
  out("first write: %s", describe(wcs).c_str());
  wcs.clear();
  const int rc = post_write(p.s, 2, p.src + 64, 64, p.smr->lkey, dst + 64, rkey, IBV_SEND_SIGNALED);
  collect(cq, wcs, rc ? 0 : 1, killed ? 10000 : 20000);
  if (killed && rc == 0 && wcs.empty())
    skip(
        "the NIC never completed a write to a destroyed peer QP (no RETRY_EXC_ERR in 10 s); a refused "
        "marker's status is host test MergeCarryRxeCannotFailAMarker");
  collect_extra(cq, wcs, 50);
  out("second write: post_rc %d, %s", rc, describe(wcs).c_str());
  out("qp %s", qp_state(p.s));
  ibv_ack_cq_events(cq, events);
  return 0;
}
