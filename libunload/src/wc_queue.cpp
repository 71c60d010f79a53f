#include "wc_queue.hpp"

#include <cerrno>
#include <new>

namespace unload::rt {

int WcQueue::init(uint32_t capacity) {
  uint64_t cap = 16;
  while (cap < capacity) cap <<= 1;
  cells_.reset(new (std::nothrow) Cell[cap]);
  if (!cells_) return -ENOMEM;
  for (uint64_t i = 0; i < cap; ++i) cells_[i].seq.store(i, std::memory_order_relaxed);
  mask_ = cap - 1;
  return 0;
}

}  // namespace unload::rt
