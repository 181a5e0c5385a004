// Multi-rank GPU tests of MoE dispatch and combine against the CPU reference (rank r on device r).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "reference/alltoallv/moe/moe.h"
#include "reference/alltoallv/moe/moe_reference.h"
#include "reference/core/check.h"
#include "reference/core/memory.h"
#include "reference/core/wait.h"
#include "reference/nccl/alltoall_moe.h"
#include "reference/nccl/comm.h"
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

// kPush: the default (fused) protocol; kPushTwoPhase: the two-phase protocol, pushing.
enum class Via { kPush, kPushTwoPhase, kPull, kNccl };

// Dispatch and combine of seeded inputs on every rank; dispatch must equal the reference exactly (it is a pure copy
// of bf16 rows and fp32 weights), combine within the bf16 rounding bound argued in moe_reference_test.cc.
void dispatchAndCombine(Bootstrap& boot, Via via, const MoeShape& shape, const std::vector<int>& tokens,
                        uint64_t seed) {
  const int me = boot.rank();
  PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaSetDevice(me)));
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto stream, createStream(me));
  cudaStream_t s = stream.get();
  // Every rank builds every rank's inputs from the same seed, so each can compute the expected results.
  const auto in = makeMoeInputs(shape, tokens, seed, /*drop=*/true);
  const auto ref = dispatchReference(shape, in);
  MoeConfig cfg;
  cfg.hidden = shape.hidden;
  cfg.top_k = shape.top_k;
  cfg.experts = shape.experts;
  cfg.max_tokens = *std::max_element(tokens.begin(), tokens.end()) + 3;
  nccl::Comm comm;
  if (via == Via::kNccl) {
    PEERLAB_ASSERT_OK_AND_ASSIGN(comm, nccl::createComm(boot, me, soon()));
  }
  auto make = [&]() -> StatusOr<MoeExchange> {
    if (via == Via::kNccl) return nccl::createHostCountMoe(comm.get(), me, boot.size(), me, cfg);
    return MoeExchange::createWithAllToAllV(boot, me, cfg, via == Via::kPull ? Transfer::kPull : Transfer::kPush,
                                            soon(), via == Via::kPushTwoPhase ? Protocol::kTwoPhase : Protocol::kAuto);
  };
  auto made = make();
  PEERLAB_ASSERT_OK(made.status());
  MoeExchange moe = std::move(made).value();
  const RankInput& mine = in[me];
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto x, upload(me, mine.x));
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto ids, upload(me, mine.ids));
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto w, upload(me, mine.weights));
  // Twice: the second dispatch reuses every buffer and epoch.
  for (int round = 0; round < 2; ++round) {
    PEERLAB_ASSERT_OK(moe.dispatch(x->as<__nv_bfloat16>(), ids->as<int32_t>(), w->as<float>(), mine.tokens, s, soon()));
    PEERLAB_ASSERT_OK(moe.checkStatus(s, soon()));
  }
  const DispatchOutput o = moe.output();
  const RankDispatch& want = ref[me];
  const int per = shape.experts / shape.ranks;
  std::vector<int64_t> counts, offsets, recv_rows;
  PEERLAB_ASSERT_OK(download(counts, o.expert_counts, per));
  PEERLAB_ASSERT_OK(download(offsets, o.expert_offsets, per));
  PEERLAB_ASSERT_OK(download(recv_rows, moe.recvCounts(), shape.ranks));
  EXPECT_EQ(counts, want.expert_counts);
  EXPECT_EQ(offsets, want.expert_offsets);
  EXPECT_EQ(recv_rows, want.recv_rows_from);
  const size_t pairs = want.source.size();
  std::vector<int4> src;
  std::vector<float> weight;
  std::vector<uint16_t> rows;
  PEERLAB_ASSERT_OK(download(src, o.row_source, pairs));
  PEERLAB_ASSERT_OK(download(weight, o.row_weight, pairs));
  PEERLAB_ASSERT_OK(download(rows, o.rows, pairs * shape.hidden));
  size_t bad_src = 0, bad_rows = 0;
  for (size_t p = 0; p < pairs; ++p) {
    const PairSource got{src[p].x, src[p].y, src[p].z};
    bad_src += (got == want.source[p] && weight[p] == want.weight[p]) ? 0 : 1;
  }
  for (size_t i = 0; i < rows.size(); ++i)
    bad_rows += rows[i] != want.rows[i] ? 1 : 0;
  EXPECT_EQ(bad_src, 0u) << "pairs with a wrong source or weight on rank " << me;
  EXPECT_EQ(bad_rows, 0u) << "wrong bf16 elements in the expert-grouped rows on rank " << me;

  // Experts run on the host from the reference rows; combine must bring their weighted sums home.
  std::vector<std::vector<uint16_t>> expert_out(shape.ranks);
  for (int r = 0; r < shape.ranks; ++r) {
    expert_out[r].resize(ref[r].rows.size());
    for (int e = 0; e < per; ++e)
      for (int64_t p = ref[r].expert_offsets[e]; p < ref[r].expert_offsets[e] + ref[r].expert_counts[e]; ++p)
        for (int h = 0; h < shape.hidden; ++h)
          expert_out[r][p * shape.hidden + h] = expertFunction(ref[r].rows[p * shape.hidden + h], r * per + e);
  }
  const auto naive = combineNaive(shape, in, ref, expert_out);
  const auto mag = combineMagnitude(shape, in, ref, expert_out);
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto eo, upload(me, expert_out[me]));
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto out, allocDevice(me, std::max<size_t>(mine.x.size() * 2, 16)));
  PEERLAB_ASSERT_OK(PEERLAB_CUDA(cudaMemset(out->ptr, 0xFF, out->bytes)));
  PEERLAB_ASSERT_OK(moe.combine(eo->as<__nv_bfloat16>(), out->as<__nv_bfloat16>(), s, soon()));
  PEERLAB_ASSERT_OK(moe.checkStatus(s, soon()));
  std::vector<uint16_t> got;
  PEERLAB_ASSERT_OK(download(got, out->ptr, mine.x.size()));
  size_t bad = 0, first = SIZE_MAX;
  for (size_t i = 0; i < got.size(); ++i) {
    const float a = bf16ToFloat(got[i]), b = bf16ToFloat(naive[me][i]);
    if (!(std::fabs(a - b) <= 1e-2f * mag[me][i] + 1e-6f)) {
      ++bad;
      first = std::min(first, i);
    }
  }
  EXPECT_EQ(bad, 0u) << "combined elements outside 1e-2 of their magnitude on rank " << me << ", first at " << first;
  PEERLAB_ASSERT_OK(boot.barrier(soon()));
  PEERLAB_ASSERT_OK(moe.close(boot, soon()));
}

class Moe : public ::testing::TestWithParam<std::tuple<int, Via>> {};

TEST_P(Moe, DispatchIsExactAndCombineWithinBf16Rounding) {
  const auto [ranks, via] = GetParam();
  PEERLAB_REQUIRE_GPUS(ranks);
  PEERLAB_TEST_RANKS(ranks, boot);
  MoeShape shape{ranks, 256, 8, 32};
  std::vector<int> tokens(ranks);
  for (int r = 0; r < ranks; ++r)
    tokens[r] = r == 1 ? 0 : 97 + 31 * r;  // rank 1 has no tokens at all
  dispatchAndCombine(boot, via, shape, tokens, 1234 + ranks);
}

INSTANTIATE_TEST_SUITE_P(Ranks, Moe,
                         ::testing::Values(std::make_tuple(2, Via::kPush), std::make_tuple(4, Via::kPush),
                                           std::make_tuple(4, Via::kPushTwoPhase), std::make_tuple(4, Via::kPull),
                                           std::make_tuple(4, Via::kNccl)),
                         [](const auto& info) {
                           const Via v = std::get<1>(info.param);
                           return std::to_string(std::get<0>(info.param)) + "ranks_" +
                                  (v == Via::kNccl           ? "nccl"
                                   : v == Via::kPull         ? "pull"
                                   : v == Via::kPushTwoPhase ? "push_two_phase"
                                                             : "push");
                         });

TEST(MoeDeepSeek, DispatchAndCombineAtHidden7168Top8Of256) {
  PEERLAB_REQUIRE_GPUS(4);
  PEERLAB_TEST_RANKS(4, boot);
  dispatchAndCombine(boot, Via::kPush, MoeShape{4, 7168, 8, 256}, {40, 33, 1, 64}, 77);
}

}  // namespace
}  // namespace peerlab::alltoallv::moe
