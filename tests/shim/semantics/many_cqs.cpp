// many_cqs: with more CQs than the shim records, an RC pair on the last ones still posts,
// completes and places every write (the shim passes what it cannot track to the NIC).
//
//   sem_many_cqs N
//
// N CQs are created first (the device's limit, when lower, is printed as a skip); the
// pair's send and receive CQs are the last two. 300 signaled 64-byte writes, one at a
// time, each polled before the next.
#include <cstdlib>
#include <cstring>

#include "fixture.hpp"

using namespace sem;

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 5000;
  if (n < 2) die("N must be at least 2");
  Env e = open_env();
  ibv_device_attr da{};
  if (ibv_query_device(e.ctx, &da)) die("ibv_query_device");
  if (da.max_cq < n) skip("the device allows fewer CQs than asked");
  std::vector<ibv_cq*> cqs;
  for (int i = 0; i < n - 2; ++i) cqs.push_back(make_cq(e, 1));
  ibv_cq* scq = make_cq(e, 16);
  ibv_cq* rcq = make_cq(e, 16);
  constexpr uint32_t kLen = 64, kWrites = 300;
  Pair p = make_pair(e, scq, rcq, kLen * kWrites, kLen * kWrites);
  fill(p.src, p.src_len, 5);
  watchdog(120, "many_cqs did not finish");

  int failed_post = -1;
  std::vector<ibv_wc> wcs;
  for (uint32_t i = 0; i < kWrites; ++i) {
    if (post_write(p.s, i, p.src + i * kLen, kLen, p.smr->lkey, reinterpret_cast<uintptr_t>(p.dst + i * kLen),
                   p.dmr->rkey, IBV_SEND_SIGNALED)) {
      failed_post = static_cast<int>(i);
      break;
    }
    collect(scq, wcs, i + 1, 10000);
  }
  collect_extra(scq, wcs, 20);
  bool exact = wcs.size() == kWrites;
  for (size_t i = 0; exact && i < wcs.size(); ++i)
    exact = wcs[i].wr_id == i && wcs[i].status == IBV_WC_SUCCESS;
  out("%d CQs; first failed post: %d; %zu completions, %s", n, failed_post, wcs.size(),
      exact ? "exact" : "NOT EXACT");
  out("target %s; qp %s/%s", std::memcmp(p.dst, p.src, p.src_len) == 0 ? "right" : "WRONG", qp_state(p.s),
      qp_state(p.r));
  return 0;
}
