#include "reference/core/pattern.h"

#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <vector>

namespace peerlab {
namespace {

TEST(Pattern, IsDeterministicAndSeedDependent) {
  std::vector<uint8_t> a(4096), b(4096), c(4096);
  fillPatternHost(a.data(), a.size(), 11);
  fillPatternHost(b.data(), b.size(), 11);
  fillPatternHost(c.data(), c.size(), 12);
  EXPECT_EQ(a, b);
  size_t same = 0;
  for (size_t i = 0; i < a.size(); ++i)
    same += a[i] == c[i];
  EXPECT_LT(same, a.size() / 64) << "two seeds gave nearly the same bytes";
}

TEST(Pattern, IsNeverAllZeros) {
  std::vector<uint8_t> a(1 << 16);
  fillPatternHost(a.data(), a.size(), 0);
  size_t zeros = 0;
  for (uint8_t v : a)
    zeros += v == 0;
  EXPECT_LT(zeros, a.size() / 64);
}

TEST(Pattern, SeedsDifferPerPairAndSalt) {
  EXPECT_NE(patternSeed(1, 0, 1, 0), patternSeed(1, 1, 0, 0));
  EXPECT_NE(patternSeed(1, 0, 1, 0), patternSeed(1, 0, 1, 1));
  EXPECT_NE(patternSeed(1, 0, 1, 0), patternSeed(2, 0, 1, 0));
  EXPECT_EQ(patternSeed(5, 2, 3, 7), patternSeed(5, 2, 3, 7));
}

TEST(Pattern, PoisonDiffersInEveryByte) {
  std::vector<uint8_t> good(1000), bad(1000);
  fillPatternHost(good.data(), good.size(), 77, 13);
  poisonPatternHost(bad.data(), bad.size(), 77, 13);
  for (size_t i = 0; i < good.size(); ++i)
    ASSERT_NE(good[i], bad[i]) << i;
  auto r = checkPatternHost(bad.data(), bad.size(), 77, 1, 13);
  EXPECT_EQ(r.wrong, 1000u);
  EXPECT_EQ(r.first_bad, 0u);
}

TEST(Pattern, SubRangesCheckWithTheirOffset) {
  std::vector<uint8_t> whole(333);
  fillPatternHost(whole.data(), whole.size(), 5);
  // Bytes [17, 17 + 100) are the pattern at offset 17, not at offset 0.
  EXPECT_TRUE(checkPatternHost(whole.data() + 17, 100, 5, 1, 17).ok());
  EXPECT_FALSE(checkPatternHost(whole.data() + 17, 100, 5, 1, 0).ok());
}

TEST(Pattern, CountsWrongElementsAndFirstBadOffset) {
  std::vector<uint8_t> v(64);
  fillPatternHost(v.data(), v.size(), 9);
  v[10] ^= 0x1;
  v[11] ^= 0x80;
  v[40] ^= 0xff;
  auto bytes = checkPatternHost(v.data(), v.size(), 9, 1);
  EXPECT_EQ(bytes.elements, 64u);
  EXPECT_EQ(bytes.wrong, 3u);
  EXPECT_EQ(bytes.first_bad, 10u);
  auto words = checkPatternHost(v.data(), v.size(), 9, 4);
  EXPECT_EQ(words.elements, 16u);
  EXPECT_EQ(words.wrong, 2u);  // bytes 10 and 11 share word 2
  auto vec = checkPatternHost(v.data(), v.size(), 9, 16);
  EXPECT_EQ(vec.wrong, 2u);
}

TEST(Pattern, PartialLastElementCounts) {
  std::vector<uint8_t> v(10);
  fillPatternHost(v.data(), v.size(), 3);
  v[9] ^= 4;
  auto r = checkPatternHost(v.data(), v.size(), 3, 4);
  EXPECT_EQ(r.elements, 3u);
  EXPECT_EQ(r.wrong, 1u);
  EXPECT_EQ(r.first_bad, 9u);
}

// The host passes run word-wise on several threads over large buffers; they must agree byte for byte with the
// definition (patternByte), at any offset, and count wrong elements exactly across chunk edges.
TEST(Pattern, LargeHostPassesMatchTheBytewiseDefinition) {
  const size_t n = (size_t{40} << 20) + 7;  // several chunks, an odd tail
  for (uint64_t offset : {uint64_t{0}, uint64_t{13}}) {
    std::vector<uint8_t> v(n);
    fillPatternHost(v.data(), n, 99, offset);
    for (size_t i : {size_t{0}, size_t{1}, size_t{8} << 20, (size_t{8} << 20) + 3, n / 2, n - 1}) {
      ASSERT_EQ(v[i], patternByte(99, offset + i)) << "byte " << i << " offset " << offset;
    }
    EXPECT_TRUE(checkPatternHost(v.data(), n, 99, 1, offset).ok());
    // Wrong bytes: two in one 16-byte element, one on each side of a chunk edge, the last byte.
    const std::vector<size_t> bad = {5, 6, (size_t{8} << 20) - 1, size_t{8} << 20, n - 1};
    for (size_t i : bad)
      v[i] ^= 0x5a;
    for (size_t elem : {size_t{1}, size_t{4}, size_t{16}}) {
      std::set<size_t> elems;
      for (size_t i : bad)
        elems.insert(i / elem);
      const PatternCheck c = checkPatternHost(v.data(), n, 99, elem, offset);
      EXPECT_EQ(c.wrong, elems.size()) << "elem " << elem << " offset " << offset;
      EXPECT_EQ(c.first_bad, 5u);
      EXPECT_EQ(c.elements, (n + elem - 1) / elem);
    }
    std::vector<uint8_t> poison(n);
    poisonPatternHost(poison.data(), n, 99, offset);
    EXPECT_EQ(checkPatternHost(poison.data(), n, 99, 1, offset).wrong, n);
  }
}

}  // namespace
}  // namespace peerlab
