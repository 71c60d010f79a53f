// The provider entry points the shim replaces (ops.cpp).
#pragma once

#include <infiniband/verbs.h>

namespace unload::shim {

// After the runtime recorded the context: its ops take the engine's entry points.
void ops_install_context(ibv_context* ctx);
// Before the runtime forgets it: the provider's entry points go back.
void ops_restore_context(ibv_context* ctx);

}  // namespace unload::shim
