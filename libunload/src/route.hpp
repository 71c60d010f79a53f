// The route of a request: what it is and which path it takes, decided once per request
// (docs/design.md, "Route"). Both post APIs (ibv_post_send and wr_*) call route(); nothing
// else decides a path.
#pragma once

#include "config.hpp"
#include "records.hpp"
#include "unload/classify.hpp"

namespace unload::rt {

struct Route {
  WriteRequest req;
  Path path = Path::offload;
  uint64_t t0 = 0;  // adaptive: when the policy chose (the path's cost is measured from here)
};

// Every write to the NIC as the program built it (shim off, mode offload, UNLOAD_PATH=offload):
// the post paths then pass requests through untracked.
bool all_offload(const Tunables& t);

// Whether writes on `q` may go direct at all now: a peer the kmod paired, a send CQ that
// can take shim-made completions, no failure seen. Asks the kmod again, less and less
// often, while a local peer is not paired yet (it may still be connecting).
bool direct_possible(QpRec* q, const Tunables& t);

// The route of one request whose local buffers are `sg[0..n)`. `direct_ok`: the caller can
// run a direct write at this point (direct_possible, and the request's position allows it).
Route route(QpRec* q, const WriteRequest& r, const ibv_sge* sg, const Tunables& t, bool direct_ok);
inline Route route(QpRec* q, const ibv_send_wr& w, const Tunables& t, bool direct_ok) {
  return route(q, classify(w, q->sq.sig_all), w.sg_list, t, direct_ok);
}

// Do the SGEs lie inside regions registered through the shim on the QP's PD, with
// iova == address (the CPU paths read process addresses)?
bool sges_valid(const QpRec* q, const ibv_sge* sg, uint32_t n);

// Adaptive mode: the policy of this thread learns the cost of a path that finished, and
// for an offloaded write how long this thread busy-polled for it.
void observe(const QpRec* q, Path p, uint32_t length, uint32_t sge_count, uint32_t rkey,
             uint64_t remote_addr, uint64_t t0);

// What the program's ibv_poll_cq returned (after the merge): a run of empty polls is a
// wait for the NIC, which observe() reports to the policy.
void note_poll(int got);

}  // namespace unload::rt
