// A peer that is not a module: a userspace rdma_cm client on the channel's port, speaking
// the wire format (kmod/channel_wire.h, restated here as the documentation gives it), with
// or without the cluster's key.
#pragma once

#include <rdma/rdma_cma.h>

#include <cstdint>
#include <string>

namespace kt {

struct WireHello {
  uint16_t magic;
  uint8_t version, reserved0;
  uint16_t ring, buf_size;
  uint32_t reserved[2];
  uint8_t nonce[32];
};
struct WireHelloReply {
  WireHello hello;
  uint8_t proof[32];
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
static_assert(sizeof(WireHello) == 48 && sizeof(WireHelloReply) == 80 && sizeof(WireHdr) == 40,
              "the documented wire layout");
constexpr uint16_t kMagic = 0x4c55;
constexpr uint8_t kVersion = 3;
enum : uint8_t { kCredit = 1, kEcho = 2, kAck = 3, kWrite = 4, kBye = 5, kAuth = 6 };

WireHello good_hello();  // a fresh nonce
WireHdr hdr(uint8_t type, uint64_t id, uint32_t total, uint32_t off, uint32_t seg);

struct Forged {
  rdma_event_channel* ec = nullptr;
  rdma_cm_id* id = nullptr;
  ibv_mr* mr = nullptr;
  WireHello hello{};
  WireHelloReply reply{};  // the module's accept, as received
  uint8_t reply_len = 0;
  alignas(64) uint8_t buf[2][4096];
};

// The next event within ms, acked; -1 if none came. An accept's private data is kept.
int next_event(Forged* f, int ms, int* status = nullptr);
// Connected to the peer module's channel port with `hello` (its first `hello_len` bytes):
// the event that ended the attempt.
int forge_open(Forged* f, const char* peer, const WireHello& hello, uint8_t hello_len = sizeof(WireHello));
void forge_close(Forged* f);
// One message of header h and `len` bytes on the wire (len may disagree with h.seg).
bool forge_send(Forged* f, const WireHdr& h, const void* payload, uint32_t len);
// A message back within ms: its length, or -1.
int forge_recv(Forged* f, int ms);

// The cluster's key from the sandbox's root-only file (UNLOAD_CHAN_KEY_FILE); empty if none.
std::string sandbox_key();
// The initiator's proof of `key` on connection f (channel_auth.c's HMAC-SHA256), and
// whether the module's proof in its accept is the responder's of `key`.
void initiator_proof(const Forged* f, const std::string& key, uint8_t out[32]);
bool responder_proof_holds(const Forged* f, const std::string& key);
// The AUTH message with `proof`.
bool forge_send_auth(Forged* f, const uint8_t proof[32]);

}  // namespace kt
