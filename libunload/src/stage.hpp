// unload.stage: the payload copied into the QP's staging ring at post time.
#pragma once

#include "records.hpp"

namespace unload::rt {

// Every tracked QP may stage through an arena this big, made at its first stage write.
constexpr uint32_t kStageBytes = 256 * 1024;

// Can `s` take a stage write: its arena is made, or may still be (the module is there and
// no registration of the program's has yet failed for want of locked memory).
bool stage_usable(const StageRing& s);

// Copies the payload into the QP's staging ring and points e->stage_sge at it, making the
// arena first if it is not; false when there is no room now (the request then takes the NIC
// as built). Producer side.
bool stage_copy(StageRing& s, SqEntry* e, const ibv_sge* sg, uint32_t n, uint32_t len);

// Consumer side: `e` completed; the staging bytes of it and of every earlier entry are free.
inline void stage_release(StageRing& s, const SqEntry& e) {
  s.head.store(e.stage_mark, std::memory_order_release);
}

// The QP is gone (no producer or consumer is left): its arena goes back.
void stage_close(StageRing& s);

// The program's own registration failed for want of locked memory (RLIMIT_MEMLOCK): every
// arena with nothing in flight goes back, and none is made again in this process, so the
// program's memory fits as it does without the shim. Returns whether any went back.
bool stage_reclaim();

// In a forked child: the parent's arenas are not mapped here (MADV_DONTFORK); forgets them.
void stage_forget_after_fork();

}  // namespace unload::rt
