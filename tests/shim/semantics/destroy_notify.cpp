// destroy_notify: ibv_destroy_qp racing ibv_req_notify_cq on the QP's send CQ from another thread, round
// after round: no crash, no hang, no tag of the shim's reaching the program.
//
//   sem_destroy_notify [ROUNDS]
//
// One send CQ with a completion channel, one set of buffers. Each round makes an RC pair,
// posts a signaled write on its sender (not polled: under the shim a direct write's
// completion is queued, so each arming asks for a wake-up marker on a QP of the CQ), and
// destroys the pair while a thread arms the CQ over and over. The CQ is polled after each
// round. Printed: the rounds, the verbs that failed, and the completions whose wr_id is not
// a round's (a tag of the shim's) or whose status is neither SUCCESS nor WR_FLUSH_ERR.
#include <atomic>
#include <thread>

#include "fixture.hpp"

using namespace sem;

namespace {

std::atomic<uint64_t> g_rounds{0};
constexpr uint64_t kBase = 1'000'000;

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 1000;
  Env e = open_env();
  ibv_comp_channel* ch = ibv_create_comp_channel(e.ctx);
  if (!ch) die("ibv_create_comp_channel");
  ibv_cq* cq = make_cq(e, 64, ch);
  ibv_cq* rcq = make_cq(e, 64);
  uint8_t* src = alloc(4096);
  uint8_t* dst = alloc(4096);
  ibv_mr* smr = reg(e, src, 4096, IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* dmr = reg(e, dst, 4096, kRemote);
  stall_watchdog(60, "destroy_notify made no progress", [] { return g_rounds.load(); });
  int destroy_failed = 0, post_failed = 0, strange = 0;
  std::atomic<int> notify_failed{0};
  for (int r = 0; r < rounds; ++r) {
    ibv_qp* s = make_qp(e, cq, rcq);
    ibv_qp* d = make_qp(e, rcq, rcq);
    connect_pair(e, s, d);
    fill(src, 64, static_cast<uint64_t>(r));
    if (post_write(s, kBase + static_cast<uint64_t>(r), src, 64, smr->lkey, reinterpret_cast<uintptr_t>(dst),
                   dmr->rkey, IBV_SEND_SIGNALED))
      ++post_failed;
    std::atomic<bool> stop{false};
    std::thread armer([&] {
      while (!stop.load(std::memory_order_relaxed))
        if (ibv_req_notify_cq(cq, 0)) notify_failed.fetch_add(1);
    });
    if (ibv_destroy_qp(s)) ++destroy_failed;
    stop.store(true);
    armer.join();
    if (ibv_destroy_qp(d)) ++destroy_failed;
    std::vector<ibv_wc> wcs;
    collect_extra(cq, wcs, 1);
    for (const ibv_wc& wc : wcs)
      if (wc.wr_id < kBase || wc.wr_id >= kBase + static_cast<uint64_t>(rounds) ||
          (wc.status != IBV_WC_SUCCESS && wc.status != IBV_WC_WR_FLUSH_ERR))
        ++strange;
    g_rounds.fetch_add(1);
  }
  stop_watchdogs();
  out("rounds %llu: post failed %d, destroy failed %d, notify failed %d, strange completions %d",
      static_cast<unsigned long long>(g_rounds.load()), post_failed, destroy_failed, notify_failed.load(),
      strange);
  return 0;
}
