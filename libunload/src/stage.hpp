// unload.stage: the payload copied into the QP's staging ring at post time.
#pragma once

#include "records.hpp"

namespace unload::rt {

// Copies the payload into the QP's staging ring and points e->stage_sge at it; false when
// there is no room now (the request then takes the NIC as built). Producer side.
bool stage_copy(StageRing& s, SqEntry* e, const ibv_sge* sg, uint32_t n, uint32_t len);

// Consumer side: `e` completed; the staging bytes of it and of every earlier entry are free.
inline void stage_release(StageRing& s, const SqEntry& e) {
  if (s.base) s.head.store(e.stage_mark, std::memory_order_release);
}

}  // namespace unload::rt
