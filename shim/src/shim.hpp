// Shared between the shim's translation units.
#pragma once

namespace unload::shim {

// The shim's wrapper for an intercepted libibverbs entry point, or nullptr.
void* wrapper_of(const char* name);

}  // namespace unload::shim
