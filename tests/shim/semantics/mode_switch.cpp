// mode_switch: the program retunes /sys/kernel/unload/mode itself between posts: data posted in offload
// mode (the NIC), then an 8-byte flag in unload mode (direct, fenced behind the data): once the flag's
// post returns with the flag in place, the data before it is in place too; completions in post order.
//
//   sem_mode_switch [ROUNDS]
//
// About the shim and its module, not the verbs: without them the flag is never in place at
// the post's return, so kmod.sh runs it under the shim only and reads the verdict line.
// Round i: 4 x 64 KiB of byte i posted in mode offload (the last signaled), mode unload,
// the signaled flag. Printed: the rounds whose flag was in place at its post's return
// (direct), the violations among them (data not yet in place), bad completions. Skips
// when the mode file is not writable (no module, or not root).
#include <cstring>

#include "fixture.hpp"

using namespace sem;

namespace {

constexpr const char* kMode = "/sys/kernel/unload/mode";
constexpr uint32_t kChunks = 4, kChunk = 64 * 1024;

bool set_mode(const char* mode) {
  FILE* f = std::fopen(kMode, "w");
  if (!f) return false;
  const bool ok = std::fputs(mode, f) >= 0;
  return std::fclose(f) == 0 && ok;
}

}  // namespace

int main(int argc, char** argv) {
  const long rounds = argc > 1 ? std::atol(argv[1]) : 30;
  char saved[32] = "adaptive";
  if (FILE* f = std::fopen(kMode, "r")) {
    if (!std::fgets(saved, sizeof saved, f)) std::strcpy(saved, "adaptive");
    std::fclose(f);
  }
  if (!set_mode(saved)) skip("/sys/kernel/unload/mode is not writable (module not loaded, or not root)");
  Env e = open_env();
  ibv_cq* cq = make_cq(e, 64);
  QpCaps caps;
  caps.send_wr = 32;
  const size_t len = size_t{kChunks} * kChunk + 8;
  Pair p = make_pair(e, cq, cq, len, len, caps);
  watchdog(300, "mode_switch did not finish");
  long violations = 0, bad = 0, placed = 0;
  for (long i = 1; i <= rounds; ++i) {
    const uint8_t v = static_cast<uint8_t>(i);
    std::memset(p.src, v, p.src_len);
    if (!set_mode("offload")) die("set mode offload");
    for (uint32_t c = 0; c < kChunks; ++c)
      if (post_write(p.s, static_cast<uint64_t>(i) * 10 + c, p.src + c * kChunk, kChunk, p.smr->lkey,
                     reinterpret_cast<uintptr_t>(p.dst + c * kChunk), p.dmr->rkey,
                     c + 1 == kChunks ? IBV_SEND_SIGNALED : 0))
        die("post data");
    if (!set_mode("unload")) die("set mode unload");
    if (post_write(p.s, static_cast<uint64_t>(i) * 10 + 9, p.src + kChunks * kChunk, 8, p.smr->lkey,
                   reinterpret_cast<uintptr_t>(p.dst + kChunks * kChunk), p.dmr->rkey, IBV_SEND_SIGNALED))
      die("post flag");
    if (p.dst[kChunks * kChunk] == v && ++placed)
      for (uint32_t k = 0; k < kChunks * kChunk; k += 4096)
        if (p.dst[k] != v) {
          ++violations;
          break;
        }
    std::vector<ibv_wc> got;
    collect(cq, got, 2, 10000);
    const uint64_t want[2] = {static_cast<uint64_t>(i) * 10 + kChunks - 1, static_cast<uint64_t>(i) * 10 + 9};
    if (got.size() != 2) ++bad;
    for (size_t k = 0; k < got.size() && k < 2; ++k)
      if (got[k].status != IBV_WC_SUCCESS || got[k].wr_id != want[k]) ++bad;
  }
  set_mode(saved);
  out("mode_switch: %ld rounds, flag in place at its post's return in %s, data missing behind it %s, "
      "completions %s",
      rounds, placed ? "some" : "NONE", violations ? "SOMETIMES" : "never", bad ? "WRONG" : "in order");
  return 0;
}
