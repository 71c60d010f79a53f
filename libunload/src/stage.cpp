// unload.stage: the payload copied into the QP's staging arena from the kmod (pinned and
// registered once), used as a byte ring that completions free in order.
#include "internal.hpp"

#include <cstring>

namespace unload::rt {

// Copies the payload into the QP's staging ring; false when there is no room now.
bool stage_copy(QpRec* q, SqEntry* e, const ibv_sge* sg, uint32_t n, uint32_t len) {
  const uint64_t a = (static_cast<uint64_t>(len) + 63) & ~63ull;
  uint64_t t = q->stage_tail;
  const uint64_t off = t % q->stage_size;
  if (off + a > q->stage_size) t += q->stage_size - off;  // no wrap inside a slot
  if (t + a - q->stage_head.load(std::memory_order_acquire) > q->stage_size) return false;
  uint8_t* dst = q->stage_base + (t % q->stage_size);
  uint32_t done = 0;
  for (uint32_t i = 0; i < n; ++i) {
    std::memcpy(dst + done, reinterpret_cast<const void*>(sg[i].addr), sg[i].length);
    done += sg[i].length;
  }
  q->stage_tail = t + a;
  e->stage_slot_valid = 1;
  e->stage_end = t + a;
  e->stage_sge = {reinterpret_cast<uintptr_t>(dst), len, q->stage_mr->lkey};
  return true;
}

void stage_release(QpRec* q, const SqEntry& e) {
  if (e.stage_slot_valid) q->stage_head.store(e.stage_end, std::memory_order_release);
}

}  // namespace unload::rt
