// A fixed-size heavy-hitter sketch over target pages (rkey, page).
#pragma once

#include <cstdint>

namespace unload::policy {

// Count-min sketch with a sweeping decay.
//
// Why count-min and not space-saving: the sketch is touched on every adaptive decision, so
// an update must be O(1) with no data-dependent search; space-saving needs a min-heap or a
// stream-summary list for that, count-min needs two hashed increments. Its error is
// one-sided (collisions only overcount), and the minimum over two rows keeps it small
// while the hot set is far smaller than the width.
//
// Why a sweeping decay: "hot" must mean hot recently (a page the target NIC is likely to
// still have in its translation cache). Halving the whole table every N writes would put
// a 2 K-counter stall on one unlucky write; instead each touch halves the counter under a
// cursor in each row and advances it, so every counter is halved once per kWidth touches
// and the cost is spread evenly. A page receiving a fraction f of recent writes settles
// between kWidth*f and 2*kWidth*f; with kHotCount = 8 a page is hot from roughly one
// write in 200 (f ~ 1/256..1/128), far above the ~1-2 a counter collects from
// collisions with uniformly spread cold traffic.
class HotnessSketch {
 public:
  static constexpr unsigned kWidth = 1024;  // power of two
  static constexpr unsigned kHotCount = 8;

  // Where (rkey, page) is counted, so that repeated touches of one page need not hash it
  // again (the policy's settled decision, policy.hpp).
  struct Slots {
    uint16_t row0;
    uint16_t row1;
  };
  static Slots slots_of(uint32_t rkey, uint64_t page) { return slots_of_key(key_of(rkey, page)); }
  // A page's key: the 64-bit hash both rows' slots are cut from (bits 0-9 and 32-41); its
  // other bits are free for a structure beside the sketch (resident_set.hpp).
  static uint64_t key_of(uint32_t rkey, uint64_t page) { return hash(rkey, page); }
  static Slots slots_of_key(uint64_t key) {
    return {static_cast<uint16_t>(key & kMask), static_cast<uint16_t>((key >> 32) & kMask)};
  }

  // Counts one write to (rkey, page) and says whether that page is hot.
  bool touch(uint32_t rkey, uint64_t page) { return touch(slots_of(rkey, page)); }
  bool touch(Slots s) {
    uint16_t& a = rows_[0][s.row0];
    uint16_t& b = rows_[1][s.row1];
    if (a != UINT16_MAX) ++a;
    if (b != UINT16_MAX) ++b;
    const bool hot = (a < b ? a : b) >= kHotCount;
    rows_[0][cursor_] >>= 1;
    rows_[1][cursor_] >>= 1;
    cursor_ = (cursor_ + 1) & kMask;
    return hot;
  }
  // n touches of `s` at once, exactly as n calls of touch(s), for n <= steady_touches(s):
  // within it the sweep halves neither of s's counters before the last of the n, so the
  // n increments come first and the halvings of the n cursor positions after. The policy
  // pays a settled write's deferred touches so: one at a time, they were a fifth of what
  // adaptive added to an 8 B write through the mapping.
  void touch_many(Slots s, unsigned n) {
    uint16_t& a = rows_[0][s.row0];
    uint16_t& b = rows_[1][s.row1];
    a = static_cast<uint16_t>(a + n < UINT16_MAX ? a + n : UINT16_MAX);
    b = static_cast<uint16_t>(b + n < UINT16_MAX ? b + n : UINT16_MAX);
    // The sweep over n positions: one counter at a time up to a multiple of a chunk,
    // then a chunk of a row in one shift (four at once while they last: a sample pays a
    // run's worth, about 200), then the rest one at a time. Chunks never wrap: kWidth is
    // a multiple of four of them.
    unsigned c = cursor_;
    for (; n != 0 && c % kChunk != 0; --n, c = (c + 1) & kMask) halve_at(c);
    for (; n >= kChunk && c % (4 * kChunk) != 0; n -= kChunk, c = (c + kChunk) & kMask) halve_chunk_at(c);
    for (; n >= 4 * kChunk; n -= 4 * kChunk, c = (c + 4 * kChunk) & kMask) {
      *reinterpret_cast<Chunk4*>(&rows_[0][c]) >>= 1;
      *reinterpret_cast<Chunk4*>(&rows_[1][c]) >>= 1;
    }
    for (; n >= kChunk; n -= kChunk, c = (c + kChunk) & kMask) halve_chunk_at(c);
    for (; n != 0; --n, c = (c + 1) & kMask) halve_at(c);
    cursor_ = c;
  }
  // How many more touches of `s` are certain to answer as touch(s) would answer now
  // (hot if count(s) + 1 >= kHotCount): until the sweep halves one of its counters or its
  // count reaches kHotCount. The policy defers that many touches of a settled write's page.
  unsigned steady_touches(Slots s) const {
    const unsigned to_row0 = (s.row0 - cursor_) & kMask;  // touches before each is halved
    const unsigned to_row1 = (s.row1 - cursor_) & kMask;
    unsigned n = (to_row0 < to_row1 ? to_row0 : to_row1) + 1;
    const unsigned c = count(s);
    if (c + 1 < kHotCount && kHotCount - 1 - c < n) n = kHotCount - 1 - c;
    return n;
  }
  unsigned count(Slots s) const {
    const uint16_t a = rows_[0][s.row0];
    const uint16_t b = rows_[1][s.row1];
    return a < b ? a : b;
  }
  bool is_hot(uint32_t rkey, uint64_t page) const { return count(rkey, page) >= kHotCount; }

  unsigned count(uint32_t rkey, uint64_t page) const { return count(slots_of(rkey, page)); }

 private:
  static constexpr unsigned kMask = kWidth - 1;
  static_assert(kWidth <= 1u << 16, "Slots hold a row index in 16 bits");
  // Eight counters of a row, halved at once by touch_many's sweep.
  typedef uint16_t Chunk __attribute__((vector_size(16), may_alias));
  typedef uint16_t Chunk4 __attribute__((vector_size(64), aligned(16), may_alias));  // rows_ is 16-aligned
  static constexpr unsigned kChunk = sizeof(Chunk) / sizeof(uint16_t);
  static_assert(kWidth % (4 * kChunk) == 0, "a chunk never wraps, nor four");
  void halve_at(unsigned c) {
    rows_[0][c] >>= 1;
    rows_[1][c] >>= 1;
  }
  void halve_chunk_at(unsigned c) {
    *reinterpret_cast<Chunk*>(&rows_[0][c]) >>= 1;
    *reinterpret_cast<Chunk*>(&rows_[1][c]) >>= 1;
  }

  // Two independent-enough 32-bit halves of one 64-bit mix, one per row.
  static uint64_t hash(uint32_t rkey, uint64_t page) {
    uint64_t x = page ^ (static_cast<uint64_t>(rkey) * 0x9E3779B97F4A7C15ULL);
    x = (x ^ (x >> 31)) * 0xBF58476D1CE4E5B9ULL;
    return x ^ (x >> 29);
  }

  alignas(16) uint16_t rows_[2][kWidth] = {};
  unsigned cursor_ = 0;
};

}  // namespace unload::policy
