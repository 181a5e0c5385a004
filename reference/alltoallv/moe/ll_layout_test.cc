#include "reference/alltoallv/moe/ll_layout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <utility>
#include <vector>

namespace peerlab::alltoallv::moe {
namespace {

TEST(LlLayout, Fp8RowsCarryScalesAndPairsAndStayVectorAligned) {
  LlShape s{2, 256, 4, 8, 16, 8, LlPayload::kFp8};
  const LlLayout l = makeLlLayout(s);
  EXPECT_EQ(l.payload_bytes, 256u);
  EXPECT_EQ(l.scale_bytes, 8u);
  EXPECT_EQ(l.meta_offset, 272u);  // 256 + 8, rounded up to 16: one 16-byte store per pair entry
  EXPECT_EQ(l.row_bytes, 272u + 4 * 16);
  LlShape small = s;
  small.hidden = 128;  // 128 + 4 bytes of payload and scales: the entries must not follow them unaligned
  EXPECT_EQ(makeLlLayout(small).meta_offset, 144u);
  s.payload = LlPayload::kBf16;
  s.hidden = 7168;
  s.top_k = 8;
  const LlLayout b = makeLlLayout(s);
  EXPECT_EQ(b.meta_offset, 14336u);
  EXPECT_EQ(b.row_bytes, 14336u + 8 * 16);
  EXPECT_EQ(b.scale_bytes, 0u);
  EXPECT_EQ(b.count_block_bytes, 16u + 32u);  // flag word, then 4 local experts' counts as tagged words
  EXPECT_EQ(b.row_stride, b.row_bytes);       // never tagged: rows back to back
  s.tagged_max_tokens = 4;
  const LlLayout t = makeLlLayout(s);
  EXPECT_EQ(t.row_stride, 2 * t.row_bytes);  // a tagged row: every 4 bytes in an 8-byte word
  EXPECT_EQ(t.combine_row_stride, 4u * 7168u);
  EXPECT_TRUE(t.tagged(4));
  EXPECT_FALSE(t.tagged(5));
}

// Every count block, flag, row and mark of both parities is distinct, inside the region and aligned (16 bytes for
// rows and blocks, 8 for flag words).
TEST(LlLayout, RegionsAreDisjointAndInside) {
  for (int tagged : {0, 3})
    for (LlPayload p : {LlPayload::kBf16, LlPayload::kFp8}) {
      LlShape s{3, 128, 3, 6, 5, 4, p, tagged};
      const LlLayout l = makeLlLayout(s);
      const uint64_t widen = tagged > 0 ? 2 : 1;         // tagged rows take twice the bytes
      std::vector<std::pair<uint64_t, uint64_t>> spans;  // [begin, end)
      auto add = [&](uint64_t o, uint64_t bytes, uint64_t align) {
        EXPECT_EQ(o % align, 0u) << "offset " << o;
        spans.emplace_back(o, o + bytes);
      };
      for (int par = 0; par < 2; ++par)
        for (int src = 0; src < s.ranks; ++src) {
          add(l.countBlock(par, src), l.count_block_bytes, 16);
          EXPECT_EQ(l.countOf(par, src, s.experts / s.ranks - 1) + 8, l.countBlock(par, src) + 16 + 8 * 2);
          for (int t = 0; t < s.max_tokens; ++t) {
            for (int slice = 0; slice < kLlSlices; ++slice)
              add(l.dispatchFlag(par, src, t, slice), 8, 8);
            add(l.dispatchRow(par, src, t), widen * l.row_bytes, 16);
            add(l.combineFlag(par, src, t), 8, 8);
            add(l.combineRow(par, src, t), widen * 2ull * s.hidden, 16);
          }
        }
      for (int r = 0; r < s.ranks; ++r)
        add(l.combineMark(r), 8, 8);
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

// DeepSeek-V3 decode shape on 2 ranks, 128 tokens per rank: the region holds a row per (source, token) and parity,
// not a slab per expert.
TEST(LlLayout, CapacityMathAtTheDeepSeekShape) {
  const LlShape s{2, 7168, 8, 256, 128, 128, LlPayload::kBf16};
  const LlLayout l = makeLlLayout(s);
  EXPECT_EQ(l.row_bytes, 14336u + 128u);
  const uint64_t rows = 2ull * 2 * 128;  // parities x sources x tokens
  EXPECT_GE(l.total_bytes, rows * (l.row_bytes + 14336 + 16));
  EXPECT_LT(l.total_bytes, rows * (l.row_bytes + 14336 + 16) + (1 << 16));
  EXPECT_LT(l.total_bytes, 16u << 20);  // under 16 MiB per rank
  const LlLayout f = makeLlLayout(LlShape{2, 7168, 8, 256, 128, 128, LlPayload::kFp8});
  EXPECT_EQ(f.row_bytes, 7168u + 224u + 128u);  // fp8 rows: about half of bf16
}

TEST(LlLayout, ShapeErrorsNameTheValue) {
  EXPECT_EQ(llShapeError(LlShape{2, 256, 8, 16, 4, 4, LlPayload::kFp8}), "");
  EXPECT_NE(llShapeError(LlShape{2, 264, 8, 16, 4, 4, LlPayload::kFp8}).find("264"), std::string::npos);
  EXPECT_EQ(llShapeError(LlShape{2, 264, 8, 16, 4, 4, LlPayload::kBf16}), "");
  EXPECT_NE(llShapeError(LlShape{3, 256, 8, 16, 4, 4, LlPayload::kBf16}).find("16 experts"), std::string::npos);
  EXPECT_NE(llShapeError(LlShape{2, 256, 8, 16, 4, 0, LlPayload::kBf16}).find("capacity 0"), std::string::npos);
  EXPECT_NE(llShapeError(LlShape{2, 256, 8, 16, 0, 4, LlPayload::kBf16}).find("max tokens 0"), std::string::npos);
  EXPECT_NE(llShapeError(LlShape{9, 256, 8, 18, 4, 4, LlPayload::kBf16}).find("9"), std::string::npos);
  EXPECT_NE(llShapeError(LlShape{2, 256, 17, 16, 4, 4, LlPayload::kBf16}).find("top_k 17"), std::string::npos);
  EXPECT_NE(llShapeError(LlShape{2, 256, 8, 8192, 4, 4, LlPayload::kBf16}).find("8192 experts"), std::string::npos);
}

TEST(LlLayout, FlagWordsCarryEpochAndValue) {
  const uint64_t w = llFlagWord(0x89abcdefu, 12345);
  EXPECT_EQ(llFlagEpoch(w), 0x89abcdefu);
  EXPECT_EQ(llFlagValue(w), 12345u);
  // A zeroed region never matches a call: epochs start at 1.
  EXPECT_NE(llFlagEpoch(0), 1u);
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

TEST(LlLayout, AutoTakesLowLatencyUpToTheLimit) {
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

// Kernel spans: slots that hold a start and an end count, empty or half-written ones do not.
TEST(LlLayout, KernelSpansSkipEmptySlots) {
  LlKernelTimes t{};
  llClearTimes(&t);
  EXPECT_TRUE(llKernelSpansUs(t, false).empty());
  EXPECT_TRUE(llKernelSpansUs(t, true).empty());
  t.dispatch[3][0] = 1'000'000;
  t.dispatch[3][1] = 1'012'500;
  t.dispatch[4][0] = 2'000'000;  // started, never ended: the end word is still 0
  t.combine[0][0] = 5'000;
  t.combine[0][1] = 13'000;
  EXPECT_EQ(llKernelSpansUs(t, false), std::vector<double>{12.5});
  EXPECT_EQ(llKernelSpansUs(t, true), std::vector<double>{8.0});
}

// Slices: runs of whole fp8 scale groups (8 units) covering the row once, in order; empty past the end.
TEST(LlLayout, SlicesCoverTheRowInWholeGroups) {
  for (int units : {1, 16, 56, 448, 896, 1000}) {
    int next = 0;
    for (int j = 0; j < kLlSlices; ++j) {
      const LlUnits u = llSliceUnits(units, j, j + 1);
      EXPECT_EQ(u.begin, next) << units << " units, slice " << j;
      EXPECT_LE(u.begin, u.end);
      if (u.end < units) {
        EXPECT_EQ(u.end % 8, 0) << units << " units, slice " << j;
      }
      next = u.end;
    }
    EXPECT_EQ(next, units);
    EXPECT_EQ(llSliceUnits(units, 0, kLlSlices).end, units);
    EXPECT_EQ(llSliceUnits(units, 2, 4).begin, llSliceUnits(units, 2, 3).begin);
    EXPECT_EQ(llSliceUnits(units, 2, 4).end, llSliceUnits(units, 3, 4).end);
  }
  EXPECT_EQ(llSliceUnits(896, 0, 1).end, 112);  // bf16 H = 7168: 112 units per slice
}

// Phase stamps: offsets from the call's start, only for whole calls and stamps inside the call.
TEST(LlLayout, PhaseStampsAreOffsetsInsideWholeCalls) {
  LlKernelTimes t{};
  llClearTimes(&t);
  t.dispatch[1][kLlStampStart] = 1'000'000;
  t.dispatch[1][kLlStampEnd] = 1'007'000;
  t.dispatch[1][kLlStampSent] = 1'004'500;
  t.dispatch[1][kLlStampRows] = 1'009'000;   // after the end: not a stamp of this call
  t.dispatch[2][kLlStampStart] = 2'000'000;  // never ended
  t.dispatch[2][kLlStampSent] = 2'001'000;
  EXPECT_EQ(llStampOffsetsUs(t, false, kLlStampSent), std::vector<double>{4.5});
  EXPECT_TRUE(llStampOffsetsUs(t, false, kLlStampRows).empty());
  EXPECT_TRUE(llStampOffsetsUs(t, false, kLlStampSignals).empty());  // never stamped (0)
  EXPECT_TRUE(llStampOffsetsUs(t, false, kLlStampStart).empty());    // not a phase
  EXPECT_TRUE(llStampOffsetsUs(t, false, kLlStamps).empty());
  EXPECT_TRUE(llStampOffsetsUs(t, true, kLlStampSent).empty());
}

}  // namespace
}  // namespace peerlab::alltoallv::moe
