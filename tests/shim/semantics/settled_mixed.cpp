// settled_mixed: a send, a READ and a write a round, as rping's server posts them, until the writes settle on the NIC; then a
// READ with a bad rkey and three requests behind it; completions on both sides, bytes read and placed, both QP states as the NIC has them.
//
//   sem_settled_mixed [ROUNDS]
//
// One pair. Each of ROUNDS (200) rounds: the responder posts a receive; the sender posts
// a signaled 16 B send, a signaled 64 B READ of the target's slot and a signaled 64 B
// write to the next slot, each polled before the next. In the default mode with the CPU's
// copies off (the nic column) the writes settle on the NIC and the sends and READs go to
// it beside them around the ring (semantics.sh checks the statistics). Then a READ with a
// bad rkey, polled, and a send, a write and a READ posted at once, which the NIC flushes.
// Printed: each kind's run (wr_ids in order or the first out of place), the responder's
// receives, the error and the flushes, digests of what was read and of the target, both
// QP states.
#include <string>

#include "fixture.hpp"

using namespace sem;

namespace {

constexpr uint32_t kSlots = 64, kSlot = 64, kMsg = 16;

struct Bufs {
  uint8_t* msg;   // the send's source
  uint8_t* back;  // where the READs land, a slot a round
  uint8_t* rbuf;  // the responder's receive buffer
  ibv_mr* msg_mr;
  ibv_mr* back_mr;
  ibv_mr* rbuf_mr;
};

void post_recv(ibv_qp* qp, uint64_t id, Bufs& b) {
  ibv_sge sg{reinterpret_cast<uintptr_t>(b.rbuf), kMsg, b.rbuf_mr->lkey};
  ibv_recv_wr wr{}, *bad = nullptr;
  wr.wr_id = id;
  wr.sg_list = &sg;
  wr.num_sge = 1;
  if (ibv_post_recv(qp, &wr, &bad)) die("ibv_post_recv");
}

// The one completion of request `id`, polled: empty when it is that id's SUCCESS.
std::string one(ibv_cq* cq, uint64_t id) {
  std::vector<ibv_wc> got;
  if (collect(cq, got, 1, 20000) != 1) return "request " + std::to_string(id) + ": no completion";
  if (got[0].wr_id != id || got[0].status != IBV_WC_SUCCESS) return "request " + std::to_string(id) + ": " + describe(got);
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  const uint32_t rounds = argc > 1 ? static_cast<uint32_t>(std::strtoul(argv[1], nullptr, 0)) : 200;
  watchdog(240, "settled_mixed");
  Env e = open_env();
  ibv_cq* scq = make_cq(e, 64);
  ibv_cq* rcq = make_cq(e, 64);
  Pair p = make_pair(e, scq, rcq, size_t{kSlots} * kSlot, size_t{kSlots} * kSlot);
  Bufs b{};
  b.msg = alloc(kMsg);
  b.back = alloc(size_t{kSlots} * kSlot);
  b.rbuf = alloc(kMsg);
  b.msg_mr = reg(e, b.msg, kMsg, IBV_ACCESS_LOCAL_WRITE);
  b.back_mr = reg(e, b.back, size_t{kSlots} * kSlot, IBV_ACCESS_LOCAL_WRITE);
  b.rbuf_mr = reg(e, b.rbuf, kMsg, IBV_ACCESS_LOCAL_WRITE);
  for (uint32_t s = 0; s < kSlots; ++s) fill(p.dst + size_t{s} * kSlot, kSlot, 100000u + s);
  const uint64_t dst = reinterpret_cast<uintptr_t>(p.dst);

  // wr_ids: 3 a round (send, READ, write), from 0; the receives from 1,000,000.
  std::string fault[3];
  uint32_t received = 0;
  for (uint32_t i = 0; i < rounds; ++i) {
    const uint32_t rd = i % kSlots, wr = (i + 1) % kSlots;
    post_recv(p.r, 1000000u + i, b);
    fill(b.msg, kMsg, i);
    if (post_write(p.s, 3u * i, b.msg, kMsg, b.msg_mr->lkey, 0, 0, IBV_SEND_SIGNALED, IBV_WR_SEND))
      die("ibv_post_send (send)");
    std::string f = one(scq, 3u * i);
    if (fault[0].empty()) fault[0] = f;
    std::vector<ibv_wc> rw;
    if (collect(rcq, rw, 1, 20000) == 1 && rw[0].wr_id == 1000000u + i && rw[0].status == IBV_WC_SUCCESS &&
        rw[0].byte_len == kMsg && fnv(b.rbuf, kMsg) == fnv(b.msg, kMsg))
      ++received;
    if (post_write(p.s, 3u * i + 1, b.back + size_t{rd} * kSlot, kSlot, b.back_mr->lkey,
                   dst + size_t{rd} * kSlot, p.dmr->rkey, IBV_SEND_SIGNALED, IBV_WR_RDMA_READ))
      die("ibv_post_send (READ)");
    f = one(scq, 3u * i + 1);
    if (fault[1].empty()) fault[1] = f;
    uint8_t* src = p.src + size_t{wr} * kSlot;
    fill(src, kSlot, 200000u + i);
    if (post_write(p.s, 3u * i + 2, src, kSlot, p.smr->lkey, dst + size_t{wr} * kSlot, p.dmr->rkey,
                   IBV_SEND_SIGNALED))
      die("ibv_post_send (write)");
    f = one(scq, 3u * i + 2);
    if (fault[2].empty()) fault[2] = f;
  }
  const char* kind[3] = {"sends", "READs", "writes"};
  for (int k = 0; k < 3; ++k)
    out("%s: %s", kind[k], fault[k].empty() ? (std::to_string(rounds) + " SUCCESS in order").c_str() : fault[k].c_str());
  out("receives: %u of %u whole", received, rounds);
  out("read back: %016llx", static_cast<unsigned long long>(fnv(b.back, size_t{kSlots} * kSlot)));

  // A READ with a bad rkey, polled; then a send, a write and a READ posted at once.
  const uint64_t bad_id = 3u * rounds;
  if (post_write(p.s, bad_id, b.back, kSlot, b.back_mr->lkey, dst, p.dmr->rkey ^ 0x5a5a00, IBV_SEND_SIGNALED,
                 IBV_WR_RDMA_READ))
    die("ibv_post_send (bad rkey)");
  std::vector<ibv_wc> got;
  collect(scq, got, 1, 20000);
  out("bad rkey: %s", describe(got).c_str());
  got.clear();
  int rc[3] = {post_write(p.s, bad_id + 1, b.msg, kMsg, b.msg_mr->lkey, 0, 0, IBV_SEND_SIGNALED, IBV_WR_SEND),
               post_write(p.s, bad_id + 2, p.src, kSlot, p.smr->lkey, dst, p.dmr->rkey, IBV_SEND_SIGNALED),
               post_write(p.s, bad_id + 3, b.back, kSlot, b.back_mr->lkey, dst, p.dmr->rkey,
                          IBV_SEND_SIGNALED, IBV_WR_RDMA_READ)};
  for (int k = 0; k < 3; ++k)
    if (rc[k]) out("post %llu: %d", static_cast<unsigned long long>(bad_id + 1 + k), rc[k]);
  collect(scq, got, 3, 20000);
  collect_extra(scq, got, 200);
  out("behind it: %s", describe(got).c_str());
  got.clear();
  collect_extra(rcq, got, 200);
  out("responder after: %s", got.empty() ? "nothing" : describe(got).c_str());
  out("target: %016llx", static_cast<unsigned long long>(fnv(p.dst, p.dst_len)));
  out("states: sender %s, responder %s", qp_state(p.s), qp_state(p.r));
  return 0;
}
