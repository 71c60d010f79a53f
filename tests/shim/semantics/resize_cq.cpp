// resize_cq: ibv_resize_cq on a send CQ in use, grown (then filled to its new size before polling) and
// shrunk; completions exact, target right.
//
//   sem_resize_cq
//
// The send CQ starts with 32 entries. Phase a: 64 signaled writes, at most 16 in flight.
// Then 16 writes are posted and the CQ is grown to 256 with them in flight. Phase b: 200
// signaled writes posted before any is polled (the grown CQ holds them). The CQ is shrunk
// to 64 (empty). Phase c: 48 writes posted, then polled. Printed per phase: ibv_resize_cq's
// value, whether the CQ has at least what was asked, and the completions (count, once
// each, in order, statuses).
#include <cstring>

#include "fixture.hpp"

using namespace sem;

namespace {

constexpr uint32_t kLen = 64;
constexpr uint64_t kTotal = 64 + 16 + 200 + 48;

struct Run {
  Pair* p;
  ibv_cq* cq;
  uint64_t next = 0;  // the next write's index (and wr_id)
  void post(uint64_t n) {
    for (uint64_t i = 0; i < n; ++i, ++next) {
      const int rc =
          post_write(p->s, next, p->src + next * kLen, kLen, p->smr->lkey,
                     reinterpret_cast<uintptr_t>(p->dst + next * kLen), p->dmr->rkey, IBV_SEND_SIGNALED);
      if (rc) {
        errno = rc;
        die("ibv_post_send");
      }
    }
  }
  // Collects n completions: "n completions: exact" when they are the next n wr_ids in order.
  std::string take(uint64_t n, uint64_t first) {
    std::vector<ibv_wc> wcs;
    collect(cq, wcs, n, 20000, 32);
    collect_extra(cq, wcs, 20);
    bool exact = wcs.size() == n;
    uint64_t errors = 0;
    for (size_t i = 0; i < wcs.size(); ++i) {
      if (wcs[i].wr_id != first + i) exact = false;
      if (wcs[i].status != IBV_WC_SUCCESS) ++errors;
    }
    return std::to_string(wcs.size()) + " completions, " + (exact ? "exact" : "NOT EXACT") +
           ", error statuses " + std::to_string(errors);
  }
};

}  // namespace

int main() {
  Env e = open_env();
  ibv_cq* cq = make_cq(e, 32);
  ibv_cq* rcq = make_cq(e, 16);
  QpCaps caps;
  caps.send_wr = 256;
  Pair p = make_pair(e, cq, rcq, kTotal * kLen, kTotal * kLen, caps);
  fill(p.src, p.src_len, 99);
  watchdog(60, "resize_cq did not finish");
  Run r{&p, cq};
  std::string a;
  for (int i = 0; i < 4; ++i) {
    const uint64_t first = r.next;
    r.post(16);
    a += (i ? "; " : "") + r.take(16, first);
  }
  out("phase a (cqe 32, 4 x 16 writes): %s", a.c_str());
  uint64_t first = r.next;
  r.post(16);
  int rc = ibv_resize_cq(cq, 256);
  out("grow to 256 with 16 writes in flight: rc %d, cqe >= 256 %s; %s", rc, cq->cqe >= 256 ? "yes" : "no",
      r.take(16, first).c_str());
  first = r.next;
  r.post(200);
  out("phase b (200 writes posted, then polled): %s", r.take(200, first).c_str());
  rc = ibv_resize_cq(cq, 64);
  out("shrink to 64 (empty): rc %d, cqe >= 64 %s", rc, cq->cqe >= 64 ? "yes" : "no");
  first = r.next;
  r.post(48);
  out("phase c (48 writes posted, then polled): %s", r.take(48, first).c_str());
  out("target %s; qp %s/%s", std::memcmp(p.dst, p.src, kTotal * kLen) == 0 ? "right" : "WRONG", qp_state(p.s),
      qp_state(p.r));
  return 0;
}
