// The ibv_qp_ex wr_* API on QPs made through the shim.
#pragma once

#include "records.hpp"

namespace unload::rt {

// Frees the QP's wr_* state (unload_qpx_provider made it).
void qpx_release(QpRec* q);

}  // namespace unload::rt
