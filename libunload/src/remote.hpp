// The remote path (unload.remote): writes placed by the peer host's module, sent by ours
// over the modules' channel. Forced by UNLOAD_PATH=remote, or ranked by the modes for a
// peer on another host once a channel to it is up (places_remote).
#pragma once

#include "direct.hpp"

namespace unload::rt {

// What keeps writes on `q` from going remote now (none: an RC QP registered with the
// module, its peer on another host whose module answers the channel's probe, asked once
// per registration; no failure seen; a send CQ the shim can complete on). Post gate.
Why remote_blocker(QpRec* q, const Tunables& t);

// What keeps `q`'s writes from the CPU path its peer calls for (remote for a peer on
// another host, places_remote; else direct): the `direct_why` route() takes. Post gate.
inline Why cpu_blocker(QpRec* q, const Tunables& t) {
  return places_remote(q) ? remote_blocker(q, t) : direct_blocker(q, t);
}

// As place_direct, for the remote path: the fence, then w[0..n) with one submission
// (UNLOAD_SUBMIT_REMOTE | UNLOAD_SUBMIT_STOP), inside q's post gate. Returns how many
// writes it consumed: the placed ones (completed with IBV_WC_SUCCESS when signaled) and,
// when the target did not answer one, that one too, completed with IBV_WC_RETRY_EXC_ERR
// and the QP moved to ERR. *why says what stopped the first one not consumed; the caller
// sends it and the rest to the NIC in order (which flushes them after a move to ERR).
// Without waiting (remote_ring.hpp) when every write of the run fits an entry and the ring
// is there; else with one synchronous submission, after q's writes in flight settled.
int place_remote(QpRec* q, const DirectWrite* w, int n, Why* why);

}  // namespace unload::rt
