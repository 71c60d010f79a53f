#include "sq_ring.hpp"

#include <cerrno>
#include <new>

namespace unload::rt {

int SqRing::init(uint32_t capacity) {
  uint32_t cap = 16;
  while (cap < capacity) cap <<= 1;
  slots_.reset(new (std::nothrow) SqEntry[cap]);
  if (!slots_) return -ENOMEM;
  mask_ = cap - 1;
  return 0;
}

}  // namespace unload::rt
