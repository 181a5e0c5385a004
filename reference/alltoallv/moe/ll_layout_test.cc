#include "reference/alltoallv/moe/ll_layout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <utility>
#include <vector>

namespace peerlab::alltoallv::moe {
namespace {

TEST(LlLayout, Fp8RowsCarryScalesAndMetaAndStayVectorAligned) {
  LlShape s{2, 256, 4, 8, 16, 8, LlPayload::kFp8};
  const LlLayout l = makeLlLayout(s);
  EXPECT_EQ(l.payload_bytes, 256u);
  EXPECT_EQ(l.scale_bytes, 8u);
  EXPECT_EQ(l.row_bytes, 288u);     // 256 + 8 + 16 = 280, rounded up to 16
  EXPECT_EQ(l.metaOffset(), 272u);  // the last 16 bytes, vector-aligned for one int4 store
  EXPECT_GE(l.metaOffset(), l.payload_bytes + l.scale_bytes);
  LlShape small = s;
  small.hidden = 128;  // 128 + 4 bytes of payload and scales: the meta must not follow them unaligned
  EXPECT_EQ(makeLlLayout(small).metaOffset() % 16, 0u);
  EXPECT_EQ(makeLlLayout(small).row_bytes, 160u);
  s.payload = LlPayload::kBf16;
  s.hidden = 7168;
  const LlLayout b = makeLlLayout(s);
  EXPECT_EQ(b.row_bytes, 14336u + 16u);
  EXPECT_EQ(b.scale_bytes, 0u);
}

// Every slab row, signal and combine row of both parities is distinct, inside the region and 16-byte aligned.
TEST(LlLayout, RegionsAreDisjointAndInside) {
  for (LlPayload p : {LlPayload::kBf16, LlPayload::kFp8}) {
    LlShape s{3, 128, 3, 6, 5, 4, p};
    const LlLayout l = makeLlLayout(s);
    std::vector<std::pair<uint64_t, uint64_t>> spans;  // [begin, end)
    for (int par = 0; par < 2; ++par) {
      for (int src = 0; src < s.ranks; ++src)
        for (int le = 0; le < s.experts / s.ranks; ++le) {
          for (int slot = 0; slot < s.capacity; ++slot) {
            const uint64_t o = l.slabRow(par, src, le, slot);
            EXPECT_EQ(o % 16, 0u);
            spans.emplace_back(o, o + l.row_bytes);
          }
          spans.emplace_back(l.dispatchSignal(par, src, le), l.dispatchSignal(par, src, le) + 8);
        }
      for (int t = 0; t < s.max_tokens; ++t)
        for (int j = 0; j < s.top_k; ++j) {
          const uint64_t o = l.combineRow(par, t, j);
          EXPECT_EQ(o % 16, 0u);
          spans.emplace_back(o, o + 2ull * s.hidden);
        }
      for (int e = 0; e < s.experts; ++e)
        spans.emplace_back(l.combineSignal(par, e), l.combineSignal(par, e) + 8);
    }
    for (int r = 0; r < s.ranks; ++r)
      spans.emplace_back(l.combineDone(r), l.combineDone(r) + 8);
    std::sort(spans.begin(), spans.end());
    for (size_t i = 0; i < spans.size(); ++i) {
      EXPECT_LE(spans[i].second, l.total_bytes);
      if (i > 0) {
        EXPECT_LE(spans[i - 1].second, spans[i].first) << "overlap at " << spans[i].first;
      }
    }
    EXPECT_EQ(l.total_bytes % 4096, 0u);
    EXPECT_EQ(l.expertStride(), 3u * 4u);
  }
}

// DeepSeek-V3 decode shape on 4 ranks, 128 tokens per rank: what one rank's region holds.
TEST(LlLayout, CapacityMathAtTheDeepSeekShape) {
  const LlShape s{4, 7168, 8, 256, 128, 128, LlPayload::kBf16};
  const LlLayout l = makeLlLayout(s);
  EXPECT_EQ(l.row_bytes, 14352u);
  EXPECT_EQ(l.slab_parity_bytes, 256ull * 128 * 14352);  // every (source, local expert) pair of slabs = E x capacity
  EXPECT_EQ(l.combine_parity_bytes, 128ull * 8 * 14336);
  EXPECT_GE(l.total_bytes, 2 * (l.slab_parity_bytes + l.combine_parity_bytes));
  EXPECT_LT(l.total_bytes, 2 * (l.slab_parity_bytes + l.combine_parity_bytes) + (1 << 20));
  const LlLayout f = makeLlLayout(LlShape{4, 7168, 8, 256, 128, 128, LlPayload::kFp8});
  EXPECT_EQ(f.row_bytes, 7168u + 224u + 16u);  // fp8 rows: about half of bf16
}

TEST(LlLayout, ShapeErrorsNameTheValue) {
  EXPECT_EQ(llShapeError(LlShape{2, 256, 8, 16, 4, 4, LlPayload::kFp8}), "");
  EXPECT_NE(llShapeError(LlShape{2, 264, 8, 16, 4, 4, LlPayload::kFp8}).find("264"), std::string::npos);
  EXPECT_EQ(llShapeError(LlShape{2, 264, 8, 16, 4, 4, LlPayload::kBf16}), "");
  EXPECT_NE(llShapeError(LlShape{3, 256, 8, 16, 4, 4, LlPayload::kBf16}).find("16 experts"), std::string::npos);
  EXPECT_NE(llShapeError(LlShape{2, 256, 8, 16, 4, 0, LlPayload::kBf16}).find("capacity 0"), std::string::npos);
  EXPECT_NE(llShapeError(LlShape{2, 256, 8, 16, 0, 4, LlPayload::kBf16}).find("max tokens 0"), std::string::npos);
  EXPECT_NE(llShapeError(LlShape{9, 256, 8, 18, 4, 4, LlPayload::kBf16}).find("9"), std::string::npos);
}

TEST(LlLayout, SignalWordsCarryEpochAndRows) {
  const uint64_t w = llSignalWord(0x89abcdefu, 12345);
  EXPECT_EQ(llSignalEpoch(w), 0x89abcdefu);
  EXPECT_EQ(llSignalRows(w), 12345u);
  // A zeroed region never matches a call: epochs start at 1.
  EXPECT_NE(llSignalEpoch(0), 1u);
  EXPECT_EQ(llParity(1), 1);
  EXPECT_EQ(llParity(2), 0);
  EXPECT_TRUE(llEpochReached(5, 5));
  EXPECT_TRUE(llEpochReached(6, 5));
  EXPECT_FALSE(llEpochReached(4, 5));
  EXPECT_TRUE(llEpochReached(2, 0xfffffffeu));  // across the wrap
}

TEST(LlLayout, OverflowKeepsTheFirstCapacitySlots) {
  EXPECT_TRUE(llKept(0, 1));
  EXPECT_TRUE(llKept(3, 4));
  EXPECT_FALSE(llKept(4, 4));
  EXPECT_EQ(llDropped(3, 4), 0);
  EXPECT_EQ(llDropped(4, 4), 0);
  EXPECT_EQ(llDropped(9, 4), 5);
}

TEST(LlLayout, AutoTakesLowLatencyOnlyWhenTheCallFits) {
  EXPECT_EQ(chooseMoeMode(MoeMode::kAuto, 128, 1), MoeMode::kLowLatency);
  EXPECT_EQ(chooseMoeMode(MoeMode::kAuto, 128, 128), MoeMode::kLowLatency);
  EXPECT_EQ(chooseMoeMode(MoeMode::kAuto, 128, 129), MoeMode::kNormal);
  EXPECT_EQ(chooseMoeMode(MoeMode::kAuto, 0, 1), MoeMode::kNormal);
  EXPECT_EQ(chooseMoeMode(MoeMode::kAuto, 128, 0), MoeMode::kLowLatency);
  EXPECT_EQ(chooseMoeMode(MoeMode::kNormal, 128, 1), MoeMode::kNormal);
  EXPECT_EQ(chooseMoeMode(MoeMode::kLowLatency, 128, 4096), MoeMode::kLowLatency);
}

TEST(LlLayout, TrafficCountsSelectionsAndRemoteRanksOnce) {
  // 2 ranks, 4 experts (2 each), rank 0's tokens; row of 10 bytes.
  const std::vector<int32_t> ids = {
      0, 1, 2,   // all local but expert 2: 3 selections, 1 remote rank
      2, 3, -1,  // 2 selections (one dropped slot), both on rank 1: 1 remote rank
      0, 1, 7,   // expert 7 does not exist: 2 selections, no remote rank
  };
  const MoeTrafficBytes b = moeTrafficBytes(ids.data(), 3, 3, 4, 2, 0, 10);
  EXPECT_EQ(b.logical, 70u);
  EXPECT_EQ(b.nvlink, 20u);
  const MoeTrafficBytes r1 = moeTrafficBytes(ids.data(), 3, 3, 4, 2, 1, 10);
  EXPECT_EQ(r1.logical, 70u);
  EXPECT_EQ(r1.nvlink, 20u);  // tokens 0 and 2 reach rank 0
}

}  // namespace
}  // namespace peerlab::alltoallv::moe
