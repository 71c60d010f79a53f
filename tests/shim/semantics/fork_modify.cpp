// fork_modify: a forked child moves its parent's responder QP to ERR; the parent's next write to it
// meets the QP as the NIC does.
//
//   sem_fork_modify
//
// The child holds the parent's verbs objects (the uverbs file is inherited) but not its
// module session, so the shim's registration of the QP is the parent's. One pair of the
// parent's; a signaled write, polled (under the shim a same-host pair goes direct, through
// a mapping of the target); fork; the child modifies the responder QP to ERR and exits;
// the parent writes again. rxe never completes a write to a responder in ERR (it retries
// for ever, peer_gone.cpp), so printed are: the first write's completion, the child's
// exit, the second write's completions within 2 s, whether its bytes reached the target,
// and both QPs' states.
#include <sys/wait.h>
#include <unistd.h>

#include "fixture.hpp"

using namespace sem;

int main() {
  Env e = open_env();
  ibv_cq* cq = make_cq(e, 16);
  ibv_cq* rcq = make_cq(e, 16);
  Pair p = make_pair(e, cq, rcq, 4096, 4096);
  watchdog(60, "fork_modify did not finish");
  fill(p.src, 4096, 7);
  const uintptr_t dst = reinterpret_cast<uintptr_t>(p.dst);
  std::vector<ibv_wc> wcs;
  if (post_write(p.s, 1, p.src, 64, p.smr->lkey, dst, p.dmr->rkey, IBV_SEND_SIGNALED)) die("ibv_post_send 1");
  collect(cq, wcs, 1, 5000);
  out("first write: %s", describe(wcs).c_str());

  const pid_t child = fork();
  if (child < 0) die("fork");
  if (child == 0) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_ERR;
    _exit(ibv_modify_qp(p.r, &a, IBV_QP_STATE) == 0 ? 0 : 1);
  }
  int st = 0;
  if (waitpid(child, &st, 0) != child) die("waitpid");
  out("child: %s", WIFEXITED(st) && WEXITSTATUS(st) == 0 ? "moved the responder to ERR" : "failed");

  if (post_write(p.s, 2, p.src + 1024, 64, p.smr->lkey, dst + 1024, p.dmr->rkey, IBV_SEND_SIGNALED))
    die("ibv_post_send 2");
  wcs.clear();
  collect(cq, wcs, 1, 2000);
  out("second write: %s", wcs.empty() ? "no completion in 2 s" : describe(wcs).c_str());
  out("second write's bytes at the target: %s", p.dst[1024 + 63] == p.src[1024 + 63] ? "placed" : "not placed");
  out("sender %s, responder %s", qp_state(p.s), qp_state(p.r));
  return 0;
}
