// CPU reference of the low-latency mode: fp8 e4m3 rounding, per-128 quantization, LL dispatch and combine.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <tuple>
#include <vector>

#include "reference/alltoallv/moe/moe_reference.h"

namespace peerlab::alltoallv::moe {
namespace {

TEST(Fp8E4m3, RoundsToNearestEvenAndSaturates) {
  EXPECT_EQ(floatToE4m3(0.f), 0x00);
  EXPECT_EQ(floatToE4m3(-0.f), 0x80);
  EXPECT_EQ(floatToE4m3(1.f), 0x38);
  EXPECT_EQ(floatToE4m3(-2.f), 0xC0);
  EXPECT_EQ(floatToE4m3(448.f), 0x7E);
  EXPECT_EQ(floatToE4m3(449.f), 0x7E);
  EXPECT_EQ(floatToE4m3(1e9f), 0x7E);
  EXPECT_EQ(floatToE4m3(std::numeric_limits<float>::infinity()), 0x7E);
  EXPECT_EQ(floatToE4m3(-std::numeric_limits<float>::infinity()), 0xFE);
  EXPECT_EQ(floatToE4m3(NAN) & 0x7F, 0x7F);
  // 1 + 1/16 is halfway between 1 and 1.125: ties to even (1.0); 1 + 3/16 between 1.125 and 1.25: to 1.25.
  EXPECT_EQ(floatToE4m3(1.0625f), 0x38);
  EXPECT_EQ(floatToE4m3(1.1875f), 0x3A);
  EXPECT_EQ(floatToE4m3(1.07f), 0x39);
  // Subnormals: multiples of 2^-9; 2^-10 ties to 0, 3 * 2^-10 ties to 2 * 2^-9; 15 * 2^-10 rounds up to 2^-6.
  EXPECT_EQ(floatToE4m3(std::ldexp(1.f, -9)), 0x01);
  EXPECT_EQ(floatToE4m3(std::ldexp(1.f, -10)), 0x00);
  EXPECT_EQ(floatToE4m3(std::ldexp(3.f, -10)), 0x02);
  EXPECT_EQ(floatToE4m3(std::ldexp(15.f, -10)), 0x08);
  EXPECT_EQ(e4m3ToFloat(0x08), std::ldexp(1.f, -6));
  EXPECT_EQ(e4m3ToFloat(0x7E), 448.f);
  EXPECT_TRUE(std::isnan(e4m3ToFloat(0x7F)));
  EXPECT_TRUE(std::isnan(e4m3ToFloat(0xFF)));
}

TEST(Fp8E4m3, EveryFiniteCodeRoundTrips) {
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7F) == 0x7F) continue;
    EXPECT_EQ(floatToE4m3(e4m3ToFloat(static_cast<uint8_t>(b))), b) << "code " << b;
  }
}

// Against a brute-force oracle: the nearest finite code, ties to the even code, beyond 448 saturated.
TEST(Fp8E4m3, MatchesTheNearestCodeOracle) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> mag(-12.f, 9.5f);
  for (int i = 0; i < 20000; ++i) {
    const float x = std::exp2(mag(rng)) * ((rng() & 1) ? -1.f : 1.f);
    int best = -1;
    float best_d = INFINITY;
    for (int b = 0; b < 0x7F; ++b) {
      const float v = e4m3ToFloat(static_cast<uint8_t>(b));
      const float d = std::fabs(std::fabs(x) - v);
      if (d < best_d || (d == best_d && (b & 1) == 0)) {
        best = b;
        best_d = d;
      }
    }
    const int want = best | (x < 0 ? 0x80 : 0);
    ASSERT_EQ(floatToE4m3(x), want) << "x = " << x;
  }
}

TEST(Fp8Quantize, GroupsScaleToTheirMaxAndStayWithinHalfAStep) {
  const int H = 512;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> val(-3.f, 3.f);
  std::vector<uint16_t> x(H);
  for (int i = 0; i < H; ++i)
    x[i] = floatToBf16(val(rng) * (i < 128 ? 1e-3f : 1.f));  // group 0 much smaller than the rest
  for (int i = 256; i < 384; ++i)
    x[i] = 0;  // group 2 all zero
  std::vector<uint8_t> q(H);
  std::vector<float> scales(H / kFp8Group), back(H);
  quantizeRowFp8(x.data(), H, q.data(), scales.data());
  dequantizeRowFp8(q.data(), scales.data(), H, back.data());
  for (int g = 0; g < H / kFp8Group; ++g) {
    float amax = 0;
    for (int i = 0; i < kFp8Group; ++i)
      amax = std::max(amax, std::fabs(bf16ToFloat(x[g * kFp8Group + i])));
    EXPECT_EQ(scales[g], std::max(amax, kFp8MinAmax) / 448.f) << "group " << g;
  }
  int saturated = 0;
  for (int i = 0; i < H; ++i) {
    const float xi = bf16ToFloat(x[i]);
    const float s = scales[i / kFp8Group];
    // Half a step of 3 mantissa bits (2^-4 relative), or half the subnormal step 2^-10 in scaled units.
    const float bound = std::max(std::fabs(xi) * 0.0625f, std::ldexp(s, -10)) * 1.0001f;
    ASSERT_LE(std::fabs(back[i] - xi), bound) << "element " << i;
    saturated += (q[i] & 0x7F) == 0x7E ? 1 : 0;
  }
  EXPECT_GE(saturated, 3) << "each non-zero group's largest element maps to +-448";
  for (int i = 256; i < 384; ++i)
    EXPECT_EQ(q[i], 0) << "zero group element " << i;
}

class LlShapes : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

// With room for every pair, LL dispatch holds the same rows as the definition, in the same order per expert.
TEST_P(LlShapes, DispatchWithRoomMatchesTheDefinition) {
  const auto [ranks, k, experts] = GetParam();
  MoeShape s{ranks, 16, k, experts};
  std::vector<int> tokens(ranks);
  for (int r = 0; r < ranks; ++r)
    tokens[r] = r == 1 ? 0 : 11 + 5 * r;
  const int cap = 40;
  auto in = makeMoeInputs(s, tokens, 21 + ranks + k, /*drop=*/true);
  auto ll = llDispatchReference(s, cap, LlPayload::kBf16, in);
  auto naive = dispatchNaive(s, in);
  const int per = experts / ranks;
  int empty = 0;
  for (int d = 0; d < ranks; ++d) {
    for (int le = 0; le < per; ++le) {
      empty += ll[d].expert_counts[le] == 0 ? 1 : 0;
      for (int64_t i = ll[d].expert_counts[le]; i < static_cast<int64_t>(ranks) * cap; ++i)
        ASSERT_EQ(ll[d].source[le * ranks * cap + i], PairSource{}) << "a row past expert " << le << "'s count";
    }
    EXPECT_EQ(ll[d].dropped_from_me, 0);
    EXPECT_EQ(ll[d].expert_counts, naive[d].expert_counts) << "rank " << d;
    for (int le = 0; le < per; ++le)
      for (int64_t i = 0; i < ll[d].expert_counts[le]; ++i) {
        const size_t row = static_cast<size_t>(le) * ranks * cap + i;
        const size_t p = static_cast<size_t>(naive[d].expert_offsets[le] + i);
        ASSERT_EQ(ll[d].source[row], naive[d].source[p]) << "rank " << d << " expert " << le << " row " << i;
        ASSERT_EQ(ll[d].weight[row], naive[d].weight[p]);
        for (int h = 0; h < s.hidden; ++h)
          ASSERT_EQ(ll[d].rows[row * s.hidden + h], naive[d].rows[p * s.hidden + h]);
      }
  }
  // Few tokens over many experts: some experts get nothing, and they say so with a count of 0.
  if (experts >= 256) {
    EXPECT_GT(empty, 0);
  }
}

// Combine in fp32 of every kept slot agrees with the definition (double sum, one rounding) within bf16 rounding.
TEST_P(LlShapes, CombineWithRoomMatchesTheDefinition) {
  const auto [ranks, k, experts] = GetParam();
  MoeShape s{ranks, 24, k, experts};
  const int cap = 40;
  auto in = makeMoeInputs(s, std::vector<int>(ranks, 9), 3 + ranks * k, /*drop=*/true);
  auto ll = llDispatchReference(s, cap, LlPayload::kBf16, in);
  auto d = dispatchReference(s, in);
  const int per = experts / ranks;
  std::vector<std::vector<uint16_t>> eo(ranks), eo_ll(ranks);
  for (int r = 0; r < ranks; ++r) {
    eo[r].resize(d[r].rows.size());
    for (int le = 0; le < per; ++le)
      for (int64_t p = d[r].expert_offsets[le]; p < d[r].expert_offsets[le] + d[r].expert_counts[le]; ++p)
        for (int h = 0; h < s.hidden; ++h)
          eo[r][p * s.hidden + h] = expertFunction(d[r].rows[p * s.hidden + h], r * per + le);
    eo_ll[r].assign(ll[r].rows.size(), 0);
    for (size_t i = 0; i < eo_ll[r].size(); ++i) {
      const int le = static_cast<int>(i / s.hidden / (static_cast<size_t>(ranks) * cap));
      eo_ll[r][i] = expertFunction(ll[r].rows[i], r * per + le);
    }
  }
  auto got = llCombineReference(s, cap, in, ll, eo_ll);
  auto naive = combineNaive(s, in, d, eo);
  auto mag = combineMagnitude(s, in, d, eo);
  for (int r = 0; r < ranks; ++r) {
    ASSERT_EQ(got[r].size(), naive[r].size());
    for (size_t i = 0; i < got[r].size(); ++i)
      ASSERT_LE(std::fabs(bf16ToFloat(got[r][i]) - bf16ToFloat(naive[r][i])), 1e-2f * mag[r][i] + 1e-6f)
          << "rank " << r << " element " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, LlShapes,
                         ::testing::Values(std::make_tuple(1, 1, 4), std::make_tuple(1, 8, 32),
                                           std::make_tuple(2, 4, 8), std::make_tuple(4, 8, 256),
                                           std::make_tuple(8, 8, 64)));

// A hot expert overflows its slabs: each source keeps its first `cap` pairs, drops and counts the rest, writes
// nothing past them; empty experts stay empty; combine leaves the dropped slots out.
TEST(LlReference, HotExpertOverflowsAndDropsAreCounted) {
  MoeShape s{2, 8, 4, 16};
  const int cap = 3;
  auto in = makeHotMoeInputs(s, {10, 7}, 5, /*hot=*/9);
  auto ll = llDispatchReference(s, cap, LlPayload::kBf16, in);
  const int per = s.experts / s.ranks;
  int64_t kept = 0, dropped = 0, valid = 0, empty = 0;
  for (int r = 0; r < s.ranks; ++r) {
    dropped += ll[r].dropped_from_me;
    for (int32_t e : in[r].ids)
      valid += (e >= 0 && e < s.experts) ? 1 : 0;
    for (int le = 0; le < per; ++le) {
      kept += ll[r].expert_counts[le];
      empty += ll[r].expert_counts[le] == 0 ? 1 : 0;
      for (int src = 0; src < s.ranks; ++src)
        EXPECT_LE(ll[r].source_counts[le][src], cap);
      for (int64_t i = ll[r].expert_counts[le]; i < static_cast<int64_t>(s.ranks) * cap; ++i)
        EXPECT_EQ(ll[r].source[le * s.ranks * cap + i], PairSource{}) << "row past the count written";
    }
  }
  // Expert 9 (rank 1, local 1) takes 3 of rank 0's 10 and 3 of rank 1's 7.
  EXPECT_EQ(ll[1].source_counts[1][0], 3);
  EXPECT_EQ(ll[1].source_counts[1][1], 3);
  EXPECT_GE(ll[0].dropped_from_me, 7);
  EXPECT_GE(ll[1].dropped_from_me, 4);
  EXPECT_EQ(kept + dropped, valid);
  // Identity experts, unit weights: a token gets back, per rank, (its kept slots there) x itself rounded to bf16,
  // summed over the ranks in rank order.
  for (auto& r : in)
    for (auto& w : r.weights)
      w = 1.f;
  ll = llDispatchReference(s, cap, LlPayload::kBf16, in);
  std::vector<std::vector<uint16_t>> eo(s.ranks);
  for (int r = 0; r < s.ranks; ++r)
    eo[r] = ll[r].rows;
  auto out = llCombineReference(s, cap, in, ll, eo);
  int multi_slot = 0;
  for (int r = 0; r < s.ranks; ++r) {
    std::vector<int> seen(s.experts, 0);
    for (int t = 0; t < in[r].tokens; ++t) {
      std::vector<int> kept_on(s.ranks, 0);
      for (int j = 0; j < s.top_k; ++j) {
        const int e = in[r].ids[t * s.top_k + j];
        if (e >= 0 && e < s.experts && seen[e]++ < cap) kept_on[e / per]++;
      }
      for (int q = 0; q < s.ranks; ++q)
        multi_slot += kept_on[q] > 1 ? 1 : 0;
      for (int h = 0; h < s.hidden; ++h) {
        const float x = bf16ToFloat(in[r].x[t * s.hidden + h]);
        float total = 0.f;
        for (int q = 0; q < s.ranks; ++q)
          if (kept_on[q] > 0) total += bf16ToFloat(floatToBf16(static_cast<float>(kept_on[q]) * x));
        ASSERT_EQ(out[r][t * s.hidden + h], floatToBf16(total)) << "rank " << r << " token " << t;
      }
    }
  }
  EXPECT_GT(multi_slot, 0) << "some token must have several kept slots on one rank";
}

// The GPU's two steps (each token once per rank with its kept pairs, then the fan-out by the earlier sources' kept
// counts) give exactly the definition, drops and hot experts included.
TEST(LlReference, SendOncePerRankThenFanOutIsTheDefinition) {
  struct Case {
    MoeShape shape;
    int capacity;
    LlPayload payload;
    bool hot;
  };
  for (const Case& c :
       {Case{{2, 16, 4, 8}, 40, LlPayload::kBf16, false}, Case{{2, 16, 4, 8}, 3, LlPayload::kBf16, true},
        Case{{4, 128, 8, 64}, 2, LlPayload::kFp8, false}, Case{{3, 8, 3, 9}, 5, LlPayload::kBf16, true},
        Case{{1, 128, 8, 32}, 4, LlPayload::kFp8, true}, Case{{8, 8, 8, 64}, 1, LlPayload::kBf16, false}}) {
    SCOPED_TRACE("ranks " + std::to_string(c.shape.ranks) + " capacity " + std::to_string(c.capacity));
    std::vector<int> tokens(c.shape.ranks);
    for (int r = 0; r < c.shape.ranks; ++r)
      tokens[r] = r == 1 ? 0 : 9 + 4 * r;
    const auto in = c.hot ? makeHotMoeInputs(c.shape, tokens, 77, c.shape.experts - 1)
                          : makeMoeInputs(c.shape, tokens, 78, /*drop=*/true);
    const auto got = llDispatchReference(c.shape, c.capacity, c.payload, in);
    const auto want = llDispatchNaive(c.shape, c.capacity, c.payload, in);
    int64_t dropped = 0;
    for (int r = 0; r < c.shape.ranks; ++r) {
      EXPECT_TRUE(got[r] == want[r]) << "rank " << r;
      dropped += want[r].dropped_from_me;
    }
    if (c.hot || c.capacity <= 2) {
      EXPECT_GT(dropped, 0) << "this case must drop pairs";
    }
  }
}

// Each token goes once to each rank that holds one of its kept pairs, carrying exactly those pairs in slot order;
// without drops the bytes to other ranks are moeTrafficBytes' nvlink count.
TEST(LlReference, SentRowsCarryEachTokenOncePerRank) {
  const MoeShape s{4, 16, 8, 64};
  const int per = s.experts / s.ranks;
  for (int cap : {64, 2}) {
    const auto in = makeMoeInputs(s, {20, 20, 20, 20}, 5 + cap, /*drop=*/true);
    for (int src = 0; src < s.ranks; ++src) {
      const auto sent = llSentRows(s, cap, in[src]);
      const auto position = llPositions(s, in[src]);
      uint64_t other_rows = 0;
      for (int d = 0; d < s.ranks; ++d) {
        int last = -1;
        for (const LlSentRow& r : sent[d]) {
          ASSERT_GT(r.token, last) << "tokens in order, each once";
          last = r.token;
          std::vector<LlPairEntry> want;
          for (int j = 0; j < s.top_k; ++j) {
            const size_t i = static_cast<size_t>(r.token) * s.top_k + j;
            const int e = in[src].ids[i];
            if (position[i] >= 0 && llKept(position[i], cap) && e / per == d) {
              want.push_back(LlPairEntry{e % per, j, static_cast<int32_t>(position[i]), in[src].weights[i]});
            }
          }
          ASSERT_FALSE(r.pairs.empty());
          ASSERT_EQ(r.pairs.size(), want.size());
          for (size_t p = 0; p < want.size(); ++p) {
            EXPECT_EQ(r.pairs[p].local_expert, want[p].local_expert);
            EXPECT_EQ(r.pairs[p].slot, want[p].slot);
            EXPECT_EQ(r.pairs[p].position, want[p].position);
            EXPECT_EQ(r.pairs[p].weight, want[p].weight);
            EXPECT_LT(r.pairs[p].position, cap);
          }
        }
        if (d != src) other_rows += sent[d].size();
      }
      const MoeTrafficBytes b =
          moeTrafficBytes(in[src].ids.data(), in[src].tokens, s.top_k, s.experts, s.ranks, src, 1);
      if (cap == 64) {
        EXPECT_EQ(other_rows, b.nvlink) << "source " << src;
      } else {
        EXPECT_LT(other_rows, b.nvlink) << "source " << src << ": dropped pairs send less";
      }
    }
  }
}

// Partial sums are rounded per rank before they are added: 1 + 2^-8 on rank 0 rounds to 1 (ties to even), and
// 1 + 2^-8 again at the end; one fp32 chain over all three slots would give 1 + 2^-7.
TEST(LlReference, CombineRoundsEachRanksPartialSumOnce) {
  const MoeShape s{2, 8, 3, 4};
  const int cap = 4;
  std::vector<RankInput> in(2);
  in[0].tokens = 1;
  in[0].x.assign(8, floatToBf16(1.f));
  in[0].ids = {0, 1, 2};  // experts 0 and 1 on rank 0, expert 2 on rank 1
  in[0].weights = {1.f, 1.f, 1.f};
  const auto ll = llDispatchReference(s, cap, LlPayload::kBf16, in);
  const size_t stride = 2 * cap;
  std::vector<std::vector<uint16_t>> eo = {std::vector<uint16_t>(2 * stride * 8, 0),
                                           std::vector<uint16_t>(2 * stride * 8, 0)};
  const uint16_t tiny = floatToBf16(std::ldexp(1.f, -8));
  for (int h = 0; h < 8; ++h) {
    eo[0][h] = floatToBf16(1.f);   // rank 0, local expert 0, row 0
    eo[0][stride * 8 + h] = tiny;  // rank 0, local expert 1, row 0
    eo[1][h] = tiny;               // rank 1, local expert 0, row 0
  }
  ASSERT_EQ(ll[0].expert_counts, (std::vector<int64_t>{1, 1}));
  ASSERT_EQ(ll[1].expert_counts, (std::vector<int64_t>{1, 0}));
  const auto out = llCombineReference(s, cap, in, ll, eo);
  for (int h = 0; h < 8; ++h)
    EXPECT_EQ(bf16ToFloat(out[0][h]), 1.f);
  EXPECT_TRUE(out[1].empty());
}

TEST(LlReference, Fp8DispatchCarriesTheQuantizedRows) {
  MoeShape s{2, 256, 4, 8};
  const int cap = 16;
  auto in = makeMoeInputs(s, {5, 6}, 8);
  auto ll = llDispatchReference(s, cap, LlPayload::kFp8, in);
  auto bf = llDispatchReference(s, cap, LlPayload::kBf16, in);
  for (int r = 0; r < s.ranks; ++r) {
    EXPECT_TRUE(ll[r].rows.empty());
    EXPECT_EQ(ll[r].expert_counts, bf[r].expert_counts);
    for (size_t row = 0; row < ll[r].source.size(); ++row) {
      if (ll[r].source[row].rank < 0) continue;
      std::vector<uint8_t> q(s.hidden);
      std::vector<float> sc(s.hidden / kFp8Group);
      quantizeRowFp8(&bf[r].rows[row * s.hidden], s.hidden, q.data(), sc.data());
      for (int h = 0; h < s.hidden; ++h)
        ASSERT_EQ(ll[r].q[row * s.hidden + h], q[h]);
      for (int g = 0; g < s.hidden / kFp8Group; ++g)
        ASSERT_EQ(ll[r].scales[row * (s.hidden / kFp8Group) + g], sc[g]);
    }
  }
}

}  // namespace
}  // namespace peerlab::alltoallv::moe
