// wr_untouched: ibv_post_send never writes the caller's ibv_send_wr list or its SGEs (byte-identical after,
// and a read-only list posts), for one write, a list, a list that fails, an SQ overflow.
//
//   sem_wr_untouched
//
// Each case builds its list in a page of its own. First pass ("rw"): the page is writable;
// the list's bytes (wr_id, send_flags, sg_list, num_sge, next, SGEs) are compared with a
// snapshot taken before ibv_post_send. Second pass ("ro"): the page is made read-only
// around ibv_post_send, as a program that keeps its request templates in read-only
// memory may; a write into it is a SIGSEGV, reported as one line. Each case also prints
// ibv_post_send's value, the index of *bad_wr, the completions and the target's state.
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "fixture.hpp"

using namespace sem;

namespace {

constexpr size_t kSlot = 256;  // target / source bytes per request
constexpr int kMaxWr = 24;
constexpr int kMaxSge = 64;

struct Area {
  ibv_send_wr wr[kMaxWr];
  ibv_sge sge[kMaxSge];
};

const char* g_case = "";

void on_segv(int) {
  char line[160];
  const int n = std::snprintf(
      line, sizeof line, "ro %s: SIGSEGV in ibv_post_send: the caller's request list was written\n", g_case);
  std::fflush(stdout);
  ssize_t w = write(1, line, static_cast<size_t>(n));
  (void)w;
  _exit(4);
}

struct Ctx {
  Env e;
  ibv_cq* cq;
  Pair p;
  Area* area;
  size_t area_len;
  int case_no = 0;
};

// Fills `a` with case `name`'s list; returns the number of requests. Request j of case c
// writes its SGEs (source slot j) to target slot c * kMaxWr + j.
int build(Ctx& c, const std::string& name, int case_no) {
  Area* a = c.area;
  std::memset(a, 0, sizeof *a);
  int nwr = 0, nsge = 0;
  auto add = [&](std::initializer_list<uint32_t> lens, unsigned flags) {
    ibv_send_wr& w = a->wr[nwr];
    uint8_t* src = c.p.src + static_cast<size_t>(nwr) * kSlot;
    w.wr_id = 1000u * static_cast<unsigned>(case_no) + static_cast<unsigned>(nwr);
    w.opcode = IBV_WR_RDMA_WRITE;
    w.send_flags = flags;
    w.sg_list = &a->sge[nsge];
    uint32_t off = 0;
    for (uint32_t l : lens) {
      a->sge[nsge++] = {reinterpret_cast<uintptr_t>(src + off), l, c.p.smr->lkey};
      off += l;
    }
    w.num_sge = static_cast<int>(lens.size());
    w.wr.rdma.remote_addr =
        reinterpret_cast<uintptr_t>(c.p.dst + (static_cast<size_t>(case_no) * kMaxWr + nwr) * kSlot);
    w.wr.rdma.rkey = c.p.dmr->rkey;
    if (nwr > 0) a->wr[nwr - 1].next = &w;
    ++nwr;
  };
  if (name == "one") {
    add({64}, IBV_SEND_SIGNALED);
  } else if (name == "list") {
    add({32}, 0);
    add({40, 60}, IBV_SEND_SIGNALED);
    add({200}, IBV_SEND_SIGNALED);
    add({8, 8, 8}, 0);
    add({128}, IBV_SEND_SIGNALED);
  } else if (name == "bad_sge") {
    // The second request has more SGEs than any rxe QP takes (the device's limit is 32):
    // the provider refuses it, the first is posted, the third is not.
    add({64}, IBV_SEND_SIGNALED);
    ibv_send_wr& w = a->wr[nwr];
    add({4}, IBV_SEND_SIGNALED);
    for (int i = 1; i < 40; ++i)
      a->sge[nsge++] = {reinterpret_cast<uintptr_t>(c.p.src + static_cast<size_t>(nwr - 1) * kSlot +
                                                    4u * static_cast<unsigned>(i)),
                        4, c.p.smr->lkey};
    w.num_sge = 40;
    add({64}, IBV_SEND_SIGNALED);
  } else if (name == "sq_overflow") {
    // More requests than the send queue holds (asked for 8): the provider takes what fits.
    for (int i = 0; i < 20; ++i) add({16}, IBV_SEND_SIGNALED);
  }
  return nwr;
}

void run_case(Ctx& c, const std::string& name, bool ro) {
  const int case_no = ++c.case_no;
  const int nwr = build(c, name, case_no);
  for (int j = 0; j < nwr; ++j)
    fill(c.p.src + static_cast<size_t>(j) * kSlot, kSlot,
         100u * static_cast<unsigned>(case_no) + static_cast<unsigned>(j));
  std::vector<uint8_t> snap(reinterpret_cast<uint8_t*>(c.area),
                            reinterpret_cast<uint8_t*>(c.area) + sizeof(Area));
  const std::string label = std::string(ro ? "ro " : "rw ") + name;
  g_case = name.c_str();
  ibv_send_wr* bad = nullptr;
  if (ro && mprotect(c.area, c.area_len, PROT_READ)) die("mprotect");
  const int rc = ibv_post_send(c.p.s, &c.area->wr[0], &bad);
  if (ro && mprotect(c.area, c.area_len, PROT_READ | PROT_WRITE)) die("mprotect");
  int bad_index = -1;
  for (int j = 0; j < nwr; ++j)
    if (bad == &c.area->wr[j]) bad_index = j;
  const bool same = std::memcmp(snap.data(), c.area, sizeof(Area)) == 0;
  // The requests before *bad_wr were posted; of those, the signaled ones complete.
  const int posted = rc ? bad_index : nwr;
  size_t want = 0;
  for (int j = 0; j < posted; ++j)
    if (c.area->wr[j].send_flags & IBV_SEND_SIGNALED) ++want;
  std::vector<ibv_wc> wcs;
  collect(c.cq, wcs, want, 10000);
  collect_extra(c.cq, wcs, 50);
  // Target: the posted requests' bytes in their slots, nothing in the others.
  int placed_right = 0, placed_wrong = 0;
  for (int j = 0; j < nwr; ++j) {
    const ibv_send_wr& w = c.area->wr[j];
    uint32_t len = 0;
    for (int i = 0; i < w.num_sge; ++i) len += w.sg_list[i].length;
    const uint8_t* t = c.p.dst + (static_cast<size_t>(case_no) * kMaxWr + j) * kSlot;
    std::vector<uint8_t> want_bytes(kSlot, 0);
    if (j < posted) {
      uint32_t off = 0;
      for (int i = 0; i < w.num_sge; ++i) {
        std::memcpy(&want_bytes[off], reinterpret_cast<const void*>(w.sg_list[i].addr), w.sg_list[i].length);
        off += w.sg_list[i].length;
      }
    }
    if (std::memcmp(t, want_bytes.data(), kSlot) == 0)
      placed_right++;
    else
      placed_wrong++;
  }
  out("%s: requests %d post_rc %d bad_wr_index %d list_unchanged %s", label.c_str(), nwr, rc, bad_index,
      same ? "yes" : "NO");
  out("%s: completions %s", label.c_str(), describe(wcs).c_str());
  out("%s: target slots right %d wrong %d; qp %s/%s", label.c_str(), placed_right, placed_wrong,
      qp_state(c.p.s), qp_state(c.p.r));
}

}  // namespace

int main() {
  Ctx c;
  c.e = open_env();
  c.cq = make_cq(c.e, 64);
  QpCaps caps;
  caps.send_wr = 8;
  c.p = make_pair(c.e, c.cq, c.cq, kMaxWr * kSlot, 16 * kMaxWr * kSlot, caps);
  c.area_len = (sizeof(Area) + 4095) / 4096 * 4096;
  c.area = reinterpret_cast<Area*>(alloc(c.area_len));
  signal(SIGSEGV, on_segv);
  watchdog(60, "wr_untouched did not finish");
  static const char* const cases[] = {"one", "list", "bad_sge", "sq_overflow"};
  for (const char* n : cases) run_case(c, n, false);
  for (const char* n : cases) run_case(c, n, true);
  return 0;
}
