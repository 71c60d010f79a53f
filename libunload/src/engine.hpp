// Which of direct's two engines places a write (issue 54): the mapped engine (this
// process's stores through the responder's mapped region) or the module's checked copy
// (one system call). Neither is faster everywhere: under TCG a userspace copy of 64 KiB
// runs 5-7x slower than the module's, while at 4 KiB mapped is 2.5x the faster. So each
// QP learns, per log2 length class, the cost of each engine from adaptive's timed direct
// writes (the same samples the policy learns direct's cost from), and places a write
// through the cheaper one. No samples (a forced path, a mode that does not sample): the
// mapped engine, as before.
#pragma once

#include <cstdint>

namespace unload::rt {

class EngineChoice {
 public:
  // The length classes learnt apart: 0 .. 2^22; longer writes share the last.
  static constexpr unsigned kClasses = 24;
  // An engine's cost is the least of its last kWindow samples: a copy is never faster
  // than it can be, while its slow samples are many and wild. A QP's first writes cost
  // milliseconds (the first write of the QP, the mapping's grant, the target page's
  // fault: 4 ms, 76 us, 3.5 us for three mapped 4 KiB samples in a row under TCG), and a
  // median of 5 then still sent a 4 KiB stream to the module, 2.6x dearer, for its run.
  static constexpr unsigned kWindow = 8;
  // Samples of each engine before the cheaper is chosen, and the gain a switch needs.
  static constexpr unsigned kWarmSamples = 4;
  static constexpr unsigned kHysteresisPct = 15;
  // Of a class's timed writes once both engines are warm, one in kExploreEvery takes the
  // other engine: timed writes are one in 8 to 32 of adaptive's writes, so that is one
  // write in 128 to 512 on the dearer engine. One in kExploreYoung while the other's
  // window is not full: its few samples may all be a QP's first writes' (in a sandbox
  // run an 8 B ping-pong went 43 % to the module, 6x dearer, with one exploration in the
  // run to correct it).
  static constexpr unsigned kExploreEvery = 16;
  static constexpr unsigned kExploreYoung = 4;

  // Whether a write of `length` goes through the mapped engine; `timed`: adaptive samples
  // its cost (the warm-up and exploration go to timed writes only).
  bool mapped(uint32_t length, bool timed) const {
    const Class& c = cls_[class_of(length)];
    if (!timed) return !c.module;
    const uint32_t nm = c.est[0].n, nk = c.est[1].n;
    if (nm < kWarmSamples || nk < kWarmSamples) return nm <= nk;
    const unsigned every = c.est[c.module ? 0 : 1].n < kWindow ? kExploreYoung : kExploreEvery;
    return (c.timed % every == every - 1) ? c.module : !c.module;
  }
  // A timed write's cost through one engine.
  void learn(uint32_t length, bool mapped, uint64_t cost_ns);

  // What a class chose (statistics and tests): true when the module's copy.
  bool module_chosen(uint32_t length) const { return cls_[class_of(length)].module; }

 private:
  struct Window {
    uint32_t ns[kWindow] = {};
    uint32_t n = 0;  // samples so far (saturates)
    uint32_t least() const;
  };
  struct Class {
    Window est[2];       // [0] mapped, [1] the module
    uint32_t timed = 0;  // timed writes since both were warm
    bool module = false;
  };
  static unsigned class_of(uint32_t length) {
    const unsigned c = length ? 32u - static_cast<unsigned>(__builtin_clz(length)) : 0;
    return c < kClasses ? c : kClasses - 1;
  }
  Class cls_[kClasses];
};

}  // namespace unload::rt
