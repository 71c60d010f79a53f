// ibv_cq_ex polling (start_poll, next_poll, end_poll, read_*): the provider's completions
// through the merger, the shim-made ones handed over in their place.
#pragma once

#include "records.hpp"

namespace unload::rt {

// Frees the CQ's poll state (unload_cqx_provider made it).
void cqx_release(CqRec* r);

// Whether the shim can hand over a completion of its own on this CQ (every read_* the
// program may call answered, no field it cannot fill asked for).
bool cqx_can_synthesise(const CqRec* c);

// Whether a CQ made with `wc_flags` asks for no field a shim-made completion lacks.
bool cqx_flags_synthesisable(uint64_t wc_flags);

}  // namespace unload::rt
