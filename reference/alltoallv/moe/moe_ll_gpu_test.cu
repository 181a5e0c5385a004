// GPU tests of the MoE low-latency mode against the CPU reference (rank r on device r). One rank proves the kernels
// and the data path (every expert local); more ranks need as many GPUs and skip otherwise.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "reference/alltoallv/moe/low_latency.h"
#include "reference/alltoallv/moe/moe.h"
#include "reference/alltoallv/moe/moe_reference.h"
#include "reference/core/check.h"
#include "reference/core/memory.h"
#include "reference/core/wait.h"
#include "reference/testing/rank_test.h"
#include "reference/testing/testing.h"

namespace peerlab::alltoallv::moe {
namespace {

Deadline soon() {
  return Deadline::afterMs(60'000);
}

template <class T>
StatusOr<DeviceBuffer> upload(int dev, const std::vector<T>& v) {
  PEERLAB_ASSIGN_OR_RETURN(auto b, allocDevice(dev, std::max<size_t>(v.size() * sizeof(T), 16)));
  if (!v.empty())
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaMemcpy(b->ptr, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice)));
  return b;
}
template <class T>
Status download(std::vector<T>& out, const void* p, size_t count) {
  out.resize(count);
  if (count == 0) return Status::ok();
  return PEERLAB_CUDA(cudaMemcpy(out.data(), p, count * sizeof(T), cudaMemcpyDeviceToHost));
}

enum class Routing { kUniform, kHot };

struct LlCase {
  int ranks;
  LlPayload payload;
  Routing routing;
  int tagged_max_tokens = kLlDefaultTaggedMaxTokens;  ///< 0: every row plain; between the ranks' token counts: mixed
};

// The experts run on the host from the reference's rows (fp8: dequantized, then rounded to bf16).
std::vector<std::vector<uint16_t>> runLlExperts(const MoeShape& s, int cap, LlPayload payload,
                                                const std::vector<LlRankDispatch>& d) {
  const int per = s.experts / s.ranks, H = s.hidden;
  const size_t stride = static_cast<size_t>(s.ranks) * cap;
  std::vector<std::vector<uint16_t>> out(s.ranks);
  std::vector<float> deq(H);
  for (int r = 0; r < s.ranks; ++r) {
    out[r].assign(per * stride * H, 0);
    for (int le = 0; le < per; ++le)
      for (int64_t i = 0; i < d[r].expert_counts[le]; ++i) {
        const size_t row = le * stride + static_cast<size_t>(i);
        for (int h = 0; h < H; ++h) {
          uint16_t x = 0;
          if (payload == LlPayload::kBf16) {
            x = d[r].rows[row * H + h];
          } else {
            x = floatToBf16(e4m3ToFloat(d[r].q[row * H + h]) * d[r].scales[row * (H / kFp8Group) + h / kFp8Group]);
          }
          out[r][row * H + h] = expertFunction(x, r * per + le);
        }
      }
  }
  return out;
}

size_t countDiffs(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b, size_t* first) {
  size_t bad = 0;
  *first = SIZE_MAX;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    if (a[i] != b[i]) {
      ++bad;
      *first = std::min(*first, i);
    }
  return bad + (a.size() > b.size() ? a.size() - b.size() : b.size() - a.size());
}

// Three rounds of dispatch, experts, combine with fresh inputs each (both slab parities, reused twice); dispatch
// must equal the reference exactly and so must combine (the same fp32 fma chain in slot order, one rounding).
void llRounds(Bootstrap& boot, const LlCase& c, const MoeShape& shape, int cap, const std::vector<int>& tokens) {
  const int me = boot.rank();
  PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaSetDevice(me)));
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto stream, createStream(me));
  cudaStream_t s = stream.get();
  MoeConfig cfg;
  cfg.hidden = shape.hidden;
  cfg.top_k = shape.top_k;
  cfg.experts = shape.experts;
  cfg.max_tokens = 64;
  cfg.ll_max_tokens = *std::max_element(tokens.begin(), tokens.end());
  cfg.ll_capacity = cap;
  cfg.ll_payload = c.payload;
  cfg.ll_tagged_max_tokens = c.tagged_max_tokens;
  auto made = MoeExchange::createWithAllToAllV(boot, me, cfg, Transfer::kPush, soon());
  PEERLAB_ASSERT_OK(made.status());
  MoeExchange moe = std::move(made).value();
  ASSERT_NE(moe.lowLatency(), nullptr);
  // The kernels are built to fit twice on an SM (registers and shared memory), so every GPU takes the default.
  EXPECT_EQ(moe.lowLatency()->ctasPerSm(), kLlDefaultCtasPerSm);
  const LlDispatchOutput o = moe.lowLatency()->output();
  const int per = shape.experts / shape.ranks;
  const size_t stride = static_cast<size_t>(shape.ranks) * cap;
  const size_t rows = per * stride;
  const int H = shape.hidden;
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const uint64_t seed = 900 + 17 * round + c.ranks;
    const auto in = c.routing == Routing::kHot ? makeHotMoeInputs(shape, tokens, seed, /*hot=*/shape.experts - 1)
                                               : makeMoeInputs(shape, tokens, seed, /*drop=*/true);
    const auto ref = llDispatchReference(shape, cap, c.payload, in);
    const RankInput& mine = in[me];
    PEERLAB_ASSERT_OK_AND_ASSIGN(auto x, upload(me, mine.x));
    PEERLAB_ASSERT_OK_AND_ASSIGN(auto ids, upload(me, mine.ids));
    PEERLAB_ASSERT_OK_AND_ASSIGN(auto w, upload(me, mine.weights));
    // Poison the packed output: a row the kernel should have written and did not shows.
    PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaMemset(const_cast<uint8_t*>(o.rows), 0xEE, rows * o.payload_bytes)));
    PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaMemset(const_cast<int4*>(o.row_source), 0xEE, rows * sizeof(int4))));
    // Round 1 dispatches twice back to back (the second call on the other parity, no combine between).
    for (int call = 0; call <= round % 2; ++call) {
      PEERLAB_ASSERT_OK(
          moe.dispatch(x->as<__nv_bfloat16>(), ids->as<int32_t>(), w->as<float>(), mine.tokens, s, soon()));
    }
    EXPECT_EQ(moe.lastMode(), MoeMode::kLowLatency);
    const Status st = moe.checkStatus(s, soon());
    int64_t dropped = 0;
    for (const auto& r : ref)
      dropped += r.dropped_from_me;
    if (ref[me].dropped_from_me > 0) {
      EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.toString();
      EXPECT_EQ(moe.lowLatency()->droppedPairs(), static_cast<uint64_t>((1 + round % 2) * ref[me].dropped_from_me));
    } else {
      PEERLAB_ASSERT_OK(st);
    }
    if (c.routing == Routing::kHot) {
      EXPECT_GT(dropped, 0) << "the hot routing must overflow some slab";
    }
    const LlRankDispatch& want = ref[me];
    std::vector<int64_t> counts;
    PEERLAB_ASSERT_OK(download(counts, o.expert_counts, per));
    EXPECT_EQ(counts, want.expert_counts);
    std::vector<int4> src;
    std::vector<float> weight;
    std::vector<uint8_t> payload;
    std::vector<float> scales;
    PEERLAB_ASSERT_OK(download(src, o.row_source, rows));
    PEERLAB_ASSERT_OK(download(weight, o.row_weight, rows));
    PEERLAB_ASSERT_OK(download(payload, o.rows, rows * o.payload_bytes));
    if (c.payload == LlPayload::kFp8) PEERLAB_ASSERT_OK(download(scales, o.scales, rows * (H / kFp8Group)));
    size_t bad_src = 0, bad_payload = 0, bad_scales = 0, first = SIZE_MAX;
    for (int le = 0; le < per; ++le)
      for (int64_t i = 0; i < std::min(counts[le], want.expert_counts[le]); ++i) {
        const size_t row = le * stride + static_cast<size_t>(i);
        const PairSource got{src[row].x, src[row].y, src[row].z};
        bad_src += (got == want.source[row] && weight[row] == want.weight[row]) ? 0 : 1;
        const uint8_t* p = &payload[row * o.payload_bytes];
        const uint8_t* q =
            c.payload == LlPayload::kBf16 ? reinterpret_cast<const uint8_t*>(&want.rows[row * H]) : &want.q[row * H];
        for (uint64_t b = 0; b < o.payload_bytes; ++b)
          if (p[b] != q[b]) {
            ++bad_payload;
            first = std::min(first, row * o.payload_bytes + b);
          }
        if (c.payload == LlPayload::kFp8)
          for (int g = 0; g < H / kFp8Group; ++g)
            bad_scales += scales[row * (H / kFp8Group) + g] == want.scales[row * (H / kFp8Group) + g] ? 0 : 1;
      }
    EXPECT_EQ(bad_src, 0u) << "rows with a wrong source or weight on rank " << me;
    EXPECT_EQ(bad_payload, 0u) << "wrong payload bytes on rank " << me << ", first at byte " << first;
    EXPECT_EQ(bad_scales, 0u) << "wrong fp8 scales on rank " << me;

    const auto expert_out = runLlExperts(shape, cap, c.payload, ref);
    const auto combined = llCombineReference(shape, cap, in, ref, expert_out);
    PEERLAB_ASSERT_OK_AND_ASSIGN(auto eo, upload(me, expert_out[me]));
    PEERLAB_ASSERT_OK_AND_ASSIGN(auto out, allocDevice(me, std::max<size_t>(mine.x.size() * 2, 16)));
    // Combine may repeat after one dispatch (both parities of the combine rows, then one reused).
    for (int again = 0; again < 3; ++again) {
      PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaMemset(out->ptr, 0xFF, out->bytes)));
      PEERLAB_ASSERT_OK(moe.combine(eo->as<__nv_bfloat16>(), out->as<__nv_bfloat16>(), s, soon()));
      PEERLAB_ASSERT_OK(moe.checkStatus(s, soon()));
      std::vector<uint16_t> got;
      PEERLAB_ASSERT_OK(download(got, out->ptr, mine.x.size()));
      size_t first_out = 0;
      EXPECT_EQ(countDiffs(got, combined[me], &first_out), 0u)
          << "combine " << again << ": bf16 elements differing from the reference on rank " << me << ", first at "
          << first_out;
    }
  }
  PEERLAB_ASSERT_OK(boot.barrier(soon()));
  PEERLAB_ASSERT_OK(moe.close(boot, soon()));
}

class MoeLowLatency : public ::testing::TestWithParam<LlCase> {};

TEST_P(MoeLowLatency, DispatchAndCombineEqualTheReference) {
  const LlCase c = GetParam();
  PEERLAB_REQUIRE_GPUS(c.ranks);
  PEERLAB_TEST_RANKS(c.ranks, boot);
  // 8 experts per rank, top-4; one rank has no tokens at all when there are several.
  MoeShape shape{c.ranks, 256, 4, 8 * c.ranks};
  std::vector<int> tokens(c.ranks);
  for (int r = 0; r < c.ranks; ++r)
    tokens[r] = (c.ranks > 1 && r == 1) ? 0 : 37 + 5 * r;
  const int cap = c.routing == Routing::kHot ? 6 : *std::max_element(tokens.begin(), tokens.end());
  llRounds(boot, c, shape, cap, tokens);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, MoeLowLatency,
    ::testing::Values(LlCase{1, LlPayload::kBf16, Routing::kUniform}, LlCase{1, LlPayload::kFp8, Routing::kUniform},
                      LlCase{1, LlPayload::kBf16, Routing::kHot}, LlCase{1, LlPayload::kFp8, Routing::kHot},
                      LlCase{2, LlPayload::kBf16, Routing::kUniform}, LlCase{2, LlPayload::kFp8, Routing::kUniform},
                      LlCase{2, LlPayload::kBf16, Routing::kHot}, LlCase{2, LlPayload::kFp8, Routing::kHot},
                      LlCase{4, LlPayload::kBf16, Routing::kUniform}, LlCase{4, LlPayload::kFp8, Routing::kUniform},
                      LlCase{4, LlPayload::kBf16, Routing::kHot},
                      // Every row tagged (37 and 42 tokens are above the default limit), every row plain, and
                      // mixed: rank 0 (37 tokens) plain, rank 1 (none) tagged.
                      LlCase{1, LlPayload::kBf16, Routing::kHot, 64},
                      LlCase{2, LlPayload::kBf16, Routing::kUniform, 64}, LlCase{2, LlPayload::kFp8, Routing::kHot, 64},
                      LlCase{4, LlPayload::kFp8, Routing::kHot, 64}, LlCase{1, LlPayload::kFp8, Routing::kUniform, 0},
                      LlCase{2, LlPayload::kBf16, Routing::kUniform, 0}, LlCase{2, LlPayload::kFp8, Routing::kHot, 0},
                      LlCase{2, LlPayload::kBf16, Routing::kHot, 20},
                      LlCase{2, LlPayload::kFp8, Routing::kUniform, 20}),
    [](const auto& info) {
      const LlCase& c = info.param;
      const std::string rows = c.tagged_max_tokens == kLlDefaultTaggedMaxTokens ? ""
                               : c.tagged_max_tokens == 0                       ? "_plain"
                               : c.tagged_max_tokens >= 64                      ? "_tagged"
                                                                                : "_mixed";
      return std::to_string(c.ranks) + "ranks_" + (c.payload == LlPayload::kFp8 ? "fp8" : "bf16") + "_" +
             (c.routing == Routing::kHot ? "hot" : "uniform") + rows;
    });

TEST(MoeLowLatencyDeepSeek, Hidden7168Top8Of256) {
  PEERLAB_REQUIRE_GPUS(1);
  PEERLAB_TEST_RANKS(1, boot);
  llRounds(boot, LlCase{1, LlPayload::kFp8, Routing::kUniform}, MoeShape{1, 7168, 8, 256}, 16, {16});
}

TEST(MoeLowLatencyDeepSeek, TwoRanksHidden7168Top8Of256) {
  PEERLAB_REQUIRE_GPUS(2);
  PEERLAB_TEST_RANKS(2, boot);
  llRounds(boot, LlCase{2, LlPayload::kBf16, Routing::kUniform}, MoeShape{2, 7168, 8, 256}, 32, {32, 9});
}

TEST(MoeLowLatencyDeepSeek, TwoRanksFp8Hidden7168Top8Of256) {
  PEERLAB_REQUIRE_GPUS(2);
  PEERLAB_TEST_RANKS(2, boot);
  llRounds(boot, LlCase{2, LlPayload::kFp8, Routing::kHot}, MoeShape{2, 7168, 8, 256}, 6, {30, 1});
}

// More rows than SMs (two CTAs per SM), small enough for the sanitizers: 190 rows on 2 ranks, fp8 and bf16.
TEST(MoeLowLatencyDense, TwoRanksMoreRowsThanSms) {
  PEERLAB_REQUIRE_GPUS(2);
  PEERLAB_TEST_RANKS(2, boot);
  for (LlPayload payload : {LlPayload::kBf16, LlPayload::kFp8}) {
    SCOPED_TRACE(payload == LlPayload::kFp8 ? "fp8" : "bf16");
    llRounds(boot, LlCase{2, payload, Routing::kUniform}, MoeShape{2, 256, 4, 16}, 100, {100, 90});
  }
}

// Decode at T=128: the rank with 128 tokens launches 256 CTAs for its dispatch and its combine, more than one per SM
// on every GPU with fewer than 256 SMs.
TEST(MoeLowLatencyDeepSeek, TwoRanksT128Hidden7168Top8Of256) {
  PEERLAB_REQUIRE_GPUS(2);
  PEERLAB_TEST_RANKS(2, boot);
  llRounds(boot, LlCase{2, LlPayload::kBf16, Routing::kUniform}, MoeShape{2, 7168, 8, 256}, 128, {128, 100});
}

TEST(MoeLowLatencyDeepSeek, TwoRanksT128Fp8Hidden7168Top8Of256) {
  PEERLAB_REQUIRE_GPUS(2);
  PEERLAB_TEST_RANKS(2, boot);
  llRounds(boot, LlCase{2, LlPayload::kFp8, Routing::kUniform}, MoeShape{2, 7168, 8, 256}, 128, {100, 128});
}

// The same shape with rank 0's rows plain (30 tokens) and rank 1's tagged (1 token).
TEST(MoeLowLatencyDeepSeek, TwoRanksMixedRowsHidden7168Top8Of256) {
  PEERLAB_REQUIRE_GPUS(2);
  PEERLAB_TEST_RANKS(2, boot);
  llRounds(boot, LlCase{2, LlPayload::kBf16, Routing::kUniform, 8}, MoeShape{2, 7168, 8, 256}, 30, {30, 1});
}

TEST(MoeLowLatencyDeepSeek, FourRanksHidden7168Top8Of256) {
  PEERLAB_REQUIRE_GPUS(4);
  PEERLAB_TEST_RANKS(4, boot);
  llRounds(boot, LlCase{4, LlPayload::kBf16, Routing::kUniform}, MoeShape{4, 7168, 8, 256}, 24, {24, 1, 17, 9});
}

// Dispatch and combine captured once in a CUDA graph and replayed: the epochs live on the GPU, so every replay is a
// fresh call with its own parity. The kernel spans land in LlKernelTimes, one per call.
// Both row kinds: tagged rows carry the epoch in every word.
class MoeLowLatencyGraph : public ::testing::TestWithParam<std::pair<int, int>> {};

TEST_P(MoeLowLatencyGraph, ReplaysEqualTheReference) {
  const int ranks = GetParam().first;
  PEERLAB_REQUIRE_GPUS(ranks);
  PEERLAB_TEST_RANKS(ranks, boot);
  const int me = boot.rank();
  PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaSetDevice(me)));
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto stream, createStream(me));
  cudaStream_t s = stream.get();
  const MoeShape shape{ranks, 512, 8, 64};
  const int T = 24, cap = T;
  LlConfig cfg;
  cfg.hidden = shape.hidden;
  cfg.top_k = shape.top_k;
  cfg.experts = shape.experts;
  cfg.max_tokens = T;
  cfg.payload = LlPayload::kFp8;
  cfg.tagged_max_tokens = GetParam().second;
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto ll, LowLatencyExchange::create(boot, me, cfg, soon()));
  const auto in = makeMoeInputs(shape, std::vector<int>(ranks, T), 31, /*drop=*/true);
  const auto ref = llDispatchReference(shape, cap, cfg.payload, in);
  const auto expert_out = runLlExperts(shape, cap, cfg.payload, ref);
  const auto combined = llCombineReference(shape, cap, in, ref, expert_out);
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto x, upload(me, in[me].x));
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto ids, upload(me, in[me].ids));
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto w, upload(me, in[me].weights));
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto eo, upload(me, expert_out[me]));
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto out, allocDevice(me, in[me].x.size() * 2));
  LlKernelTimes host_times{};
  llClearTimes(&host_times);
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto times, allocDevice(me, sizeof(LlKernelTimes)));
  PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaMemcpy(times->ptr, &host_times, sizeof(host_times), cudaMemcpyHostToDevice)));
  ll.setKernelTimes(times->as<LlKernelTimes>());
  cudaGraph_t graph = nullptr;
  PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal)));
  Status d = ll.dispatch(x->as<__nv_bfloat16>(), ids->as<int32_t>(), w->as<float>(), T, s);
  Status c = ll.combine(eo->as<__nv_bfloat16>(), out->as<__nv_bfloat16>(), s);
  PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaStreamEndCapture(s, &graph)));
  PEERLAB_ASSERT_OK(d);
  PEERLAB_ASSERT_OK(c);
  cudaGraphExec_t exec = nullptr;
  PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaGraphInstantiate(&exec, graph, 0)));
  const int replays = 5;
  for (int replay = 0; replay < replays; ++replay) {
    PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaMemsetAsync(out->ptr, 0xFF, out->bytes, s)));
    PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaGraphLaunch(exec, s)));
    PEERLAB_ASSERT_OK(ll.checkStatus(s, soon()));
    std::vector<uint16_t> got;
    PEERLAB_ASSERT_OK(download(got, out->ptr, in[me].x.size()));
    size_t first = 0;
    EXPECT_EQ(countDiffs(got, combined[me], &first), 0u) << "replay " << replay << ", first at " << first;
  }
  PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaMemcpy(&host_times, times->ptr, sizeof(host_times), cudaMemcpyDeviceToHost)));
  for (bool combine : {false, true}) {
    const auto spans = llKernelSpansUs(host_times, combine);
    EXPECT_EQ(spans.size(), static_cast<size_t>(replays)) << (combine ? "combine" : "dispatch");
    for (double us : spans) {
      EXPECT_GT(us, 0.0);
      EXPECT_LT(us, 1e6) << "a span of a second or more is not one kernel";
    }
  }
  ll.setKernelTimes(nullptr);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  PEERLAB_ASSERT_OK(boot.barrier(soon()));
  PEERLAB_ASSERT_OK(ll.close(boot, soon()));
}

INSTANTIATE_TEST_SUITE_P(Ranks, MoeLowLatencyGraph,
                         ::testing::Values(std::make_pair(1, 0), std::make_pair(2, 0), std::make_pair(1, 64),
                                           std::make_pair(2, 64)),
                         [](const auto& info) {
                           return std::to_string(info.param.first) + "ranks" +
                                  (info.param.second > 0 ? "_tagged" : "_plain");
                         });

// A signal that never comes (the scorecard's dropped writes; a dead peer looks the same) ends the wait at the
// deadline with a timeout naming the peer, not a hang; the next call works again.
TEST(MoeLowLatencyFaults, MissingSignalsTimeOutAndTheNextCallRecovers) {
  PEERLAB_REQUIRE_GPUS(1);
  PEERLAB_TEST_RANKS(1, boot);
  const int me = boot.rank();
  PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaSetDevice(me)));
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto stream, createStream(me));
  cudaStream_t s = stream.get();
  const MoeShape shape{1, 128, 2, 8};
  for (int tagged : {kLlDefaultTaggedMaxTokens, 0}) {
    SCOPED_TRACE(tagged > 0 ? "tagged rows" : "plain rows");
    LlConfig cfg;
    cfg.hidden = shape.hidden;
    cfg.top_k = shape.top_k;
    cfg.experts = shape.experts;
    cfg.max_tokens = 8;
    cfg.timeout_ms = 50;
    cfg.tagged_max_tokens = tagged;
    PEERLAB_ASSERT_OK_AND_ASSIGN(auto ll, LowLatencyExchange::create(boot, me, cfg, soon()));
    const auto in = makeMoeInputs(shape, {8}, 5);
    const auto ref = llDispatchReference(shape, 8, cfg.payload, in);
    const auto expert_out = runLlExperts(shape, 8, cfg.payload, ref);
    const auto combined = llCombineReference(shape, 8, in, ref, expert_out);
    PEERLAB_ASSERT_OK_AND_ASSIGN(auto x, upload(me, in[0].x));
    PEERLAB_ASSERT_OK_AND_ASSIGN(auto ids, upload(me, in[0].ids));
    PEERLAB_ASSERT_OK_AND_ASSIGN(auto w, upload(me, in[0].weights));
    PEERLAB_ASSERT_OK_AND_ASSIGN(auto eo, upload(me, expert_out[0]));
    PEERLAB_ASSERT_OK_AND_ASSIGN(auto out, allocDevice(me, in[0].x.size() * 2));
    auto both = [&] {
      PEERLAB_RETURN_IF_ERROR(ll.dispatch(x->as<__nv_bfloat16>(), ids->as<int32_t>(), w->as<float>(), 8, s));
      PEERLAB_RETURN_IF_ERROR(ll.combine(eo->as<__nv_bfloat16>(), out->as<__nv_bfloat16>(), s));
      return ll.checkStatus(s, Deadline::afterMs(10'000));
    };
    for (LlFault f : {LlFault::kSkipDispatchSignals, LlFault::kSkipCombineSignals}) {
      ll.setFault(f);
      const auto t0 = Deadline::Clock::now();
      const Status st = both();
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Deadline::Clock::now() - t0).count();
      EXPECT_EQ(st.code(), StatusCode::kTimeout) << st.toString();
      EXPECT_NE(st.message().find("no signal from rank 0"), std::string::npos) << st.toString();
      EXPECT_NE(st.message().find(f == LlFault::kSkipDispatchSignals ? "dispatch" : "combine"), std::string::npos);
      EXPECT_LT(ms, 5'000) << "the device waits must end at their 50 ms deadline";
      ll.setFault(LlFault::kNone);
      PEERLAB_ASSERT_OK(both());
      std::vector<uint16_t> got;
      PEERLAB_ASSERT_OK(download(got, out->ptr, in[0].x.size()));
      size_t first = 0;
      EXPECT_EQ(countDiffs(got, combined[0], &first), 0u) << "after recovery, first at " << first;
    }
    PEERLAB_ASSERT_OK(ll.close(boot, soon()));
  }
}

// A peer that dies after setup: the survivors' LL dispatch reports a timeout naming it instead of hanging.
TEST(MoeLowLatencyFaults, DeadPeerIsATimeoutNamingIt) {
  PEERLAB_REQUIRE_GPUS(2);
  PEERLAB_TEST_RANKS(2, boot);
  const int me = boot.rank();
  PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaSetDevice(me)));
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto stream, createStream(me));
  const MoeShape shape{2, 128, 2, 8};
  LlConfig cfg;
  cfg.hidden = shape.hidden;
  cfg.top_k = shape.top_k;
  cfg.experts = shape.experts;
  cfg.max_tokens = 8;
  cfg.timeout_ms = 200;
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto ll, LowLatencyExchange::create(boot, me, cfg, soon()));
  PEERLAB_ASSERT_OK(boot.barrier(soon()));
  if (me == 1) testing::exitRankAbruptly();
  const auto in = makeMoeInputs(shape, {8, 8}, 5);
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto x, upload(me, in[0].x));
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto ids, upload(me, in[0].ids));
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto w, upload(me, in[0].weights));
  PEERLAB_ASSERT_OK(ll.dispatch(x->as<__nv_bfloat16>(), ids->as<int32_t>(), w->as<float>(), 8, stream.get()));
  const Status st = ll.checkStatus(stream.get(), Deadline::afterMs(10'000));
  EXPECT_EQ(st.code(), StatusCode::kTimeout) << st.toString();
  EXPECT_NE(st.message().find("no signal from rank 1"), std::string::npos) << st.toString();
  // No collective close: the peer is gone. The destructor unmaps locally.
}

// Auto mode: up to ll_auto_max_tokens the LL kernels, beyond it the normal path (also where the LL buffers would
// still hold the call), both equal to their references.
TEST(MoeLowLatencyMode, AutoPicksByTokenCount) {
  PEERLAB_REQUIRE_GPUS(1);
  PEERLAB_TEST_RANKS(1, boot);
  const int me = boot.rank();
  PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaSetDevice(me)));
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto stream, createStream(me));
  cudaStream_t s = stream.get();
  const MoeShape shape{1, 256, 4, 16};
  MoeConfig cfg;
  cfg.hidden = shape.hidden;
  cfg.top_k = shape.top_k;
  cfg.experts = shape.experts;
  cfg.max_tokens = 64;
  cfg.ll_max_tokens = 16;
  cfg.ll_auto_max_tokens = 8;
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto moe, MoeExchange::createWithAllToAllV(boot, me, cfg, Transfer::kPush, soon()));
  EXPECT_EQ(moe.llAutoLimit(), 8);
  for (int T : {8, 16, 40}) {
    const auto in = makeMoeInputs(shape, {T}, 60 + T);
    PEERLAB_ASSERT_OK_AND_ASSIGN(auto x, upload(me, in[0].x));
    PEERLAB_ASSERT_OK_AND_ASSIGN(auto ids, upload(me, in[0].ids));
    PEERLAB_ASSERT_OK_AND_ASSIGN(auto w, upload(me, in[0].weights));
    PEERLAB_ASSERT_OK(moe.dispatch(x->as<__nv_bfloat16>(), ids->as<int32_t>(), w->as<float>(), T, s, soon()));
    PEERLAB_ASSERT_OK(moe.checkStatus(s, soon()));
    EXPECT_EQ(moe.lastMode(), T <= 8 ? MoeMode::kLowLatency : MoeMode::kNormal) << "T = " << T;
    // Identity experts with the output layout of the mode taken; weights sum per token is what comes back.
    std::vector<uint16_t> want(in[0].x.size());
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < shape.hidden; ++h) {
        float acc = 0.f;
        for (int j = 0; j < shape.top_k; ++j)
          acc = std::fma(in[0].weights[t * shape.top_k + j], bf16ToFloat(in[0].x[t * shape.hidden + h]), acc);
        want[t * shape.hidden + h] = floatToBf16(acc);
      }
    const __nv_bfloat16* rows = moe.lastMode() == MoeMode::kLowLatency
                                    ? reinterpret_cast<const __nv_bfloat16*>(moe.lowLatency()->output().rows)
                                    : moe.output().rows;
    PEERLAB_ASSERT_OK_AND_ASSIGN(auto out, allocDevice(me, in[0].x.size() * 2));
    PEERLAB_ASSERT_OK(moe.combine(rows, out->as<__nv_bfloat16>(), s, soon()));
    PEERLAB_ASSERT_OK(moe.checkStatus(s, soon()));
    std::vector<uint16_t> got;
    PEERLAB_ASSERT_OK(download(got, out->ptr, in[0].x.size()));
    size_t bad = 0;
    for (size_t i = 0; i < got.size(); ++i)
      bad += std::fabs(bf16ToFloat(got[i]) - bf16ToFloat(want[i])) <= 1e-2f * std::fabs(bf16ToFloat(want[i])) + 1e-6f
                 ? 0
                 : 1;
    EXPECT_EQ(bad, 0u) << "T = " << T;
  }
  PEERLAB_ASSERT_OK(moe.close(boot, soon()));
}

}  // namespace
}  // namespace peerlab::alltoallv::moe
