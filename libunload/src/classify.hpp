// Request classification: what a posted work request is, as far as the paths care, and
// which paths it may take (docs/design.md, sections 2 and 3). Pure: reads verbs structs only.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

#include "unload/policy.hpp"

namespace unload::rt {

struct WriteRequest {
  bool is_write = false;  // RDMA WRITE or WRITE_WITH_IMM
  bool with_imm = false;
  bool user_inline = false;  // the program already asked for IBV_SEND_INLINE
  bool signaled = false;     // a completion is due to the program
  bool fence = false;        // IBV_SEND_FENCE
  uint32_t length = 0;       // sum of the SGEs
  uint32_t sge_count = 0;
  uint32_t rkey = 0;
  uint64_t remote_addr = 0;
};

// classify()'s answer for a lone RDMA WRITE of one SGE, with no fence (what the lanes'
// memos know of a write of their shape).
inline WriteRequest one_sge_write(bool user_inline, bool signaled, uint32_t length, uint32_t rkey,
                                  uint64_t remote_addr) {
  WriteRequest r;
  r.is_write = true;
  r.user_inline = user_inline;
  r.signaled = signaled;
  r.length = length;
  r.sge_count = 1;
  r.rkey = rkey;
  r.remote_addr = remote_addr;
  return r;
}

// The bytes a request's SGEs name, summed (one SGE, the usual case, without the loop).
inline uint64_t wr_length(const ibv_send_wr& wr) {
  if (wr.num_sge == 1) return wr.sg_list[0].length;
  uint64_t len = 0;
  for (int i = 0; i < wr.num_sge; ++i) len += wr.sg_list[i].length;
  return len;
}

// An RDMA WRITE, with or without immediate data.
inline bool is_write(ibv_wr_opcode op) {
  return op == IBV_WR_RDMA_WRITE || op == IBV_WR_RDMA_WRITE_WITH_IMM;
}

// A READ or an atomic: what IBV_SEND_FENCE makes a later request wait for.
inline bool is_ordering(ibv_wr_opcode op) {
  return op == IBV_WR_RDMA_READ || op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD;
}

inline WriteRequest classify(const ibv_send_wr& wr, bool sq_sig_all) {
  WriteRequest r;
  r.signaled = sq_sig_all || (wr.send_flags & IBV_SEND_SIGNALED);
  r.fence = (wr.send_flags & IBV_SEND_FENCE) != 0;
  if (!is_write(wr.opcode)) return r;
  r.is_write = true;
  r.with_imm = wr.opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
  r.user_inline = (wr.send_flags & IBV_SEND_INLINE) != 0;
  r.sge_count = wr.num_sge > 0 ? static_cast<uint32_t>(wr.num_sge) : 0;
  const uint64_t len = wr_length(wr);
  r.length = len > UINT32_MAX ? UINT32_MAX : static_cast<uint32_t>(len);
  r.rkey = wr.wr.rdma.rkey;
  r.remote_addr = wr.wr.rdma.remote_addr;
  return r;
}

// What the runtime knows about the QP and the request's local buffers.
struct PathContext {
  uint32_t max_inline = 0;        // the QP's real inline cap
  bool sges_valid = false;        // every SGE lies in a region this process registered on the QP's PD
  bool stage_available = false;   // the kmod gave a staging arena with a free slot
  bool direct_available = false;  // the kmod can place on this QP's peer (local, registered)
  bool remote_available = false;  // the peer host's kmod can place it (forced remote only)
  bool mapped_available = false;  // this process can, through a mapping (direct's, UNLOAD_MAPPED)
};

// The paths a request may take; offload always. A write the program inlined itself may
// take only direct or mapped, which copy at post time and so keeps the inline promise (the buffer
// is free when the post returns); no lkey is checked, as the NIC checks none. A CPU path whose precondition
// fails is simply not offered, so the request goes to the NIC, which reports whatever error it finds
// (docs/design.md, section 3, "Errors"). WRITE_WITH_IMM: inline and stage put exactly the offload path's
// packets on the wire, so the peer's receive completion is the same; direct and remote cannot
// reproduce it (no module consumes the responder's receive or makes its completion).
inline policy::PathSet eligible_paths(const WriteRequest& r, const PathContext& c) {
  policy::PathSet s(policy::Path::offload);
  if (!r.is_write) return s;
  if (r.with_imm && r.user_inline) return s;
  if (r.user_inline) {
    if (c.direct_available) s = s.with(policy::Path::unload_direct);
    if (c.mapped_available) s = s.with(policy::Path::unload_mapped);
    return c.remote_available ? s.with(policy::Path::unload_remote) : s;
  }
  if (!c.sges_valid && r.length != 0) return s;
  if (r.length <= c.max_inline) s = s.with(policy::Path::unload_inline);
  if (c.stage_available) s = s.with(policy::Path::unload_stage);
  if (c.direct_available && !r.with_imm) s = s.with(policy::Path::unload_direct);
  if (c.mapped_available && !r.with_imm) s = s.with(policy::Path::unload_mapped);
  if (c.remote_available && !r.with_imm) s = s.with(policy::Path::unload_remote);
  return s;
}

}  // namespace unload::rt
