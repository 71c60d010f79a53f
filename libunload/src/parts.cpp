// The lifecycle hooks, each run over the parts in the table's order (parts.hpp).
#include "parts.hpp"

namespace unload::rt {
namespace {

// The remote ring first: a QP's writes in flight settle (and its queue goes) before any
// other part lets go of what they may still use.
constexpr const Part* kParts[] = {&g_remote_ring_part, &g_mapped_part, &g_stage_part, &g_qpx_part, &g_cqx_part};

}  // namespace

void parts_qp_track(QpRec* q) {
  for (const Part* p : kParts)
    if (p->qp_track) p->qp_track(q);
}

void parts_qp_settle(QpRec* q) {
  if (!q) return;
  for (const Part* p : kParts)
    if (p->qp_settle) p->qp_settle(q);
}

void parts_qp_release(QpRec* q) {
  for (const Part* p : kParts)
    if (p->qp_release) p->qp_release(q);
}

void parts_cq_release(CqRec* c) {
  for (const Part* p : kParts)
    if (p->cq_release) p->cq_release(c);
}

bool parts_reclaim_memlock() {
  bool any = false;
  for (const Part* p : kParts)
    if (p->reclaim_memlock) any |= p->reclaim_memlock();
  return any;
}

void parts_after_fork() {
  for (const Part* p : kParts)
    if (p->after_fork) p->after_fork();
}

}  // namespace unload::rt
