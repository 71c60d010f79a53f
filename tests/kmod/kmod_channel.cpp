// The channel between two hosts' modules: probes both ways, past the credits, forged peers, a module gone.
//
//   kmod_channel KO      on both hosts of scripts/sandbox --hosts 2 (UNLOAD_HOST says
//                        which); B reloads KO when A asks it to
//
// The hosts take turns through files in UNLOAD_PAIR_DIR. One line per check with its
// figure; exit 0 pass, 1 fail, 2 set-up, 3 hang, 77 skip.
#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "kmod_util.hpp"

using namespace kt;

namespace {

const char* kDev = "rxe0";  // the link's device in each guest (scripts/sandbox --hosts 2)
std::string pair_dir;

void signal_peer(const char* name) {
  std::string p = pair_dir + "/" + name;
  int fd = open(p.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
  if (fd < 0) die(p.c_str());
  close(fd);
}

void await(const char* name, int seconds = 300) {
  std::string p = pair_dir + "/" + name;
  struct stat st;
  for (int i = 0; i < seconds * 10; i++) {
    if (stat(p.c_str(), &st) == 0) return;
    usleep(100000);
  }
  hang(("waiting for the peer's " + std::string(name)).c_str(), "no signal file");
}

void peer_gid(const char* addr, uint8_t gid[16]) {
  memset(gid, 0, 16);
  gid[10] = gid[11] = 0xff;
  if (inet_pton(AF_INET, addr, gid + 12) != 1) die("UNLOAD_PEER_ADDR is not an IPv4 address", -EINVAL);
}

unload_channel_probe probe_args(const char* peer, uint32_t len) {
  unload_channel_probe p{};
  snprintf(p.ibdev, sizeof p.ibdev, "%s", kDev);
  p.port = 1;
  p.length = len;
  peer_gid(peer, p.peer_gid);
  return p;
}

int probe(int fd, const char* peer, uint32_t len, unload_channel_probe* out = nullptr) {
  unload_channel_probe p = probe_args(peer, len);
  int r = uioctl(fd, UNLOAD_IOC_CHANNEL_PROBE, &p);
  if (out) *out = p;
  return r;
}

uint32_t segments_for(uint32_t len) {
  return len ? (len + UNLOAD_CHANNEL_SEGMENT - 1) / UNLOAD_CHANNEL_SEGMENT : 1;
}

long long chan_stat(const char* name) {
  std::string v;
  if (!sysfs_read(std::string("channel/") + name, &v)) return -1;
  return atoll(v.c_str());
}

// Sizes around a receive buffer, and the largest probe.
void sizes(int fd, const char* peer, const char* dir, uint64_t* channel) {
  const uint32_t lens[] = {0, 1, UNLOAD_CHANNEL_SEGMENT, UNLOAD_CHANNEL_SEGMENT + 1, UNLOAD_PROBE_MAX_LEN};
  bool one = true;
  for (uint32_t len : lens) {
    unload_channel_probe p{};
    int r = probe(fd, peer, len, &p);
    expect(r == 0 && p.segments == segments_for(len) && p.state == UNLOAD_CHANNEL_UP,
           (std::string(dir) + ".len_" + std::to_string(len)).c_str(),
           "rc %d, %u segments (want %u), rtt %.1f us, channel %llu, state %u", r, p.segments,
           segments_for(len), p.rtt_ns / 1e3, (unsigned long long)p.channel_id, p.state);
    if (*channel && p.channel_id != *channel) one = false;
    if (!*channel) *channel = p.channel_id;
  }
  expect(one, (std::string(dir) + ".one_channel").c_str(), "every size on channel %llu",
         (unsigned long long)*channel);
}

void bad_args(int fd, const char* peer) {
  unload_channel_probe p = probe_args(peer, 1);
  p.reserved[2] = 1;
  int r = uioctl(fd, UNLOAD_IOC_CHANNEL_PROBE, &p);
  expect(r == -EINVAL, "args.reserved_set", "rc %d", r);
  p = probe_args(peer, 1);
  p.flags = UNLOAD_PROBE_EXISTING << 1;
  r = uioctl(fd, UNLOAD_IOC_CHANNEL_PROBE, &p);
  expect(r == -EINVAL, "args.unknown_flag", "rc %d", r);
  p = probe_args(peer, UNLOAD_PROBE_MAX_LEN + 1);
  r = uioctl(fd, UNLOAD_IOC_CHANNEL_PROBE, &p);
  expect(r == -EINVAL, "args.length_over_max", "rc %d", r);
  p = probe_args(peer, 1);
  memset(p.peer_gid, 0, 16);
  p.peer_gid[0] = 0xfe;
  p.peer_gid[1] = 0x80;
  p.peer_gid[15] = 1;
  r = uioctl(fd, UNLOAD_IOC_CHANNEL_PROBE, &p);
  expect(r == -EAFNOSUPPORT, "args.gid_not_ipv4", "rc %d", r);
  p = probe_args(peer, 1);
  snprintf(p.ibdev, sizeof p.ibdev, "nosuchdev");
  r = uioctl(fd, UNLOAD_IOC_CHANNEL_PROBE, &p);
  expect(r == -ENETUNREACH, "args.other_device", "rc %d", r);
}

// 8 threads, 8 probes of 64 KiB each: up to 8 x 17 segments in flight, past the
// channel's 32 credits.
void concurrent(int fd, const char* peer) {
  constexpr int kThreads = 8, kEach = 8;
  constexpr uint32_t kLen = 64 * 1024;
  std::atomic<int> good{0}, first_bad{0};
  const double t0 = now_s();
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; t++)
    ts.emplace_back([&] {
      for (int i = 0; i < kEach; i++) {
        int r = probe(fd, peer, kLen);
        if (r == 0)
          good++;
        else if (!first_bad)
          first_bad = r;
      }
    });
  for (auto& t : ts) t.join();
  const double s = now_s() - t0;
  expect(good == kThreads * kEach, "a_to_b.concurrent_8x8x64KiB",
         "%d/%d verified in %.2f s (%.1f MB/s echoed), first error %d", good.load(), kThreads * kEach, s,
         kThreads * kEach * kLen / s / 1e6, first_bad.load());
}

// A peer that is not a module: a userspace rdma_cm client on the channel's port, speaking
// the wire format (kmod/channel_wire.h, restated here as the documentation gives it).
struct WireHello {
  uint16_t magic;
  uint8_t version, reserved0;
  uint16_t ring, buf_size;
  uint32_t reserved[2];
};
struct WireHdr {
  uint16_t magic;
  uint8_t version, type;
  uint16_t credits, reserved0;
  uint64_t id;
  uint32_t total, off, seg;
  int32_t status;
  uint64_t reserved1;
};
static_assert(sizeof(WireHello) == 16 && sizeof(WireHdr) == 40, "the documented wire layout");
constexpr uint16_t kMagic = 0x4c55;
constexpr uint8_t kVersion = 2;
enum : uint8_t { kCredit = 1, kEcho = 2, kAck = 3, kBye = 5 };

WireHello good_hello() {
  return WireHello{kMagic, kVersion, 0, 32, 4096, {0, 0}};
}
WireHdr hdr(uint8_t type, uint64_t id, uint32_t total, uint32_t off, uint32_t seg) {
  return WireHdr{kMagic, kVersion, type, 0, 0, id, total, off, seg, 0, 0};
}

struct Forged {
  rdma_event_channel* ec = nullptr;
  rdma_cm_id* id = nullptr;
  ibv_mr* mr = nullptr;
  alignas(64) uint8_t buf[2][4096];
};

// The next event within ms, acked; -1 if none came.
int next_event(Forged* f, int ms, int* status = nullptr) {
  pollfd p{f->ec->fd, POLLIN, 0};
  if (poll(&p, 1, ms) != 1) return -1;
  rdma_cm_event* ev;
  if (rdma_get_cm_event(f->ec, &ev)) return -1;
  int type = ev->event;
  if (status) *status = ev->status;
  rdma_ack_cm_event(ev);
  return type;
}

// Connected to the peer module's channel port: the event that ended the attempt.
int forge_open(Forged* f, const char* peer, const WireHello& hello) {
  f->ec = rdma_create_event_channel();
  if (!f->ec || rdma_create_id(f->ec, &f->id, nullptr, RDMA_PS_TCP)) die("rdma_create_id");
  sockaddr_in dst{};
  dst.sin_family = AF_INET;
  dst.sin_port = htons(UNLOAD_CHANNEL_PORT);
  inet_pton(AF_INET, peer, &dst.sin_addr);
  if (rdma_resolve_addr(f->id, nullptr, reinterpret_cast<sockaddr*>(&dst), 2000) ||
      next_event(f, 5000) != RDMA_CM_EVENT_ADDR_RESOLVED)
    die("rdma_resolve_addr", -EHOSTUNREACH);
  if (rdma_resolve_route(f->id, 2000) || next_event(f, 5000) != RDMA_CM_EVENT_ROUTE_RESOLVED)
    die("rdma_resolve_route", -EHOSTUNREACH);
  ibv_qp_init_attr qa{};
  qa.cap.max_send_wr = qa.cap.max_recv_wr = 4;
  qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
  qa.qp_type = IBV_QPT_RC;
  qa.sq_sig_all = 1;
  if (rdma_create_qp(f->id, nullptr, &qa)) die("rdma_create_qp");
  f->mr = ibv_reg_mr(f->id->pd, f->buf, sizeof f->buf, IBV_ACCESS_LOCAL_WRITE);
  if (!f->mr) die("ibv_reg_mr");
  ibv_sge sge{reinterpret_cast<uintptr_t>(f->buf[1]), 4096, f->mr->lkey};
  ibv_recv_wr rwr{}, *bad;
  rwr.sg_list = &sge;
  rwr.num_sge = 1;
  if (ibv_post_recv(f->id->qp, &rwr, &bad)) die("ibv_post_recv");
  rdma_conn_param cp{};
  cp.private_data = &hello;
  cp.private_data_len = sizeof hello;
  cp.retry_count = 7;
  cp.rnr_retry_count = 7;
  if (rdma_connect(f->id, &cp)) die("rdma_connect");
  return next_event(f, 5000);
}

void forge_close(Forged* f) {
  rdma_disconnect(f->id);
  if (f->id->qp) rdma_destroy_qp(f->id);
  if (f->mr) ibv_dereg_mr(f->mr);
  while (next_event(f, 0) >= 0) {
  }
  rdma_destroy_id(f->id);
  rdma_destroy_event_channel(f->ec);
}

// One message of header h and `len` bytes on the wire (len may disagree with h.seg).
bool forge_send(Forged* f, const WireHdr& h, const void* payload, uint32_t len) {
  memcpy(f->buf[0], &h, sizeof h);
  if (len > sizeof h) memcpy(f->buf[0] + sizeof h, payload, len - sizeof h);
  ibv_sge sge{reinterpret_cast<uintptr_t>(f->buf[0]), len, f->mr->lkey};
  ibv_send_wr wr{}, *bad;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  if (ibv_post_send(f->id->qp, &wr, &bad)) return false;
  ibv_wc wc;
  for (int i = 0; i < 5000; i++) {
    int n = ibv_poll_cq(f->id->send_cq, 1, &wc);
    if (n) return n == 1 && wc.status == IBV_WC_SUCCESS;
    usleep(1000);
  }
  return false;
}

constexpr int kForgedBad = 8;

void forge(const char* peer) {
  // A well-formed echo from a program is answered as the format says.
  Forged f;
  int ev = forge_open(&f, peer, good_hello());
  WireHdr h = hdr(kEcho, 7, 5, 0, 5);
  bool sent = ev == RDMA_CM_EVENT_ESTABLISHED && forge_send(&f, h, "hello", sizeof h + 5);
  ibv_wc wc{};
  int n = 0;
  for (int i = 0; sent && !n && i < 5000; i++) {
    n = ibv_poll_cq(f.id->recv_cq, 1, &wc);
    if (!n) usleep(1000);
  }
  WireHdr a{};
  memcpy(&a, f.buf[1], sizeof a);
  expect(n == 1 && wc.status == IBV_WC_SUCCESS && wc.byte_len == sizeof a + 5 && a.type == kAck &&
             a.id == 7 && a.status == 0 && a.total == 5 && a.seg == 5 &&
             !memcmp(f.buf[1] + sizeof a, "hello", 5),
         "forge.echo_answered", "event %d, completion %d, %u bytes, type %u id %llu status %d", ev, n,
         wc.byte_len, a.type, (unsigned long long)a.id, a.status);
  forge_close(&f);

  WireHello bad_hello = good_hello();
  bad_hello.version = 9;
  Forged g;
  ev = forge_open(&g, peer, bad_hello);
  expect(ev == RDMA_CM_EVENT_REJECTED, "forge.hello_version_rejected", "event %d", ev);
  forge_close(&g);

  // Each malformed message takes its connection down (the module closes it).
  struct Case {
    const char* name;
    WireHdr h;
    uint32_t len;
  } cases[kForgedBad] = {
      {"forge.bad_version", hdr(kEcho, 1, 0, 0, 0), 40},
      {"forge.reserved_set", hdr(kEcho, 1, 0, 0, 0), 40},
      {"forge.length_mismatch", hdr(kEcho, 1, 10, 0, 10), 40},
      {"forge.ack_unknown_id", hdr(kAck, 99, 0, 0, 0), 40},
      {"forge.segment_out_of_order", hdr(kEcho, 1, 8000, UNLOAD_CHANNEL_SEGMENT, 16), 56},
      {"forge.credits_past_ring", hdr(kCredit, 0, 0, 0, 0), 40},
      {"forge.over_max_length", hdr(kEcho, 1, UNLOAD_PROBE_MAX_LEN + 1, 0, 16), 56},
      {"forge.bye_with_id", hdr(kBye, 7, 0, 0, 0), 40},  // a goodbye carries no id
  };
  cases[0].h.version = kVersion + 1;
  cases[1].h.reserved1 = 1;
  cases[5].h.credits = 1;
  static const uint8_t zeros[64] = {};
  for (auto& c : cases) {
    Forged x;
    ev = forge_open(&x, peer, good_hello());
    sent = ev == RDMA_CM_EVENT_ESTABLISHED && forge_send(&x, c.h, zeros, c.len);
    const double t0 = now_s();
    int down = sent ? next_event(&x, 10000) : -1;
    // A message that reaches the module before its side of the connect completes is
    // refused the same way, but the close is then a reject.
    expect(down == RDMA_CM_EVENT_DISCONNECTED || down == RDMA_CM_EVENT_REJECTED, c.name,
           "connect event %d, sent %d, then event %d after %.2f s", ev, sent, down, now_s() - t0);
    forge_close(&x);
  }
}

// A process killed while its 1 MiB probes are on the wire: a message it started is
// finished, its requests are let go when their acks come, and the channel, shared, stays.
void killed_mid_probe(int fd, const char* peer, uint64_t chan) {
  int killed = 0;
  for (int round = 0; round < 3; round++) {
    pid_t pid = fork();
    if (pid == 0) {
      int cfd = unload_open();
      for (;;) probe(cfd, peer, UNLOAD_PROBE_MAX_LEN);
    }
    usleep(150000 + round * 100000);
    kill(pid, SIGKILL);
    int st = 0;
    waitpid(pid, &st, 0);
    killed += WIFSIGNALED(st);
  }
  unload_channel_probe p{};
  int r = probe(fd, peer, 100000, &p);
  expect(killed == 3 && r == 0 && p.channel_id == chan, "a_to_b.killed_mid_probe",
         "%d/3 children killed mid-probe, then rc %d on channel %llu (was %llu)", killed, r,
         (unsigned long long)p.channel_id, (unsigned long long)chan);
}

// UNLOAD_PROBE_EXISTING asks only a channel already up: none to a host no channel goes to
// (192.0.2.99: the link's range, no such host), and no connect to it (the channels open and
// opened stay as they were); the one the probes use to the peer.
void existing_only(int fd, const char* peer, uint64_t chan) {
  unload_channel_probe p = probe_args(chan ? peer : "192.0.2.99", 8);
  p.flags = UNLOAD_PROBE_EXISTING;
  const long long opened = chan_stat("opened"), open = chan_stat("open");
  int r = uioctl(fd, UNLOAD_IOC_CHANNEL_PROBE, &p);
  if (!chan) {
    expect(r == -ENOTCONN && chan_stat("opened") == opened && chan_stat("open") == open, "a.existing_none",
           "rc %d, opened %lld -> %lld, open %lld -> %lld", r, opened, chan_stat("opened"), open,
           chan_stat("open"));
    return;
  }
  expect(r == 0 && p.channel_id == chan && p.state == UNLOAD_CHANNEL_UP, "a.existing_up",
         "rc %d, channel %llu (the probes' %llu), state %u", r, (unsigned long long)p.channel_id,
         (unsigned long long)chan, p.state);
}

int host_a(const char* peer) {
  await("B.ready");
  int fd = unload_open();
  uint64_t chan = 0;
  existing_only(fd, peer, 0);
  sizes(fd, peer, "a_to_b", &chan);
  existing_only(fd, peer, chan);
  bad_args(fd, peer);
  concurrent(fd, peer);
  expect(chan_stat("open") >= 1 && chan_stat("bad_messages") == 0 && chan_stat("opened") >= 1,
         "a.sysfs_counters",
         "open %lld, opened %lld, messages sent %lld / received %lld, bytes sent %lld, bad %lld",
         chan_stat("open"), chan_stat("opened"), chan_stat("messages_sent"), chan_stat("messages_received"),
         chan_stat("bytes_sent"), chan_stat("bad_messages"));
  // In a child: librdmacm keeps every device open for its process's life, and the
  // device removal below waits for whoever has it open.
  pid_t pid = fork();
  if (pid == 0) {
    forge(peer);
    _exit(failures() ? 1 : 0);
  }
  int fst = 0;
  waitpid(pid, &fst, 0);
  expect(WIFEXITED(fst) && WEXITSTATUS(fst) == 0, "forge.all", "the forging child's status %d", fst);
  killed_mid_probe(fd, peer, chan);
  signal_peer("A.done");
  await("B.done");

  // B unloads its module, channel up: the next probes fail with a clear errno, quickly.
  signal_peer("B.rmmod");
  await("B.gone");
  double t0 = now_s();
  unload_channel_probe p{};
  int r = probe(fd, peer, 4096, &p);
  double s = now_s() - t0;
  expect((r == -ECONNREFUSED || r == -ECONNRESET) && s < 20, "no_module.first_probe", "rc %d (%s) in %.2f s",
         r, strerror(-r), s);
  t0 = now_s();
  r = probe(fd, peer, 4096, &p);
  s = now_s() - t0;
  expect(r == -ECONNREFUSED && s < 10 && p.state == UNLOAD_CHANNEL_NONE, "no_module.refused",
         "rc %d (%s) in %.2f s", r, strerror(-r), s);

  // B loads it again: a new channel, and echoes verified on it.
  signal_peer("B.insmod");
  await("B.back");
  r = probe(fd, peer, 100000, &p);
  expect(r == 0 && p.channel_id != chan, "reload.probe", "rc %d, channel %llu (was %llu), rtt %.1f us", r,
         (unsigned long long)p.channel_id, (unsigned long long)chan, p.rtt_ns / 1e3);
  // The device goes with the channel up: the channel is torn down before it, and the
  // peer sees its side closed.
  const double t1 = now_s();
  const int st = system("rdma link delete rxe0");
  expect(st == 0 && chan_stat("open") == 0, "a.device_removed_channel_up", "status %d in %.2f s, open %lld",
         st, now_s() - t1, chan_stat("open"));
  r = probe(fd, peer, 1, &p);
  expect(r < 0, "a.probe_without_device", "rc %d (%s)", r, strerror(-r));
  close(fd);
  signal_peer("A.end");
  finish();
}

int host_b(const char* peer, const char* ko) {
  signal_peer("B.ready");
  await("A.done");
  int fd = unload_open();
  // The channel A opened serves B's requests too: B finds it, passive.
  for (uint32_t len : {0u, UNLOAD_PROBE_MAX_LEN}) {
    unload_channel_probe p{};
    int r = probe(fd, peer, len, &p);
    expect(r == 0 && p.passive == 1 && p.segments == segments_for(len),
           ("b_to_a.len_" + std::to_string(len)).c_str(),
           "rc %d, %u segments, rtt %.1f us, channel %llu, opened by %s", r, p.segments, p.rtt_ns / 1e3,
           (unsigned long long)p.channel_id, p.passive ? "A (the same channel)" : "B (a second channel)");
  }
  // The same through the tool: `unloadctl probe` over the same channel.
  const char* build = getenv("UNLOAD_BUILD_DIR");
  if (build) {
    std::string cmd = std::string(build) + "/tools/unloadctl/unloadctl probe -c 3 -s 4096 " + peer;
    const int st = system(cmd.c_str());
    expect(st == 0, "b_to_a.unloadctl_probe", "`unloadctl probe -c 3 -s 4096 %s`: status %d", peer, st);
  } else {
    skip_check("b_to_a.unloadctl_probe", "no UNLOAD_BUILD_DIR");
  }
  expect(chan_stat("bad_messages") == kForgedBad && chan_stat("errors") >= kForgedBad,
         "b.bad_messages_counted", "bad_messages %lld (A forged %d), errors %lld, open %lld",
         chan_stat("bad_messages"), kForgedBad, chan_stat("errors"), chan_stat("open"));
  close(fd);
  signal_peer("B.done");

  await("B.rmmod");
  double t0 = now_s();
  int st = system("rmmod unload");
  expect(st == 0, "b.rmmod_channel_up", "status %d in %.2f s", st, now_s() - t0);
  signal_peer("B.gone");
  await("B.insmod");
  st = system((std::string("insmod ") + ko + " && chmod 0666 /dev/unload").c_str());
  expect(st == 0, "b.insmod_again", "status %d", st);
  signal_peer("B.back");
  await("A.end");
  // A's device went with the channel up: B's side was closed by the disconnect.
  for (int i = 0; i < 50 && chan_stat("open") != 0; i++) usleep(100000);
  expect(chan_stat("open") == 0, "b.peer_device_removed", "open %lld, errors %lld", chan_stat("open"),
         chan_stat("errors"));
  finish();
}

}  // namespace

int main(int argc, char** argv) {
  const char* host = getenv("UNLOAD_HOST");
  const char* peer = getenv("UNLOAD_PEER_ADDR");
  const char* dir = getenv("UNLOAD_PAIR_DIR");
  if (!host || !peer || !dir) skip("not on two hosts (UNLOAD_HOST, UNLOAD_PEER_ADDR, UNLOAD_PAIR_DIR)");
  if (argc != 2) die("usage: kmod_channel KO", -EINVAL);
  pair_dir = dir;
  watchdog(600, "kmod_channel");
  return std::string(host) == "A" ? host_a(peer) : host_b(peer, argv[1]);
}
