// The target pages a sender keeps on the NIC when it knows how many translations a target
// NIC caches (the target_xlate_pages tunable).
#pragma once

#include <cstdint>

#include "unload/policy/hotness_sketch.hpp"

namespace unload::policy {

// At most `pages` target pages, the ones the NIC should place so that its translation
// cache holds them all and their writes never miss; the other pages' writes are cold
// (remote is weighed for them).
//
// Why a set of its own and not the sketch's "hot" with a threshold from the cache size: a
// page the NIC places only some of the time is the worst of both paths (each of its NIC
// writes finds its translation evicted by the others' and misses), and a frequency
// threshold splits a uniform footprint's pages at random, anew at every halving. Members
// here stay: a page joins at its second write while there is room (the whole footprint,
// when it fits the cache), or in place of a member of its set it clearly outnumbers in the
// sketch (a hot page arriving late), or of one unwritten for kIdleCacheTurns turns of the
// cache. A uniform footprint larger than the cache keeps its first members, whose writes
// keep hitting. Not at its first write: a page written once (most of a hot set's cold
// tenth) would take a place and miss at the NIC, where remote costs less; a doorkeeper, a
// bit a page by hash cleared every kSeenTurns turns of the set, remembers the first.
//
// Set-associative, kWays a set, twice as many ways as members may be (so that a footprint
// the size of the cache finds room for nearly every page: with as many ways as members,
// a fifth of them would find their set full), sets a power of two chosen by hash bits the
// sketch's rows do not use. A member is stored as its sketch slots, which is all the set
// compares and all it needs to read a member's count.
class ResidentSet {
 public:
  static constexpr unsigned kWays = 8;
  static constexpr uint32_t kMaxPages = 16384;  // the tunable's range: 256 KiB of ways, 64 of bits
  // A member unwritten for this many times the set's size in writes may be replaced.
  static constexpr uint32_t kIdleCacheTurns = 64;
  // A page's second write lets it join when it comes within this many turns of the set.
  static constexpr uint32_t kSeenTurns = 2;

  // Sized for `pages` (0: off, no page is a member); a new size forgets the members.
  void configure(uint32_t pages) {
    if (pages > kMaxPages) pages = kMaxPages;
    if (pages == pages_) return;
    pages_ = pages;
    sets_ = 0;
    if (pages != 0) {
      sets_ = 1;
      while (sets_ * kWays < 2 * pages) sets_ *= 2;
    }
    members_ = 0;
    idle_limit_ = pages * kIdleCacheTurns < 4096 ? 4096 : pages * kIdleCacheTurns;
    for (uint32_t i = 0; i < sets_ * kWays; ++i) ways_[i] = Member{0, 0};
    // 16 bits a write of the window: a page written once finds its bit set by another's
    // (and joins at once) one time in 16 at most.
    seen_window_ = pages * kSeenTurns < 4096 ? 4096 : pages * kSeenTurns;
    seen_bits_ = 64;
    while (seen_bits_ < 16 * seen_window_) seen_bits_ *= 2;
    forget_seen();
  }
  bool active() const { return sets_ != 0; }
  uint32_t pages() const { return pages_; }
  uint32_t members() const { return members_; }

  // A write to the page of sketch key `key`, already counted in `sketch`: whether the page
  // is a member now (joining if it may).
  bool touch(uint64_t key, const HotnessSketch& sketch) {
    if (!active()) return false;
    ++clock_;
    if (++seen_writes_ == seen_window_) forget_seen();
    Member* set = set_of(key);
    const uint32_t id = id_of(key);
    Member* empty = nullptr;
    Member* victim = nullptr;  // an idle member, else the member counted least
    bool idle = false;
    unsigned victim_count = UINT32_MAX;
    for (unsigned w = 0; w < kWays; ++w) {
      Member& m = set[w];
      if (m.id == id) {
        m.last = clock_;
        return true;
      }
      if (m.id == 0) {
        empty = &m;
      } else if (!idle && clock_ - m.last > idle_limit_) {
        victim = &m;
        idle = true;
      } else if (!idle) {
        const unsigned c = sketch.count(slots_of(m.id));
        if (c < victim_count) {
          victim = &m;
          victim_count = c;
        }
      }
    }
    const bool again = seen_again(key);
    if (empty && members_ < pages_) {
      if (!again) return false;
      ++members_;
      *empty = Member{id, clock_};
      return true;
    }
    if (!victim) return false;
    if (idle && !again) return false;
    if (!idle) {
      const unsigned count = sketch.count(HotnessSketch::slots_of_key(key));
      if (count < HotnessSketch::kHotCount || count <= 2 * victim_count) return false;
    }
    *victim = Member{id, clock_};
    return true;
  }
  // Whether the page of `key` is a member, changing nothing.
  bool contains(uint64_t key) const {
    if (!active()) return false;
    const Member* set = set_of(key);
    for (unsigned w = 0; w < kWays; ++w)
      if (set[w].id == id_of(key)) return true;
    return false;
  }

 private:
  struct Member {
    uint32_t id;    // kUsed | the page's sketch slots (row1 << 16 | row0); 0: empty
    uint32_t last;  // clock_ at its last write
  };
  static constexpr uint32_t kUsed = 1u << 31;
  static_assert(HotnessSketch::kWidth <= 1u << 15, "a slot fits 15 bits beside kUsed");
  static uint32_t id_of(uint64_t key) {
    const HotnessSketch::Slots s = HotnessSketch::slots_of_key(key);
    return kUsed | uint32_t{s.row1} << 16 | s.row0;
  }
  static HotnessSketch::Slots slots_of(uint32_t id) {
    return {static_cast<uint16_t>(id & 0xFFFF), static_cast<uint16_t>((id & ~kUsed) >> 16)};
  }
  Member* set_of(uint64_t key) { return &ways_[((key >> 12) & (sets_ - 1)) * kWays]; }
  const Member* set_of(uint64_t key) const { return &ways_[((key >> 12) & (sets_ - 1)) * kWays]; }
  // Whether the page of `key` was written since the doorkeeper last forgot; it is now.
  bool seen_again(uint64_t key) {
    const uint32_t bit = static_cast<uint32_t>(key >> 42) & (seen_bits_ - 1);  // bits no slot uses
    uint64_t& word = seen_[bit / 64];
    const uint64_t mask = uint64_t{1} << (bit % 64);
    const bool again = (word & mask) != 0;
    word |= mask;
    return again;
  }
  void forget_seen() {
    for (uint32_t i = 0; i < seen_bits_ / 64; ++i) seen_[i] = 0;
    seen_writes_ = 0;
  }

  uint32_t pages_ = 0;
  uint32_t sets_ = 0;
  uint32_t members_ = 0;  // ways in use, at most pages_
  uint32_t idle_limit_ = 0;
  uint32_t clock_ = 0;        // writes touched; wraps, compared by difference
  uint32_t seen_window_ = 0;  // writes between the doorkeeper's clearings
  uint32_t seen_writes_ = 0;  // since the last
  uint32_t seen_bits_ = 0;    // a power of two
  static_assert(kMaxPages * kSeenTurns * 16 <= (1u << 22), "a doorkeeper bit from 22 free key bits");
  // Both left uninitialised: configure() clears the part it uses, so a policy that never
  // has a size (every thread, by default) never touches these 320 KiB.
  Member ways_[2 * kMaxPages];
  uint64_t seen_[kMaxPages * kSeenTurns * 16 / 64];
};

}  // namespace unload::policy
