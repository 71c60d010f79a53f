// The ways a write can execute (docs/design.md, section 2) and sets of them.
#pragma once

#include <cstdint>

namespace unload::policy {

// Values are stable: they index per-path tables and appear in statistics.
enum class Path : uint8_t {
  offload = 0,        // the NIC does everything
  unload_inline = 1,  // CPU copies the payload into the work request (IBV_SEND_INLINE)
  unload_stage = 2,   // CPU copies into a pinned staging slot; the NIC sends from it
  unload_direct = 3,  // the kmod copies straight into a same-host peer's region
  unload_remote = 4,  // the peer host's kmod places it, sent over the modules' channel
  unload_mapped = 5,  // this process's stores place it, through the same-host peer's region
                      // the kmod mapped here; no system call
};

inline constexpr unsigned kPathCount = 6;

constexpr unsigned index_of(Path p) {
  return static_cast<unsigned>(p);
}

// CPU paths spend CPU time copying, which the CPU budget accounts for.
constexpr bool is_cpu_path(Path p) {
  return p != Path::offload;
}

// Whether a path's cost is this thread's CPU time, which the CPU budget (cpu_budget_pct)
// caps: a CPU path's, but not remote's, whose sender sleeps while the peer host's CPU
// places the write.
constexpr bool charges_budget(Path p) {
  return is_cpu_path(p) && p != Path::unload_remote;
}

// Only the direct, mapped and remote paths leave the QP's send queue, so only they need
// the ordering fence against NIC requests still outstanding on the QP (docs/design.md,
// section 3).
constexpr bool needs_fence_after_nic(Path p) {
  return p == Path::unload_direct || p == Path::unload_mapped || p == Path::unload_remote;
}

// The paths that place a write at a peer on this host, the module's copy or the mapping.
constexpr bool places_here(Path p) {
  return p == Path::unload_direct || p == Path::unload_mapped;
}

const char* name_of(Path p);
// Its name where a user sets or reads it: UNLOAD_PATH, the statistics file, sysfs
// (writes_<name>): offload, inline, stage, direct, remote, mapped.
const char* setting_name_of(Path p);

// A bitmask of paths, one bit per Path value.
class PathSet {
 public:
  constexpr PathSet() = default;
  constexpr PathSet(Path p) : bits_(bit(p)) {}  // NOLINT: a path is a one-path set

  static constexpr PathSet from_bits(uint8_t bits) { return PathSet(bits & kAllBits, 0); }
  static constexpr PathSet all() { return from_bits(kAllBits); }
  static constexpr PathSet cpu_paths() { return all().without(Path::offload); }

  constexpr uint8_t bits() const { return bits_; }
  constexpr bool empty() const { return bits_ == 0; }
  constexpr bool contains(Path p) const { return (bits_ & bit(p)) != 0; }
  constexpr PathSet with(Path p) const { return PathSet(bits_ | bit(p), 0); }
  constexpr PathSet without(Path p) const { return PathSet(bits_ & ~bit(p), 0); }
  constexpr PathSet operator|(PathSet o) const { return PathSet(bits_ | o.bits_, 0); }
  constexpr PathSet operator&(PathSet o) const { return PathSet(bits_ & o.bits_, 0); }
  constexpr bool operator==(const PathSet&) const = default;

 private:
  static constexpr uint8_t kAllBits = (1u << kPathCount) - 1;
  static constexpr uint8_t bit(Path p) { return static_cast<uint8_t>(1u << index_of(p)); }
  constexpr PathSet(unsigned bits, int) : bits_(static_cast<uint8_t>(bits)) {}

  uint8_t bits_ = 0;
};

}  // namespace unload::policy
