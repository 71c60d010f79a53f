// The express lane's placement through a mapping's view: the short copy as the general one, bounds, word and
// busy byte.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <vector>

#include "mapped.hpp"

namespace unload::rt {
namespace {

constexpr uint8_t kUntouched = 0xEE;

// dst after `copy` of n bytes from a patterned source, at an offset that tests alignment.
template <typename Copy>
std::vector<uint8_t> copied(Copy copy, uint64_t n, uint64_t offset) {
  std::vector<uint8_t> src(64), dst(64, kUntouched);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7 + 1);
  copy(dst.data() + offset, src.data() + 3, n);
  return dst;
}

TEST(mapped_view, ShortCopyWritesWhatTheGeneralOneWrites) {
  for (uint64_t n = kShortMin; n <= kShortMax; ++n) {
    for (uint64_t offset : {0u, 1u, 5u, 8u}) {
      const auto general = copied(copy_tail_last, n, offset);
      const auto short_copy = copied(copy_short_tail_last, n, offset);
      EXPECT_EQ(short_copy, general) << n << " bytes at offset " << offset;
      EXPECT_EQ(short_copy[offset + n], kUntouched) << "past the end, " << n << " bytes";
      if (offset) {
        EXPECT_EQ(short_copy[offset - 1], kUntouched) << "before the start, " << n << " bytes";
      }
    }
  }
}

struct Region {
  std::array<uint8_t, 64> bytes{};
  uint64_t word = 42;
  uint8_t busy = 0;
  // A view of `bytes` as the remote region [base, base + 64) for writes of `len` bytes.
  MappedView view(uint64_t base, uint32_t len) {
    MappedView v;
    v.shift = reinterpret_cast<uintptr_t>(bytes.data()) - base;
    v.lo = base;
    v.span = bytes.size() - len;
    v.word = &word;
    v.cookie = 42;
    v.busy = &busy;
    return v;
  }
};

template <bool kShort>
void places_within_bounds_while_valid() {
  constexpr uint64_t kBase = 0x7000'0000'1000;
  const std::array<uint8_t, 16> src = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  for (uint32_t len : {8u, 12u, 16u}) {
    Region r;
    const MappedView v = r.view(kBase, len);
    EXPECT_TRUE(place_mapped_view<kShort>(v, kBase, src.data(), len)) << len;
    EXPECT_EQ(std::memcmp(r.bytes.data(), src.data(), len), 0) << len;
    EXPECT_TRUE(place_mapped_view<kShort>(v, kBase + 64 - len, src.data(), len)) << "the last start, " << len;
    EXPECT_EQ(std::memcmp(r.bytes.data() + 64 - len, src.data(), len), 0) << len;
    // Out of bounds, by one either way and by wrapping around: refused, nothing placed.
    const auto before = r.bytes;
    for (uint64_t addr : {kBase - 1, kBase + 64 - len + 1, kBase + (uint64_t{1} << 63), ~uint64_t{0}})
      EXPECT_FALSE(place_mapped_view<kShort>(v, addr, src.data(), len)) << std::hex << addr;
    EXPECT_EQ(r.bytes, before);
    r.word = 43;  // revoked
    EXPECT_FALSE(place_mapped_view<kShort>(v, kBase + 8, src.data(), len));
    r.word = 42;
    r.busy = 1;  // the responder QP is busy
    EXPECT_FALSE(place_mapped_view<kShort>(v, kBase + 8, src.data(), len));
    EXPECT_EQ(r.bytes, before);
  }
}

TEST(mapped_view, PlacesWithinBoundsWhileTheWordHoldsAndTheResponderIsIdle) {
  places_within_bounds_while_valid<false>();
  places_within_bounds_while_valid<true>();
}

}  // namespace
}  // namespace unload::rt
