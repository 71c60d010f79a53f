// Lifecycle and robustness of /dev/unload:
//   kmod_lifecycle pins          the module's own FOLL_PINs balance (regions, arenas, exit)
//   kmod_lifecycle kill N        kill -9 of the sender or the target mid-stream, N times
//   kmod_lifecycle fuzz N SEED   N random ioctl / mmap / uring_cmd calls
//   kmod_lifecycle linger        a QP registered, then destroyed with its device: the
//                                device stays removable (see cmd_linger)
// One line per check; exit 0 pass, 1 fail, 77 skip.
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <random>
#include <vector>

#include "kmod_util.hpp"

using namespace kt;

namespace {

bool wait_readable(int fd, int ms) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, ms) == 1;
}

int cmd_pins() {
  const long long p0 = foll_pins_outstanding(), pp0 = stat("pinned_pages");
  pid_t pid = fork();
  if (pid == 0) {
    int fd = unload_open();
    Rc rc;
    rc_open(&rc);
    std::vector<uint64_t> handles(20);
    int bad = 0;
    for (int i = 0; i < 20; i++) {
      size_t len = 4096 * (1 + i * 7) + (i * 131) % 4096;
      void* b = mmap(nullptr, len + 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      ibv_mr* mr = ibv_reg_mr(rc.pd, static_cast<char*>(b) + (i * 37) % 4096, len,
                              IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
      bad += !mr || reg_mr(fd, mr, UNLOAD_ACCESS_LOCAL_WRITE | UNLOAD_ACCESS_REMOTE_WRITE, &handles[i]) != 0;
    }
    for (int i = 0; i < 10; i++) bad += dereg_region(fd, handles[i]) != 0;
    unload_arena a{};
    a.length = 3 * 4096 + 1;
    bad += uioctl(fd, UNLOAD_IOC_ARENA_ALLOC, &a) != 0;
    void* m = mmap(nullptr, a.length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, a.mmap_offset);
    if (m == MAP_FAILED)
      bad++;
    else
      memset(m, 1, a.length);
    _exit(bad);  // the rest goes with the exit
  }
  int st = 0;
  waitpid(pid, &st, 0);
  const long long p1 = foll_pins_outstanding(), pp1 = stat("pinned_pages");
  expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "pins.calls", "child status %d", WEXITSTATUS(st));
  expect(p1 == p0, "pins.foll_pin_balance", "outstanding %lld -> %lld", p0, p1);
  expect(pp1 == pp0, "pins.pinned_pages", "%lld -> %lld", pp0, pp1);
  expect(stat("sessions") == 0, "pins.sessions", "%lld", stat("sessions"));
  return failures() ? 1 : 0;
}

// One side of a streaming pair; never returns.
[[noreturn]] void side(bool target, int in, int out, int ready) {
  Rc rc;
  rc_open(&rc);
  int fd = unload_open();
  static uint8_t buf[65536];
  ibv_mr* mr = ibv_reg_mr(rc.pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (!mr) _exit(3);
  // Both sides: the target's region takes the writes, the sender's is their source.
  if (reg_mr(fd, mr, UNLOAD_ACCESS_LOCAL_WRITE | UNLOAD_ACCESS_REMOTE_WRITE)) _exit(4);
  struct {
    Wire w;
    uint32_t rkey;
    uint64_t addr;
  } mine{rc.wire, mr->rkey, reinterpret_cast<uintptr_t>(buf)}, theirs;
  xwrite(out, &mine, sizeof mine);
  xread(in, &theirs, sizeof theirs);
  rc_connect(&rc, theirs.w);
  if (reg_qp(fd, rc.dev.c_str(), rc.wire.qpn)) _exit(5);
  char c = 'R';
  xwrite(ready, &c, 1);
  if (target)
    for (;;) pause();
  std::vector<unload_direct_req> reqs(16);
  uint64_t n = 0;
  for (;;) {
    for (auto& r : reqs) {
      r = {};
      r.qp_num = rc.wire.qpn;
      r.rkey = theirs.rkey;
      uint64_t len = 1 + (n++ * 977) % 32768;
      r.remote_addr = theirs.addr + (n * 131) % (sizeof buf - len);
      r.length = len;
      r.iov = reinterpret_cast<uintptr_t>(buf);
      r.lkey = mr->lkey;
    }
    unload_submit s{};
    s.reqs = reinterpret_cast<uintptr_t>(reqs.data());
    s.count = 16;
    ioctl(fd, UNLOAD_IOC_SUBMIT, &s);
  }
}

int cmd_kill(int n) {
  std::mt19937 rng(7);
  const long long s0 = stat("sessions"), pp0 = stat("pinned_pages");
  const long long w0 = stat("writes_direct"), pins0 = foll_pins_outstanding();
  int not_ready = 0;
  const time_t t0 = time(nullptr);
  for (int i = 0; i < n; i++) {
    int ts[2], st_[2], rd[2];
    if (pipe(ts) || pipe(st_) || pipe(rd)) die("pipe");
    pid_t t = fork();
    if (t == 0) side(true, st_[0], ts[1], rd[1]);
    pid_t s = fork();
    if (s == 0) side(false, ts[0], st_[1], rd[1]);
    char c;
    int ready = 0;
    while (ready < 2 && wait_readable(rd[0], 20000) && read(rd[0], &c, 1) == 1) ready++;
    if (ready < 2) not_ready++;
    usleep(rng() % 20000);  // mid-stream
    pid_t first = i % 2 ? t : s, second = i % 2 ? s : t;
    kill(first, SIGKILL);
    waitpid(first, nullptr, 0);
    usleep(rng() % 5000);  // the survivor keeps going a little
    kill(second, SIGKILL);
    waitpid(second, nullptr, 0);
    for (int fd : {ts[0], ts[1], st_[0], st_[1], rd[0], rd[1]}) close(fd);
  }
  const long long s1 = stat("sessions"), pp1 = stat("pinned_pages");
  expect(not_ready == 0, "kill.pairs_streamed", "%d pairs, %d never ready, %lld direct writes, %lds", n,
         not_ready, stat("writes_direct") - w0, static_cast<long>(time(nullptr) - t0));
  expect(s1 == s0 && pp1 == pp0, "kill.back_to_baseline", "sessions %lld -> %lld, pinned_pages %lld -> %lld",
         s0, s1, pp0, pp1);
  const long long pins1 = foll_pins_outstanding();
  expect(pins1 == pins0, "kill.foll_pin_balance", "outstanding %lld -> %lld (rxe included)", pins0, pins1);
  return failures() ? 1 : 0;
}

int cmd_fuzz(long n, unsigned seed) {
  const long long pp0 = stat("pinned_pages"), pins0 = foll_pins_outstanding();
  pid_t pid = fork();
  if (pid == 0) {
    std::mt19937_64 rng(seed);
    static uint8_t buf[8192] __attribute__((aligned(4096)));
    static const unsigned long cmds[] = {UNLOAD_IOC_HELLO,
                                         UNLOAD_IOC_REG_QP,
                                         UNLOAD_IOC_UNREG_QP,
                                         UNLOAD_IOC_REG_REGION,
                                         UNLOAD_IOC_DEREG_REGION,
                                         UNLOAD_IOC_ARENA_ALLOC,
                                         UNLOAD_IOC_ARENA_FREE,
                                         UNLOAD_IOC_SUBMIT,
                                         UNLOAD_IOC_QP_CHANGED,
                                         _IOWR(UNLOAD_IOC_MAGIC, 0x08, uint64_t),
                                         _IO(UNLOAD_IOC_MAGIC, 0),
                                         0x5401 /* TCGETS */};
    int fd = open(UNLOAD_DEVICE_PATH, O_RDWR);
    io_uring ring;
    bool have_ring = io_uring_queue_init(8, &ring, 0) == 0;
    long counts[4] = {};
    for (long i = 0; i < n; i++) {
      if (rng() % 500 == 0) {  // a new session now and then
        close(fd);
        fd = open(UNLOAD_DEVICE_PATH, O_RDWR);
      }
      // The argument: a buffer of random bytes, mostly small numbers, or a bad pointer.
      for (size_t k = 0; k < 256; k += 8) {
        uint64_t v = rng();
        switch (v % 6) {
          case 0:
            v = 0;
            break;
          case 1:
            v &= 0xff;
            break;
          case 2:
            v = reinterpret_cast<uintptr_t>(buf) + (v % 8192);
            break;
          case 3:
            v = 1ULL << (v % 64);
            break;
          default:
            break;
        }
        memcpy(buf + k, &v, 8);
      }
      if (rng() % 4 == 0) memcpy(buf, "rxe0\0", 5);
      if (rng() % 3 == 0) {  // hello-like
        uint32_t abi = rng() % 8 ? UNLOAD_ABI_VERSION : static_cast<uint32_t>(rng());
        memset(buf, 0, 64);
        memcpy(buf, &abi, 4);
      }
      static const uint64_t bad_ptrs[] = {
          0, 1, 0xffff888000000000ULL, 0xffffffffff600000ULL, 0x7fffffffe000ULL, ~0ULL};
      void* arg = rng() % 8 == 0 ? reinterpret_cast<void*>(bad_ptrs[rng() % 6]) : buf;
      switch (rng() % 10) {
        case 0: {  // random command number
          unsigned long c = static_cast<uint32_t>(rng());
          ioctl(fd, c, arg);
          counts[0]++;
          break;
        }
        case 1: {  // mmap
          static const uint64_t offs[] = {UNLOAD_MMAP_CONTROL,
                                          UNLOAD_MMAP_COUNTERS,
                                          UNLOAD_MMAP_ARENA_BASE,
                                          UNLOAD_MMAP_ARENA_BASE * 3,
                                          4096,
                                          0x7ffff000};
          size_t len = 4096 * (1 + rng() % 4);
          int prot = rng() % 2 ? PROT_READ : PROT_READ | PROT_WRITE;
          void* m = mmap(nullptr, len, prot, rng() % 4 ? MAP_SHARED : MAP_PRIVATE, fd,
                         static_cast<off_t>(offs[rng() % 6]));
          if (m != MAP_FAILED) {
            volatile uint8_t x = *static_cast<uint8_t*>(m);
            (void)x;
            munmap(m, len);
          }
          counts[1]++;
          break;
        }
        case 2: {  // uring_cmd
          if (!have_ring) break;
          io_uring_sqe* sqe = io_uring_get_sqe(&ring);
          io_uring_prep_rw(IORING_OP_URING_CMD, sqe, fd, nullptr, 0, 0);
          sqe->cmd_op = rng() % 4 ? UNLOAD_URING_SUBMIT : static_cast<uint32_t>(rng());
          unload_uring_submit us{rng() % 2 ? reinterpret_cast<uintptr_t>(buf) : rng(),
                                 static_cast<uint32_t>(rng() % 300), rng() % 8 ? 0u : 1u};
          memcpy(sqe->cmd, &us, sizeof us);
          io_uring_submit(&ring);
          io_uring_cqe* cqe;
          __kernel_timespec ts{5, 0};
          if (io_uring_wait_cqe_timeout(&ring, &cqe, &ts) == 0)
            io_uring_cqe_seen(&ring, cqe);
          else
            _exit(9);  // a uring_cmd never completed
          counts[2]++;
          break;
        }
        default: {
          ioctl(fd, cmds[rng() % (sizeof cmds / sizeof cmds[0])], arg);
          counts[3]++;
          break;
        }
      }
    }
    std::printf("info: fuzz %ld calls: %ld random cmds, %ld mmaps, %ld uring_cmds, %ld ioctls\n", n,
                counts[0], counts[1], counts[2], counts[3]);
    _exit(0);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "fuzz.calls", "%ld calls seed %u, status %d", n, seed,
         WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st));
  const long long pp1 = stat("pinned_pages"), pins1 = foll_pins_outstanding();
  expect(pp1 == pp0 && stat("sessions") == 0, "fuzz.no_leak", "pinned_pages %lld -> %lld, sessions %lld", pp0,
         pp1, stat("sessions"));
  expect(pins1 == pins0, "fuzz.foll_pin_balance", "outstanding %lld -> %lld", pins0, pins1);
  return failures() ? 1 : 0;
}

// Registers a QP with the module, then destroys it and closes the device without
// unregistering it, keeps the session open, says "closed" and sleeps: the module must
// let the RDMA core remove the device meanwhile (its ib_client forgets the QP).
int cmd_linger() {
  const int fd = unload_open();
  Rc rc;
  rc_open(&rc);
  rc_init_only(&rc);
  const int r = reg_qp(fd, rc.dev.c_str(), rc.qp->qp_num);
  if (r != 0) {
    std::printf("linger: reg_qp: %s\n", strerror(-r));
    return 1;
  }
  rc_close(&rc);
  if (ibv_dealloc_pd(rc.pd) || ibv_close_device(rc.ctx)) {
    std::printf("linger: could not close the device\n");
    return 1;
  }
  std::printf("closed\n");
  sleep(60);
  close(fd);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (access(UNLOAD_DEVICE_PATH, F_OK)) skip("no /dev/unload (module not loaded)");
  std::string cmd = argc > 1 ? argv[1] : "";
  if (cmd == "pins") return cmd_pins();
  if (cmd == "linger") return cmd_linger();
  if (cmd == "kill") return cmd_kill(argc > 2 ? atoi(argv[2]) : 100);
  if (cmd == "fuzz")
    return cmd_fuzz(argc > 2 ? atol(argv[2]) : 20000, argc > 3 ? static_cast<unsigned>(atoi(argv[3])) : 1);
  std::fprintf(stderr, "usage: kmod_lifecycle pins | kill N | fuzz N SEED | linger\n");
  return 2;
}
