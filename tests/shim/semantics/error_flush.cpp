// error_flush: after a request fails (bad rkey), later requests complete with WR_FLUSH_ERR and are never
// placed (canaries unchanged); QP states and the next request's status as the NIC has them.
//
//   sem_error_flush [race ROUNDS]
//
// Three cases, each on a fresh pair, each good write aimed at a canary slot of its own:
//   list      one ibv_post_send: good, BAD RKEY, good unsignaled, good, good
//   separate  BAD RKEY posted alone, then three good writes posted one by one at once
//   after     BAD RKEY posted alone; once its error completion was polled, a good write
// then ("next") one more good write once everything before it completed.
// race: ROUNDS times, each on a fresh pair of QPs, a write with a
// bad lkey (the local error leaves the responder in RTS), then at once a good write:
// the good one must be flushed, never placed, in every round.
// Printed: completions (wr_id:status in order), which canaries changed, both QP states.
#include <cstring>

#include "fixture.hpp"

using namespace sem;

namespace {

constexpr size_t kSlot = 64;
constexpr int kSlots = 16;

struct Case {
  Env* e;
  ibv_cq* cq;
  Pair p;
  std::vector<ibv_wc> wcs;
  int next_slot = 0;
  std::vector<int> slots_posted;
};

Case make_case(Env& e) {
  Case c;
  c.e = &e;
  c.cq = make_cq(e, 64);
  ibv_cq* rcq = make_cq(e, 16);
  c.p = make_pair(e, c.cq, rcq, kSlots * kSlot, kSlots * kSlot);
  std::memset(c.p.dst, 0xcc, kSlots * kSlot);  // the canaries
  for (int i = 0; i < kSlots; ++i) fill(c.p.src + i * kSlot, kSlot, 50u + static_cast<unsigned>(i));
  return c;
}

// A write of source slot i to target slot i; bad: with a wrong rkey.
ibv_send_wr make_wr(Case& c, ibv_sge* sg, uint64_t wr_id, int slot, bool bad_rkey, bool signaled) {
  *sg = {reinterpret_cast<uintptr_t>(c.p.src + slot * kSlot), kSlot, c.p.smr->lkey};
  ibv_send_wr w{};
  w.wr_id = wr_id;
  w.opcode = IBV_WR_RDMA_WRITE;
  w.sg_list = sg;
  w.num_sge = 1;
  w.send_flags = signaled ? IBV_SEND_SIGNALED : 0;
  w.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(c.p.dst + slot * kSlot);
  w.wr.rdma.rkey = bad_rkey ? c.p.dmr->rkey + 0x1000 : c.p.dmr->rkey;
  return w;
}

int post_one(Case& c, uint64_t wr_id, int slot, bool bad_rkey, bool signaled = true) {
  ibv_sge sg;
  ibv_send_wr w = make_wr(c, &sg, wr_id, slot, bad_rkey, signaled), *bad = nullptr;
  return ibv_post_send(c.p.s, &w, &bad);
}

std::string canaries(Case& c) {
  // Per slot: '.' untouched, 'W' holds its write's bytes, '?' anything else.
  std::string s;
  std::vector<uint8_t> cc(kSlot, 0xcc);
  for (int i = 0; i < kSlots; ++i) {
    const uint8_t* t = c.p.dst + i * kSlot;
    s += std::memcmp(t, cc.data(), kSlot) == 0             ? '.'
         : std::memcmp(t, c.p.src + i * kSlot, kSlot) == 0 ? 'W'
                                                           : '?';
  }
  return s;
}

void report(Case& c, const char* name, const std::string& posts) {
  out("%s: post_rcs %s", name, posts.c_str());
  out("%s: completions %s", name, describe(c.wcs).c_str());
  out("%s: target slots %s (slot 0 good-before-error, others after it; '.' untouched)", name,
      canaries(c).c_str());
  out("%s: qp %s/%s", name, qp_state(c.p.s), qp_state(c.p.r));
}

// One more good signaled write once everything before completed: its status.
void next_request(Case& c, const char* name, int slot) {
  const int rc = post_one(c, 900, slot, false);
  std::vector<ibv_wc> wcs;
  collect(c.cq, wcs, rc ? 0 : 1, 10000);
  collect_extra(c.cq, wcs, 50);
  out("%s: next request post_rc %d completions %s slot %d %s; qp %s/%s", name, rc, describe(wcs).c_str(),
      slot, canaries(c).substr(static_cast<size_t>(slot), 1) == "." ? "untouched" : "WRITTEN",
      qp_state(c.p.s), qp_state(c.p.r));
}

int race(Env& e, int rounds) {
  Case c = make_case(e);
  ibv_cq* rcq = make_cq(e, 16);
  int placed = 0;
  std::vector<std::pair<std::string, int>> kinds;  // completions of a round, and how often
  for (int i = 0; i < rounds; ++i) {
    if (i) {  // a fresh pair on the same buffers (a reset QP is not always accepted back by rxe 6.12)
      if (ibv_destroy_qp(c.p.s) || ibv_destroy_qp(c.p.r)) die("ibv_destroy_qp");
      c.p.s = make_qp(e, c.cq, rcq);
      c.p.r = make_qp(e, rcq, rcq);
      connect_pair(e, c.p.s, c.p.r);
    }
    std::memset(c.p.dst, 0xcc, kSlots * kSlot);
    ibv_sge sg;
    ibv_send_wr w = make_wr(c, &sg, 1, 0, false, true), *bad = nullptr;
    sg.lkey += 0x1000;  // bad lkey: a local protection error
    int rc = ibv_post_send(c.p.s, &w, &bad);
    rc |= post_one(c, 2, 1, false);
    c.wcs.clear();
    collect(c.cq, c.wcs, 2, 10000);
    const std::string d = "post_rc " + std::to_string(rc) + " completions " + describe(c.wcs);
    bool found = false;
    for (auto& k : kinds)
      if (k.first == d) {
        k.second++;
        found = true;
      }
    if (!found) kinds.emplace_back(d, 1);
    if (canaries(c)[1] != '.') ++placed;
  }
  out("race: %d rounds of (bad lkey, then a good write at once)", rounds);
  out("race: rounds where the good write was placed after the error %d", placed);
  for (auto& k : kinds) out("race: %s in %d rounds", k.first.c_str(), k.second);
  out("race: qp %s/%s", qp_state(c.p.s), qp_state(c.p.r));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Env e = open_env();
  watchdog(90, "error_flush did not finish");
  if (argc > 2 && std::string(argv[1]) == "race") return race(e, std::atoi(argv[2]));
  {
    Case c = make_case(e);
    ibv_sge sg[5];
    ibv_send_wr w[5];
    w[0] = make_wr(c, &sg[0], 1, 0, false, true);
    w[1] = make_wr(c, &sg[1], 2, 1, true, true);
    w[2] = make_wr(c, &sg[2], 3, 2, false, false);
    w[3] = make_wr(c, &sg[3], 4, 3, false, true);
    w[4] = make_wr(c, &sg[4], 5, 4, false, true);
    for (int i = 0; i < 4; ++i) w[i].next = &w[i + 1];
    ibv_send_wr* bad = nullptr;
    const int rc = ibv_post_send(c.p.s, w, &bad);
    // Success of 1, the error of 2, flushes of 3 (unsignaled: rxe reports it flushed), 4, 5.
    collect(c.cq, c.wcs, 5, 10000);
    collect_extra(c.cq, c.wcs, 100);
    report(c, "list", std::to_string(rc));
    next_request(c, "list", 8);
  }
  {
    Case c = make_case(e);
    std::string rcs = std::to_string(post_one(c, 1, 0, false));
    rcs += " " + std::to_string(post_one(c, 2, 1, true));
    for (int i = 2; i < 5; ++i)
      rcs += " " + std::to_string(post_one(c, static_cast<uint64_t>(i + 1), i, false));
    collect(c.cq, c.wcs, 5, 10000);
    collect_extra(c.cq, c.wcs, 100);
    report(c, "separate", rcs);
    next_request(c, "separate", 8);
  }
  {
    Case c = make_case(e);
    std::string rcs = std::to_string(post_one(c, 1, 0, false));
    rcs += " " + std::to_string(post_one(c, 2, 1, true));
    collect(c.cq, c.wcs, 2, 10000);  // the good write's success, then the error
    rcs += " " + std::to_string(post_one(c, 3, 2, false));
    rcs += " " + std::to_string(post_one(c, 4, 3, false, false));
    rcs += " " + std::to_string(post_one(c, 5, 4, false));
    collect(c.cq, c.wcs, 5, 10000);
    collect_extra(c.cq, c.wcs, 100);
    report(c, "after", rcs);
    next_request(c, "after", 8);
  }
  return 0;
}
