// wr_multi_sge: ibv_qp_ex wr_rdma_write with 2-4 SGEs (wr_set_sge_list), and one SGE as a control: the target
// gets the SGEs' bytes, concatenated, on every path.
//
//   sem_wr_multi_sge equal|unequal
//
// One write per wr_start/wr_complete batch, each signaled, each to a target slot of its
// own (zeroed), its SGEs taken from scattered places in reverse order. equal: the SGEs
// of a write have one length (sums from 24 to 2000 bytes, so inline, stage and direct all
// apply to some). unequal: lengths differ within a write; rxe in rdma-core 44 gets these
// wrong itself (its wr_set_sge_list sums the first SGE's length num_sge times: short
// writes, or LOC_QP_OP_ERR when that exceeds the SGEs), so that mode documents the
// provider, and the script runs it without comparing. Printed per write: its completion
// and "right" (the concatenated SGEs), "NOTHING" (the slot still zero) or "WRONG".
#include <cstring>

#include "fixture.hpp"

using namespace sem;

namespace {

constexpr size_t kSlot = 4096;

const std::vector<std::vector<uint32_t>> kEqual = {
    {64},  // control: one SGE
    {32, 32}, {8, 8, 8}, {64, 64, 64, 64}, {1000, 1000}, {512, 512, 512},
};
const std::vector<std::vector<uint32_t>> kUnequal = {
    {64},  // control: one SGE
    {20, 30}, {8, 100, 50}, {1, 2, 3, 4}, {1000, 24}, {200, 24},
};

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "equal";
  if (mode != "equal" && mode != "unequal") return 2;
  const auto& kWrites = mode == "equal" ? kEqual : kUnequal;
  Env e = open_env();
  ibv_cq* cq = make_cq(e, 64);
  ibv_cq* rcq = make_cq(e, 16);
  ibv_qp_init_attr_ex a{};
  a.send_cq = cq;
  a.recv_cq = rcq;
  a.qp_type = IBV_QPT_RC;
  a.cap.max_send_wr = 32;
  a.cap.max_recv_wr = 16;
  a.cap.max_send_sge = 4;
  a.cap.max_recv_sge = 1;
  a.pd = e.pd;
  a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  a.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE;
  ibv_qp* sender = ibv_create_qp_ex(e.ctx, &a);
  if (!sender) skip("ibv_create_qp_ex with send_ops_flags is not supported");
  ibv_qp_ex* qx = ibv_qp_to_qp_ex(sender);
  if (!qx) skip("ibv_qp_to_qp_ex gave nothing");
  QpCaps caps;
  caps.send_wr = 32;
  Pair p = make_pair(e, cq, rcq, kWrites.size() * kSlot, kWrites.size() * kSlot, caps, sender);
  fill(p.src, p.src_len, 42);
  watchdog(60, "wr_multi_sge did not finish");
  out("wr_multi_sge %s: one ibv_qp_ex write per batch, SGEs set with wr_set_sge_list (one: wr_set_sge)",
      mode.c_str());
  for (size_t w = 0; w < kWrites.size(); ++w) {
    const auto& lens = kWrites[w];
    // SGEs from scattered places of this write's source slot, in reverse order, so a
    // path that reads the slot contiguously gets other bytes than the concatenation.
    std::vector<ibv_sge> sg;
    std::vector<uint8_t> want;
    size_t off = kSlot;
    for (uint32_t l : lens) {
      off -= l + 8;
      const uint8_t* s = p.src + w * kSlot + off;
      sg.push_back({reinterpret_cast<uintptr_t>(s), l, p.smr->lkey});
      want.insert(want.end(), s, s + l);
    }
    ibv_wr_start(qx);
    qx->wr_id = 100 + w;
    qx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_rdma_write(qx, p.dmr->rkey, reinterpret_cast<uintptr_t>(p.dst + w * kSlot));
    if (sg.size() == 1)
      ibv_wr_set_sge(qx, sg[0].lkey, sg[0].addr, sg[0].length);
    else
      ibv_wr_set_sge_list(qx, sg.size(), sg.data());
    const int rc = ibv_wr_complete(qx);
    std::vector<ibv_wc> wcs;
    collect(cq, wcs, rc ? 0 : 1, 10000);
    collect_extra(cq, wcs, 20);
    const uint8_t* t = p.dst + w * kSlot;
    std::vector<uint8_t> zero(want.size(), 0);
    const char* v = std::memcmp(t, want.data(), want.size()) == 0   ? "right"
                    : std::memcmp(t, zero.data(), want.size()) == 0 ? "NOTHING"
                                                                    : "WRONG";
    std::string ls;
    for (uint32_t l : lens) ls += (ls.empty() ? "" : "+") + std::to_string(l);
    out("write %zu (%zu SGEs, %s B): wr_complete %d, completions %s, target %s", w, lens.size(), ls.c_str(),
        rc, describe(wcs).c_str(), v);
  }
  out("qp %s/%s", qp_state(p.s), qp_state(p.r));
  return 0;
}
