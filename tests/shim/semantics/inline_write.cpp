// inline_write: writes the program flags IBV_SEND_INLINE, from memory no MR covers, reused as
// soon as each post returns; printed: the post's value, the completions and the target's bytes.
//
//   sem_inline_write
//
// Inline promises the buffer is free when ibv_post_send returns: the program overwrites it
// at once, so the target must hold what the buffer held at the post. Cases: lengths 1, 64
// and the QP's max_inline_data, signaled and unsignaled (a signaled one last); a bogus lkey
// (the NIC checks none for inline data); two SGEs; one byte over max_inline_data (the
// provider refuses the post). Under the shim the first ones may go direct (the module reads
// the buffer at post time); the rest keep the NIC's outcome.
#include <cstring>

#include "fixture.hpp"

using namespace sem;

namespace {

// One inline write of `len` bytes from `buf` (one SGE, or two halves), then the buffer is
// overwritten: returns ibv_post_send's value.
int post_inline(ibv_qp* qp, uint64_t wr_id, uint8_t* buf, uint32_t len, uint32_t lkey, uint64_t raddr,
                uint32_t rkey, unsigned flags, bool two_sges = false) {
  ibv_sge sg[2] = {{reinterpret_cast<uintptr_t>(buf), len, lkey}, {}};
  if (two_sges) {
    sg[0].length = len / 2;
    sg[1] = {reinterpret_cast<uintptr_t>(buf + len / 2), len - len / 2, lkey};
  }
  ibv_send_wr wr{};
  ibv_send_wr* bad = nullptr;
  wr.wr_id = wr_id;
  wr.sg_list = sg;
  wr.num_sge = two_sges ? 2 : 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = flags | IBV_SEND_INLINE;
  wr.wr.rdma.remote_addr = raddr;
  wr.wr.rdma.rkey = rkey;
  const int rc = ibv_post_send(qp, &wr, &bad);
  std::memset(buf, 0xee, len);  // free once the post returned
  return rc;
}

}  // namespace

int main() {
  Env e = open_env();
  ibv_cq* cq = make_cq(e, 64);
  ibv_cq* rcq = make_cq(e, 16);
  QpCaps caps;
  caps.inline_data = 128;
  Pair p = make_pair(e, cq, rcq, 4096, 8192, caps);
  watchdog(60, "inline_write did not finish");
  ibv_qp_attr a{};
  ibv_qp_init_attr ia{};
  if (ibv_query_qp(p.s, &a, IBV_QP_CAP, &ia)) die("ibv_query_qp");
  const uint32_t max_inline = ia.cap.max_inline_data;
  if (max_inline < 64) skip("the QP takes under 64 bytes inline");

  struct Case {
    const char* name;
    uint32_t len;
    bool bogus_lkey, two_sges;
    unsigned flags;
  };
  const Case cases[] = {
      {"1 byte", 1, false, false, 0},
      {"64 bytes", 64, false, false, 0},
      {"max_inline_data", max_inline, false, false, IBV_SEND_SIGNALED},
      {"bogus lkey", 64, true, false, IBV_SEND_SIGNALED},
      {"two sges", 64, false, true, IBV_SEND_SIGNALED},
      {"max_inline_data + 1", max_inline + 1, false, false, IBV_SEND_SIGNALED},
  };
  const uintptr_t dst = reinterpret_cast<uintptr_t>(p.dst);
  uint64_t at = 0;
  uint64_t id = 1;
  for (const Case& c : cases) {
    uint8_t* buf = alloc(4096);  // never registered
    fill(buf, c.len, id);
    const uint64_t want = fnv(buf, c.len);
    const int rc = post_inline(p.s, id, buf, c.len, c.bogus_lkey ? 0xdeadbeef : 0, dst + at, p.dmr->rkey,
                               c.flags, c.two_sges);
    std::vector<ibv_wc> wcs;
    if (rc == 0 && (c.flags & IBV_SEND_SIGNALED)) collect(cq, wcs, 1, 5000);
    collect_extra(cq, wcs, 20);
    // An unsignaled write's bytes land when they land: wait for them (bounded), not print a race.
    const uint64_t end = now_ms() + 2000;
    while (rc == 0 && fnv(p.dst + at, c.len) != want && now_ms() < end) sleep_ms(1);
    out("%s: post_rc %d, %s, target %s", c.name, rc, describe(wcs).c_str(),
        rc != 0                          ? "untouched"
        : fnv(p.dst + at, c.len) == want ? "holds the bytes at the post"
                                         : "DIFFERS");
    at += 512;
    ++id;
  }
  out("qp %s", qp_state(p.s));
  return 0;
}
