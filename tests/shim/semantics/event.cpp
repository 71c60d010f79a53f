// event: a send CQ with a completion channel, waited on as ibv_rc_pingpong -e does (post, sleep on the
// channel, then re-arm and poll): every signaled completion wakes the waiter; events acknowledged exactly
// (ibv_destroy_cq returns).
//
//   sem_event block|fd [WRITES] [LEN]
//
// Random writes (1 B to 512 B, or all LEN bytes: a stream of one shape, which the express
// lane takes) on one pair, every 3rd signaled (and the last). After each
// signaled one the program waits for its completion: block sleeps in ibv_get_cq_event; fd
// first waits with poll(2) on the channel's fd (10 s). Then it re-arms and polls. A lost
// wake-up is "lost wake-up" (fd) or the watchdog (block). At the end it acknowledges
// every event and destroys the QP and the CQ (which waits for the acknowledgements).
// Printed: the writes, wake-ups (every one, or where one was lost), the completions, the
// target, the destroy calls' values.
#include <poll.h>

#include <cstring>
#include <random>

#include "fixture.hpp"

using namespace sem;

namespace {

constexpr uint32_t kDepth = 32, kMaxLen = 512;

// Write k of a random stream: random length (or `len`) and offset, payload from slot k,
// mirrored in `shadow`.
int post_random(Pair& p, std::vector<uint8_t>& shadow, std::mt19937_64& rng, uint64_t k, bool sig,
                uint32_t len) {
  uint8_t* s = p.src + (k % kDepth) * kMaxLen;
  RandomWrite w = random_write(rng, 64, kMaxLen, s, shadow);
  if (len != 0) {
    w.len = len;
    w.off = rng() % (shadow.size() - len);
    for (uint32_t i = 0; i < len; ++i) s[i] = static_cast<uint8_t>(rng());
    std::memcpy(&shadow[w.off], s, len);
  }
  return post_write(p.s, k, s, w.len, p.smr->lkey, reinterpret_cast<uintptr_t>(p.dst + w.off), p.dmr->rkey,
                    sig ? IBV_SEND_SIGNALED : 0);
}

}  // namespace

int main(int argc, char** argv) {
  const bool use_fd = argc > 1 && std::string(argv[1]) == "fd";
  const uint64_t writes = argc > 2 ? std::strtoull(argv[2], nullptr, 0) : 300;
  const uint32_t len = argc > 3 ? static_cast<uint32_t>(std::strtoul(argv[3], nullptr, 0)) : 0;
  if (len > kMaxLen) die("LEN is at most 512", 0);
  Env e = open_env();
  ibv_comp_channel* ch = ibv_create_comp_channel(e.ctx);
  if (!ch) die("ibv_create_comp_channel");
  ibv_cq* cq = make_cq(e, kDepth, ch);
  ibv_cq* rcq = make_cq(e, 16);
  QpCaps caps;
  caps.send_wr = kDepth;
  Pair p = make_pair(e, cq, rcq, size_t{kDepth} * kMaxLen, 1 << 16, caps);
  std::vector<uint8_t> shadow(p.dst_len, 0);
  std::mt19937_64 rng(5);
  if (ibv_req_notify_cq(cq, 0)) die("ibv_req_notify_cq");
  unsigned events = 0;
  uint64_t bad = 0, lost_at = ~0ull;
  for (uint64_t k = 0; k < writes && lost_at == ~0ull; ++k) {
    const bool s = k % 3 == 2 || k + 1 == writes;
    if (int rc = post_random(p, shadow, rng, k, s, len)) {
      errno = rc;
      die("ibv_post_send");
    }
    if (!s) continue;
    for (bool found = false; !found;) {
      if (use_fd) {
        pollfd pf{ch->fd, POLLIN, 0};
        if (::poll(&pf, 1, 10000) != 1) {
          lost_at = k;
          break;
        }
      } else {
        watchdog(20, "event: lost wake-up: ibv_get_cq_event slept 20 s");
      }
      ibv_cq* ecq;
      void* ectx;
      if (ibv_get_cq_event(ch, &ecq, &ectx)) die("ibv_get_cq_event");
      stop_watchdogs();
      if (ecq != cq) ++bad;
      ++events;
      if (ibv_req_notify_cq(cq, 0)) die("ibv_req_notify_cq");
      ibv_wc wc[4];
      int n;
      while ((n = ibv_poll_cq(cq, 4, wc)) > 0)
        for (int i = 0; i < n; ++i) {
          if (wc[i].status != IBV_WC_SUCCESS || wc[i].wr_id != k || found || wc[i].qp_num != p.s->qp_num ||
              wc[i].opcode != IBV_WC_RDMA_WRITE)
            ++bad;
          found = true;
        }
      if (n < 0) die("ibv_poll_cq");
    }
  }
  ibv_ack_cq_events(cq, events);
  const bool right = std::memcmp(p.dst, shadow.data(), p.dst_len) == 0;
  // ibv_destroy_cq waits for every event to be acknowledged: exact accounting or a hang.
  watchdog(20, "event: ibv_destroy_cq did not return (events not acknowledged exactly)");
  const int dq = ibv_destroy_qp(p.s);
  const int dc = ibv_destroy_cq(cq);
  stop_watchdogs();
  out("event (%s): %llu writes, every 3rd signaled",
      use_fd ? "poll(2) on the channel fd" : "ibv_get_cq_event", static_cast<unsigned long long>(writes));
  out("wake-ups: %s", lost_at == ~0ull ? "one at least per signaled write"
                                       : ("LOST at write " + std::to_string(lost_at)).c_str());
  out("completions: bad %llu, events > 0: %s", static_cast<unsigned long long>(bad), events ? "yes" : "NO");
  out("target %s", lost_at != ~0ull ? "not checked" : right ? "right" : "WRONG");
  out("destroy qp %d, destroy cq %d", dq, dc);
  return 0;
}
