#include "reference/alltoallv/moe/low_latency.h"

#include <cuda_fp8.h>

#include <algorithm>
#include <cstddef>
#include <string>

#include "reference/core/check.h"
#include "reference/core/device_time.cuh"
#include "reference/core/scoped.h"
#include "reference/core/wait.h"
#include "reference/core/warp_scan.cuh"

namespace peerlab::alltoallv::moe {

namespace {

constexpr int kLlThreads = 256;
constexpr int kLlWarps = kLlThreads / 32;
constexpr uint32_t kWhatDispatch = 1;
constexpr uint32_t kWhatCombine = 2;

// Exclusive block-wide scan of one int per thread; the block total in *total.
__device__ __forceinline__ int llBlockScan(int v, int* total, int* smem /* [32] */) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int x = warpInclusiveSum(v);
  if (lane == 31) smem[warp] = x;
  __syncthreads();
  if (warp == 0) {
    const int w = warpInclusiveSum(lane < kLlWarps ? smem[lane] : 0);
    if (lane < kLlWarps) smem[lane] = w;
  }
  __syncthreads();
  const int before = warp > 0 ? smem[warp - 1] : 0;
  *total = smem[kLlWarps - 1];
  __syncthreads();
  return before + x - v;
}

__device__ __forceinline__ void llReportTimeout(LlState* s, int peer, uint32_t what) {
  if (atomicCAS(&s->code, 0u, static_cast<uint32_t>(kDeviceTimeout)) == 0u) {
    s->rank = peer;
    s->what = what;
  }
}

// Spins until `pred(*p)` (acquire, system scope) or the deadline; true with the word in *word, false on timeout.
template <class Pred>
__device__ __forceinline__ bool llWait(const uint64_t* p, Pred pred, uint64_t timeout_ns, uint64_t* word) {
  const uint64_t start = globalTimerNs();
  for (;;) {
    const uint64_t w = loadAcquireSys64(p);
    if (pred(w)) {
      *word = w;
      return true;
    }
    if (globalTimerNs() - start > timeout_ns) return false;
  }
}

// The last CTA of a launch advances the epoch (every CTA read it at its start).
__device__ __forceinline__ void llCloseCall(uint32_t* arrived, uint32_t* epoch_word, uint32_t epoch) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(arrived, 1u) + 1 == gridDim.x) {
      *arrived = 0;
      *epoch_word = epoch;
    }
  }
}

struct DispatchArgs {
  SymmetricView region;
  LlLayout layout;
  int rank;
  int num_tokens;
  const __nv_bfloat16* tokens;
  const int32_t* ids;
  const float* weights;
  int32_t* slot_expert;
  float* slot_weight;
  uint8_t* rows;
  float* scales;
  int64_t* expert_counts;
  int4* row_source;
  float* row_weight;
  LlState* state;
  uint64_t timeout_ns;
  uint32_t fault;
};
static_assert(std::is_trivially_copyable_v<DispatchArgs>);

// One warp writes token `t`'s row, as bf16 or quantized to fp8 per 128 elements, and its metadata.
__device__ __forceinline__ void writeRow(const DispatchArgs& a, uint8_t* row, int t, int slot, float w, int lane) {
  const LlLayout& L = a.layout;
  const auto* src = reinterpret_cast<const uint4*>(a.tokens + static_cast<int64_t>(t) * L.hidden);
  const int chunks = L.hidden / 8;
  if (L.payload == static_cast<uint32_t>(LlPayload::kBf16)) {
    for (int c = lane; c < chunks; c += 32)
      reinterpret_cast<uint4*>(row)[c] = src[c];
  } else {
    // Lanes 0-15 hold one 128-element group, lanes 16-31 the next (chunks of 8 elements).
    for (int c0 = 0; c0 < chunks; c0 += 32) {
      const int c = c0 + lane;
      const bool active = c < chunks;
      uint4 v = active ? src[c] : make_uint4(0, 0, 0, 0);
      float f[8];
      const auto* h = reinterpret_cast<const __nv_bfloat162*>(&v);
      float amax = 0.f;
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float2 p = __bfloat1622float2(h[q]);
        f[2 * q] = p.x;
        f[2 * q + 1] = p.y;
        amax = fmaxf(amax, fmaxf(fabsf(p.x), fabsf(p.y)));
      }
#pragma unroll
      for (int o = 8; o >= 1; o >>= 1)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
      amax = fmaxf(amax, kFp8MinAmax);
      const float mult = __fdiv_rn(kFp8E4m3Max, amax);
      if (!active) continue;
      uint8_t q8[8];
#pragma unroll
      for (int i = 0; i < 8; ++i)
        q8[i] = static_cast<uint8_t>(__nv_cvt_float_to_fp8(__fmul_rn(f[i], mult), __NV_SATFINITE, __NV_E4M3));
      uint2 packed;
      memcpy(&packed, q8, 8);
      reinterpret_cast<uint2*>(row)[c] = packed;
      if ((lane & 15) == 0) {
        reinterpret_cast<float*>(row + L.payload_bytes)[c / (kFp8Group / 8)] = __fdiv_rn(amax, kFp8E4m3Max);
      }
    }
  }
  if (lane == 0) *reinterpret_cast<int4*>(row + L.metaOffset()) = make_int4(t, slot, __float_as_int(w), 0);
}

// Send phase: CTA per global expert. Receive phase: CTA per local expert.
__global__ void __launch_bounds__(kLlThreads) llDispatchKernel(DispatchArgs a) {
  __shared__ int smem[32];
  __shared__ int list[kLlThreads];
  __shared__ int prefix[kMaxRanks + 1];
  const LlLayout& L = a.layout;
  const uint32_t epoch = a.state->dispatch_epoch + 1;
  const int parity = llParity(epoch);
  const int k = L.top_k;
  const int per = L.local_experts;
  const int pairs = a.num_tokens * k;
  const int warp = static_cast<int>(threadIdx.x) >> 5;
  const int lane = static_cast<int>(threadIdx.x) & 31;

  // Slots with no valid expert take part in nothing.
  for (int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); i < pairs;
       i += static_cast<int>(gridDim.x * blockDim.x)) {
    const int e = a.ids[i];
    if (e < 0 || e >= L.experts) {
      a.slot_expert[i] = -1;
      a.slot_weight[i] = 0.f;
    }
  }

  for (int ge = static_cast<int>(blockIdx.x); ge < L.experts; ge += static_cast<int>(gridDim.x)) {
    const int dest = ge / per;
    const int le = ge % per;
    // Rank this expert's pairs in (token, slot) order, a block of pairs at a time; warps write the kept rows.
    int running = 0;
    bool wrote = false;
    for (int base = 0; base < pairs; base += kLlThreads) {
      const int i = base + static_cast<int>(threadIdx.x);
      const int match = (i < pairs && a.ids[i] == ge) ? 1 : 0;
      int total = 0;
      const int before = llBlockScan(match, &total, smem);
      if (match) {
        list[before] = i;
        a.slot_expert[i] = llKept(running + before, L.capacity) ? ge : -1;
        a.slot_weight[i] = a.weights[i];
      }
      __syncthreads();
      for (int j = warp; j < total && llKept(running + j, L.capacity); j += kLlWarps) {
        const int p = list[j];
        uint8_t* row = a.region.at<uint8_t>(dest, L.slabRow(parity, a.rank, le, running + j));
        writeRow(a, row, p / k, p % k, a.weights[p], lane);
        wrote = true;
      }
      running += total;
      __syncthreads();
    }
    // Publish: the writers' fences, then one release of (epoch, rows) into the expert's rank.
    if (wrote) __threadfence_system();
    __syncthreads();
    if (threadIdx.x == 0) {
      const int64_t dropped = llDropped(running, L.capacity);
      if (dropped > 0) atomicAdd(&a.state->dropped, static_cast<unsigned long long>(dropped));
      if (a.fault != static_cast<uint32_t>(LlFault::kSkipDispatchSignals)) {
        const uint32_t rows = static_cast<uint32_t>(running - dropped);
        storeReleaseSys64(a.region.at<uint64_t>(dest, L.dispatchSignal(parity, a.rank, le)), llSignalWord(epoch, rows));
      }
    }
  }

  const uint64_t stride = L.expertStride();
  const uint64_t scale_words = L.scale_bytes / 4;
  for (int le = static_cast<int>(blockIdx.x); le < per; le += static_cast<int>(gridDim.x)) {
    // Wait for every source's signal of this expert.
    if (threadIdx.x < static_cast<unsigned>(L.ranks)) {
      const int src = static_cast<int>(threadIdx.x);
      uint64_t w = 0;
      const bool ok = llWait(
          a.region.at<uint64_t>(a.rank, L.dispatchSignal(parity, src, le)),
          [epoch](uint64_t x) { return llSignalEpoch(x) == epoch; }, a.timeout_ns, &w);
      if (!ok) llReportTimeout(a.state, src, kWhatDispatch);
      // A signal never exceeds the capacity; clamp anyway so a corrupt word cannot send a copy out of bounds.
      prefix[src + 1] = ok ? static_cast<int>(min(llSignalRows(w), static_cast<uint32_t>(L.capacity))) : 0;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      prefix[0] = 0;
      for (int s = 0; s < L.ranks; ++s)
        prefix[s + 1] += prefix[s];
      a.expert_counts[le] = prefix[L.ranks];
    }
    __syncthreads();
    const int total = prefix[L.ranks];
    for (int j = warp; j < total; j += kLlWarps) {
      int src = 0;
      while (src + 1 < L.ranks && j >= prefix[src + 1])
        ++src;
      const uint8_t* row = a.region.at<uint8_t>(a.rank, L.slabRow(parity, src, le, j - prefix[src]));
      const uint64_t out_row = static_cast<uint64_t>(le) * stride + static_cast<uint64_t>(j);
      const auto* from = reinterpret_cast<const uint4*>(row);
      auto* to = reinterpret_cast<uint4*>(a.rows + out_row * L.payload_bytes);
      for (uint64_t c = lane; c < L.payload_bytes / 16; c += 32)
        to[c] = __ldcg(from + c);
      for (uint64_t c = lane; c < scale_words; c += 32)
        a.scales[out_row * scale_words + c] = __ldcg(reinterpret_cast<const float*>(row + L.payload_bytes) + c);
      if (lane == 0) {
        const int4 m = __ldcg(reinterpret_cast<const int4*>(row + L.metaOffset()));
        a.row_source[out_row] = make_int4(src, m.x, m.y, 0);
        a.row_weight[out_row] = __int_as_float(m.z);
      }
    }
    __syncthreads();
  }
  llCloseCall(&a.state->dispatch_arrived, &a.state->dispatch_epoch, epoch);
}

struct CombineArgs {
  SymmetricView region;
  LlLayout layout;
  int rank;
  int num_tokens;
  const __nv_bfloat16* expert_out;
  const int4* row_source;
  const int64_t* expert_counts;
  const int32_t* slot_expert;
  const float* slot_weight;
  __nv_bfloat16* out;
  LlState* state;
  uint64_t timeout_ns;
  uint32_t fault;
};
static_assert(std::is_trivially_copyable_v<CombineArgs>);

// Send phase: CTA per local expert. Receive phase: CTA per token.
__global__ void __launch_bounds__(kLlThreads) llCombineKernel(CombineArgs a) {
  __shared__ int kept[kMaxTopK];
  const LlLayout& L = a.layout;
  const uint32_t epoch = a.state->combine_epoch + 1;
  const int parity = llParity(epoch);
  const int k = L.top_k;
  const int per = L.local_experts;
  const int chunks = L.hidden / 8;
  const uint64_t stride = L.expertStride();
  const int warp = static_cast<int>(threadIdx.x) >> 5;
  const int lane = static_cast<int>(threadIdx.x) & 31;

  // Rows of this parity at rank r are free once r has finished the call two before (a rank whose tokens need
  // nothing from another could otherwise run two combines ahead of it). Usually true already: a local load.
  if (epoch > 2 && threadIdx.x < static_cast<unsigned>(L.ranks)) {
    const int r = static_cast<int>(threadIdx.x);
    uint64_t w = 0;
    const bool ok = llWait(
        a.region.at<uint64_t>(a.rank, L.combineDone(r)),
        [epoch](uint64_t x) { return llEpochReached(static_cast<uint32_t>(x), epoch - 2); }, a.timeout_ns, &w);
    if (!ok) llReportTimeout(a.state, r, kWhatCombine);
  }
  __syncthreads();

  for (int le = static_cast<int>(blockIdx.x); le < per; le += static_cast<int>(gridDim.x)) {
    const int64_t total = a.expert_counts[le];
    const bool wrote = warp < total;
    for (int64_t j = warp; j < total; j += kLlWarps) {
      const uint64_t r = static_cast<uint64_t>(le) * stride + static_cast<uint64_t>(j);
      const int4 src = a.row_source[r];
      const auto* from = reinterpret_cast<const uint4*>(a.expert_out + r * L.hidden);
      auto* to = a.region.at<uint4>(src.x, L.combineRow(parity, src.y, src.z));
      for (int c = lane; c < chunks; c += 32)
        to[c] = from[c];
    }
    if (wrote) __threadfence_system();
    __syncthreads();
    if (threadIdx.x < static_cast<unsigned>(L.ranks) &&
        a.fault != static_cast<uint32_t>(LlFault::kSkipCombineSignals)) {
      storeReleaseSys64(
          a.region.at<uint64_t>(static_cast<int>(threadIdx.x), L.combineSignal(parity, a.rank * per + le)), epoch);
    }
  }

  for (int t = static_cast<int>(blockIdx.x); t < a.num_tokens; t += static_cast<int>(gridDim.x)) {
    if (threadIdx.x < static_cast<unsigned>(k)) {
      const int j = static_cast<int>(threadIdx.x);
      const int e = a.slot_expert[t * k + j];
      bool ok = e >= 0;
      if (ok) {
        uint64_t w = 0;
        ok = llWait(
            a.region.at<uint64_t>(a.rank, L.combineSignal(parity, e)), [epoch](uint64_t x) { return x == epoch; },
            a.timeout_ns, &w);
        if (!ok) llReportTimeout(a.state, e / per, kWhatCombine);
      }
      kept[j] = ok ? 1 : 0;
    }
    __syncthreads();
    for (int c = static_cast<int>(threadIdx.x); c < chunks; c += kLlThreads) {
      float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (int j = 0; j < k; ++j) {
        if (!kept[j]) continue;
        const float w = a.slot_weight[t * k + j];
        const uint4 v = __ldcg(a.region.at<const uint4>(a.rank, L.combineRow(parity, t, j)) + c);
        const auto* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const float2 f = __bfloat1622float2(h[q]);
          acc[2 * q] = fmaf(w, f.x, acc[2 * q]);
          acc[2 * q + 1] = fmaf(w, f.y, acc[2 * q + 1]);
        }
      }
      uint4 o;
      auto* ob = reinterpret_cast<__nv_bfloat162*>(&o);
#pragma unroll
      for (int q = 0; q < 4; ++q)
        ob[q] = __floats2bfloat162_rn(acc[2 * q], acc[2 * q + 1]);
      reinterpret_cast<uint4*>(a.out + static_cast<int64_t>(t) * L.hidden)[c] = o;
    }
    __syncthreads();
  }
  // The last CTA (every CTA has read its rows) tells every rank this call is done here.
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(&a.state->combine_arrived, 1u) + 1 == gridDim.x) {
      a.state->combine_arrived = 0;
      a.state->combine_epoch = epoch;
      for (int r = 0; r < L.ranks; ++r)
        storeReleaseSys64(a.region.at<uint64_t>(r, L.combineDone(a.rank)), epoch);
    }
  }
}

}  // namespace

StatusOr<LowLatencyExchange> LowLatencyExchange::create(Bootstrap& boot, int device, const LlConfig& config,
                                                        Deadline deadline) {
  LlShape shape;
  shape.ranks = boot.size();
  shape.hidden = config.hidden;
  shape.top_k = config.top_k;
  shape.experts = config.experts;
  shape.max_tokens = config.max_tokens;
  shape.capacity = config.capacity > 0 ? config.capacity : config.max_tokens;
  shape.payload = config.payload;
  if (const std::string why = llShapeError(shape); !why.empty()) return PEERLAB_INVALID_ARGUMENT(why);
  if (config.top_k > kMaxTopK) {
    return PEERLAB_INVALID_ARGUMENT("ll: top_k " + std::to_string(config.top_k) + " above " + std::to_string(kMaxTopK));
  }
  if (config.timeout_ms <= 0) return PEERLAB_INVALID_ARGUMENT("ll: timeout_ms must be positive");
  LowLatencyExchange x;
  x.config_ = config;
  x.config_.capacity = shape.capacity;
  x.layout_ = makeLlLayout(shape);
  x.rank_ = boot.rank();
  x.device_ = device;
  PEERLAB_ASSIGN_OR_RETURN(auto region, SymmetricRegion::create(boot, device, x.layout_.total_bytes, deadline));
  x.region_ = std::make_unique<SymmetricRegion>(std::move(region));
  const uint64_t slots = static_cast<uint64_t>(config.max_tokens) * config.top_k;
  const uint64_t rows = static_cast<uint64_t>(x.layout_.local_experts) * x.layout_.expertStride();
  PEERLAB_ASSIGN_OR_RETURN(x.slot_expert_, allocDevice(device, slots * sizeof(int32_t)));
  PEERLAB_ASSIGN_OR_RETURN(x.slot_weight_, allocDevice(device, slots * sizeof(float)));
  PEERLAB_ASSIGN_OR_RETURN(x.rows_, allocDevice(device, rows * x.layout_.payload_bytes));
  PEERLAB_ASSIGN_OR_RETURN(x.scales_, allocDevice(device, std::max<uint64_t>(rows * x.layout_.scale_bytes, 16)));
  PEERLAB_ASSIGN_OR_RETURN(x.counts_, allocDevice(device, x.layout_.local_experts * sizeof(int64_t)));
  PEERLAB_ASSIGN_OR_RETURN(x.row_source_, allocDevice(device, rows * sizeof(int4)));
  PEERLAB_ASSIGN_OR_RETURN(x.row_weight_, allocDevice(device, rows * sizeof(float)));
  PEERLAB_ASSIGN_OR_RETURN(x.state_, allocDevice(device, sizeof(LlState)));
  PEERLAB_ASSIGN_OR_RETURN(x.host_state_, allocPinned(sizeof(LlState)));
  {
    PEERLAB_ASSIGN_OR_RETURN(auto guard, ScopedDevice::make(device));
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaMemset(x.state_->ptr, 0, sizeof(LlState))));
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaMemset(x.counts_->ptr, 0, x.counts_->bytes)));
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaDeviceGetAttribute(&x.sms_, cudaDevAttrMultiProcessorCount, device)));
    PEERLAB_RETURN_IF_ERROR(PEERLAB_CUDA(cudaDeviceSynchronize()));
  }
  return x;
}

int LowLatencyExchange::dispatchCtas() const {
  const int cap = config_.max_ctas > 0 ? std::min(config_.max_ctas, sms_) : sms_;
  return std::max(1, std::min(cap, std::max(layout_.experts, 1)));
}

int LowLatencyExchange::combineCtas(int num_tokens) const {
  const int cap = config_.max_ctas > 0 ? std::min(config_.max_ctas, sms_) : sms_;
  return std::max(1, std::min(cap, std::max(layout_.local_experts, num_tokens)));
}

LlDispatchOutput LowLatencyExchange::output() const {
  LlDispatchOutput o{};
  o.rows = rows_->as<uint8_t>();
  o.scales = config_.payload == LlPayload::kFp8 ? scales_->as<float>() : nullptr;
  o.expert_counts = counts_->as<int64_t>();
  o.row_source = row_source_->as<int4>();
  o.row_weight = row_weight_->as<float>();
  o.local_experts = layout_.local_experts;
  o.expert_stride = layout_.expertStride();
  o.payload_bytes = layout_.payload_bytes;
  o.payload = config_.payload;
  return o;
}

Status LowLatencyExchange::dispatch(const __nv_bfloat16* tokens, const int32_t* topk_ids, const float* topk_weights,
                                    int num_tokens, cudaStream_t stream) {
  if (num_tokens < 0 || num_tokens > config_.max_tokens) {
    return PEERLAB_INVALID_ARGUMENT("ll dispatch: " + std::to_string(num_tokens) + " tokens, low-latency capacity " +
                                    std::to_string(config_.max_tokens));
  }
  num_tokens_ = num_tokens;
  PEERLAB_ASSIGN_OR_RETURN(auto guard, ScopedDevice::make(device_));
  DispatchArgs a{};
  a.region = region_->view();
  a.layout = layout_;
  a.rank = rank_;
  a.num_tokens = num_tokens;
  a.tokens = tokens;
  a.ids = topk_ids;
  a.weights = topk_weights;
  a.slot_expert = slot_expert_->as<int32_t>();
  a.slot_weight = slot_weight_->as<float>();
  a.rows = rows_->as<uint8_t>();
  a.scales = scales_->as<float>();
  a.expert_counts = counts_->as<int64_t>();
  a.row_source = row_source_->as<int4>();
  a.row_weight = row_weight_->as<float>();
  a.state = state_->as<LlState>();
  a.timeout_ns = static_cast<uint64_t>(config_.timeout_ms) * 1'000'000ull;
  a.fault = static_cast<uint32_t>(fault_);
  llDispatchKernel<<<dispatchCtas(), kLlThreads, 0, stream>>>(a);
  return PEERLAB_CUDA_LAUNCH("ll dispatch kernel");
}

Status LowLatencyExchange::combine(const __nv_bfloat16* expert_out, __nv_bfloat16* out, cudaStream_t stream) {
  PEERLAB_ASSIGN_OR_RETURN(auto guard, ScopedDevice::make(device_));
  CombineArgs a{};
  a.region = region_->view();
  a.layout = layout_;
  a.rank = rank_;
  a.num_tokens = num_tokens_;
  a.expert_out = expert_out;
  a.row_source = row_source_->as<int4>();
  a.expert_counts = counts_->as<int64_t>();
  a.slot_expert = slot_expert_->as<int32_t>();
  a.slot_weight = slot_weight_->as<float>();
  a.out = out;
  a.state = state_->as<LlState>();
  a.timeout_ns = static_cast<uint64_t>(config_.timeout_ms) * 1'000'000ull;
  a.fault = static_cast<uint32_t>(fault_);
  llCombineKernel<<<combineCtas(num_tokens_), kLlThreads, 0, stream>>>(a);
  return PEERLAB_CUDA_LAUNCH("ll combine kernel");
}

Status LowLatencyExchange::checkStatus(cudaStream_t stream, Deadline deadline) {
  PEERLAB_ASSIGN_OR_RETURN(auto guard, ScopedDevice::make(device_));
  auto* dev = state_->as<LlState>();
  PEERLAB_RETURN_IF_ERROR(
      PEERLAB_CUDA(cudaMemcpyAsync(host_state_->ptr, dev, sizeof(LlState), cudaMemcpyDeviceToHost, stream)));
  // Clear the status words only (the epochs stay).
  PEERLAB_RETURN_IF_ERROR(
      PEERLAB_CUDA(cudaMemsetAsync(&dev->code, 0, sizeof(LlState) - offsetof(LlState, code), stream)));
  PEERLAB_RETURN_IF_ERROR(waitStream(stream, deadline, "ll status"));
  const LlState h = *host_state_->as<LlState>();
  dropped_ = h.dropped;
  if (h.code == kDeviceTimeout) {
    return PEERLAB_TIMEOUT("moe low-latency " + std::string(h.what == kWhatCombine ? "combine" : "dispatch") +
                           " on rank " + std::to_string(rank_) + ": no signal from rank " + std::to_string(h.rank) +
                           " within " + std::to_string(config_.timeout_ms) + " ms");
  }
  if (h.dropped > 0) {
    return PEERLAB_INVALID_ARGUMENT("moe low-latency dispatch on rank " + std::to_string(rank_) + ": " +
                                    std::to_string(h.dropped) + " (token, expert) pairs dropped, expert capacity " +
                                    std::to_string(config_.capacity) + " slots per source rank");
  }
  if (h.code != kDeviceOk) return PEERLAB_INTERNAL("moe low-latency: device error " + std::to_string(h.code));
  return Status::ok();
}

Status LowLatencyExchange::close(Bootstrap& boot, Deadline deadline) {
  if (!region_) return Status::ok();
  if (device_ >= 0) {
    auto guard = ScopedDevice::make(device_);
    if (guard.isOk()) PEERLAB_CUDA(cudaDeviceSynchronize()).ignore();
  }
  Status st = region_->close(boot, deadline);
  region_.reset();
  return st;
}

}  // namespace peerlab::alltoallv::moe
