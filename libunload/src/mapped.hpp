// The direct path's mapped engine (issue 28): a write placed by this process's own stores
// through the responder region the module mapped here (UNLOAD_IOC_MAP, kmod/mappings.c),
// with no system call. On by default (UNLOAD_MAPPED=0 turns it off): the responder's busy
// byte stands for what rxe does to a QP without an event (docs/design.md, "The mapped
// engine").
#pragma once

#include <cstdint>

#include "records.hpp"
#include "request.hpp"

namespace unload::rt {

// Places the write routed `rt`, its local buffers `sg` (after its fence, in q's post gate),
// through a mapping of its target:
// true when every byte went through a mapping that was valid after the copy. false: not
// placed by this engine (no mapping granted, out of its bounds, or revoked during the copy,
// when bytes may have landed): the module's checked submission takes it, and its answer
// stands.
// A timed write passes `copy_ns`: the clock read once the mapping is there, so that the
// cost adaptive learns of a write that had to ask the module for one (an ioctl, a mmap,
// perhaps the peer's mem file) is the copy's, not the grant's, which a QP pays once.
bool place_mapped(QpRec* q, const Route& rt, const ibv_sge* sg, uint64_t* copy_ns = nullptr);
// The express lane's use (express.hpp): where in q's set a granted mapping of rkey is
// (-1: none), and place_mapped of one buffer (`len` bytes at `src`, which the process
// reads where the program put it) through that one without looking it up, for a memo
// still armed: letting go of a mapping of q's disarms it, so the one at `index` is the
// one it was armed with.
int mapped_index_of(const QpRec* q, uint32_t rkey);
bool place_mapped_at(QpRec* q, uint32_t index, uint64_t remote_addr, const void* src, uint32_t len);
// q's mappings go (its destruction, or a reset): unmapped here when they are this
// session's, forgotten when they are a parent's (a forked child has none).
void mapped_forget(QpRec* q);

}  // namespace unload::rt
