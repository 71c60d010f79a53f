// cq_room: a send queue and CQ sized exactly to what the program keeps outstanding (15), unsignaled requests
// with a signaled one every 5th: requests the shim adds must not overflow them.
//
//   sem_cq_room plain|ex [REQUESTS]
//   sem_cq_room channel [ROUNDS]
//
// max_send_wr 15 and a send CQ of 15 (rxe sizes both exactly at 2^n - 1); ex: the CQ is
// an ibv_cq_ex (with qp_num and byte_len) polled with start_poll/end_poll. The stream (600 requests) mixes
// 8-byte RDMA READs (every 3rd request: only the NIC executes them) with 64 B writes, so a CPU write often
// follows a NIC request still in flight. Request i is signaled when i % 5 == 4 (and the last); at most 15
// requests are outstanding, counted as verbs counts them (a signaled completion frees itself and everything
// before it). Printed: the first failed post (index, value), completions (count, exact and in order,
// statuses), the target and read-back buffers.
//
// channel: the send CQ (15) has a completion channel. Each round the program arms the
// CQ, posts a signaled 64 B write, waits for the event (poll(2) on the fd, 5 s), takes
// the write's completion with ibv_poll_cq(cq, 1, ...), then posts 15 signaled 8-byte
// READs at once and polls them: the CQ (and the send queue) are empty as far as verbs
// counts, so all 15 fit. A completion the shim asked for to make the event fire must
// not take their room.
#include <poll.h>
#include <sched.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "fixture.hpp"

using namespace sem;

namespace {

constexpr uint32_t kDepth = 15;
constexpr uint32_t kLen = 64;

std::string g_where = "setting up";
std::string where() {
  return g_where;
}

int channel(Env& e, int rounds) {
  ibv_comp_channel* ch = ibv_create_comp_channel(e.ctx);
  if (!ch) die("ibv_create_comp_channel");
  ibv_cq* cq = make_cq(e, kDepth, ch);
  ibv_cq* rcq = make_cq(e, 16);
  QpCaps caps;
  caps.send_wr = kDepth;
  Pair p = make_pair(e, cq, rcq, static_cast<size_t>(rounds) * kLen,
                     static_cast<size_t>(rounds) * kLen + kDepth * 8, caps);
  uint8_t* back = alloc(kDepth * 8);
  ibv_mr* bmr = reg(e, back, kDepth * 8, IBV_ACCESS_LOCAL_WRITE);
  fill(p.src, p.src_len, 8);
  watchdog(15, "cq_room channel did not finish", where);
  unsigned events = 0;
  int no_event = 0, post_fail = 0, short_rounds = 0, bad = 0;
  std::string first_fail;
  for (int r = 0; r < rounds; ++r) {
    const uint64_t base = 1000u * static_cast<unsigned>(r);
    if (ibv_req_notify_cq(cq, 0)) die("ibv_req_notify_cq");
    g_where = "round " + std::to_string(r) + ": in ibv_post_send of the write";
    int rc = post_write(p.s, base, p.src + r * kLen, kLen, p.smr->lkey,
                        reinterpret_cast<uintptr_t>(p.dst + r * kLen), p.dmr->rkey, IBV_SEND_SIGNALED);
    if (rc) {
      errno = rc;
      die("ibv_post_send");
    }
    g_where = "round " + std::to_string(r) + ": after the write";
    pollfd pf{ch->fd, POLLIN, 0};
    if (::poll(&pf, 1, 5000) == 1) {
      ibv_cq* ecq;
      void* ectx;
      if (ibv_get_cq_event(ch, &ecq, &ectx)) die("ibv_get_cq_event");
      ++events;
    } else {
      ++no_event;
    }
    std::vector<ibv_wc> wcs;
    collect(cq, wcs, 1, 5000, 1);
    // 15 READs at once, all signaled: the program's whole send queue and CQ.
    ibv_sge sg[kDepth];
    ibv_send_wr wr[kDepth], *badwr = nullptr;
    for (uint32_t i = 0; i < kDepth; ++i) {
      sg[i] = {reinterpret_cast<uintptr_t>(back + i * 8), 8, bmr->lkey};
      wr[i] = {};
      wr[i].wr_id = base + 1 + i;
      wr[i].opcode = IBV_WR_RDMA_READ;
      wr[i].sg_list = &sg[i];
      wr[i].num_sge = 1;
      wr[i].send_flags = IBV_SEND_SIGNALED;
      wr[i].wr.rdma.remote_addr =
          reinterpret_cast<uintptr_t>(p.dst + static_cast<size_t>(rounds) * kLen + i * 8);
      wr[i].wr.rdma.rkey = p.dmr->rkey;
      wr[i].next = i + 1 < kDepth ? &wr[i + 1] : nullptr;
    }
    g_where = "round " + std::to_string(r) + ": in ibv_post_send of the READs";
    rc = ibv_post_send(p.s, wr, &badwr);
    g_where = "round " + std::to_string(r) + ": after the READs";
    size_t posted = kDepth;
    if (rc) {
      posted = static_cast<size_t>(badwr - wr);
      if (!post_fail++)
        first_fail =
            "round " + std::to_string(r) + ": " + std::strerror(rc) + " at READ " + std::to_string(posted);
    }
    collect(cq, wcs, 1 + posted, 5000, 4);
    collect_extra(cq, wcs, 5);
    bool wrong = false;
    for (size_t i = 0; i < wcs.size(); ++i)
      if (wcs[i].wr_id != base + i || wcs[i].status != IBV_WC_SUCCESS) wrong = true;
    if (wcs.size() != 1 + posted) ++short_rounds;
    if (wrong) ++bad;
    if ((wrong || wcs.size() != 1 + kDepth) && short_rounds + bad + post_fail <= 3)
      out("round %d (not as it should be): READs posted %zu, completions %s", r, posted,
          describe(wcs).c_str());
    if (short_rounds > 2) break;  // the CQ lost completions: no point going on
  }
  ibv_ack_cq_events(cq, events);
  out("cq_room channel: %d rounds of (arm, 64 B write, event, poll 1, 15 READs at once), send queue and CQ "
      "of %u",
      rounds, kDepth);
  out("rounds without an event %d; READ lists refused %d%s%s", no_event, post_fail,
      post_fail ? "; first: " : "", first_fail.c_str());
  out("rounds with completions missing %d, with completions out of order or failed %d", short_rounds, bad);
  out("writes' target %s; qp %s/%s",
      std::memcmp(p.dst, p.src, static_cast<size_t>(rounds) * kLen) == 0 ? "right" : "WRONG", qp_state(p.s),
      qp_state(p.r));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string kind = argc > 1 ? argv[1] : "plain";
  const uint64_t total = argc > 2 ? std::strtoull(argv[2], nullptr, 0) : 600;
  if (kind != "plain" && kind != "ex" && kind != "channel") return 2;
  Env e = open_env();
  if (kind == "channel") return channel(e, argc > 2 ? std::atoi(argv[2]) : 20);
  ibv_cq* cq = nullptr;
  ibv_cq_ex* cqx = nullptr;
  if (kind == "ex") {
    ibv_cq_init_attr_ex ca{};
    ca.cqe = kDepth;
    ca.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_QP_NUM;
    cqx = ibv_create_cq_ex(e.ctx, &ca);
    if (!cqx) die("ibv_create_cq_ex");
    cq = ibv_cq_ex_to_cq(cqx);
  } else {
    cq = make_cq(e, kDepth);
  }
  ibv_cq* rcq = make_cq(e, 16);
  QpCaps caps;
  caps.send_wr = kDepth;
  Pair p = make_pair(e, cq, rcq, total * kLen, total * kLen, caps);
  uint8_t* back = alloc(total * 8);  // where the READs land
  ibv_mr* bmr = reg(e, back, total * 8, IBV_ACCESS_LOCAL_WRITE);
  fill(p.src, p.src_len, 5);
  fill(p.dst, p.dst_len, 6);  // the READs read what the target held before any write
  std::vector<uint8_t> before(p.dst, p.dst + p.dst_len);
  watchdog(60, "cq_room did not finish");

  auto is_read = [](uint64_t i) { return i % 3 == 2; };
  auto signaled = [&](uint64_t i) { return i % 5 == 4 || i + 1 == total; };
  uint64_t completed = 0;  // every request below it is complete
  uint64_t got = 0, inexact = 0, errors = 0;
  uint64_t expect = 0;  // the next signaled request whose completion is due
  while (!signaled(expect)) ++expect;
  auto take_one = [&]() -> bool {
    uint64_t wr_id;
    ibv_wc_status st;
    if (cqx) {
      ibv_poll_cq_attr pa{};
      const int rc = ibv_start_poll(cqx, &pa);
      if (rc == ENOENT) return false;
      if (rc) {
        errno = rc;
        die("ibv_start_poll");
      }
      wr_id = cqx->wr_id;
      st = cqx->status;
      ibv_end_poll(cqx);  // one completion per sequence: rxe (rdma-core 44) needs it
    } else {
      ibv_wc wc;
      const int n = ibv_poll_cq(cq, 1, &wc);
      if (n < 0) die("ibv_poll_cq");
      if (n == 0) return false;
      wr_id = wc.wr_id;
      st = wc.status;
    }
    ++got;
    if (st != IBV_WC_SUCCESS) ++errors;
    if (wr_id != expect) ++inexact;
    if (wr_id < total) completed = std::max(completed, wr_id + 1);
    do ++expect;
    while (expect < total && !signaled(expect));
    return true;
  };
  int fail_rc = 0;
  uint64_t fail_at = total;
  for (uint64_t i = 0; i < total; ++i) {
    const uint64_t deadline = now_ms() + 5000;
    while (i >= completed + kDepth) {
      if (!take_one()) {
        if (now_ms() > deadline) break;
        sched_yield();
      }
    }
    if (i >= completed + kDepth) {
      fail_at = i;
      fail_rc = -1;
      break;
    }  // completions stopped coming
    ibv_send_wr wr{}, *bad = nullptr;
    ibv_sge sg;
    wr.wr_id = i;
    wr.send_flags = signaled(i) ? IBV_SEND_SIGNALED : 0;
    wr.sg_list = &sg;
    wr.num_sge = 1;
    wr.wr.rdma.rkey = p.dmr->rkey;
    if (is_read(i)) {
      sg = {reinterpret_cast<uintptr_t>(back + i * 8), 8, bmr->lkey};
      wr.opcode = IBV_WR_RDMA_READ;
      wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(p.dst + i * kLen);  // not written by anyone
    } else {
      sg = {reinterpret_cast<uintptr_t>(p.src + i * kLen), kLen, p.smr->lkey};
      wr.opcode = IBV_WR_RDMA_WRITE;
      wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(p.dst + i * kLen);
    }
    const int rc = ibv_post_send(p.s, &wr, &bad);
    if (rc) {
      fail_rc = rc;
      fail_at = i;
      break;
    }
    while (take_one()) {
    }
  }
  const uint64_t posted = fail_at;
  uint64_t want = 0;
  for (uint64_t i = 0; i < posted; ++i) want += signaled(i);
  const uint64_t deadline = now_ms() + 5000;
  while (got < want && now_ms() < deadline)
    if (!take_one()) sleep_ms(1);
  const uint64_t extra_end = now_ms() + 50;
  while (now_ms() < extra_end) take_one();
  uint64_t wrong = 0, wrong_reads = 0;
  for (uint64_t i = 0; i < posted; ++i) {
    if (is_read(i)) {
      if (std::memcmp(back + i * 8, before.data() + i * kLen, 8) != 0) ++wrong_reads;
    } else if (std::memcmp(p.dst + i * kLen, p.src + i * kLen, kLen) != 0) {
      ++wrong;
    }
  }
  out("cq_room %s: requests %llu, send queue and CQ of %u, a signaled request every 5th", kind.c_str(),
      static_cast<unsigned long long>(total), kDepth);
  if (fail_rc > 0)
    out("post failed at request %llu: %s", static_cast<unsigned long long>(fail_at), std::strerror(fail_rc));
  else if (fail_rc < 0)
    out("completions stopped at request %llu", static_cast<unsigned long long>(fail_at));
  else
    out("every request posted");
  out("completions %llu of %llu due, out of order or unexpected %llu, error statuses %llu",
      static_cast<unsigned long long>(got), static_cast<unsigned long long>(want),
      static_cast<unsigned long long>(inexact), static_cast<unsigned long long>(errors));
  out("writes whose target is wrong %llu, reads whose data is wrong %llu; qp %s/%s",
      static_cast<unsigned long long>(wrong), static_cast<unsigned long long>(wrong_reads), qp_state(p.s),
      qp_state(p.r));
  return 0;
}
