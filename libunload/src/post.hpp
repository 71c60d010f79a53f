// Posting: ibv_post_send, and the provider-bound half of a wr_* batch's refused direct write.
#pragma once

#include "records.hpp"
#include "route.hpp"

namespace unload::rt {

// Inside q's post gate: posts one request on the path already routed (a wr_* write the
// direct path refused, `fallback` saying why). 0 or a positive errno, like the provider.
int post_routed(QpRec* q, const ibv_send_wr& w, const Route& rt, Why fallback);

}  // namespace unload::rt
