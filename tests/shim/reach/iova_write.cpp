// iova_write: RDMA WRITEs between regions registered with ibv_reg_mr_iova2 and ibv_reg_mr_iova at an iova
// other than their address: every byte lands where the iova names, every completion exact.
//
//   reach_iova_write [ROUNDS]
//
// The source region is registered at kSrcIova (ibv_reg_mr_iova), the target at kDstIova
// (ibv_reg_mr_iova2); SGEs and remote addresses are iovas, as on the wire. Each round
// writes every size of kSizes at its own offset of the target, one SGE, then the same
// bytes as two SGEs, signaled every other write. The outcome (completions, and each
// write's bytes at the target's process address) is printed for the sandbox script to
// compare with and without the shim; exit codes are the fixture's.
#include <cstring>

#include "../semantics/fixture.hpp"

#undef ibv_reg_mr_iova

using namespace sem;

namespace {

constexpr uint64_t kSrcIova = 0x7e5700000000ull;  // far from any mapping of this process
constexpr uint64_t kDstIova = 0x1d0000001000ull;
constexpr uint32_t kSizes[] = {1, 8, 64, 1000, 4096, 65536, 300000};
constexpr size_t kSrcLen = 1 << 20;
constexpr size_t kDstLen = 4 << 20;

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 3;
  watchdog(120, "iova_write");
  Env e = open_env();
  ibv_cq* cq = make_cq(e, 256);
  ibv_cq* rcq = make_cq(e, 16);
  ibv_qp* s = make_qp(e, cq, rcq);
  ibv_qp* r = make_qp(e, rcq, rcq);
  connect_pair(e, s, r);
  uint8_t* src = alloc(kSrcLen);
  uint8_t* dst = alloc(kDstLen);
  ibv_mr* smr = ibv_reg_mr_iova(e.pd, src, kSrcLen, kSrcIova, IBV_ACCESS_LOCAL_WRITE);
  if (!smr) die("ibv_reg_mr_iova");
  ibv_mr* dmr = ibv_reg_mr_iova2(e.pd, dst, kDstLen, kDstIova, kRemote);
  if (!dmr) die("ibv_reg_mr_iova2");

  uint64_t wr_id = 0;
  for (int round = 0; round < rounds; ++round) {
    size_t at = 0;  // offset in the target: every write its own bytes
    for (uint32_t len : kSizes) {
      for (int split = 0; split < 2; ++split) {
        const uint64_t seed = static_cast<uint64_t>(round) * 131 + len * 2 + static_cast<uint64_t>(split);
        const size_t from = (len * 7 + static_cast<size_t>(split) * 4096) % (kSrcLen - len);
        fill(src + from, len, seed);
        ibv_sge sg[2];
        const uint32_t first = split && len > 1 ? len / 3 : len;
        sg[0] = {kSrcIova + from, first, smr->lkey};
        sg[1] = {kSrcIova + from + first, len - first, smr->lkey};
        ibv_send_wr w{}, *bad = nullptr;
        w.wr_id = ++wr_id;
        w.sg_list = sg;
        w.num_sge = first == len ? 1 : 2;
        w.opcode = IBV_WR_RDMA_WRITE;
        w.send_flags = (wr_id & 1) ? IBV_SEND_SIGNALED : 0;
        w.wr.rdma.remote_addr = kDstIova + at;
        w.wr.rdma.rkey = dmr->rkey;
        const int rc = ibv_post_send(s, &w, &bad);
        std::vector<ibv_wc> wcs;
        if (w.send_flags) {
          collect(cq, wcs, 1, 10000);
        } else {  // unsignaled: a signaled zero-length write behind it says it executed
          ibv_send_wr z{};
          z.wr_id = 1000000 + wr_id;
          z.opcode = IBV_WR_RDMA_WRITE;
          z.send_flags = IBV_SEND_SIGNALED;
          z.wr.rdma.remote_addr = kDstIova;
          z.wr.rdma.rkey = dmr->rkey;
          ibv_post_send(s, &z, &bad);
          collect(cq, wcs, 1, 10000);
        }
        const bool right = std::memcmp(dst + at, src + from, len) == 0;
        out("round %d write %u B, %d SGE: post %d, completions %s, target %s", round, len, w.num_sge, rc,
            describe(wcs).c_str(), right ? "right" : "WRONG");
        at += (len + 4095) & ~size_t{4095};
      }
    }
  }
  out("sender %s, responder %s", qp_state(s), qp_state(r));
  return 0;
}
