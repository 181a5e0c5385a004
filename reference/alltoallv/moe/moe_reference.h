#pragma once
/// Plain CPU reference of MoE dispatch and combine over all ranks at once (tests compare the GPU against it).
/// Two versions of each: `*Reference` follows the GPU's algorithm (per-rank send once, fan-out on arrival, partial
/// sums per rank rounded to bf16), `*Naive` computes the definition directly; tests hold them to each other.

#include <cstdint>
#include <vector>

#include "reference/alltoallv/moe/ll_layout.h"

namespace peerlab::alltoallv::moe {

/// bf16 <-> float on the host (round to nearest even, NaN kept NaN).
uint16_t floatToBf16(float f);
float bf16ToFloat(uint16_t b);

/// One rank's inputs.
struct RankInput {
  int tokens = 0;
  std::vector<uint16_t> x;     ///< [tokens, H] bf16 bits
  std::vector<int32_t> ids;    ///< [tokens, k] expert ids (outside [0, E): ignored)
  std::vector<float> weights;  ///< [tokens, k]
};

/// A received (token, expert) pair as the dispatch layout records it.
struct PairSource {
  int rank = -1;
  int token = -1;
  int slot = -1;
  bool operator==(const PairSource&) const = default;
};

/// One rank's dispatch output.
struct RankDispatch {
  std::vector<int64_t> expert_counts;   ///< [E / n]
  std::vector<int64_t> expert_offsets;  ///< [E / n]
  std::vector<PairSource> source;       ///< [pairs]
  std::vector<float> weight;            ///< [pairs]
  std::vector<uint16_t> rows;           ///< [pairs, H]
  std::vector<int64_t> recv_rows_from;  ///< [n] token rows received from each source (send once per rank)
};

struct MoeShape {
  int ranks = 1;
  int hidden = 8;
  int top_k = 1;
  int experts = 1;
};

/// The GPU's algorithm: each token to each distinct destination rank once, then fan-out by local expert.
std::vector<RankDispatch> dispatchReference(const MoeShape& shape, const std::vector<RankInput>& in);
/// The definition: for every rank, every local expert, every (source rank, token, slot) in order.
std::vector<RankDispatch> dispatchNaive(const MoeShape& shape, const std::vector<RankInput>& in);

/// Combine given each rank's expert outputs ([pairs, H] bf16 in that rank's dispatch layout): per source token the
/// weighted sum over its slots. Reference: per-rank partial sums in fp32 rounded to bf16, summed in fp32, rounded.
std::vector<std::vector<uint16_t>> combineReference(const MoeShape& shape, const std::vector<RankInput>& in,
                                                    const std::vector<RankDispatch>& dispatched,
                                                    const std::vector<std::vector<uint16_t>>& expert_out);
/// Naive: one fp32 sum over all slots in double precision, rounded to bf16 once.
std::vector<std::vector<uint16_t>> combineNaive(const MoeShape& shape, const std::vector<RankInput>& in,
                                                const std::vector<RankDispatch>& dispatched,
                                                const std::vector<std::vector<uint16_t>>& expert_out);
/// Sum over a token's valid slots of |w * expert_out|, per element: the scale that combine tolerances use.
std::vector<std::vector<float>> combineMagnitude(const MoeShape& shape, const std::vector<RankInput>& in,
                                                 const std::vector<RankDispatch>& dispatched,
                                                 const std::vector<std::vector<uint16_t>>& expert_out);

/// Seeded inputs: random bf16 tokens, distinct top-k experts per token (plus some dropped slots when `drop`),
/// weights in (0, 1].
std::vector<RankInput> makeMoeInputs(const MoeShape& shape, const std::vector<int>& tokens, uint64_t seed,
                                     bool drop = false);
/// fp8 e4m3 (OCP "fn": bias 7, no infinities, max 448) <-> float on the host. Round to nearest even, saturating to
/// +-448 (what cvt.rn.satfinite does; an infinity saturates too), NaN to NaN (0x7F / 0xFF).
uint8_t floatToE4m3(float f);
float e4m3ToFloat(uint8_t b);

/// One token row quantized per 128 elements (DeepEP): amax = max(|x| over the group, kFp8MinAmax),
/// q = e4m3(x * (448 / amax)), scale = amax / 448 (both divisions rounded once in fp32); x ~= q * scale.
void quantizeRowFp8(const uint16_t* bf16_row, int hidden, uint8_t* q, float* scales);
/// float(q) * scale per element.
void dequantizeRowFp8(const uint8_t* q, const float* scales, int hidden, float* out);

/// One rank's LL dispatch output: local expert `le`'s rows are [le * ranks * capacity, + expert_counts[le]), source
/// rank by source rank, each source's pairs in (token, slot) order. Rows past a count are not written.
struct LlRankDispatch {
  std::vector<int64_t> expert_counts;               ///< [E / n]
  std::vector<std::vector<int64_t>> source_counts;  ///< [E / n][n] rows kept from each source
  std::vector<PairSource> source;                   ///< [E / n * n * capacity]
  std::vector<float> weight;                        ///< same
  std::vector<uint16_t> rows;                       ///< bf16 payload [.., H] (empty for fp8)
  std::vector<uint8_t> q;                           ///< fp8 payload [.., H] (empty for bf16)
  std::vector<float> scales;                        ///< fp8 [.., H / 128]
  int64_t dropped_from_me = 0;                      ///< pairs this rank sent that no slot took
  bool operator==(const LlRankDispatch&) const = default;
};

/// Position of every (token, slot) of one rank among its pairs of the same expert, in token then slot order (-1 for
/// an id outside [0, E)); a pair is kept when its position is below the capacity (llKept).
std::vector<int64_t> llPositions(const MoeShape& shape, const RankInput& in);

/// One row an LL dispatch sends: a token, once, with its kept pairs on the receiving rank in slot order.
struct LlSentRow {
  int token = -1;
  std::vector<LlPairEntry> pairs;
};
/// What rank `src` sends to each rank d (`[d]`, token order): every token with at least one kept pair on d, once.
std::vector<std::vector<LlSentRow>> llSentRows(const MoeShape& shape, int capacity, const RankInput& in);

/// LL dispatch over all ranks (shape.ranks ranks, `capacity` kept pairs per (source, expert)) as the GPU does it:
/// the rows of llSentRows, then on each rank every row fanned out to its pairs' places (the kept pairs of earlier
/// sources for the same expert, then the pair's position).
std::vector<LlRankDispatch> llDispatchReference(const MoeShape& shape, int capacity, LlPayload payload,
                                                const std::vector<RankInput>& in);
/// The definition: for every rank, local expert and source, that source's kept pairs of the expert in order.
std::vector<LlRankDispatch> llDispatchNaive(const MoeShape& shape, int capacity, LlPayload payload,
                                            const std::vector<RankInput>& in);
/// LL combine as the GPU does it: for every source token and every rank r holding one of its kept pairs, the partial
/// sum over those pairs in slot order (fp32 fma chain of w * expert_out, the row its pair landed in) rounded to bf16;
/// then the fp32 sum of those partials in rank order, rounded to bf16. Tokens with no kept pair get 0.
/// `expert_out[r]` is rank r's expert output in its LL dispatch layout ([E / n * n * capacity, H] bf16).
std::vector<std::vector<uint16_t>> llCombineReference(const MoeShape& shape, int capacity,
                                                      const std::vector<RankInput>& in,
                                                      const std::vector<LlRankDispatch>& dispatched,
                                                      const std::vector<std::vector<uint16_t>>& expert_out);
/// Routing with hot experts: every token's slot 0 picks expert `hot` (the rest distinct random), past its capacity.
std::vector<RankInput> makeHotMoeInputs(const MoeShape& shape, const std::vector<int>& tokens, uint64_t seed, int hot);
/// A deterministic "expert": out = bf16(x * (1 + e / 64) + e / 256) for local expert e of rank r (global id).
uint16_t expertFunction(uint16_t x, int global_expert);

}  // namespace peerlab::alltoallv::moe
