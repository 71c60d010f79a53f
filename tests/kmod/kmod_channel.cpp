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
#include <grp.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "channel_forge.hpp"
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

// An address of the link's subnet no host answers at: a channel to it is listed while it
// resolves, and then fails (never -EBUSY or -EDQUOT, which only the bounds give).
constexpr const char* kNoHost = "192.0.2.200";

// A probe to peer by a process of uid `uid` with a session of its own: its rc, or 2 when
// the child could not run. The channel it opens is charged to that uid.
int probe_as(int uid, const char* peer);

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

// The victim: a QP of a process on B under its module, with a region that takes remote
// writes, connected to a QP on A; what a forger on A names in its writes.
struct Victim {
  Wire b, a;  // B's responder QP and A's QP it is connected to
  uint32_t rkey;
  uint64_t addr;
};
constexpr size_t kVictimLen = 4096;
constexpr size_t kUnprovenOff = 0, kProvenOff = 64, kVictimWrite = 16;

long long chan_stat(const char* name) {
  std::string v;
  if (!sysfs_read(std::string("channel/") + name, &v)) return -1;
  return atoll(v.c_str());
}

int probe_as(int uid, const char* peer) {
  const pid_t pid = fork();
  if (pid < 0) die("fork");
  if (pid == 0) {
    if (setgroups(0, nullptr) || setresgid(uid, uid, uid) || setresuid(uid, uid, uid)) _exit(2);
    const int cfd = unload_open();
    const int r = probe(cfd, peer, 64);
    _exit(r == 0 ? 0 : r == -EDQUOT ? 3 : r == -EBUSY ? 4 : 5);
  }
  int st = 0;
  if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st)) return 2;
  switch (WEXITSTATUS(st)) {
    case 0: return 0;
    case 3: return -EDQUOT;
    case 4: return -EBUSY;
    case 5: return -EIO;  // another failure: what a host that is not there gives
    default: return 2;
  }
}

// channels_max and user_channels_max (the channel to peer up, opened by root's fd): past
// channels_max a probe is refused at once, before anything goes on the wire; a user holds
// at most user_channels_max channels it opened, root is not bounded, and a channel's
// charge goes with it when it closes.
void channel_bounds(int fd, const char* peer) {
  const std::string open_now = std::to_string(chan_stat("open"));
  int w = sysfs_write("channels_max", open_now);
  int r = probe(fd, kNoHost, 64);
  expect(w == 0 && r == -EBUSY, "a.channels_max_refuses", "channels_max %s: rc %d (%s)", open_now.c_str(), r,
         strerror(-r));
  sysfs_write("channels_max", "1024");
  // uid 65534 opens the channel to peer itself (root's reaped first), then may open no other.
  for (int i = 0; i < 100 && chan_stat("open") != 0; i++) usleep(100000);
  const int own = probe_as(65534, peer);
  w = sysfs_write("user_channels_max", "1");
  const int over = probe_as(65534, kNoHost);
  const int other = probe_as(65533, kNoHost);
  r = probe(fd, kNoHost, 64);
  expect(own == 0 && w == 0 && over == -EDQUOT && other != -EDQUOT && other != 2 && r != -EDQUOT,
         "a.user_channels_max_refuses", "own %d, over %d, another user %d, root %d", own, over, other, r);
  // The user's channel reaped: its charge is returned.
  for (int i = 0; i < 100 && chan_stat("open") != 0; i++) usleep(100000);
  const int after = probe_as(65534, kNoHost);
  expect(after != -EDQUOT && after != 2, "a.user_channel_uncharged_at_close",
         "rc %d after its channel closed", after);
  sysfs_write("user_channels_max", "256");
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

constexpr int kForgedBad = 8;
constexpr int kUnprovenMax = 4;  // kmod/channel.c's UNLOAD_CHAN_UNPROVEN_MAX

// A peer without the key, as an unprivileged user (uid 65534): whatever it sends is refused
// unread and its connection let go; only UNLOAD_CHAN_UNPROVEN_MAX such connections are held
// at once. B counts the refusals and checks that nothing was placed (host_b).
// One remote write as channel_wire.h has it: its header and kVictimWrite bytes of `fill`.
struct VictimWrite {
  uint32_t src_qpn, dst_qpn, rkey, length;
  uint64_t remote_addr, reserved;
  uint8_t data[kVictimWrite];
};
static_assert(sizeof(VictimWrite) == 48, "the documented write");

VictimWrite victim_write(const Victim& v, size_t off, uint8_t fill) {
  VictimWrite w{v.a.qpn, v.b.qpn, v.rkey, kVictimWrite, v.addr + off, 0, {}};
  memset(w.data, fill, sizeof w.data);
  return w;
}

void forge_unproven(const char* peer, const Victim& v) {
  if (setgroups(0, nullptr) || setresgid(65534, 65534, 65534) || setresuid(65534, 65534, 65534))
    die("dropping to uid 65534");
  WireHello old = good_hello();
  old.version = 2;
  Forged v2;
  int ev = forge_open(&v2, peer, old, 16);  // the hello of version 2: no nonce
  expect(ev == RDMA_CM_EVENT_REJECTED, "unproven.hello_v2_rejected", "event %d", ev);
  forge_close(&v2);

  // Each request a peer could send first: none answered, each connection closed by B.
  // The write names B's victim exactly (its QP, the QP it is connected to, its rkey and
  // address): a proven peer's is placed (forge_proven), this one must not be.
  const VictimWrite vw = victim_write(v, kUnprovenOff, 0xAB);
  const WireHdr w = hdr(kWrite, 1, sizeof vw, 0, sizeof vw);
  uint8_t wrong[32];
  if (getrandom(wrong, sizeof wrong, 0) != sizeof wrong) die("getrandom");
  struct Case {
    const char* name;
    WireHdr h;
    const void* body;
    uint32_t len;
  } cases[] = {
      {"unproven.echo_refused", hdr(kEcho, 7, 5, 0, 5), "hello", sizeof(WireHdr) + 5},
      {"unproven.victim_write_refused", w, &vw, sizeof(WireHdr) + sizeof vw},
      {"unproven.wrong_proof_refused", hdr(kAuth, 0, 32, 0, 32), wrong, sizeof(WireHdr) + 32},
  };
  for (const Case& c : cases) {
    Forged x;
    ev = forge_open(&x, peer, good_hello());
    const bool proved = ev == RDMA_CM_EVENT_ESTABLISHED && x.reply_len == sizeof(WireHelloReply);
    const bool sent = proved && forge_send(&x, c.h, c.body, c.len);
    const int answer = sent ? forge_recv(&x, 2000) : -1;
    const int down = sent ? next_event(&x, 10000) : -1;
    expect(proved && answer < 0 && (down == RDMA_CM_EVENT_DISCONNECTED || down == RDMA_CM_EVENT_REJECTED),
           c.name, "connect event %d (accept's proof %u bytes), sent %d, answer %d bytes, then event %d", ev,
           x.reply_len, sent, answer, down);
    forge_close(&x);
  }

  // Silence: let go once the proof's time (5 s) is out.
  Forged q;
  ev = forge_open(&q, peer, good_hello());
  const double t0 = now_s();
  const int down = ev == RDMA_CM_EVENT_ESTABLISHED ? next_event(&q, 20000) : -1;
  expect(down == RDMA_CM_EVENT_DISCONNECTED, "unproven.silent_let_go", "connect event %d, then event %d after %.1f s",
         ev, down, now_s() - t0);
  forge_close(&q);

  // A flood of connects: at most kUnprovenMax held unproven at once (one let go by its
  // deadline frees its room), the rest rejected at once.
  constexpr int kFlood = 12;
  Forged flood[kFlood];
  bool up[kFlood] = {};
  int held = 0, most = 0, rejected = 0, other = 0;
  for (int i = 0; i < kFlood; i++) {
    for (int j = 0; j < i; j++)
      if (up[j] && next_event(&flood[j], 0) == RDMA_CM_EVENT_DISCONNECTED) up[j] = false, held--;
    ev = forge_open(&flood[i], peer, good_hello());
    up[i] = ev == RDMA_CM_EVENT_ESTABLISHED;
    held += up[i];
    most = std::max(most, held);
    rejected += ev == RDMA_CM_EVENT_REJECTED;
    other += !up[i] && ev != RDMA_CM_EVENT_REJECTED;
  }
  expect(most <= kUnprovenMax && other == 0, "unproven.flood_bounded",
         "%d connects: at most %d held unproven at once (the bound %d), %d rejected, %d otherwise", kFlood,
         most, kUnprovenMax, rejected, other);
  for (Forged& f : flood) forge_close(&f);
}

// A peer with the key (root reads the sandbox's): the format's checks, one malformed
// message each, behind a valid proof.
void forge_proven(const char* peer, const Victim& v) {
  const std::string key = sandbox_key();
  if (key.empty()) {
    skip_check("proven.*", "no channel key in this sandbox (UNLOAD_CHAN_KEY_FILE)");
    return;
  }
  // A well-formed echo from a program is answered as the format says.
  Forged f;
  int ev = forge_open(&f, peer, good_hello());
  expect(ev == RDMA_CM_EVENT_ESTABLISHED && responder_proof_holds(&f, key), "proven.module_proved_the_key",
         "connect event %d, accept's private data %u bytes", ev, f.reply_len);
  uint8_t proof[32];
  initiator_proof(&f, key, proof);
  WireHdr h = hdr(kEcho, 7, 5, 0, 5);
  const bool sent = ev == RDMA_CM_EVENT_ESTABLISHED && forge_send_auth(&f, proof) &&
                    forge_send(&f, h, "hello", sizeof h + 5);
  const int n = sent ? forge_recv(&f, 5000) : -1;
  WireHdr a{};
  memcpy(&a, f.buf[1], sizeof a);
  expect(n == static_cast<int>(sizeof a + 5) && a.type == kAck && a.id == 7 && a.status == 0 && a.total == 5 &&
             a.seg == 5 && !memcmp(f.buf[1] + sizeof a, "hello", 5),
         "proven.echo_answered", "event %d, %d bytes back, type %u id %llu status %d", ev, n, a.type,
         (unsigned long long)a.id, a.status);
  forge_close(&f);

  // The unproven peer's write, from a peer with the key: placed (B checks the bytes), so
  // it was well-formed and only the proof kept it out.
  {
    Forged pv;
    ev = forge_open(&pv, peer, good_hello());
    initiator_proof(&pv, key, proof);
    const VictimWrite vw = victim_write(v, kProvenOff, 0xCD);
    const bool out = ev == RDMA_CM_EVENT_ESTABLISHED && forge_send_auth(&pv, proof) &&
                     forge_send(&pv, hdr(kWrite, 30, sizeof vw, 0, sizeof vw), &vw, sizeof(WireHdr) + sizeof vw);
    const int got = out ? forge_recv(&pv, 5000) : -1;
    WireHdr ah{};
    uint32_t verdict[2] = {9, 9};
    memcpy(&ah, pv.buf[1], sizeof ah);
    memcpy(verdict, pv.buf[1] + sizeof ah, sizeof verdict);
    expect(got == 48 && ah.type == kAck && ah.id == 30 && verdict[0] == 0 && verdict[1] == 0,
           "proven.victim_write_placed", "ack of %d bytes, type %u id %llu, verdict %u/%u", got, ah.type,
           (unsigned long long)ah.id, verdict[0], verdict[1]);
    forge_close(&pv);
  }

  // Refused writes, for two reasons: the same answer, which says only "refused" (a NIC's
  // NAK names no check either); B counts each reason (host_b).
  Forged r;
  ev = forge_open(&r, peer, good_hello());
  initiator_proof(&r, key, proof);
  bool ok = ev == RDMA_CM_EVENT_ESTABLISHED && forge_send_auth(&r, proof);
  uint8_t acks[2][sizeof(WireHdr) + 8] = {};
  int got[2] = {-1, -1};
  for (int k = 0; k < 2 && ok; k++) {
    struct {
      uint32_t src_qpn, dst_qpn, rkey, length;
      uint64_t remote_addr, reserved;
      uint8_t data[16];
    } w{0x11, k ? 0x12u : 0xfffff0u, 0x1000, k ? 17u : 16u, 0, 0, {}};  // unknown QP; length wrong
    static_assert(sizeof w == 48, "the documented write");
    ibv_recv_wr rwr{}, *bad;
    ibv_sge sge{reinterpret_cast<uintptr_t>(r.buf[1]), 4096, r.mr->lkey};
    rwr.sg_list = &sge;
    rwr.num_sge = 1;
    ok = (k == 0 || !ibv_post_recv(r.id->qp, &rwr, &bad)) &&
         forge_send(&r, hdr(kWrite, 40 + k, sizeof w, 0, sizeof w), &w, sizeof(WireHdr) + sizeof w);
    got[k] = ok ? forge_recv(&r, 5000) : -1;
    memcpy(acks[k], r.buf[1], sizeof acks[k]);
  }
  WireHdr a0{}, a1{};
  memcpy(&a0, acks[0], sizeof a0);
  memcpy(&a1, acks[1], sizeof a1);
  uint32_t v0[2], v1[2];
  memcpy(v0, acks[0] + sizeof a0, 8);
  memcpy(v1, acks[1] + sizeof a1, 8);
  expect(got[0] == 48 && got[1] == 48 && a0.type == kAck && a0.id == 40 && a1.id == 41 && a0.status == 0 &&
             a1.status == 0 && v0[0] == 1 && v0[1] == 0 && v1[0] == 1 && v1[1] == 0,
         "proven.refusals_alike", "acks of %d and %d bytes, ids %llu %llu, verdicts %u/%u and %u/%u", got[0],
         got[1], (unsigned long long)a0.id, (unsigned long long)a1.id, v0[0], v0[1], v1[0], v1[1]);
  forge_close(&r);

  WireHello bad_hello = good_hello();
  bad_hello.version = 9;
  Forged g;
  ev = forge_open(&g, peer, bad_hello);
  expect(ev == RDMA_CM_EVENT_REJECTED, "proven.hello_version_rejected", "event %d", ev);
  forge_close(&g);

  // Each malformed message takes its connection down (the module closes it).
  struct Case {
    const char* name;
    WireHdr h;
    uint32_t len;
  } cases[kForgedBad] = {
      {"proven.bad_version", hdr(kEcho, 1, 0, 0, 0), 40},
      {"proven.reserved_set", hdr(kEcho, 1, 0, 0, 0), 40},
      {"proven.length_mismatch", hdr(kEcho, 1, 10, 0, 10), 40},
      {"proven.ack_unknown_id", hdr(kAck, 99, 0, 0, 0), 40},
      {"proven.segment_out_of_order", hdr(kEcho, 1, 8000, UNLOAD_CHANNEL_SEGMENT, 16), 56},
      {"proven.credits_past_ring", hdr(kCredit, 0, 0, 0, 0), 40},
      {"proven.over_max_length", hdr(kEcho, 1, UNLOAD_PROBE_MAX_LEN + 1, 0, 16), 56},
      {"proven.bye_with_id", hdr(kBye, 7, 0, 0, 0), 40},  // a goodbye carries no id
  };
  cases[0].h.version = kVersion + 1;
  cases[1].h.reserved1 = 1;
  cases[5].h.credits = 1;
  static const uint8_t zeros[64] = {};
  for (auto& c : cases) {
    Forged x;
    ev = forge_open(&x, peer, good_hello());
    initiator_proof(&x, key, proof);
    const bool out = ev == RDMA_CM_EVENT_ESTABLISHED && forge_send_auth(&x, proof) && forge_send(&x, c.h, zeros, c.len);
    const double t0 = now_s();
    const int down = out ? next_event(&x, 10000) : -1;
    // A message that reaches the module before its side of the connect completes is
    // refused the same way, but the close is then a reject.
    expect(down == RDMA_CM_EVENT_DISCONNECTED || down == RDMA_CM_EVENT_REJECTED, c.name,
           "connect event %d, sent %d, then event %d after %.2f s", ev, out, down, now_s() - t0);
    forge_close(&x);
  }
}

// Both forgers, each in a child of its own (the unproven one drops its privileges for good),
// against B's victim, whose peer QP this process opens on A.
void forge(const char* peer) {
  Rc rc;
  rc_open(&rc);
  Victim v{};
  pair_put(pair_dir, "victim.A", &rc.wire, sizeof rc.wire);
  pair_get(pair_dir, "victim.B", &v, sizeof v);
  v.a = rc.wire;
  rc_connect(&rc, v.b);
  await("B.victim_ready");
  for (void (*f)(const char*, const Victim&) : {forge_unproven, forge_proven}) {
    const pid_t pid = fork();
    if (pid == 0) {
      f(peer, v);
      _exit(failures() ? 1 : 0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, f == forge_unproven ? "unproven.all" : "proven.all",
           "the forging child's status %d", st);
  }
  rc_close(&rc);
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

  // B loads it again, with no key first: its listener is closed, as if it had no module.
  signal_peer("B.insmod");
  await("B.nokey");
  r = probe(fd, peer, 4096, &p);
  expect(r == -ECONNREFUSED && p.state == UNLOAD_CHANNEL_NONE, "a.peer_without_key_refused", "rc %d (%s)", r,
         strerror(-r));
  signal_peer("A.nokey_seen");
  // Then with another key than ours: its proof fails here, and we say nothing more.
  await("B.wrongkey");
  const long long refused = chan_stat("auth_refused");
  r = probe(fd, peer, 4096, &p);
  expect(r == -EKEYREJECTED && chan_stat("auth_refused") == refused + 1, "a.peer_wrong_key_refused",
         "rc %d (%s), auth_refused %lld (was %lld)", r, strerror(-r), chan_stat("auth_refused"), refused);
  signal_peer("A.wrongkey_seen");
  // Then with the key: a new channel, and echoes verified on it.
  await("B.back");
  r = probe(fd, peer, 100000, &p);
  expect(r == 0 && p.channel_id != chan, "reload.probe", "rc %d, channel %llu (was %llu), rtt %.1f us", r,
         (unsigned long long)p.channel_id, (unsigned long long)chan, p.rtt_ns / 1e3);
  // A channel idle for channel_idle_ms is closed with a goodbye, and the next caller opens
  // another.
  const long long reaped = chan_stat("reaped"), opened = chan_stat("opened");
  const int w = sysfs_write("channel_idle_ms", "1000");
  for (int i = 0; i < 100 && chan_stat("open") != 0; i++) usleep(100000);
  expect(w == 0 && chan_stat("open") == 0 && chan_stat("reaped") == reaped + 1, "a.idle_channel_reaped",
         "write %d, open %lld, reaped %lld (was %lld)", w, chan_stat("open"), chan_stat("reaped"), reaped);
  r = probe(fd, peer, 4096, &p);
  expect(r == 0 && chan_stat("opened") == opened + 1, "a.reaped_channel_reopened", "rc %d, opened %lld (was %lld)",
         r, chan_stat("opened"), opened);
  channel_bounds(fd, peer);
  sysfs_write("channel_idle_ms", "60000");
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

// 32 random bytes in hex: a key no other host has.
std::string random_key() {
  uint8_t k[32];
  if (getrandom(k, sizeof k, 0) != sizeof k) die("getrandom");
  std::string hex;
  char two[3];
  for (uint8_t b : k) {
    snprintf(two, sizeof two, "%02x", b);
    hex += two;
  }
  return hex;
}

// Slab memory now, in KiB (/proc/meminfo).
long long slab_kib() {
  FILE* f = fopen("/proc/meminfo", "re");
  char line[128];
  long long kib = -1;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "Slab: %lld kB", &kib) == 1) break;
  if (f) fclose(f);
  return kib;
}

int host_b(const char* peer, const char* ko) {
  const long long placed = stat("remote_placed_writes");
  // The victim: a QP and a region of this process, registered with the module.
  Rc victim;
  rc_open(&victim);
  const int vfd = unload_open();
  void* vmem = nullptr;
  if (posix_memalign(&vmem, 4096, kVictimLen)) die("posix_memalign", -ENOMEM);
  memset(vmem, 0, kVictimLen);
  ibv_mr* vmr = ibv_reg_mr(victim.pd, vmem, kVictimLen, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (!vmr) die("ibv_reg_mr");
  if (int r = reg_mr(vfd, vmr, kRegionRw)) die("REG_REGION", r);
  const Victim mine{victim.wire, {}, vmr->rkey, reinterpret_cast<uintptr_t>(vmem)};
  pair_put(pair_dir, "victim.B", &mine, sizeof mine);
  const long long slab0 = slab_kib();
  signal_peer("B.ready");
  Wire a{};
  pair_get(pair_dir, "victim.A", &a, sizeof a);
  rc_connect(&victim, a);
  if (int r = reg_qp(vfd, victim.dev.c_str(), victim.qp->qp_num)) die("REG_QP", r);
  signal_peer("B.victim_ready");
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
  // The peer without the key: its echo, write, wrong proof and silence each refused and
  // counted, nothing placed, and every connection it held let go.
  // The proven forger's two refused writes, each reason counted here (never sent).
  expect(stat("remote_refused_peer_unknown") >= 1 && stat("remote_refused_invalid") >= 1,
         "b.refusal_reasons_counted", "remote_refused_peer_unknown %lld, remote_refused_invalid %lld",
         stat("remote_refused_peer_unknown"), stat("remote_refused_invalid"));
  expect(chan_stat("auth_refused") >= 4 && chan_stat("open") == 1, "b.unproven_refused_counted",
         "auth_refused %lld (at least 4), open %lld (A's)", chan_stat("auth_refused"), chan_stat("open"));
  // In the victim's memory: the proven peer's write and nothing of the unproven one's.
  const auto* vb = static_cast<const uint8_t*>(vmem);
  size_t unproven_bytes = 0, proven_bytes = 0, elsewhere = 0;
  for (size_t i = 0; i < kVictimLen; i++) {
    if (i >= kUnprovenOff && i < kUnprovenOff + kVictimWrite)
      unproven_bytes += vb[i] != 0;
    else if (i >= kProvenOff && i < kProvenOff + kVictimWrite)
      proven_bytes += vb[i] == 0xCD;
    else
      elsewhere += vb[i] != 0;
  }
  expect(unproven_bytes == 0 && proven_bytes == kVictimWrite && elsewhere == 0 &&
             stat("remote_placed_writes") == placed + 1,
         "b.victim_only_proven_write", "unproven write's bytes %zu (want 0), proven's %zu of %zu, others %zu, "
         "placed %lld (was %lld, want +1)", unproven_bytes, proven_bytes, kVictimWrite, elsewhere,
         stat("remote_placed_writes"), placed);
  const long long slab1 = slab_kib();
  expect(slab0 > 0 && slab1 - slab0 < 16 * 1024, "b.slab_bounded",
         "Slab %lld kB before the forgers, %lld kB after (+%lld kB; bound 16 MiB)", slab0, slab1, slab1 - slab0);
  ibv_dereg_mr(vmr);
  free(vmem);
  rc_close(&victim);
  close(vfd);  // before B's module goes below: rmmod waits for no session
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
  // A module loaded anew has no key: closed, and says so.
  std::string listening, installed;
  sysfs_read("channel/listening", &listening);
  sysfs_read("channel/key_installed", &installed);
  const long long no_key = chan_stat("no_key");
  fd = unload_open();
  unload_channel_probe p{};
  int r = probe(fd, peer, 16, &p);
  expect(listening == "0" && installed == "0" && r == -ENOKEY && chan_stat("no_key") == no_key + 1,
         "b.no_key_closed", "listening %s, key_installed %s, probe rc %d (%s), no_key %lld (was %lld)",
         listening.c_str(), installed.c_str(), r, strerror(-r), chan_stat("no_key"), no_key);
  if (build) {
    const std::string cmd = std::string(build) + "/tools/unloadctl/unloadctl status | grep -q 'closed: no key'";
    const int ss = system(cmd.c_str());
    expect(ss == 0, "b.no_key_status_says_why", "`unloadctl status` %s", ss ? "does not say it" : "says it");
  }
  signal_peer("B.nokey");
  await("A.nokey_seen");
  int w = sysfs_write("channel/key", random_key());
  sysfs_read("channel/listening", &listening);
  expect(w == 0 && listening == "1", "b.other_key_listening", "write %d, listening %s", w, listening.c_str());
  // Bad keys change nothing: too short, not hex.
  const int w1 = sysfs_write("channel/key", "abcd"), w2 = sysfs_write("channel/key", std::string(64, 'z'));
  sysfs_read("channel/key_installed", &installed);
  expect(w1 == EINVAL && w2 == EINVAL && installed == "1", "b.bad_key_refused", "short %d, not hex %d, installed %s",
         w1, w2, installed.c_str());
  signal_peer("B.wrongkey");
  await("A.wrongkey_seen");
  // The sandbox's key (scripts/sandbox --chan-key), as the reload of a real host would.
  st = system("[ -n \"$UNLOAD_CHAN_KEY_FILE\" ] && cat \"$UNLOAD_CHAN_KEY_FILE\" >/sys/kernel/unload/channel/key");
  expect(st == 0, "b.key_again", "status %d", st);
  close(fd);
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
