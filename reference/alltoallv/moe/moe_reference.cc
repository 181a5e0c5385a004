#include "reference/alltoallv/moe/moe_reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

namespace peerlab::alltoallv::moe {

uint16_t floatToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return static_cast<uint16_t>((u >> 16) | 0x40);
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

float bf16ToFloat(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

namespace {

bool validExpert(const MoeShape& s, int e) {
  return e >= 0 && e < s.experts;
}

}  // namespace

std::vector<RankDispatch> dispatchReference(const MoeShape& shape, const std::vector<RankInput>& in) {
  const int n = shape.ranks, H = shape.hidden, k = shape.top_k, per = shape.experts / shape.ranks;
  // Sender side: rows per destination in token order, each with the slots that target that destination.
  struct SentRow {
    int token;
    std::vector<int> local;  // per slot: local expert on the destination or -1
    std::vector<float> w;
  };
  std::vector<std::vector<std::vector<SentRow>>> sent(n, std::vector<std::vector<SentRow>>(n));
  for (int s = 0; s < n; ++s) {
    for (int t = 0; t < in[s].tokens; ++t) {
      for (int d = 0; d < n; ++d) {
        SentRow row{t, std::vector<int>(k, -1), std::vector<float>(k, 0.f)};
        bool any = false;
        for (int j = 0; j < k; ++j) {
          const int e = in[s].ids[t * k + j];
          if (validExpert(shape, e) && e / per == d) {
            row.local[j] = e - d * per;
            row.w[j] = in[s].weights[t * k + j];
            any = true;
          }
        }
        if (any) sent[s][d].push_back(std::move(row));
      }
    }
  }
  std::vector<RankDispatch> out(n);
  for (int d = 0; d < n; ++d) {
    RankDispatch& r = out[d];
    r.recv_rows_from.assign(n, 0);
    // Received rows, in source order (what the alltoallv delivers).
    std::vector<std::pair<int, const SentRow*>> received;
    for (int s = 0; s < n; ++s) {
      r.recv_rows_from[s] = static_cast<int64_t>(sent[s][d].size());
      for (const auto& row : sent[s][d])
        received.emplace_back(s, &row);
    }
    r.expert_counts.assign(per, 0);
    for (const auto& [s, row] : received)
      for (int j = 0; j < k; ++j)
        if (row->local[j] >= 0) r.expert_counts[row->local[j]]++;
    r.expert_offsets.assign(per, 0);
    for (int e = 1; e < per; ++e)
      r.expert_offsets[e] = r.expert_offsets[e - 1] + r.expert_counts[e - 1];
    const int64_t pairs = per ? r.expert_offsets[per - 1] + r.expert_counts[per - 1] : 0;
    r.source.resize(pairs);
    r.weight.resize(pairs);
    r.rows.resize(static_cast<size_t>(pairs) * H);
    std::vector<int64_t> fill(r.expert_offsets);
    for (int e = 0; e < per; ++e) {
      for (const auto& [s, row] : received) {
        for (int j = 0; j < k; ++j) {
          if (row->local[j] != e) continue;
          const int64_t p = fill[e]++;
          r.source[p] = PairSource{s, row->token, j};
          r.weight[p] = row->w[j];
          std::copy_n(&in[s].x[static_cast<size_t>(row->token) * H], H, &r.rows[static_cast<size_t>(p) * H]);
        }
      }
    }
  }
  return out;
}

std::vector<RankDispatch> dispatchNaive(const MoeShape& shape, const std::vector<RankInput>& in) {
  const int n = shape.ranks, H = shape.hidden, k = shape.top_k, per = shape.experts / shape.ranks;
  std::vector<RankDispatch> out(n);
  for (int r = 0; r < n; ++r) {
    RankDispatch& o = out[r];
    o.recv_rows_from.assign(n, 0);
    for (int s = 0; s < n; ++s) {
      for (int t = 0; t < in[s].tokens; ++t) {
        bool any = false;
        for (int j = 0; j < k; ++j) {
          const int e = in[s].ids[t * k + j];
          any = any || (validExpert(shape, e) && e / per == r);
        }
        o.recv_rows_from[s] += any ? 1 : 0;
      }
    }
    for (int le = 0; le < per; ++le) {
      o.expert_offsets.push_back(static_cast<int64_t>(o.source.size()));
      const int e = r * per + le;
      for (int s = 0; s < n; ++s) {
        for (int t = 0; t < in[s].tokens; ++t) {
          for (int j = 0; j < k; ++j) {
            if (in[s].ids[t * k + j] != e) continue;
            o.source.push_back(PairSource{s, t, j});
            o.weight.push_back(in[s].weights[t * k + j]);
            o.rows.insert(o.rows.end(), in[s].x.begin() + static_cast<size_t>(t) * H,
                          in[s].x.begin() + static_cast<size_t>(t + 1) * H);
          }
        }
      }
      o.expert_counts.push_back(static_cast<int64_t>(o.source.size()) - o.expert_offsets.back());
    }
  }
  return out;
}

std::vector<std::vector<uint16_t>> combineReference(const MoeShape& shape, const std::vector<RankInput>& in,
                                                    const std::vector<RankDispatch>& dispatched,
                                                    const std::vector<std::vector<uint16_t>>& expert_out) {
  const int n = shape.ranks, H = shape.hidden;
  // partial[d][s][t]: rank d's weighted sum for token t of rank s, fp32 then bf16 (one row on the wire).
  std::vector<std::vector<std::vector<std::vector<float>>>> partial(n, std::vector<std::vector<std::vector<float>>>(n));
  for (int d = 0; d < n; ++d) {
    for (int s = 0; s < n; ++s)
      partial[d][s].assign(in[s].tokens, {});
    const RankDispatch& r = dispatched[d];
    for (size_t p = 0; p < r.source.size(); ++p) {
      auto& acc = partial[d][r.source[p].rank][r.source[p].token];
      if (acc.empty()) acc.assign(H, 0.f);
      for (int h = 0; h < H; ++h)
        acc[h] = std::fma(r.weight[p], bf16ToFloat(expert_out[d][p * H + h]), acc[h]);
    }
  }
  std::vector<std::vector<uint16_t>> out(n);
  for (int s = 0; s < n; ++s) {
    out[s].assign(static_cast<size_t>(in[s].tokens) * H, 0);
    for (int t = 0; t < in[s].tokens; ++t) {
      for (int h = 0; h < H; ++h) {
        float sum = 0.f;
        for (int d = 0; d < n; ++d)
          if (!partial[d][s][t].empty()) sum += bf16ToFloat(floatToBf16(partial[d][s][t][h]));
        out[s][static_cast<size_t>(t) * H + h] = floatToBf16(sum);
      }
    }
  }
  return out;
}

namespace {
// For each source token and slot, the pair row that holds it on its expert's rank.
struct PairIndex {
  int rank = -1;
  int64_t pair = -1;
};
std::vector<std::vector<PairIndex>> pairIndex(const MoeShape& shape, const std::vector<RankInput>& in,
                                              const std::vector<RankDispatch>& dispatched) {
  std::vector<std::vector<PairIndex>> idx(shape.ranks);
  for (int s = 0; s < shape.ranks; ++s)
    idx[s].assign(static_cast<size_t>(in[s].tokens) * shape.top_k, {});
  for (int d = 0; d < shape.ranks; ++d)
    for (size_t p = 0; p < dispatched[d].source.size(); ++p) {
      const PairSource& src = dispatched[d].source[p];
      idx[src.rank][static_cast<size_t>(src.token) * shape.top_k + src.slot] = PairIndex{d, static_cast<int64_t>(p)};
    }
  return idx;
}
}  // namespace

std::vector<std::vector<uint16_t>> combineNaive(const MoeShape& shape, const std::vector<RankInput>& in,
                                                const std::vector<RankDispatch>& dispatched,
                                                const std::vector<std::vector<uint16_t>>& expert_out) {
  const int n = shape.ranks, H = shape.hidden, k = shape.top_k;
  auto idx = pairIndex(shape, in, dispatched);
  std::vector<std::vector<uint16_t>> out(n);
  for (int s = 0; s < n; ++s) {
    out[s].assign(static_cast<size_t>(in[s].tokens) * H, 0);
    for (int t = 0; t < in[s].tokens; ++t) {
      for (int h = 0; h < H; ++h) {
        double sum = 0;
        for (int j = 0; j < k; ++j) {
          const PairIndex& pi = idx[s][static_cast<size_t>(t) * k + j];
          if (pi.rank < 0) continue;
          sum += static_cast<double>(in[s].weights[t * k + j]) *
                 bf16ToFloat(expert_out[pi.rank][static_cast<size_t>(pi.pair) * H + h]);
        }
        out[s][static_cast<size_t>(t) * H + h] = floatToBf16(static_cast<float>(sum));
      }
    }
  }
  return out;
}

std::vector<std::vector<float>> combineMagnitude(const MoeShape& shape, const std::vector<RankInput>& in,
                                                 const std::vector<RankDispatch>& dispatched,
                                                 const std::vector<std::vector<uint16_t>>& expert_out) {
  const int n = shape.ranks, H = shape.hidden, k = shape.top_k;
  auto idx = pairIndex(shape, in, dispatched);
  std::vector<std::vector<float>> out(n);
  for (int s = 0; s < n; ++s) {
    out[s].assign(static_cast<size_t>(in[s].tokens) * H, 0.f);
    for (int t = 0; t < in[s].tokens; ++t)
      for (int j = 0; j < k; ++j) {
        const PairIndex& pi = idx[s][static_cast<size_t>(t) * k + j];
        if (pi.rank < 0) continue;
        for (int h = 0; h < H; ++h)
          out[s][static_cast<size_t>(t) * H + h] += std::fabs(
              in[s].weights[t * k + j] * bf16ToFloat(expert_out[pi.rank][static_cast<size_t>(pi.pair) * H + h]));
      }
  }
  return out;
}

std::vector<RankInput> makeMoeInputs(const MoeShape& shape, const std::vector<int>& tokens, uint64_t seed, bool drop) {
  std::vector<RankInput> in(shape.ranks);
  for (int r = 0; r < shape.ranks; ++r) {
    std::mt19937_64 rng(seed * 1000003 + static_cast<uint64_t>(r));
    std::uniform_real_distribution<float> val(-2.f, 2.f), wt(0.01f, 1.f);
    RankInput& x = in[r];
    x.tokens = tokens[r];
    x.x.resize(static_cast<size_t>(x.tokens) * shape.hidden);
    for (auto& v : x.x)
      v = floatToBf16(val(rng));
    x.ids.resize(static_cast<size_t>(x.tokens) * shape.top_k);
    x.weights.resize(x.ids.size());
    std::vector<int> experts(shape.experts);
    for (int e = 0; e < shape.experts; ++e)
      experts[e] = e;
    for (int t = 0; t < x.tokens; ++t) {
      // Distinct experts per token, like a router's top-k.
      for (int j = 0; j < shape.top_k; ++j) {
        const int pick = j + static_cast<int>(rng() % static_cast<uint64_t>(shape.experts - j));
        std::swap(experts[j], experts[pick]);
        x.ids[static_cast<size_t>(t) * shape.top_k + j] = experts[j];
        x.weights[static_cast<size_t>(t) * shape.top_k + j] = wt(rng);
      }
      if (drop && rng() % 4 == 0) x.ids[static_cast<size_t>(t) * shape.top_k + rng() % shape.top_k] = -1;
    }
  }
  return in;
}

uint8_t floatToE4m3(float f) {
  const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  if (std::isnan(f)) return static_cast<uint8_t>(sign | 0x7F);
  const float a = std::fabs(f);
  // satfinite: anything beyond the largest finite value (448), infinities included, saturates.
  if (a >= kFp8E4m3Max) return static_cast<uint8_t>(sign | 0x7E);
  // Subnormals (below 2^-6) are multiples of 2^-9; a result of 8 * 2^-9 is the smallest normal, encoded as 0x08.
  if (a < std::ldexp(1.f, -6)) return static_cast<uint8_t>(sign | static_cast<int>(std::nearbyint(a * 512.f)));
  int ex = 0;
  std::frexp(a, &ex);  // a = fr * 2^ex, fr in [0.5, 1)
  int e = ex - 1;
  int m = static_cast<int>(std::nearbyint((std::ldexp(a, -e) - 1.f) * 8.f));  // exact scaling, ties to even
  if (m == 8) {
    m = 0;
    ++e;
  }
  const int bits = std::min(((e + 7) << 3) | m, 0x7E);
  return static_cast<uint8_t>(sign | bits);
}

float e4m3ToFloat(uint8_t b) {
  const float sign = (b & 0x80) ? -1.f : 1.f;
  const int e = (b >> 3) & 0xF, m = b & 7;
  if (e == 15 && m == 7) return NAN;
  if (e == 0) return sign * std::ldexp(static_cast<float>(m), -9);
  return sign * std::ldexp(1.f + static_cast<float>(m) / 8.f, e - 7);
}

void quantizeRowFp8(const uint16_t* bf16_row, int hidden, uint8_t* q, float* scales) {
  for (int g = 0; g < hidden / kFp8Group; ++g) {
    float amax = 0.f;
    for (int i = 0; i < kFp8Group; ++i)
      amax = std::max(amax, std::fabs(bf16ToFloat(bf16_row[g * kFp8Group + i])));
    amax = std::max(amax, kFp8MinAmax);
    const float mult = kFp8E4m3Max / amax;
    scales[g] = amax / kFp8E4m3Max;
    for (int i = 0; i < kFp8Group; ++i)
      q[g * kFp8Group + i] = floatToE4m3(bf16ToFloat(bf16_row[g * kFp8Group + i]) * mult);
  }
}

void dequantizeRowFp8(const uint8_t* q, const float* scales, int hidden, float* out) {
  for (int i = 0; i < hidden; ++i)
    out[i] = e4m3ToFloat(q[i]) * scales[i / kFp8Group];
}

std::vector<int64_t> llPositions(const MoeShape& shape, const RankInput& in) {
  std::vector<int64_t> position(in.ids.size(), -1);
  std::vector<int64_t> next(shape.experts, 0);
  for (size_t i = 0; i < in.ids.size(); ++i)
    if (validExpert(shape, in.ids[i])) position[i] = next[in.ids[i]]++;
  return position;
}

std::vector<std::vector<LlSentRow>> llSentRows(const MoeShape& shape, int capacity, const RankInput& in) {
  const int k = shape.top_k, per = shape.experts / shape.ranks;
  const auto position = llPositions(shape, in);
  std::vector<std::vector<LlSentRow>> sent(shape.ranks);
  for (int t = 0; t < in.tokens; ++t) {
    std::vector<LlSentRow> row(shape.ranks);
    for (int j = 0; j < k; ++j) {
      const size_t i = static_cast<size_t>(t) * k + j;
      if (position[i] < 0 || !llKept(position[i], capacity)) continue;
      const int e = in.ids[i];
      row[e / per].pairs.push_back(LlPairEntry{e % per, j, static_cast<int32_t>(position[i]), in.weights[i]});
    }
    for (int d = 0; d < shape.ranks; ++d) {
      if (row[d].pairs.empty()) continue;
      row[d].token = t;
      sent[d].push_back(std::move(row[d]));
    }
  }
  return sent;
}

namespace {

LlRankDispatch emptyLlDispatch(const MoeShape& shape, int capacity, LlPayload payload) {
  const int n = shape.ranks, H = shape.hidden, per = shape.experts / shape.ranks;
  const size_t rows = static_cast<size_t>(per) * n * capacity;
  LlRankDispatch o;
  o.expert_counts.assign(per, 0);
  o.source_counts.assign(per, std::vector<int64_t>(n, 0));
  o.source.assign(rows, PairSource{});
  o.weight.assign(rows, 0.f);
  if (payload == LlPayload::kBf16) o.rows.assign(rows * H, 0);
  if (payload == LlPayload::kFp8) {
    o.q.assign(rows * H, 0);
    o.scales.assign(rows * (H / kFp8Group), 0.f);
  }
  return o;
}

// The payload of packed row `row`: source rank s's token t.
void placeLlRow(const MoeShape& shape, LlPayload payload, const std::vector<RankInput>& in, int s, int t, size_t row,
                LlRankDispatch& o) {
  const int H = shape.hidden;
  const uint16_t* x = &in[s].x[static_cast<size_t>(t) * H];
  if (payload == LlPayload::kBf16) std::copy_n(x, H, &o.rows[row * H]);
  if (payload == LlPayload::kFp8) quantizeRowFp8(x, H, &o.q[row * H], &o.scales[row * (H / kFp8Group)]);
}

}  // namespace

std::vector<LlRankDispatch> llDispatchReference(const MoeShape& shape, int capacity, LlPayload payload,
                                                const std::vector<RankInput>& in) {
  const int n = shape.ranks, per = shape.experts / shape.ranks;
  const size_t stride = static_cast<size_t>(n) * capacity;
  std::vector<LlRankDispatch> out(n, emptyLlDispatch(shape, capacity, payload));
  // Senders: the rows, the count blocks (kept pairs per local expert of the receiver) and the dropped pairs.
  std::vector<std::vector<std::vector<LlSentRow>>> sent(n);
  for (int s = 0; s < n; ++s) {
    sent[s] = llSentRows(shape, capacity, in[s]);
    std::vector<int64_t> pairs(shape.experts, 0);
    for (size_t i = 0; i < in[s].ids.size(); ++i)
      if (validExpert(shape, in[s].ids[i])) pairs[in[s].ids[i]]++;
    for (int e = 0; e < shape.experts; ++e) {
      out[s].dropped_from_me += llDropped(pairs[e], capacity);
      out[e / per].source_counts[e % per][s] = pairs[e] - llDropped(pairs[e], capacity);
    }
  }
  // Receivers: each row to its pairs' places.
  for (int d = 0; d < n; ++d) {
    LlRankDispatch& o = out[d];
    for (int le = 0; le < per; ++le)
      for (int s = 0; s < n; ++s)
        o.expert_counts[le] += o.source_counts[le][s];
    for (int s = 0; s < n; ++s)
      for (const LlSentRow& r : sent[s][d])
        for (const LlPairEntry& p : r.pairs) {
          int64_t base = 0;
          for (int q = 0; q < s; ++q)
            base += o.source_counts[p.local_expert][q];
          const size_t row = p.local_expert * stride + static_cast<size_t>(base + p.position);
          o.source[row] = PairSource{s, r.token, p.slot};
          o.weight[row] = p.weight;
          placeLlRow(shape, payload, in, s, r.token, row, o);
        }
  }
  return out;
}

std::vector<LlRankDispatch> llDispatchNaive(const MoeShape& shape, int capacity, LlPayload payload,
                                            const std::vector<RankInput>& in) {
  const int n = shape.ranks, per = shape.experts / shape.ranks;
  const size_t stride = static_cast<size_t>(n) * capacity;
  std::vector<LlRankDispatch> out(n, emptyLlDispatch(shape, capacity, payload));
  std::vector<std::vector<int64_t>> position(n);
  for (int s = 0; s < n; ++s)
    position[s] = llPositions(shape, in[s]);
  for (int d = 0; d < n; ++d) {
    LlRankDispatch& o = out[d];
    for (int le = 0; le < per; ++le) {
      int64_t row = 0;
      for (int s = 0; s < n; ++s) {
        for (size_t i = 0; i < in[s].ids.size(); ++i) {
          if (in[s].ids[i] != d * per + le) continue;
          if (!llKept(position[s][i], capacity)) {
            out[s].dropped_from_me++;
            continue;
          }
          const int t = static_cast<int>(i) / shape.top_k, j = static_cast<int>(i) % shape.top_k;
          const size_t at = le * stride + static_cast<size_t>(row++);
          o.source[at] = PairSource{s, t, j};
          o.weight[at] = in[s].weights[i];
          placeLlRow(shape, payload, in, s, t, at, o);
          o.source_counts[le][s]++;
        }
      }
      o.expert_counts[le] = row;
    }
  }
  return out;
}

std::vector<std::vector<uint16_t>> llCombineReference(const MoeShape& shape, int capacity,
                                                      const std::vector<RankInput>& in,
                                                      const std::vector<LlRankDispatch>& dispatched,
                                                      const std::vector<std::vector<uint16_t>>& expert_out) {
  const int n = shape.ranks, H = shape.hidden, k = shape.top_k, per = shape.experts / shape.ranks;
  const size_t stride = static_cast<size_t>(n) * capacity;
  std::vector<std::vector<uint16_t>> out(n);
  for (int s = 0; s < n; ++s) {
    const auto position = llPositions(shape, in[s]);
    out[s].assign(static_cast<size_t>(in[s].tokens) * H, 0);
    std::vector<float> partial(H), total(H);
    for (int t = 0; t < in[s].tokens; ++t) {
      std::fill(total.begin(), total.end(), 0.f);
      for (int r = 0; r < n; ++r) {
        std::fill(partial.begin(), partial.end(), 0.f);
        bool any = false;
        for (int j = 0; j < k; ++j) {
          const size_t i = static_cast<size_t>(t) * k + j;
          if (position[i] < 0 || !llKept(position[i], capacity) || in[s].ids[i] / per != r) continue;
          const int le = in[s].ids[i] % per;
          int64_t base = 0;
          for (int src = 0; src < s; ++src)
            base += dispatched[r].source_counts[le][src];
          const size_t row = le * stride + static_cast<size_t>(base + position[i]);
          for (int h = 0; h < H; ++h)
            partial[h] = std::fma(in[s].weights[i], bf16ToFloat(expert_out[r][row * H + h]), partial[h]);
          any = true;
        }
        if (!any) continue;
        for (int h = 0; h < H; ++h)
          total[h] += bf16ToFloat(floatToBf16(partial[h]));
      }
      for (int h = 0; h < H; ++h)
        out[s][static_cast<size_t>(t) * H + h] = floatToBf16(total[h]);
    }
  }
  return out;
}

std::vector<RankInput> makeHotMoeInputs(const MoeShape& shape, const std::vector<int>& tokens, uint64_t seed, int hot) {
  auto in = makeMoeInputs(shape, tokens, seed);
  const int k = shape.top_k;
  for (auto& r : in)
    for (int t = 0; t < r.tokens; ++t) {
      int32_t* ids = &r.ids[static_cast<size_t>(t) * k];
      for (int j = 1; j < k; ++j)
        if (ids[j] == hot) ids[j] = ids[0];
      ids[0] = hot;
    }
  return in;
}

uint16_t expertFunction(uint16_t x, int global_expert) {
  const float e = static_cast<float>(global_expert);
  return floatToBf16(bf16ToFloat(x) * (1.f + e / 64.f) + e / 256.f);
}

}  // namespace peerlab::alltoallv::moe
