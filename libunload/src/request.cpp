// The request's SGEs against the regions and windows made through the shim, and the
// module's request for a write the CPU places (request.hpp).
#include "request.hpp"

#include "kmod.hpp"
#include "nic_only.hpp"
#include "registry.hpp"
#include "unload.h"

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

// The module's request for write w; iov: room for its segment list when it has several
// SGEs. false when the module could not take it (more SGEs than it allows).
bool build_request(const QpRec* q, const DirectWrite& w, unload_direct_req& req, unload_iov* iov) {
  const WriteRequest& r = w.rt.req;
  ibv_sge process_sg[UNLOAD_MAX_IOV];  // the module reads the source by process address
  const ibv_sge* sg = w.sg;
  if (r.sge_count > UNLOAD_MAX_IOV || r.sge_count > g_kmod.max_iov) return false;
  if (w.rt.translated) {
    sges_translate(q, sg, r.sge_count, process_sg);
    sg = process_sg;
  }
  request_head(q, r, req);
  if (r.user_inline) {  // the provider would read it at post: so does the module
    req.flags = UNLOAD_REQ_INLINE;
    req.iov = sg[0].addr;
  } else if (r.sge_count == 1) {
    req.iov = sg[0].addr;
    req.lkey = sg[0].lkey;
  } else {
    for (uint32_t i = 0; i < r.sge_count; ++i) iov[i] = {sg[i].addr, sg[i].length, sg[i].lkey, 0};
    req.iov = reinterpret_cast<uintptr_t>(iov);
    req.iov_count = r.sge_count;
  }
  return true;
}

}  // namespace unload::rt
