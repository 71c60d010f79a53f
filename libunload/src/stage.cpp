// unload.stage: the staging arena from the kmod (pinned, registered once) used as a byte
// ring; each entry records the ring's tail after it, so a completion frees in O(1).
#include "stage.hpp"

#include <cstring>

namespace unload::rt {

bool stage_copy(StageRing& s, SqEntry* e, const ibv_sge* sg, uint32_t n, uint32_t len) {
  const uint64_t a = (static_cast<uint64_t>(len) + 63) & ~63ull;
  uint64_t t = s.tail;
  const uint64_t off = t % s.size;
  if (off + a > s.size) t += s.size - off;  // no wrap inside a slot
  if (t + a - s.head.load(std::memory_order_acquire) > s.size) return false;
  uint8_t* dst = s.base + (t % s.size);
  uint32_t done = 0;
  for (uint32_t i = 0; i < n; ++i) {
    std::memcpy(dst + done, reinterpret_cast<const void*>(sg[i].addr), sg[i].length);
    done += sg[i].length;
  }
  s.tail = t + a;
  e->stage_mark = s.tail;
  e->stage_sge = {reinterpret_cast<uintptr_t>(dst), len, s.mr->lkey};
  return true;
}

}  // namespace unload::rt
