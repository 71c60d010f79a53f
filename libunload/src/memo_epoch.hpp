// The memo epoch: one counter that moves whenever something a memo of a write's route kept
// may have changed beyond its own QP and request (a region deregistered, a window
// allocated or freed, a staging arena made or given back, memlock pressure, the module
// found or lost). A memo keeps the epoch it was made in and holds only while the counter
// has not moved: its check is one load, and the changes, all rare, pay the store.
#pragma once

#include <atomic>
#include <cstdint>

namespace unload::rt {

inline std::atomic<uint64_t> g_memo_epoch{0};

// Read before what a memo vouches for is looked at: a change after it moves the epoch.
inline uint64_t memo_epoch() {
  return g_memo_epoch.load(std::memory_order_acquire);
}

// After the change it announces, or before a record that memos may name goes (a region's).
inline void memo_epoch_move() {
  g_memo_epoch.fetch_add(1, std::memory_order_release);
}

}  // namespace unload::rt
