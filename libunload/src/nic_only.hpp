// Memory the CPU paths must not touch (docs/design.md, "Memory the CPU must not touch"):
// the decisions, made once per MR at its registration and per write for a window's rkey.
#pragma once

#include <infiniband/verbs.h>

#include <cerrno>
#include <cstdint>

namespace unload::rt {

// An MR the CPU paths never read from: ODP (the module would hold pages the program may
// drop, MADV_DONTNEED, and the NIC would fault in anew) and dma-buf (device memory with no
// process address at all). Such an MR is not registered with the module either.
constexpr bool mr_nic_only(int access, bool dmabuf) {
  return dmabuf || (access & IBV_ACCESS_ON_DEMAND) != 0;
}

// The module's refusal to pin an MR's range (kmod_reg_region), read as whether the range
// has no pages a CPU may copy: VM_IO/VM_PFNMAP mappings and peer memory (a GPU's, through a
// peer-memory client) fail pin_user_pages with -EFAULT, FOLL_LONGTERM ranges it cannot
// hold (fs-dax) with -EOPNOTSUPP. Other refusals (its limits, an MR it cannot find) leave
// the memory a process's own: inline and stage still copy from it.
constexpr bool pin_refusal_nic_only(int err) {
  return err == -EFAULT || err == -EOPNOTSUPP;
}

// Memory windows by their device and rkey index (the low 8 bits, the key, change at every
// bind; the index does not), so a write whose rkey names one is known whatever it is bound
// to now. Never 0.
inline uint64_t mw_key(const ibv_context* ctx, uint32_t rkey) {
  const uint64_t dev = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(ctx->device) >> 4);
  return (1ull << 63) | (dev << 24) | (rkey >> 8);
}

}  // namespace unload::rt
