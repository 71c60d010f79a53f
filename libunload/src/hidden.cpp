// Hidden completions: taken, and their room given back (hidden.hpp).
#include "hidden.hpp"

#include "unload.h"

namespace unload::rt {
namespace {

// Unsignaled requests in a row after which the shim asks for a hidden completion.
constexpr uint64_t kFenceSignalEvery = 16;

}  // namespace

bool take_hidden_signal(QpRec* q, uint64_t seq, bool timed) {
  if (!timed && (!(q->peer.flags & UNLOAD_PEER_PAIRED) || seq - q->sq.last_completing < kFenceSignalEvery))
    return false;
  // Not on an ibv_cq_ex: its poll sequence hands over what it reads (the fence does not
  // poll it anyway), and a dropped completion there showed as an unexpected one
  // (semantics cq_room ex, cqex_many, default mode).
  CqRec* c = q->scq;
  if (!c || c->cqx) return false;
  if (c->hidden_room.fetch_sub(1, std::memory_order_relaxed) > 0) return true;
  c->hidden_room.fetch_add(1, std::memory_order_relaxed);
  return false;
}

void release_hidden(QpRec* q, uint64_t from) {
  if (!q->scq) return;
  SqRing& ring = q->sq.ring;
  int32_t n = 0;
  for (uint64_t s = from; s < ring.tail(); ++s)
    if ((ring.at(s)->flags & (kHidden | kMarker)) == kHidden) ++n;
  if (n) q->scq->hidden_room.fetch_add(n, std::memory_order_relaxed);
}

}  // namespace unload::rt
