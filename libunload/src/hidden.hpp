// Hidden completions: the ones the shim asks the NIC for, on requests the program left
// unsignaled, so that the fence sees its QP's progress (docs/design.md, "The fence"). Their
// successful completions are never shown; each CQ has a bounded room for them.
#pragma once

#include "records.hpp"

namespace unload::rt {

// Whether the shim asks for a completion of the unsignaled NIC request it is posting at
// ring position `seq` (kHidden; its successful completion is never shown). The fence can
// only see a QP's progress through completions: behind a hundred unsignaled writes it
// would see none until the last, and a sampled write (`timed`) could not be observed at
// all. So a QP whose peer was paired gets one every kFenceSignalEvery requests, and every
// timed one does, while its send CQ has hidden room. Producer side (post gate).
bool take_hidden_signal(QpRec* q, uint64_t seq, bool timed);
// An entry that yields a completion (the program's or a hidden one) was posted at `seq`.
inline void note_completing(QpRec* q, uint64_t seq) {
  q->sq.last_completing = seq;
}
// Gives back the hidden room of the QP's entries from ring position `from` to its tail,
// whose completions will never come: the provider refused them (before a rollback), or
// the QP was reset or destroyed (from its head). Inside the post gate (and the send CQ's
// gate when from the head).
void release_hidden(QpRec* q, uint64_t from);
// The provider refused the QP's entries from ring position `from` on: they are forgotten,
// their hidden room given back. Inside the post gate.
inline void rollback_refused(QpRec* q, uint64_t from) {
  release_hidden(q, from);
  q->sq.ring.rollback(from);
}

}  // namespace unload::rt
