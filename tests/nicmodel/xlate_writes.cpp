// xlate_writes: COUNT 64 B RDMA WRITEs over rxe0, each to a random page of a PAGES-page
// target region, from one source page; the load under which nicmodel_test.sh reads the NIC
// model's translation counters. Exit 0 when every write completed with success.
//
//   nicmodel_xlate_writes PAGES COUNT
#include <cstdlib>
#include <random>
#include <string>

#include "verbs.hpp"

using namespace unload::test;

int main(int argc, char** argv) {
  if (argc != 3) die("usage: nicmodel_xlate_writes PAGES COUNT");
  const long pages = std::strtol(argv[1], nullptr, 10), count = std::strtol(argv[2], nullptr, 10);
  if (pages < 1 || pages > (1 << 20) || count < 1 || count > (1 << 24)) die("PAGES 1..2^20, COUNT 1..2^24");
  constexpr int kBatch = 32;  // writes per post list, the last one signaled

  Device d = open_device();
  ibv_pd* pd = make_pd(d.ctx);
  ibv_cq* cq = make_cq(d.ctx, 64);
  ibv_qp* s = make_rc_qp(pd, cq, cq);
  ibv_qp* r = make_rc_qp(pd, cq, cq);
  uint8_t* src = map_zeroed(4096);
  uint8_t* dst = map_zeroed(static_cast<size_t>(pages) * 4096);
  ibv_mr* smr = make_mr(pd, src, 4096, IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* dmr = make_mr(pd, dst, static_cast<size_t>(pages) * 4096, kAllAccess);
  connect(s, kAllAccess, loopback_path(d, r->qp_num));
  connect(r, kAllAccess, loopback_path(d, s->qp_num));

  std::mt19937_64 rng(42);
  ibv_sge sge{reinterpret_cast<uintptr_t>(src), 64, smr->lkey};
  ibv_send_wr wr[kBatch]{};
  for (long done = 0; done < count;) {
    const int n = static_cast<int>(std::min<long>(kBatch, count - done));
    for (int i = 0; i < n; ++i) {
      wr[i] = {};
      wr[i].wr_id = static_cast<uint64_t>(done + i);
      wr[i].sg_list = &sge;
      wr[i].num_sge = 1;
      wr[i].opcode = IBV_WR_RDMA_WRITE;
      wr[i].send_flags = i == n - 1 ? IBV_SEND_SIGNALED : 0;
      wr[i].wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(dst) + (rng() % pages) * 4096;
      wr[i].wr.rdma.rkey = dmr->rkey;
      wr[i].next = i + 1 < n ? &wr[i + 1] : nullptr;
    }
    ibv_send_wr* bad = nullptr;
    if (ibv_post_send(s, wr, &bad)) die("ibv_post_send");
    ibv_wc wc;
    if (poll_n(cq, 1, &wc) != 0) die(("write " + std::to_string(wc.wr_id) + ": " + ibv_wc_status_str(wc.status)).c_str());
    done += n;
  }
  ok("writes", (std::to_string(count) + " over " + std::to_string(pages) + " pages, all SUCCESS").c_str());
  return failures() ? 1 : 0;
}
