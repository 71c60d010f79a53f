// The direct path's mapped engine (issue 28): a write placed by this process's own stores
// through the responder region the module mapped here (UNLOAD_IOC_MAP, kmod/mappings.c),
// with no system call. On by default (UNLOAD_MAPPED=0 turns it off): the responder's busy
// byte stands for what rxe does to a QP without an event (docs/design.md, "The mapped
// engine").
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>

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
// The lane's own view of the mapping at `index` for writes of `len` bytes: false (the memo
// not armed) when the region is shorter.
bool mapped_view_of(const QpRec* q, uint32_t index, uint32_t len, MappedView& v);

// In ascending order, the last 8 bytes last and after the rest (release), as the module
// places: a poller of the last byte sees the whole write.
[[gnu::always_inline]] inline void copy_tail_last(uint8_t* dst, const uint8_t* src, uint64_t n) {
  const uint64_t tail = n < 8 ? n : 8;
  const uint64_t body = n - tail;
  if (body) std::memcpy(dst, src, body);
  std::atomic_thread_fence(std::memory_order_release);
  if (tail == 8) {  // one 8-byte move rather than a call
    uint64_t last;
    std::memcpy(&last, src + body, 8);
    std::memcpy(dst + body, &last, 8);
  } else {
    std::memcpy(dst + body, src + body, tail);
  }
}

// copy_tail_last of 8 to 16 bytes in two 8-byte moves and no call: the first 8 bytes,
// which may hold some of the last 8 (the same values again), then the last 8.
[[gnu::always_inline]] inline void copy_short_tail_last(uint8_t* dst, const uint8_t* src, uint64_t n) {
  uint64_t word;
  if (n > 8) {
    std::memcpy(&word, src, 8);
    std::memcpy(dst, &word, 8);
  }
  std::atomic_thread_fence(std::memory_order_release);
  std::memcpy(&word, src + n - 8, 8);
  std::memcpy(dst + n - 8, &word, 8);
}
constexpr uint32_t kShortMin = 8, kShortMax = 16;

// place_mapped_at through the memo's view `v`: the same bounds (no overflow on any input),
// the same word and busy byte before the copy and after it. kShort: `len` is 8 to 16.
template <bool kShort = false>
[[gnu::always_inline]] inline bool place_mapped_view(const MappedView& v, uint64_t remote_addr,
                                                     const void* src, uint32_t len) {
  if (remote_addr - v.lo > v.span) return false;
  if (__atomic_load_n(v.word, __ATOMIC_ACQUIRE) != v.cookie || __atomic_load_n(v.busy, __ATOMIC_ACQUIRE) != 0)
    return false;
  uint8_t* const dst = reinterpret_cast<uint8_t*>(v.shift + remote_addr);
  if constexpr (kShort)
    copy_short_tail_last(dst, static_cast<const uint8_t*>(src), len);
  else
    copy_tail_last(dst, static_cast<const uint8_t*>(src), len);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return __atomic_load_n(v.word, __ATOMIC_RELAXED) == v.cookie &&
         __atomic_load_n(v.busy, __ATOMIC_RELAXED) == 0;
}

// q's mappings go (its destruction, or a reset): unmapped here when they are this
// session's, forgotten when they are a parent's (a forked child has none).
void mapped_forget(QpRec* q);

}  // namespace unload::rt
