// Lock-free lookup tables for the fast paths: fixed-size open addressing, inserts and
// removals under a mutex (object creation and destruction), reads without one.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

namespace unload::rt {

template <class V, unsigned kBits = 13>
class PtrTable {
 public:
  static constexpr unsigned kSize = 1u << kBits;

  V* find(uint64_t key) const {
    for (unsigned i = hash(key), n = 0; n < kSize; i = (i + 1) & (kSize - 1), ++n) {
      const uint64_t k = slots_[i].key.load(std::memory_order_acquire);
      if (k == key) return slots_[i].val.load(std::memory_order_acquire);
      if (k == 0) return nullptr;
    }
    return nullptr;
  }
  // find() when the key sits in its home slot (most keys, in a table filled to an eighth);
  // else null, and the caller probes with find().
  [[gnu::always_inline]] V* find_home(uint64_t key) const {
    const Slot& s = slots_[hash(key)];
    return s.key.load(std::memory_order_acquire) == key ? s.val.load(std::memory_order_acquire) : nullptr;
  }
  // 0 or -ENOSPC. key must not be 0 or kTomb.
  int insert(uint64_t key, V* v) {
    std::lock_guard<std::mutex> g(mu_);
    unsigned tomb = kSize;
    for (unsigned i = hash(key), n = 0; n < kSize; i = (i + 1) & (kSize - 1), ++n) {
      const uint64_t k = slots_[i].key.load(std::memory_order_relaxed);
      if (k == key) {
        slots_[i].val.store(v, std::memory_order_release);
        changes_.fetch_add(1, std::memory_order_release);
        return 0;
      }
      if (k == kTomb && tomb == kSize) tomb = i;
      if (k == 0) {
        const unsigned j = tomb != kSize ? tomb : i;
        slots_[j].val.store(v, std::memory_order_release);
        slots_[j].key.store(key, std::memory_order_release);
        return 0;
      }
    }
    if (tomb == kSize) return -28;  // ENOSPC
    slots_[tomb].val.store(v, std::memory_order_release);
    slots_[tomb].key.store(key, std::memory_order_release);
    return 0;
  }
  // Removes `key` only while it still maps to `v` (the key may have been reused).
  bool remove_if(uint64_t key, V* v) {
    std::lock_guard<std::mutex> g(mu_);
    if (find(key) != v) return false;
    return remove_locked(key) == v;
  }
  V* remove(uint64_t key) {
    std::lock_guard<std::mutex> g(mu_);
    return remove_locked(key);
  }
  // Moves whenever a key leaves or maps to another value: what a lookup found holds until then.
  uint64_t changes() const { return changes_.load(std::memory_order_acquire); }

 private:
  V* remove_locked(uint64_t key) {
    for (unsigned i = hash(key), n = 0; n < kSize; i = (i + 1) & (kSize - 1), ++n) {
      const uint64_t k = slots_[i].key.load(std::memory_order_relaxed);
      if (k == key) {
        V* v = slots_[i].val.load(std::memory_order_relaxed);
        slots_[i].val.store(nullptr, std::memory_order_release);
        slots_[i].key.store(kTomb, std::memory_order_release);
        changes_.fetch_add(1, std::memory_order_release);
        reclaim_before_empty(i);
        return v;
      }
      if (k == 0) return nullptr;
    }
    return nullptr;
  }

  static constexpr uint64_t kTomb = ~0ull;
  // Tombstones right before an empty slot end no probe chain that an empty slot would not
  // end too: they become empty again, so create/destroy cycles do not fill the table.
  void reclaim_before_empty(unsigned i) {
    if (slots_[(i + 1) & (kSize - 1)].key.load(std::memory_order_relaxed) != 0) return;
    for (unsigned n = 0; n < kSize && slots_[i].key.load(std::memory_order_relaxed) == kTomb; ++n) {
      slots_[i].key.store(0, std::memory_order_release);
      i = (i - 1) & (kSize - 1);
    }
  }
  // Fibonacci hashing: the product's top bits mix every bit of the key (object addresses,
  // whose low bits are alignment) in two instructions; every post and poll probes.
  static unsigned hash(uint64_t k) { return static_cast<unsigned>((k * 0x9E3779B97F4A7C15ull) >> (64 - kBits)); }
  struct Slot {
    std::atomic<uint64_t> key{0};
    std::atomic<V*> val{nullptr};
  };
  Slot slots_[kSize];
  std::atomic<uint64_t> changes_{0};
  std::mutex mu_;
};

}  // namespace unload::rt
