// cqex_many: one ibv_cq_ex send CQ shared by 12 QPs (more than 8), polled with start_poll/next_poll/end_poll;
// completions exact per QP, targets right.
//
//   sem_cqex_many [QPS] [WRITES_PER_QP] [noqpnum]
//
// The CQ asks for IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_BYTE_LEN (noqpnum: BYTE_LEN only;
// a program need not ask for the QP number, and rxe then gives no read_qp_num).
// Writes are posted round-robin over the QPs, every 2nd signaled (and each QP's last), at
// most 16 outstanding per QP. A completion is attributed by its wr_id (QP index << 32 |
// write index; rxe in rdma-core 44 reads qp_num back as 0). Printed per QP: signaled
// completions exact and in order, the target; and completions whose wr_id was never posted.
#include <sched.h>

#include <cerrno>
#include <cstring>

#include "fixture.hpp"

using namespace sem;

namespace {

constexpr uint32_t kLen = 64;
constexpr uint64_t kOut = 16;

}  // namespace

int main(int argc, char** argv) {
  const int nqps = argc > 1 ? std::atoi(argv[1]) : 12;
  const uint64_t writes = argc > 2 ? std::strtoull(argv[2], nullptr, 0) : 96;
  const bool qpnum = !(argc > 3 && std::string(argv[3]) == "noqpnum");
  Env e = open_env();
  ibv_cq_init_attr_ex ca{};
  ca.cqe = static_cast<uint32_t>(nqps) * kOut;
  ca.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | (qpnum ? IBV_WC_EX_WITH_QP_NUM : 0);
  ibv_cq_ex* cqx = ibv_create_cq_ex(e.ctx, &ca);
  if (!cqx) die("ibv_create_cq_ex");
  ibv_cq* cq = ibv_cq_ex_to_cq(cqx);
  ibv_cq* rcq = make_cq(e, 16);
  QpCaps caps;
  caps.send_wr = kOut;
  std::vector<Pair> p;
  for (int q = 0; q < nqps; ++q) {
    p.push_back(make_pair(e, cq, rcq, writes * kLen, writes * kLen, caps));
    fill(p.back().src, writes * kLen, static_cast<uint64_t>(q) + 77);
  }
  watchdog(60, "cqex_many did not finish");
  auto signaled = [&](uint64_t k) { return k % 2 == 1 || k + 1 == writes; };
  std::vector<uint64_t> completed(static_cast<size_t>(nqps), 0), expect(static_cast<size_t>(nqps), 0),
      got(static_cast<size_t>(nqps), 0), inexact(static_cast<size_t>(nqps), 0);
  for (auto& x : expect)
    while (!signaled(x)) ++x;
  uint64_t unknown = 0, errors = 0, total = 0;
  auto take_one = [&]() -> bool {
    ibv_poll_cq_attr pa{};
    const int rc = ibv_start_poll(cqx, &pa);
    if (rc == ENOENT) return false;
    if (rc) {
      errno = rc;
      die("ibv_start_poll");
    }
    const uint64_t wr_id = cqx->wr_id;
    const ibv_wc_status st = cqx->status;
    ibv_end_poll(cqx);  // one completion per sequence: rxe (rdma-core 44) needs it
    ++total;
    const uint64_t q = wr_id >> 32, k = wr_id & 0xffffffffu;
    if (q >= static_cast<uint64_t>(nqps) || k >= writes) {
      ++unknown;
      return true;
    }
    if (st != IBV_WC_SUCCESS) ++errors;
    got[q]++;
    if (k != expect[q]) inexact[q]++;
    completed[q] = std::max(completed[q], k + 1);
    do ++expect[q];
    while (expect[q] < writes && !signaled(expect[q]));
    return true;
  };
  bool stuck = false;
  for (uint64_t k = 0; k < writes && !stuck; ++k)
    for (int q = 0; q < nqps && !stuck; ++q) {
      const uint64_t deadline = now_ms() + 3000;
      while (k >= completed[static_cast<size_t>(q)] + kOut && !stuck)
        if (!take_one()) {
          if (now_ms() > deadline) stuck = true;
          sched_yield();
        }
      if (stuck) break;
      Pair& x = p[static_cast<size_t>(q)];
      const int rc = post_write(x.s, (uint64_t(q) << 32) | k, x.src + k * kLen, kLen, x.smr->lkey,
                                reinterpret_cast<uintptr_t>(x.dst + k * kLen), x.dmr->rkey,
                                signaled(k) ? IBV_SEND_SIGNALED : 0);
      if (rc) {
        errno = rc;
        die("ibv_post_send");
      }
      while (take_one()) {
      }
    }
  uint64_t want = 0;
  for (uint64_t k = 0; k < writes; ++k) want += signaled(k);
  const uint64_t deadline = now_ms() + 3000;
  auto all = [&] {
    for (int q = 0; q < nqps; ++q)
      if (got[static_cast<size_t>(q)] < want) return false;
    return true;
  };
  while (!stuck && !all() && now_ms() < deadline)
    if (!take_one()) sleep_ms(1);
  const uint64_t extra_end = now_ms() + 50;
  while (now_ms() < extra_end) take_one();
  out("cqex_many: %d QPs on one ibv_cq_ex (%s), %llu writes each, %llu signaled each%s", nqps,
      qpnum ? "with qp_num" : "without qp_num", static_cast<unsigned long long>(writes),
      static_cast<unsigned long long>(want), stuck ? "; STUCK: completions stopped coming" : "");
  out("completions with a wr_id never posted %llu, error statuses %llu",
      static_cast<unsigned long long>(unknown), static_cast<unsigned long long>(errors));
  for (int q = 0; q < nqps; ++q) {
    const size_t i = static_cast<size_t>(q);
    const bool exact = got[i] == want && inexact[i] == 0;
    const bool data = std::memcmp(p[i].dst, p[i].src, writes * kLen) == 0;
    out("qp %2d: completions %s, target %s", q,
        exact ? "exact"
              : ("NOT EXACT (" + std::to_string(got[i]) + " of " + std::to_string(want) + ")").c_str(),
        data ? "right" : "WRONG");
  }
  return 0;
}
