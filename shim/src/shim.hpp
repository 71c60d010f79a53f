// Shared between the shim's translation units.
#pragma once

#include "unload/runtime.h"

namespace unload::shim {

// The real libibverbs, resolved once.
const unload_real_verbs& real();

// The shim's wrapper for an intercepted libibverbs entry point, or nullptr.
void* wrapper_of(const char* name);

}  // namespace unload::shim
