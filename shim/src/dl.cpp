// Programs and libraries that dlopen libibverbs and take its entry points with
// dlsym(handle, ...) never reach the shim's exported wrappers: a handle's lookup scope is
// that library and its dependencies, not the preloaded shim. So the shim interposes
// dlsym itself and hands out its wrappers for the intercepted names when the handle is
// libibverbs'. Every other lookup goes to the real dlsym by a tail jump, so the real one
// sees the caller's return address (RTLD_NEXT and RTLD_DEFAULT resolve relative to the
// caller) exactly as without the shim.
#include <dlfcn.h>

#include <cstring>

#include "shim.hpp"

extern "C" {
// Read by the trampoline below.
// `used`: only the assembly refers to these, which link-time optimisation cannot see.
__attribute__((visibility("hidden"), used)) void* unload_real_dlsym = nullptr;

// The wrapper for `name` if `handle` is libibverbs' and the name is intercepted, else
// nullptr (and the real dlsym is resolved, for the tail jump).
__attribute__((visibility("hidden"), used)) void* unload_dlsym_override(void* handle, const char* name) {
  if (!unload_real_dlsym) {
    void* r = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (!r) r = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    __atomic_store_n(&unload_real_dlsym, r, __ATOMIC_RELEASE);
  }
  if (handle == RTLD_DEFAULT || handle == RTLD_NEXT || !name || std::strncmp(name, "ibv_", 4) != 0)
    return nullptr;
  void* wrapper = unload::shim::wrapper_of(name);
  if (!wrapper) return nullptr;
  void* lib = dlopen("libibverbs.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (!lib) return nullptr;
  dlclose(lib);
  return lib == handle ? wrapper : nullptr;
}
}

#if defined(__x86_64__)
asm(R"(
	.text
	.globl dlsym
	.type dlsym, @function
dlsym:
	.cfi_startproc
	push %rdi
	.cfi_adjust_cfa_offset 8
	push %rsi
	.cfi_adjust_cfa_offset 8
	sub $8, %rsp
	.cfi_adjust_cfa_offset 8
	call unload_dlsym_override
	add $8, %rsp
	.cfi_adjust_cfa_offset -8
	pop %rsi
	.cfi_adjust_cfa_offset -8
	pop %rdi
	.cfi_adjust_cfa_offset -8
	test %rax, %rax
	jz 1f
	ret
1:	jmp *unload_real_dlsym(%rip)
	.cfi_endproc
	.size dlsym, .-dlsym
)");
#endif
