#include "engine.hpp"

namespace unload::rt {

uint32_t EngineChoice::Window::least() const {
  const uint32_t k = n < kWindow ? n : kWindow;
  uint32_t m = UINT32_MAX;
  for (uint32_t i = 0; i < k; ++i) m = ns[i] < m ? ns[i] : m;
  return m;
}

void EngineChoice::learn(uint32_t length, bool mapped, uint64_t cost_ns) {
  Class& c = cls_[class_of(length)];
  Window& w = c.est[mapped ? 0 : 1];
  w.ns[w.n % kWindow] = cost_ns < UINT32_MAX ? static_cast<uint32_t>(cost_ns) : UINT32_MAX;
  if (w.n < UINT32_MAX) ++w.n;
  if (c.est[0].n < kWarmSamples || c.est[1].n < kWarmSamples) return;
  ++c.timed;
  const uint64_t m = c.est[0].least(), k = c.est[1].least();
  const uint64_t chosen = c.module ? k : m, other = c.module ? m : k;
  if (other * (100 + kHysteresisPct) < chosen * 100) c.module = !c.module;
}

}  // namespace unload::rt
