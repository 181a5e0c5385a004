#include "reference/alltoallv/moe/moe.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "reference/core/check.h"
#include "reference/core/pattern.h"
#include "reference/core/scoped.h"
#include "reference/core/wait.h"
#include "reference/core/warp_scan.cuh"

namespace peerlab::alltoallv::moe {

namespace {

constexpr int kRouteThreads = 1024;
constexpr int kRowThreads = 128;
constexpr int kLayoutThreads = 256;

/// Routing tail of a dispatched row, right after the 2H token bytes.
struct RowTail {
  int32_t token;
  int32_t pad[3];
  // then int32 local_expert[k], float weight[k]
};

__device__ __forceinline__ const int32_t* tailExperts(const uint8_t* row, int hidden) {
  return reinterpret_cast<const int32_t*>(row + 2ull * hidden + sizeof(RowTail));
}
__device__ __forceinline__ const float* tailWeights(const uint8_t* row, int hidden, int k) {
  return reinterpret_cast<const float*>(row + 2ull * hidden + sizeof(RowTail) + 4ull * k);
}

// Exclusive block-wide scan of one int per thread; returns the block total in *total. blockDim.x % 32 == 0.
__device__ __forceinline__ int blockExclusiveScan(int v, int* total, int* smem /* [32] */) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int x = warpInclusiveSum(v);
  if (lane == 31) smem[warp] = x;
  __syncthreads();
  if (warp == 0) {
    const int nw = static_cast<int>(blockDim.x >> 5);
    const int w = warpInclusiveSum(lane < nw ? smem[lane] : 0);
    if (lane < nw) smem[lane] = w;
  }
  __syncthreads();
  const int before = warp > 0 ? smem[warp - 1] : 0;
  *total = smem[(blockDim.x >> 5) - 1];
  __syncthreads();
  return before + x - v;
}

struct RouteArgs {
  const int32_t* topk_ids;
  int num_tokens;
  int k;
  int experts;
  int ranks;
  int32_t* token_pos;     // [T, n]: row of token t in destination d's segment, -1 when not sent
  int64_t* send_counts;   // [n]
  int64_t* send_offsets;  // [n]
};

// One CTA: each token's destination ranks, then per rank an ordered scan over tokens.
__global__ void __launch_bounds__(kRouteThreads) routeKernel(RouteArgs a) {
  __shared__ int smem[32];
  __shared__ int carry[kMaxRanks];
  const int per_rank = a.experts / a.ranks;
  if (threadIdx.x < kMaxRanks) carry[threadIdx.x] = 0;
  __syncthreads();
  for (int base = 0; base < a.num_tokens; base += blockDim.x) {
    const int t = base + static_cast<int>(threadIdx.x);
    uint32_t mask = 0;
    if (t < a.num_tokens) {
      for (int s = 0; s < a.k; ++s) {
        const int e = a.topk_ids[static_cast<int64_t>(t) * a.k + s];
        if (e >= 0 && e < a.experts) mask |= 1u << (e / per_rank);
      }
    }
    for (int d = 0; d < a.ranks; ++d) {
      const int flag = (mask >> d) & 1u;
      int total = 0;
      const int pos = blockExclusiveScan(flag, &total, smem);
      if (t < a.num_tokens) a.token_pos[static_cast<int64_t>(t) * a.ranks + d] = flag ? carry[d] + pos : -1;
      __syncthreads();
      if (threadIdx.x == 0) carry[d] += total;
      __syncthreads();
    }
  }
  if (threadIdx.x == 0) {
    int64_t o = 0;
    for (int d = 0; d < a.ranks; ++d) {
      a.send_counts[d] = carry[d];
      a.send_offsets[d] = o;
      o += carry[d];
    }
  }
}

struct PackArgs {
  const __nv_bfloat16* tokens;
  const int32_t* topk_ids;
  const float* topk_weights;
  const int32_t* token_pos;
  const int64_t* send_offsets;
  uint8_t* send;
  int hidden;
  int k;
  int experts;
  int ranks;
  uint64_t row_bytes;
};

// One CTA per token: the token's vectors are read once and stored to every destination row it goes to.
__global__ void __launch_bounds__(kRowThreads) packKernel(PackArgs a) {
  const int t = static_cast<int>(blockIdx.x);
  const int per_rank = a.experts / a.ranks;
  uint8_t* rows[kMaxRanks];
  int nd = 0;
  int dest[kMaxRanks];
  for (int d = 0; d < a.ranks; ++d) {
    const int p = a.token_pos[static_cast<int64_t>(t) * a.ranks + d];
    if (p >= 0) {
      dest[nd] = d;
      rows[nd++] = a.send + (static_cast<uint64_t>(a.send_offsets[d]) + static_cast<uint64_t>(p)) * a.row_bytes;
    }
  }
  if (nd == 0) return;
  const auto* src = reinterpret_cast<const uint4*>(a.tokens + static_cast<int64_t>(t) * a.hidden);
  const int chunks = a.hidden / 8;
  for (int c = static_cast<int>(threadIdx.x); c < chunks; c += blockDim.x) {
    const uint4 v = src[c];
    for (int i = 0; i < nd; ++i)
      reinterpret_cast<uint4*>(rows[i])[c] = v;
  }
  // Routing tail per destination: the local expert of each slot on that rank (-1 elsewhere) and its weight.
  for (int i = 0; i < nd; ++i) {
    uint8_t* tail = rows[i] + 2ull * a.hidden;
    if (threadIdx.x == 0) {
      reinterpret_cast<int32_t*>(tail)[0] = t;
      reinterpret_cast<int32_t*>(tail)[1] = 0;
      reinterpret_cast<int32_t*>(tail)[2] = 0;
      reinterpret_cast<int32_t*>(tail)[3] = 0;
    }
    const int s = static_cast<int>(threadIdx.x);
    if (s < a.k) {
      const int e = a.topk_ids[static_cast<int64_t>(t) * a.k + s];
      const bool mine = e >= 0 && e < a.experts && e / per_rank == dest[i];
      reinterpret_cast<int32_t*>(tail + sizeof(RowTail))[s] = mine ? e - dest[i] * per_rank : -1;
      reinterpret_cast<float*>(tail + sizeof(RowTail) + 4ull * a.k)[s] =
          mine ? a.topk_weights[static_cast<int64_t>(t) * a.k + s] : 0.f;
    }
  }
}

struct LayoutArgs {
  const uint8_t* recv;          // received dispatch rows
  const int64_t* recv_counts;   // [n]
  const int64_t* recv_offsets;  // [n]
  int ranks;
  int hidden;
  int k;
  int local_experts;
  uint64_t row_bytes;
  uint64_t pair_capacity;
  int64_t* expert_counts;   // [E_local]
  int64_t* expert_offsets;  // [E_local]
  int4* row_source;         // [pair_capacity]
  float* row_weight;        // [pair_capacity]
  int32_t* pair_of_row;     // [recv rows, k]: pair row of (received row, slot), -1 when the slot is elsewhere
  uint32_t* status;         // {code, needed pairs}
};

__device__ __forceinline__ int64_t receivedRows(const LayoutArgs& a) {
  int64_t r = 0;
  for (int s = 0; s < a.ranks; ++s)
    r += a.recv_counts[s];
  return r;
}

// CTA e counts the pairs of local expert e; CTA 0 also marks slots that belong to other ranks.
__global__ void __launch_bounds__(kLayoutThreads) countKernel(LayoutArgs a) {
  __shared__ int smem[32];
  const int e = static_cast<int>(blockIdx.x);
  const int64_t rows = receivedRows(a);
  int64_t count = 0;
  for (int64_t j = threadIdx.x; j < rows; j += blockDim.x) {
    const int32_t* ex = tailExperts(a.recv + j * a.row_bytes, a.hidden);
    for (int s = 0; s < a.k; ++s) {
      const int le = ex[s];
      count += le == e ? 1 : 0;
      if (e == 0 && (le < 0 || le >= a.local_experts)) a.pair_of_row[j * a.k + s] = -1;
    }
  }
  int total = 0;
  blockExclusiveScan(static_cast<int>(count), &total, smem);
  if (threadIdx.x == 0) a.expert_counts[e] = total;
}

// CTA e places the pairs of local expert e in (source rank, token, slot) order; received rows already come in
// (source rank, token) order.
__global__ void __launch_bounds__(kLayoutThreads) placeKernel(LayoutArgs a) {
  __shared__ int smem[32];
  const int e = static_cast<int>(blockIdx.x);
  int64_t offset = 0;
  int64_t all = 0;
  for (int i = 0; i < a.local_experts; ++i) {
    if (i < e) offset += a.expert_counts[i];
    all += a.expert_counts[i];
  }
  if (threadIdx.x == 0) a.expert_offsets[e] = offset;
  // Too many pairs for the output: report, and leave every slot pointing nowhere so combine reads nothing stale.
  const bool overflow = static_cast<uint64_t>(all) > a.pair_capacity;
  if (overflow && e == 0 && threadIdx.x == 0 && atomicCAS(&a.status[0], 0u, 2u) == 0u) {
    a.status[1] = static_cast<uint32_t>(all);
  }
  const int64_t rows = receivedRows(a);
  int64_t running = offset;
  for (int64_t base = 0; base < rows; base += blockDim.x) {
    const int64_t j = base + threadIdx.x;
    int mine = 0;
    const int32_t* ex = nullptr;
    if (j < rows) {
      ex = tailExperts(a.recv + j * a.row_bytes, a.hidden);
      for (int s = 0; s < a.k; ++s)
        mine += ex[s] == e ? 1 : 0;
    }
    int total = 0;
    const int before = blockExclusiveScan(mine, &total, smem);
    if (mine && overflow) {
      for (int s = 0; s < a.k; ++s)
        if (ex[s] == e) a.pair_of_row[j * a.k + s] = -1;
    } else if (mine) {
      // The last source whose segment starts at or before j (a source that sent nothing shares the next offset).
      int src = 0;
      while (src + 1 < a.ranks && j >= a.recv_offsets[src + 1])
        ++src;
      const uint8_t* row = a.recv + j * a.row_bytes;
      const int token = reinterpret_cast<const int32_t*>(row + 2ull * a.hidden)[0];
      const float* w = tailWeights(row, a.hidden, a.k);
      int64_t slot = running + before;
      for (int s = 0; s < a.k; ++s) {
        if (ex[s] != e) continue;
        a.row_source[slot] = make_int4(src, token, s, static_cast<int>(j));
        a.row_weight[slot] = w[s];
        a.pair_of_row[j * a.k + s] = static_cast<int32_t>(slot);
        ++slot;
      }
    }
    running += total;
  }
}

struct FanoutArgs {
  const uint8_t* recv;
  const int4* row_source;
  const int64_t* expert_counts;
  int local_experts;
  uint64_t row_bytes;
  uint64_t pair_capacity;
  int hidden;
  __nv_bfloat16* rows;
};

// Copies each pair's token from its received row into the expert-grouped output (grid-stride over pairs).
__global__ void __launch_bounds__(kRowThreads) fanoutKernel(FanoutArgs a) {
  int64_t pairs = 0;
  for (int i = 0; i < a.local_experts; ++i)
    pairs += a.expert_counts[i];
  if (static_cast<uint64_t>(pairs) > a.pair_capacity) return;
  const int chunks = a.hidden / 8;
  for (int64_t p = blockIdx.x; p < pairs; p += gridDim.x) {
    const int64_t j = a.row_source[p].w;
    const auto* src = reinterpret_cast<const uint4*>(a.recv + j * a.row_bytes);
    auto* dst = reinterpret_cast<uint4*>(a.rows + p * a.hidden);
    for (int c = static_cast<int>(threadIdx.x); c < chunks; c += blockDim.x)
      dst[c] = src[c];
  }
}

struct ReduceArgs {
  const __nv_bfloat16* expert_out;  // [pairs, H]
  const float* row_weight;
  const int32_t* pair_of_row;  // [recv rows, k]
  const int64_t* recv_counts;  // dispatch receive counts [n]
  uint64_t pair_capacity;
  int ranks;
  int hidden;
  int k;
  __nv_bfloat16* send;  // combine send rows [recv rows, H]
};

// One CTA per received row: the weighted sum of its local experts' outputs, fp32, rounded once to bf16.
__global__ void __launch_bounds__(kRowThreads) reduceKernel(ReduceArgs a) {
  int64_t rows = 0;
  for (int s = 0; s < a.ranks; ++s)
    rows += a.recv_counts[s];
  const int chunks = a.hidden / 8;
  for (int64_t j = blockIdx.x; j < rows; j += gridDim.x) {
    int32_t pairs[kMaxTopK];
    int np = 0;
    for (int s = 0; s < a.k; ++s) {
      const int32_t p = a.pair_of_row[j * a.k + s];
      if (p >= 0 && static_cast<uint64_t>(p) < a.pair_capacity) pairs[np++] = p;
    }
    for (int c = static_cast<int>(threadIdx.x); c < chunks; c += blockDim.x) {
      float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (int i = 0; i < np; ++i) {
        const float w = a.row_weight[pairs[i]];
        const uint4 v = reinterpret_cast<const uint4*>(a.expert_out + static_cast<int64_t>(pairs[i]) * a.hidden)[c];
        const auto* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const float2 f = __bfloat1622float2(h[q]);
          acc[2 * q] = fmaf(w, f.x, acc[2 * q]);
          acc[2 * q + 1] = fmaf(w, f.y, acc[2 * q + 1]);
        }
      }
      uint4 out;
      auto* o = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
      for (int q = 0; q < 4; ++q)
        o[q] = __floats2bfloat162_rn(acc[2 * q], acc[2 * q + 1]);
      reinterpret_cast<uint4*>(a.send + j * a.hidden)[c] = out;
    }
  }
}

struct FinishArgs {
  const __nv_bfloat16* recv;    // combine receive rows
  const int64_t* recv_offsets;  // combine receive offsets [n]
  const int32_t* token_pos;     // [T, n]
  int num_tokens;
  int ranks;
  int hidden;
  __nv_bfloat16* out;  // [T, H]
};

// One CTA per token: the sum of the partial rows from every rank it went to (fp32), rounded to bf16.
__global__ void __launch_bounds__(kRowThreads) finishKernel(FinishArgs a) {
  const int t = static_cast<int>(blockIdx.x);
  int64_t rows[kMaxRanks];
  int nr = 0;
  for (int d = 0; d < a.ranks; ++d) {
    const int p = a.token_pos[static_cast<int64_t>(t) * a.ranks + d];
    if (p >= 0) rows[nr++] = a.recv_offsets[d] + p;
  }
  const int chunks = a.hidden / 8;
  for (int c = static_cast<int>(threadIdx.x); c < chunks; c += blockDim.x) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int i = 0; i < nr; ++i) {
      const uint4 v = reinterpret_cast<const uint4*>(a.recv + rows[i] * a.hidden)[c];
      const auto* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float2 f = __bfloat1622float2(h[q]);
        acc[2 * q] += f.x;
        acc[2 * q + 1] += f.y;
      }
    }
    uint4 out;
    auto* o = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
    for (int q = 0; q < 4; ++q)
      o[q] = __floats2bfloat162_rn(acc[2 * q], acc[2 * q + 1]);
    reinterpret_cast<uint4*>(a.out + static_cast<int64_t>(t) * a.hidden)[c] = out;
  }
}

}  // namespace

struct MoeExchange::Buffers {
  DeviceBuffer token_pos;    // int32 [T, n]
  DeviceBuffer counts;       // int64: send counts, send offsets, recv counts, recv offsets, combine recv counts,
                             //        combine recv offsets ([n] each), expert counts, offsets ([E_local] each)
  DeviceBuffer pair_of_row;  // int32 [T * n, k]
  DeviceBuffer rows;         // bf16 [pairs, H]
  DeviceBuffer row_source;   // int4 [pairs]
  DeviceBuffer row_weight;   // float [pairs]
  DeviceBuffer status;       // uint32 [2]
  uint64_t pair_capacity = 0;
  int ranks = 1;
  int local_experts = 1;
  int64_t* at(int which) const { return counts->as<int64_t>() + static_cast<int64_t>(which) * ranks; }
  int64_t* expertCounts() const { return counts->as<int64_t>() + 6 * ranks; }
  int64_t* expertOffsets() const { return expertCounts() + local_experts; }
};

namespace {
enum { kSendCounts = 0, kSendOffsets = 1, kRecvCounts = 2, kRecvOffsets = 3, kCombCounts = 4, kCombOffsets = 5 };
}  // namespace

StatusOr<std::unique_ptr<AllToAllVTransport>> AllToAllVTransport::create(Bootstrap& boot, int device,
                                                                         uint64_t row_bytes, uint64_t send_rows,
                                                                         uint64_t recv_rows, Transfer transfer,
                                                                         Deadline deadline, Protocol protocol) {
  Options o;
  o.elem_bytes = row_bytes;
  o.send_capacity = send_rows;
  o.recv_capacity = recv_rows;
  o.transfer = transfer;
  o.protocol = protocol;
  PEERLAB_ASSIGN_OR_RETURN(auto a2a, AllToAllV::create(boot, device, o, deadline));
  return std::unique_ptr<AllToAllVTransport>(new AllToAllVTransport(std::move(a2a)));
}

Status AllToAllVTransport::exchange(const int64_t* send_counts, int64_t* recv_counts, int64_t* recv_offsets,
                                    cudaStream_t stream, Deadline) {
  return a2a_.run(stream, send_counts, recv_counts, recv_offsets);
}

MoeExchange::MoeExchange(MoeConfig config, int rank, int ranks, int device, std::unique_ptr<Transport> dispatch,
                         std::unique_ptr<Transport> combine, std::unique_ptr<Buffers> buffers)
    : config_(config),
      rank_(rank),
      ranks_(ranks),
      device_(device),
      dispatch_(std::move(dispatch)),
      combine_(std::move(combine)),
      buf_(std::move(buffers)) {}

MoeExchange::~MoeExchange() = default;
MoeExchange::MoeExchange(MoeExchange&&) noexcept = default;
MoeExchange& MoeExchange::operator=(MoeExchange&&) noexcept = default;

StatusOr<MoeExchange> MoeExchange::create(const MoeConfig& config, int rank, int ranks, int device,
                                          std::unique_ptr<Transport> dispatch, std::unique_ptr<Transport> combine) {
  if (ranks < 1 || ranks > kMaxRanks) return PEERLAB_INVALID_ARGUMENT("moe: rank count out of range");
  if (config.hidden <= 0 || config.hidden % 8 != 0) {
    return PEERLAB_INVALID_ARGUMENT("moe: hidden size " + std::to_string(config.hidden) + " is not a multiple of 8");
  }
  if (config.top_k < 1 || config.top_k > kMaxTopK) {
    return PEERLAB_INVALID_ARGUMENT("moe: top_k " + std::to_string(config.top_k) + " outside [1, " +
                                    std::to_string(kMaxTopK) + "]");
  }
  if (config.experts < ranks || config.experts % ranks != 0) {
    return PEERLAB_INVALID_ARGUMENT("moe: " + std::to_string(config.experts) + " experts do not split evenly over " +
                                    std::to_string(ranks) + " ranks");
  }
  if (config.max_tokens < 1) return PEERLAB_INVALID_ARGUMENT("moe: max_tokens must be positive");
  if (!dispatch || !combine) return PEERLAB_INVALID_ARGUMENT("moe: null transport");
  auto b = std::make_unique<Buffers>();
  b->ranks = ranks;
  b->local_experts = config.experts / ranks;
  const uint64_t T = static_cast<uint64_t>(config.max_tokens);
  const uint64_t n = static_cast<uint64_t>(ranks);
  const uint64_t k = static_cast<uint64_t>(config.top_k);
  b->pair_capacity = config.pair_capacity ? config.pair_capacity : T * n * k;
  PEERLAB_ASSIGN_OR_RETURN(b->token_pos, allocDevice(device, T * n * sizeof(int32_t)));
  PEERLAB_ASSIGN_OR_RETURN(b->counts, allocDevice(device, (6 * n + 2 * b->local_experts) * sizeof(int64_t)));
  PEERLAB_ASSIGN_OR_RETURN(b->pair_of_row, allocDevice(device, T * n * k * sizeof(int32_t)));
  PEERLAB_ASSIGN_OR_RETURN(b->rows, allocDevice(device, b->pair_capacity * config.hidden * 2));
  PEERLAB_ASSIGN_OR_RETURN(b->row_source, allocDevice(device, b->pair_capacity * sizeof(int4)));
  PEERLAB_ASSIGN_OR_RETURN(b->row_weight, allocDevice(device, b->pair_capacity * sizeof(float)));
  PEERLAB_ASSIGN_OR_RETURN(b->status, allocDevice(device, 2 * sizeof(uint32_t)));
  {
    PEERLAB_ASSIGN_OR_RETURN(auto guard, ScopedDevice::make(device));
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaMemset(b->counts->ptr, 0, b->counts->bytes)));
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaMemset(b->status->ptr, 0, b->status->bytes)));
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaMemset(b->pair_of_row->ptr, 0xFF, b->pair_of_row->bytes)));
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaDeviceSynchronize()));
  }
  MoeExchange m(config, rank, ranks, device, std::move(dispatch), std::move(combine), std::move(b));
  PEERLAB_ASSIGN_OR_RETURN(m.host_status_, allocPinned(2 * sizeof(uint32_t)));
  return m;
}

StatusOr<MoeExchange> MoeExchange::createWithAllToAllV(Bootstrap& boot, int device, const MoeConfig& config,
                                                       Transfer transfer, Deadline deadline, Protocol protocol) {
  const uint64_t rows = static_cast<uint64_t>(config.max_tokens) * static_cast<uint64_t>(boot.size());
  PEERLAB_ASSIGN_OR_RETURN(
      auto d, AllToAllVTransport::create(boot, device, dispatchRowBytes(config.hidden, config.top_k), rows, rows,
                                         transfer, deadline, protocol));
  PEERLAB_ASSIGN_OR_RETURN(auto c, AllToAllVTransport::create(boot, device, combineRowBytes(config.hidden), rows, rows,
                                                              transfer, deadline, protocol));
  PEERLAB_ASSIGN_OR_RETURN(auto m, create(config, boot.rank(), boot.size(), device, std::move(d), std::move(c)));
  if (config.ll_max_tokens > 0) {
    LlConfig l;
    l.hidden = config.hidden;
    l.top_k = config.top_k;
    l.experts = config.experts;
    l.max_tokens = config.ll_max_tokens;
    l.capacity = config.ll_capacity;
    l.payload = config.ll_payload;
    l.timeout_ms = config.ll_timeout_ms;
    l.programmatic_launch = config.ll_programmatic_launch;
    l.tagged_max_tokens = config.ll_tagged_max_tokens;
    l.ctas_per_sm = config.ll_ctas_per_sm;
    PEERLAB_ASSIGN_OR_RETURN(auto ll, LowLatencyExchange::create(boot, device, l, deadline));
    m.ll_ = std::make_unique<LowLatencyExchange>(std::move(ll));
  }
  return m;
}

DispatchOutput MoeExchange::output() const {
  DispatchOutput o{};
  o.rows = buf_->rows->as<__nv_bfloat16>();
  o.expert_counts = buf_->expertCounts();
  o.expert_offsets = buf_->expertOffsets();
  o.row_source = buf_->row_source->as<int4>();
  o.row_weight = buf_->row_weight->as<float>();
  o.local_experts = buf_->local_experts;
  o.pair_capacity = buf_->pair_capacity;
  return o;
}

int MoeExchange::llAutoLimit() const {
  if (!ll_) return 0;
  const int held = ll_->config().max_tokens;
  return config_.ll_auto_max_tokens > 0 ? std::min(config_.ll_auto_max_tokens, held) : held;
}

const int64_t* MoeExchange::sendCounts() const {
  return buf_->at(kSendCounts);
}
const int64_t* MoeExchange::recvCounts() const {
  return buf_->at(kRecvCounts);
}

Status MoeExchange::dispatch(const __nv_bfloat16* tokens, const int32_t* topk_ids, const float* topk_weights,
                             int num_tokens, cudaStream_t stream, Deadline deadline, MoeMode mode) {
  const MoeMode resolved = chooseMoeMode(mode, llAutoLimit(), num_tokens);
  if (resolved == MoeMode::kLowLatency) {
    if (!ll_) return PEERLAB_INVALID_ARGUMENT("moe dispatch: low-latency mode requested, but ll_max_tokens is 0");
    PEERLAB_RETURN_IF_ERROR(ll_->dispatch(tokens, topk_ids, topk_weights, num_tokens, stream));
    num_tokens_ = num_tokens;
    last_mode_ = resolved;
    return Status::ok();
  }
  last_mode_ = MoeMode::kNormal;
  if (num_tokens < 0 || num_tokens > config_.max_tokens) {
    return PEERLAB_INVALID_ARGUMENT("moe dispatch: " + std::to_string(num_tokens) + " tokens, capacity " +
                                    std::to_string(config_.max_tokens));
  }
  num_tokens_ = num_tokens;
  PEERLAB_ASSIGN_OR_RETURN(auto guard, ScopedDevice::make(device_));
  Buffers& b = *buf_;
  RouteArgs r{topk_ids,          num_tokens,        config_.top_k, config_.experts, ranks_, b.token_pos->as<int32_t>(),
              b.at(kSendCounts), b.at(kSendOffsets)};
  routeKernel<<<1, kRouteThreads, 0, stream>>>(r);
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA_LAUNCH("moe routeKernel"));
  const uint64_t row_bytes = dispatchRowBytes(config_.hidden, config_.top_k);
  if (num_tokens > 0) {
    PackArgs p{tokens,
               topk_ids,
               topk_weights,
               b.token_pos->as<int32_t>(),
               b.at(kSendOffsets),
               static_cast<uint8_t*>(dispatch_->sendBuffer()),
               config_.hidden,
               config_.top_k,
               config_.experts,
               ranks_,
               row_bytes};
    packKernel<<<num_tokens, kRowThreads, 0, stream>>>(p);
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA_LAUNCH("moe packKernel"));
  }
  PEERLAB_RETURN_IF_ERROR(
      dispatch_->exchange(b.at(kSendCounts), b.at(kRecvCounts), b.at(kRecvOffsets), stream, deadline));
  LayoutArgs l{};
  l.recv = static_cast<const uint8_t*>(dispatch_->recvBuffer());
  l.recv_counts = b.at(kRecvCounts);
  l.recv_offsets = b.at(kRecvOffsets);
  l.ranks = ranks_;
  l.hidden = config_.hidden;
  l.k = config_.top_k;
  l.local_experts = b.local_experts;
  l.row_bytes = row_bytes;
  l.pair_capacity = b.pair_capacity;
  l.expert_counts = b.expertCounts();
  l.expert_offsets = b.expertOffsets();
  l.row_source = b.row_source->as<int4>();
  l.row_weight = b.row_weight->as<float>();
  l.pair_of_row = b.pair_of_row->as<int32_t>();
  l.status = b.status->as<uint32_t>();
  countKernel<<<b.local_experts, kLayoutThreads, 0, stream>>>(l);
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA_LAUNCH("moe countKernel"));
  placeKernel<<<b.local_experts, kLayoutThreads, 0, stream>>>(l);
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA_LAUNCH("moe placeKernel"));
  FanoutArgs f{l.recv,    l.row_source,    l.expert_counts, b.local_experts,
               row_bytes, b.pair_capacity, config_.hidden,  b.rows->as<__nv_bfloat16>()};
  fanoutKernel<<<gridForDevice(device_, b.pair_capacity * kRowThreads, kRowThreads, 8), kRowThreads, 0, stream>>>(f);
  return PEERLAB_CUDA_LAUNCH("moe fanoutKernel");
}

Status MoeExchange::combine(const __nv_bfloat16* expert_out, __nv_bfloat16* out, cudaStream_t stream,
                            Deadline deadline) {
  if (last_mode_ == MoeMode::kLowLatency) return ll_->combine(expert_out, out, stream);
  PEERLAB_ASSIGN_OR_RETURN(auto guard, ScopedDevice::make(device_));
  Buffers& b = *buf_;
  const uint64_t recv_rows = static_cast<uint64_t>(config_.max_tokens) * static_cast<uint64_t>(ranks_);
  ReduceArgs r{expert_out,
               b.row_weight->as<float>(),
               b.pair_of_row->as<int32_t>(),
               b.at(kRecvCounts),
               b.pair_capacity,
               ranks_,
               config_.hidden,
               config_.top_k,
               static_cast<__nv_bfloat16*>(combine_->sendBuffer())};
  reduceKernel<<<gridForDevice(device_, recv_rows * kRowThreads, kRowThreads, 8), kRowThreads, 0, stream>>>(r);
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA_LAUNCH("moe reduceKernel"));
  // Partial rows go back where their tokens came from: the combine's send counts are the dispatch's receive counts.
  PEERLAB_RETURN_IF_ERROR(
      combine_->exchange(b.at(kRecvCounts), b.at(kCombCounts), b.at(kCombOffsets), stream, deadline));
  if (num_tokens_ == 0) return Status::ok();
  FinishArgs f{static_cast<const __nv_bfloat16*>(combine_->recvBuffer()),
               b.at(kCombOffsets),
               b.token_pos->as<int32_t>(),
               num_tokens_,
               ranks_,
               config_.hidden,
               out};
  finishKernel<<<num_tokens_, kRowThreads, 0, stream>>>(f);
  return PEERLAB_CUDA_LAUNCH("moe finishKernel");
}

Status MoeExchange::checkStatus(cudaStream_t stream, Deadline deadline) {
  Status d = dispatch_->checkStatus(stream, deadline);
  Status c = combine_->checkStatus(stream, deadline);
  Status l = ll_ ? ll_->checkStatus(stream, deadline) : Status::ok();
  PEERLAB_ASSIGN_OR_RETURN(auto guard, ScopedDevice::make(device_));
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(
      cudaMemcpyAsync(host_status_->ptr, buf_->status->ptr, 2 * sizeof(uint32_t), cudaMemcpyDeviceToHost, stream)));
  PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaMemsetAsync(buf_->status->ptr, 0, 2 * sizeof(uint32_t), stream)));
  PEERLAB_RETURN_IF_ERROR(waitStream(stream, deadline, "moe status"));
  PEERLAB_RETURN_IF_ERROR(d.withContext("moe dispatch"));
  PEERLAB_RETURN_IF_ERROR(c.withContext("moe combine"));
  PEERLAB_RETURN_IF_ERROR(l);
  const auto* h = host_status_->as<uint32_t>();
  if (h[0] != 0) {
    return PEERLAB_INVALID_ARGUMENT("moe dispatch on rank " + std::to_string(rank_) + ": " + std::to_string(h[1]) +
                                    " (token, expert) pairs arrived, pair capacity is " +
                                    std::to_string(buf_->pair_capacity) + "; the expert layout was not written");
  }
  return Status::ok();
}

Status MoeExchange::close(Bootstrap& boot, Deadline deadline) {
  Status d = dispatch_ ? dispatch_->close(boot, deadline) : Status::ok();
  Status c = combine_ ? combine_->close(boot, deadline) : Status::ok();
  Status l = ll_ ? ll_->close(boot, deadline) : Status::ok();
  if (!d.isOk()) return d;
  return c.isOk() ? l : c;
}

}  // namespace peerlab::alltoallv::moe
