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
  head_ = 0;
  tail_.store(0, std::memory_order_relaxed);
  return 0;
}

int WcQueue::grow(uint32_t capacity) {
  if (capacity <= this->capacity()) return 0;
  WcQueue bigger;
  if (bigger.init(capacity) != 0) return -ENOMEM;
  ibv_wc wc;
  while (pop(&wc, 1) == 1) bigger.push(wc);
  cells_ = std::move(bigger.cells_);
  mask_ = bigger.mask_;
  head_ = bigger.head_;
  tail_.store(bigger.tail_.load(std::memory_order_relaxed), std::memory_order_relaxed);
  return 0;
}

}  // namespace unload::rt
