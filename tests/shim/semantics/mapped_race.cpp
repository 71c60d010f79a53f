// mapped_race: the responder changes in the middle of a sender's stream of writes (issue 28).
//
//   sem_mapped_race <modify_err|dereg|exit> [rounds]
//
// Each round streams up to 192 signaled 64-byte writes, each to its own place, and after a
// random number of them the responder changes: `modify_err` moves its QP to ERR, `dereg`
// deregisters the target MR, `exit` ends its process (a child, whose target memory this
// process shares). Whatever the timing, the NIC path gives, and every path must give: every
// write completes once (those the NIC never completes are flushed when the sender is moved
// to ERR at the round's end); a write that succeeded is in the target; none succeeded after
// one failed; a write posted after the change returned is not in the target; and after a
// `dereg` or an `exit` returned nothing lands in the target at all (a snapshot taken then
// is what it holds at the end). Not so after `modify_err`: rxe itself may still place a
// write it was taking when the modify returned. Under the shim's default direct path the
// stream's writes go through a mapping of the target until the change revokes it.
// Printed: one verdict line per run; the counts go to stderr (they depend on timing).
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <random>
#include <string>
#include <thread>

#include "fixture.hpp"

using namespace sem;

namespace {

constexpr int kWrites = 192;
constexpr uint32_t kLen = 64;
constexpr size_t kTarget = 16384;  // the MR; the writes fill its first kWrites * kLen bytes

enum class Change { modify_err, dereg, exit };

std::atomic<uint64_t> g_round{0};  // the stall watchdog's progress

void reset(ibv_qp* qp) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RESET;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE)) die("ibv_modify_qp RESET");
}

void to_err(ibv_qp* qp) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE)) die("ibv_modify_qp ERR");
}

// The sender's stream: posts until told to stop or kWrites are posted.
struct Stream {
  ibv_qp* qp;
  const uint8_t* src;
  uint32_t lkey, rkey;
  uint64_t raddr;
  std::atomic<bool> stop{false};
  std::atomic<int> posted{0};
  std::atomic<bool> done{false};

  void run() {
    for (int j = 0; j < kWrites && !stop.load(std::memory_order_acquire); ++j) {
      if (post_write(qp, static_cast<uint64_t>(j), src + j * kLen, kLen, lkey, raddr + j * kLen, rkey,
                     IBV_SEND_SIGNALED))
        break;
      posted.store(j + 1, std::memory_order_release);
    }
    done.store(true, std::memory_order_release);
  }
};

// The responder of the exit case: a child with a QP of its own on the shared target.
struct Child {
  pid_t pid = -1;
  int to = -1, from = -1;  // pipes: parent -> child, child -> parent
};

struct ChildHello {
  uint32_t qpn, rkey;
};

[[noreturn]] void child_main(int in, int out, uint8_t* target) {
  Env e = open_env();
  ibv_cq* cq = make_cq(e, 64);
  ibv_qp* r = make_qp(e, cq, cq, QpCaps{});
  ibv_mr* mr = reg(e, target, kTarget, kRemote);
  ChildHello h{r->qp_num, mr->rkey};
  if (write(out, &h, sizeof h) != sizeof h) _exit(2);
  uint32_t peer = 0;
  if (read(in, &peer, sizeof peer) != sizeof peer) _exit(2);
  connect(e, r, peer);
  char ready = 1;
  if (write(out, &ready, 1) != 1) _exit(2);
  char go;
  if (read(in, &go, 1) != 1) _exit(2);
  _exit(0);  // the change: the process ends with its QP, MR and session in place
}

Child spawn(uint8_t* target) {
  int a[2], b[2];
  if (pipe(a) || pipe(b)) die("pipe");
  Child c;
  c.pid = fork();
  if (c.pid < 0) die("fork");
  if (c.pid == 0) {
    close(a[1]);
    close(b[0]);
    child_main(a[0], b[1], target);
  }
  close(a[0]);
  close(b[1]);
  c.to = a[1];
  c.from = b[0];
  return c;
}

// One round's checks; "" when they hold, else the first violation.
// `after`: the writes posted when the change returned (the next one may have been posting);
// `snapshot`: the target then, or nullptr when a write in flight may still land.
std::string check_round(const std::vector<ibv_wc>& wcs, int posted, int after, const uint8_t* src,
                        const uint8_t* target, const uint8_t* snapshot, int* ok_writes, int* failed_writes) {
  std::vector<int> status(static_cast<size_t>(posted), -1);
  for (const ibv_wc& wc : wcs) {
    if (wc.wr_id >= static_cast<uint64_t>(posted)) return "a completion for a write never posted";
    if (status[wc.wr_id] != -1) return "write " + std::to_string(wc.wr_id) + " completed twice";
    status[wc.wr_id] = wc.status;
  }
  bool failed = false;
  static const uint8_t zero[kLen] = {};
  for (int j = 0; j < posted; ++j) {
    if (status[j] == -1) return "write " + std::to_string(j) + " never completed";
    if (j > after && std::memcmp(target + j * kLen, zero, kLen) != 0)
      return "write " + std::to_string(j) + ", posted after the change returned, is in the target";
    if (status[j] != IBV_WC_SUCCESS) {
      failed = true;
      ++*failed_writes;
      continue;
    }
    ++*ok_writes;
    if (failed) return "write " + std::to_string(j) + " succeeded after an earlier one failed";
    if (std::memcmp(target + j * kLen, src + j * kLen, kLen) != 0)
      return "write " + std::to_string(j) + " succeeded but is not in the target";
  }
  if (snapshot && std::memcmp(target, snapshot, kTarget) != 0)
    return "bytes landed in the target after the change returned";
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "";
  const Change change = what == "modify_err" ? Change::modify_err
                        : what == "dereg"    ? Change::dereg
                        : what == "exit"     ? Change::exit
                                             : (die("usage: sem_mapped_race <modify_err|dereg|exit> [rounds]"), Change::exit);
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 50;
  Env e = open_env();
  ibv_cq* scq = make_cq(e, 512);
  ibv_cq* rcq = make_cq(e, 64);
  QpCaps caps;
  caps.send_wr = 256;
  ibv_qp* s = make_qp(e, scq, rcq, caps);
  ibv_qp* r = change == Change::exit ? nullptr : make_qp(e, rcq, rcq, caps);
  uint8_t* src = alloc(kWrites * kLen);
  ibv_mr* smr = reg(e, src, kWrites * kLen, IBV_ACCESS_LOCAL_WRITE);
  // Shared, so that the exit case's child registers it and this process reads it after.
  auto* target = static_cast<uint8_t*>(mmap(nullptr, kTarget, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  if (target == MAP_FAILED) die("mmap target");
  std::vector<uint8_t> snapshot(kTarget);
  stall_watchdog(60, "mapped_race stalled", [] { return g_round.load(); });
  std::mt19937 rng(2828);
  std::string violation;
  int ok_writes = 0, failed_writes = 0;
  for (int i = 0; i < rounds && violation.empty(); ++i, g_round.store(static_cast<uint64_t>(i))) {
    std::memset(target, 0, kTarget);
    fill(src, kWrites * kLen, static_cast<uint64_t>(i) + 1);
    ibv_mr* tmr = nullptr;
    Child child;
    uint32_t rkey;
    if (change == Change::exit) {
      child = spawn(target);
      ChildHello h{};
      if (read(child.from, &h, sizeof h) != sizeof h) die("the child's hello");
      connect(e, s, h.qpn);
      if (write(child.to, &s->qp_num, sizeof s->qp_num) != sizeof s->qp_num) die("to the child");
      char ready;
      if (read(child.from, &ready, 1) != 1) die("the child's ready");
      rkey = h.rkey;
    } else {
      tmr = reg(e, target, kTarget, kRemote);
      connect_pair(e, s, r);
      rkey = tmr->rkey;
    }
    Stream st{s, src, smr->lkey, rkey, reinterpret_cast<uintptr_t>(target)};
    const int at = static_cast<int>(rng() % (kWrites * 3 / 4));
    std::thread sender([&] { st.run(); });
    while (st.posted.load(std::memory_order_acquire) < at) std::this_thread::yield();
    switch (change) {
      case Change::modify_err:
        to_err(r);
        break;
      case Change::dereg:
        if (ibv_dereg_mr(tmr)) die("ibv_dereg_mr");
        tmr = nullptr;
        break;
      case Change::exit: {
        char go = 1;
        if (write(child.to, &go, 1) != 1) die("go");
        int stw = 0;
        waitpid(child.pid, &stw, 0);
        close(child.to);
        close(child.from);
        break;
      }
    }
    const int after = st.posted.load(std::memory_order_acquire);
    std::memcpy(snapshot.data(), target, kTarget);
    // Some writes after the change, each of which must meet it.
    while (st.posted.load(std::memory_order_acquire) < after + 8 && !st.done.load(std::memory_order_acquire))
      std::this_thread::yield();
    st.stop.store(true, std::memory_order_release);
    sender.join();
    const int posted = st.posted.load();
    // What completes by itself, until 20 ms pass without a completion; then the rest flushed.
    std::vector<ibv_wc> wcs;
    for (size_t had = ~size_t{0}; wcs.size() != had && wcs.size() < static_cast<size_t>(posted);) {
      had = wcs.size();
      collect(scq, wcs, static_cast<size_t>(posted), 20);
    }
    to_err(s);
    collect(scq, wcs, static_cast<size_t>(posted), 5000);
    collect_extra(scq, wcs, 5);
    violation = check_round(wcs, posted, after, src, target, change == Change::modify_err ? nullptr : snapshot.data(),
                            &ok_writes, &failed_writes);
    if (!violation.empty()) violation = "round " + std::to_string(i) + ": " + violation;
    reset(s);
    if (r) reset(r);
    if (tmr) ibv_dereg_mr(tmr);
  }
  stop_watchdogs();
  std::fprintf(stderr, "info: %s: %d rounds, %d writes succeeded, %d failed\n", what.c_str(), rounds, ok_writes,
               failed_writes);
  out("%s, %d rounds: %s", what.c_str(), rounds,
      violation.empty() ? "every write completed once, each success in the target, none after a failure, "
                          "none posted after the change placed"
                        : violation.c_str());
  return 0;
}
