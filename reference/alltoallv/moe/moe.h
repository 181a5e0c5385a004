#pragma once
/// MoE dispatch and combine on top of an alltoallv transport.
///
/// Tokens [T, H] bf16, top-k expert ids [T, k] int32 and weights [T, k] fp32; E experts split evenly across ranks
/// (rank r owns experts [r * E/n, (r + 1) * E/n)). Ids outside [0, E) are ignored (dropped slots).
///
/// Dispatch sends each token ONCE PER DESTINATION RANK (not once per (token, expert) pair) and fans it out to the
/// rank's local experts on arrival: with DeepSeek-V3's top-8 of 256 experts on 4 ranks a token reaches ~3.6 distinct
/// ranks, so NVLink carries ~2.2x fewer bytes than per-pair sends; the fan-out is a local HBM copy, several times
/// cheaper per byte. Each sent row carries its routing in a small tail (source token, local expert per slot, weight
/// per slot). The receiver lays rows out grouped by local expert, ordered by (source rank, source token, slot), and
/// records for each such row its source rank, token, top-k slot and received row, all on the GPU.
///
/// Combine applies the weights on the expert's rank: each received row's local expert outputs are summed in fp32
/// (w * out) into one partial row, rounded once to bf16, and sent back; the source sums its <= n partial rows in
/// fp32 and rounds to bf16. That halves the combine traffic the same way and keeps fp32 accumulation.
///
/// Low-latency mode (MoeConfig::ll_max_tokens > 0, peerlab's transport only): one kernel per phase over fixed
/// buffers, no count exchange (low_latency.h); it too sends each token once per destination rank and sums per rank
/// before sending back. Each call picks its mode (chooseMoeMode): LL when num_tokens <= the LL limit
/// (ll_auto_max_tokens, at most ll_max_tokens), else the normal mode above; every rank must land on the same side. In
/// LL mode output() is not written: the expert input is lowLatency()->output() ([E / n][n * capacity] rows, bf16 or
/// fp8 with per-128 scales), and combine() takes the expert output in that layout. Pairs beyond an expert's capacity
/// are dropped and reported.

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <type_traits>

#include "reference/alltoallv/alltoallv.h"
#include "reference/alltoallv/moe/ll_layout.h"
#include "reference/alltoallv/moe/low_latency.h"
#include "reference/core/bootstrap.h"
#include "reference/core/deadline.h"
#include "reference/core/memory.h"
#include "reference/core/status.h"

namespace peerlab::alltoallv::moe {

struct MoeConfig {
  int hidden = 7168;      ///< H, a multiple of 8 (rows move as 16-byte vectors)
  int top_k = 8;          ///< k, at most kMaxTopK
  int experts = 256;      ///< E, a multiple of the rank count
  int max_tokens = 4096;  ///< T capacity per rank
  /// Rows of the expert-grouped output ((token, expert) pairs received); 0: the worst case max_tokens * n * k.
  uint64_t pair_capacity = 0;
  int ll_max_tokens = 0;  ///< tokens per rank the LL buffers hold (0: no LL mode)
  /// The auto choice takes LL for calls of at most this many tokens (0: ll_max_tokens): the crossover where the normal
  /// mode becomes faster, measured per machine (docs/moe.md).
  int ll_auto_max_tokens = 0;
  int ll_capacity = 0;  ///< LL kept pairs per (source rank, expert); 0: ll_max_tokens (nothing dropped)
  LlPayload ll_payload = LlPayload::kBf16;
  int64_t ll_timeout_ms = 10'000;                        ///< bound of the LL kernels' device waits
  int ll_tagged_max_tokens = kLlDefaultTaggedMaxTokens;  ///< LlConfig::tagged_max_tokens
  int ll_ctas_per_sm = kLlDefaultCtasPerSm;              ///< LlConfig::ctas_per_sm
  bool ll_programmatic_launch = true;  ///< LL kernels go out with programmatic dependent launch where the device has it
};

/// Bytes of one dispatched row: the token (2H) plus its routing tail (source token, k local expert ids, k weights).
__host__ __device__ inline uint64_t dispatchRowBytes(int hidden, int top_k) {
  return 2ull * static_cast<uint64_t>(hidden) + ((16ull + 8ull * static_cast<uint64_t>(top_k) + 15ull) / 16ull) * 16ull;
}
/// Bytes of one combined row (a bf16 partial sum).
__host__ __device__ inline uint64_t combineRowBytes(int hidden) {
  return 2ull * static_cast<uint64_t>(hidden);
}

/// Moves rows between ranks: send counts on the GPU in, receive counts and offsets on the GPU out.
class Transport {
 public:
  virtual ~Transport() = default;
  /// Where the caller packs the rows to send (segments in destination order).
  virtual void* sendBuffer() = 0;
  /// Where received rows are after exchange() (may change between calls for growing transports).
  virtual const void* recvBuffer() = 0;
  /// One alltoallv of rows. `deadline` bounds any host wait the transport needs.
  virtual Status exchange(const int64_t* send_counts, int64_t* recv_counts, int64_t* recv_offsets, cudaStream_t stream,
                          Deadline deadline) = 0;
  /// Reads and clears the transport's device-side status (explicit host sync).
  virtual Status checkStatus(cudaStream_t stream, Deadline deadline) = 0;
  /// Collective teardown.
  virtual Status close(Bootstrap& boot, Deadline deadline) = 0;
};

/// peerlab's GPU-initiated alltoallv as a transport (no host sync: dispatch and combine are graph-capturable).
class AllToAllVTransport : public Transport {
 public:
  static StatusOr<std::unique_ptr<AllToAllVTransport>> create(Bootstrap& boot, int device, uint64_t row_bytes,
                                                              uint64_t send_rows, uint64_t recv_rows, Transfer transfer,
                                                              Deadline deadline, Protocol protocol = Protocol::kAuto);
  void* sendBuffer() override { return a2a_.sendBuffer(); }
  const void* recvBuffer() override { return a2a_.recvBuffer(); }
  Status exchange(const int64_t* send_counts, int64_t* recv_counts, int64_t* recv_offsets, cudaStream_t stream,
                  Deadline deadline) override;
  Status checkStatus(cudaStream_t stream, Deadline deadline) override { return a2a_.checkStatus(stream, deadline); }
  Status close(Bootstrap& boot, Deadline deadline) override { return a2a_.close(boot, deadline); }
  AllToAllV& alltoallv() { return a2a_; }

 private:
  explicit AllToAllVTransport(AllToAllV a2a) : a2a_(std::move(a2a)) {}
  AllToAllV a2a_;
};

/// The dispatch output, on the GPU (valid until the next dispatch).
struct DispatchOutput {
  const __nv_bfloat16* rows;      ///< [pair_capacity, H], grouped by local expert
  const int64_t* expert_counts;   ///< [E / n] rows per local expert
  const int64_t* expert_offsets;  ///< [E / n] first row of each local expert
  const int4* row_source;         ///< [pair_capacity] {source rank, source token, top-k slot, received row}
  const float* row_weight;        ///< [pair_capacity] the routing weight of that pair
  int local_experts;
  uint64_t pair_capacity;
};
static_assert(std::is_trivially_copyable_v<DispatchOutput>);

class MoeExchange {
 public:
  /// Sizes: the dispatch transport moves rows of dispatchRowBytes() (send and receive max_tokens * n rows), the
  /// combine transport rows of combineRowBytes() (the same row counts).
  static StatusOr<MoeExchange> create(const MoeConfig& config, int rank, int ranks, int device,
                                      std::unique_ptr<Transport> dispatch, std::unique_ptr<Transport> combine);
  /// Both transports on peerlab's alltoallv (collective).
  static StatusOr<MoeExchange> createWithAllToAllV(Bootstrap& boot, int device, const MoeConfig& config,
                                                   Transfer transfer, Deadline deadline,
                                                   Protocol protocol = Protocol::kAuto);

  MoeExchange(MoeExchange&&) noexcept;
  MoeExchange& operator=(MoeExchange&&) noexcept;

  /// Routes, packs and exchanges `num_tokens` (<= max_tokens, known on the host) tokens and lays the received ones
  /// out by local expert. Enqueued on `stream`; only a host-count transport waits on the host.
  /// `mode`: see chooseMoeMode (kLowLatency without an LL exchange is an error).
  Status dispatch(const __nv_bfloat16* tokens, const int32_t* topk_ids, const float* topk_weights, int num_tokens,
                  cudaStream_t stream, Deadline deadline, MoeMode mode = MoeMode::kAuto);
  /// Weighted sum of the experts' outputs `expert_out` ([pair_capacity, H], the dispatch layout; after an LL dispatch
  /// the LL layout) back into `out` ([num_tokens, H] of the last dispatch), in the last dispatch's mode.
  Status combine(const __nv_bfloat16* expert_out, __nv_bfloat16* out, cudaStream_t stream, Deadline deadline);
  /// Reads and clears the device status of both transports, of the layout (pair capacity overflow) and of the LL
  /// kernels (dropped pairs, missing signals).
  Status checkStatus(cudaStream_t stream, Deadline deadline);
  /// Collective teardown of both transports and of the LL buffers.
  Status close(Bootstrap& boot, Deadline deadline);

  DispatchOutput output() const;
  /// The LL exchange (null when ll_max_tokens is 0 or the transport is not peerlab's).
  LowLatencyExchange* lowLatency() { return ll_.get(); }
  /// The mode the last dispatch took.
  MoeMode lastMode() const { return last_mode_; }
  /// The most tokens a kAuto call sends through the LL mode (0: none).
  int llAutoLimit() const;
  const MoeConfig& config() const { return config_; }
  int localExperts() const { return config_.experts / ranks_; }
  Transport& dispatchTransport() { return *dispatch_; }
  Transport& combineTransport() { return *combine_; }
  /// Rows this rank sent in the last dispatch per destination (device, int64 [n]).
  const int64_t* sendCounts() const;
  /// Rows received per source in the last dispatch (device, int64 [n]).
  const int64_t* recvCounts() const;

  struct Buffers;

 private:
  MoeExchange(MoeConfig config, int rank, int ranks, int device, std::unique_ptr<Transport> dispatch,
              std::unique_ptr<Transport> combine, std::unique_ptr<Buffers> buffers);
  MoeConfig config_;
  int rank_ = 0;
  int ranks_ = 1;
  int device_ = -1;
  int num_tokens_ = 0;
  std::unique_ptr<Transport> dispatch_;
  std::unique_ptr<Transport> combine_;
  std::unique_ptr<Buffers> buf_;
  PinnedBuffer host_status_;
  std::unique_ptr<LowLatencyExchange> ll_;
  MoeMode last_mode_ = MoeMode::kNormal;

 public:
  ~MoeExchange();
};

}  // namespace peerlab::alltoallv::moe
