// The direct path (unload.direct): the kmod places a write at a paired local peer; the fence
// that orders it behind its QP's NIC requests; the shim's hidden marker requests.
#pragma once

#include "records.hpp"
#include "route.hpp"

#include <cerrno>
#include <memory>

struct unload_direct_req;
struct unload_iov;

namespace unload::rt {

// What keeps writes on `q` from going direct now (none: a peer the kmod paired, a send CQ
// that can take shim-made completions, no failure seen). Asks the kmod again, less and
// less often, while a local peer is not paired yet (it may still be connecting).
Why direct_blocker(QpRec* q, const Tunables& t);
inline bool direct_possible(QpRec* q, const Tunables& t) {
  return direct_blocker(q, t) == Why::none;
}

// Most writes of one post list placed with one submission.
constexpr int kDirectRunMax = 16;

// Room for a run of direct writes, left uninitialised: a slot is constructed before it is
// read, and initialising all of them on every post (the Routes' member initialisers) cost
// 190 instructions, a sixth of the shim's work for a one-write post (callgrind).
class DirectRun {
 public:
  DirectRun() {}  // no member initialiser runs: that is the point
  void set(int i, const ibv_sge* sg, uint64_t wr_id, const Route& rt) {
    std::construct_at(&w_[i], sg, wr_id, rt);
  }
  DirectWrite& operator[](int i) { return w_[i]; }
  const DirectWrite* data() const { return w_; }

 private:
  union {
    DirectWrite w_[kDirectRunMax];
  };
};

// The fence (the writes wait until their QP's earlier requests executed), then w[0..n) in
// order, all routed direct or all mapped: the mapped path's through this process's mappings
// while they hold, the rest by the module's copy, with one submission that stops at the first write it
// does not place; inside q's post gate. Returns how many were placed (their completions
// queued if signaled); when fewer than n, *why says what stopped the first one not placed,
// and the caller sends it and the rest to the NIC, which orders them by itself and reports
// whatever error it finds. A write with several SGEs comes alone (n = 1).
int place_direct(QpRec* q, const DirectWrite* w, int n, Why* why);

// The express lane's placement (express.hpp): one write, its buffer `sg[0]` read where the
// program put it (not translated), through mapping `target` of q, with nothing in flight
// (so no fence to wait), as the mapped engine's run places one write (a timed one costs
// its decision to the copy's end).
// false: not placed by the engine (place_mapped), nothing counted or queued; place_direct
// takes it from there.
bool place_mapped_one(QpRec* q, const ibv_sge* sg, uint64_t wr_id, const Route& rt, uint32_t target);

// The parts the remote path (remote.cpp) shares with direct's:
// The ordering fence: 0 when a write the CPU places may be placed now (every earlier
// request of q executed at the responder; *waited when it had to wait); else -errno, which
// fence_why names. Inside q's post gate. Inline for a run's usual case, nothing in flight.
int fence_wait(QpRec* q, const WriteRequest& r, bool* waited);
inline int fence_before_direct(QpRec* q, const WriteRequest& r, bool* waited) {
  if (send_queue_quiet(q->sq)) return q->failed.load(std::memory_order_acquire) ? -EIO : 0;
  return fence_wait(q, r, waited);
}
Why fence_why(int rc);
// A timed write the CPU placed, whose completion the program sees only when the wake-up
// marker completes (its CQ's channel armed): what it costs the program runs to then, so
// its sample rides on the marker and merge_entry learns it (issue 54: a CPU path's cost is
// what the program pays to see its completion, which on an armed channel includes a NIC
// write). cpu_ns: the routing and copy, charged as its CPU.
struct CarriedSample {
  Path path = Path::offload;
  uint64_t t0 = 0;  // 0: none
  uint32_t cpu_ns = 0;
  uint32_t length = 0;
  uint32_t sge_count = 0;
};
// Whether timed write r's sample would ride on a wake-up marker (the channel is armed
// now; wake_after_queueing decides, and learns it at once if no marker goes).
bool carries_sample(const QpRec* q, const WriteRequest& r, bool timed);
// The completion of a write the CPU placed: an RDMA WRITE's, as the NIC gives it.
[[gnu::always_inline]] inline ibv_wc placed_write_wc(uint64_t wr_id, uint32_t byte_len, uint32_t qp_num) {
  return ibv_wc{.wr_id = wr_id,
                .status = IBV_WC_SUCCESS,
                .opcode = IBV_WC_RDMA_WRITE,
                .vendor_err = 0,
                .byte_len = byte_len,
                .imm_data = 0,
                .qp_num = qp_num,
                .src_qp = 0,
                .wc_flags = 0,
                .pkey_index = 0,
                .slid = 0,
                .sl = 0,
                .dlid_path_bits = 0};
}

// Completions were queued on q's send CQ: makes the CQ's event fire if it is armed.
// `last`: a placed write of q, a valid marker target; `s`: last's sample, to carry. Inline
// up to the fence and the look at the channel, which most writes end with.
void wake_armed(QpRec* q, const WriteRequest& last, const CarriedSample* s);
inline void wake_after_queueing(QpRec* q, const WriteRequest& last, const CarriedSample* s = nullptr) {
  const CqRec* c = q->scq;
  // A CQ's channel is fixed at its creation: one without is never armed, and needs no fence
  // against ibv_req_notify_cq.
  if (__builtin_expect(s == nullptr && !c->cq->channel, 1)) return;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (s != nullptr || c->armed.load(std::memory_order_relaxed)) wake_armed(q, last, s);
}

// A completion was queued on `c` while its channel may be armed: make the real CQ event
// fire, with a marker on some QP of the CQ. From ibv_req_notify_cq (no gate held).
void wake_channel_now(CqRec* c);

}  // namespace unload::rt
