// Why a write left the path its mode prefers: one list, the module's (enum unload_why).
#pragma once

#include <cstdint>

#include "unload.h"

namespace unload::rt {

// enum unload_why, or none.
enum class Why : uint8_t {
  not_rc = UNLOAD_WHY_NOT_RC,
  program_inline = UNLOAD_WHY_PROGRAM_INLINE,
  path_off = UNLOAD_WHY_PATH_OFF,
  no_module = UNLOAD_WHY_NO_MODULE,
  remote_peer = UNLOAD_WHY_REMOTE_PEER,
  unregistered = UNLOAD_WHY_UNREGISTERED,
  unpaired = UNLOAD_WHY_UNPAIRED,
  poisoned = UNLOAD_WHY_POISONED,
  qp_error = UNLOAD_WHY_QP_ERROR,
  cq = UNLOAD_WHY_CQ,
  queue = UNLOAD_WHY_QUEUE,
  fence = UNLOAD_WHY_FENCE,
  size = UNLOAD_WHY_SIZE,
  region = UNLOAD_WHY_REGION,
  no_room = UNLOAD_WHY_NO_ROOM,
  refused = UNLOAD_WHY_REFUSED,
  policy = UNLOAD_WHY_POLICY,
  with_imm = UNLOAD_WHY_WITH_IMM,
  nic_memory = UNLOAD_WHY_NIC_MEMORY,
  window = UNLOAD_WHY_WINDOW,
  cold = UNLOAD_WHY_COLD,
  exploring = UNLOAD_WHY_EXPLORING,
  budget = UNLOAD_WHY_BUDGET,
  cost = UNLOAD_WHY_COST,
  local_peer = UNLOAD_WHY_LOCAL_PEER,
  no_channel = UNLOAD_WHY_NO_CHANNEL,
  no_key = UNLOAD_WHY_NO_KEY,
  no_mapping = UNLOAD_WHY_NO_MAPPING,
  none = UNLOAD_WHY_COUNT,
};
const char* why_name(Why w);

}  // namespace unload::rt
