// The request's SGEs against the regions and windows made through the shim (request.hpp).
#include "request.hpp"

#include "nic_only.hpp"
#include "registry.hpp"

namespace unload::rt {

Why sges_why(const QpRec* q, const ibv_sge* sg, uint32_t n, bool* translated) {
  Why why = Why::none;  // region, which the NIC fails, wins over nic_memory, which it takes
  for (uint32_t i = 0; i < n; ++i) {
    if (sg[i].length == 0) continue;
    const MrRec* m = g_mrs.find(lkey_key(q->c, sg[i].lkey));
    if (!m || m->pd != q->qp->pd) return Why::region;
    if (sg[i].addr < m->iova || sg[i].addr + sg[i].length > m->iova + m->length ||
        sg[i].addr + sg[i].length < sg[i].addr)
      return Why::region;
    if (m->nic_only) why = Why::nic_memory;
    if (m->iova != m->addr) *translated = true;
  }
  return why;
}

bool window_rkey(const QpRec* q, uint32_t rkey) {
  return g_windows.load(std::memory_order_relaxed) != 0 &&
         g_mws.find(mw_key(q->qp->context, rkey)) != nullptr;
}

void sges_translate(const QpRec* q, const ibv_sge* sg, uint32_t n, ibv_sge* out) {
  for (uint32_t i = 0; i < n; ++i) {
    out[i] = sg[i];
    if (sg[i].length == 0) continue;
    if (const MrRec* m = g_mrs.find(lkey_key(q->c, sg[i].lkey)))
      out[i].addr = m->addr + (sg[i].addr - m->iova);
  }
}

}  // namespace unload::rt
