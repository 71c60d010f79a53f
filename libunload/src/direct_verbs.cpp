// Vendor direct verbs: what a call of the program's takes out of the shim's tracking
// (unload/direct_verbs.hpp decides, this applies it).
#include "unload/direct_verbs.hpp"

#include "registry.hpp"

#include <vector>

namespace unload::rt {

namespace {

// Posts of `q` pass through from now on, and no wake-up marker goes on it: neither lane's
// memo takes another of its writes (the express lane's is entered before the tracked test).
void untrack_qp(QpRec* q) {
  if (!q->tracked) return;
  sender_detach(q);  // its CQ stays held: requests it tracked may still complete there
  q->express.disarm();
  q->nic_lane.armed = false;
  q->tracked = false;
}

// No QP on `c` is tracked, now or later.
void untrack_cq(CqRec* c) {
  c->dv.store(true);
  std::vector<QpRec*> qps;
  {
    std::lock_guard<std::mutex> g(c->send_qps.mu);
    const SendQpList::Array* a = c->send_qps.list.load(std::memory_order_acquire);
    for (uint32_t i = 0; a && i < a->n; ++i) qps.push_back(a->qps[i]);
  }
  for (QpRec* q : qps) untrack_qp(q);
}

}  // namespace

}  // namespace unload::rt

using namespace unload::rt;

extern "C" void unload_dv_used(int call, ibv_context* ctx, ibv_qp* qp, ibv_cq* cq) {
  const unload::DvUntrack u = unload::dv_untrack(static_cast<unload::DvCall>(call));
  if (u.context)
    if (ContextRec* c = ctx ? context_find(ctx) : nullptr) c->dv.store(true);
  if (u.qp && qp)
    if (QpRec* q = g_qps.find(key_of(qp))) untrack_qp(q);
  if (!u.its_cqs) return;
  ibv_cq* cqs[2] = {cq, nullptr};
  if (qp) {
    cqs[0] = qp->send_cq;
    cqs[1] = qp->recv_cq;
  }
  for (ibv_cq* x : cqs)
    if (CqRec* r = x ? g_cqs.find(key_of(x)) : nullptr) untrack_cq(r);
}
