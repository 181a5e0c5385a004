#pragma once
/// The alltoallv benchmark's rows (alltoallv and MoE dispatch/combine), shared by the benchmark (alltoallv_bench.cu)
/// and the suite specs that run it (alltoallv_suite.cc, moe_suite.cc): the cases it registers, in order, their sizes
/// and token counts, and the calls each sample makes.

#include <cstdint>
#include <string>
#include <vector>

namespace peerlab::alltoallv_suite {

/// Bytes per rank of the alltoallv rows: 4 KiB .. 1 GiB.
inline std::vector<int64_t> sizes() {
  return {4096, 16384, 65536, 262144, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 128 << 20, 256 << 20, int64_t{1} << 30};
}
/// Tokens per rank of the MoE rows.
inline std::vector<int> moeTokens() {
  return {1, 8, 32, 64, 128, 256, 4096};
}
/// MoE geometry: a token is hidden x bf16 sent to top-k experts.
inline constexpr int kMoeHidden = 7168;
inline constexpr int kMoeTopK = 8;
/// Low-latency rows run up to this many tokens per rank (its packed expert layout grows with T x T: at T=256 and the
/// DeepSeek shape, 940 MB per rank in bf16); above it they skip.
inline constexpr int kMoeLlMaxTokens = 256;

enum class Impl { kPeerlabPush, kPeerlabTwoPhase, kPeerlabPull, kNcclAlltoAll, kNcclDevice, kNcclHostCounts };
inline const char* implName(Impl i) {
  switch (i) {
    case Impl::kPeerlabPush:
      return "peerlab.alltoallv";
    case Impl::kPeerlabTwoPhase:
      return "peerlab.alltoallv_twophase";
    case Impl::kPeerlabPull:
      return "peerlab.alltoallv_pull";
    case Impl::kNcclAlltoAll:
      return "nccl.alltoall";
    case Impl::kNcclDevice:
      return "nccl.device_alltoallv";
    case Impl::kNcclHostCounts:
      return "nccl.alltoallv_hostcounts";
  }
  return "?";
}

enum class MoePath { kPeerlab, kPeerlabTwoPhase, kNccl, kPeerlabLowLatency, kPeerlabLowLatencyFp8 };
inline const char* moeImpl(MoePath p, bool combine) {
  switch (p) {
    case MoePath::kPeerlab:
      return combine ? "peerlab.combine" : "peerlab.dispatch";
    case MoePath::kPeerlabTwoPhase:
      return combine ? "peerlab.combine_twophase" : "peerlab.dispatch_twophase";
    case MoePath::kNccl:
      return combine ? "nccl.combine" : "nccl.dispatch";
    case MoePath::kPeerlabLowLatency:
      return combine ? "peerlab.combine_ll" : "peerlab.dispatch_ll";
    case MoePath::kPeerlabLowLatencyFp8:
      return combine ? "peerlab.combine_ll_fp8" : "peerlab.dispatch_ll_fp8";
  }
  return "?";
}

/// One alltoallv row: impl, traffic pattern, graph-replayed or eager, bytes per rank.
struct Case {
  Impl impl;
  const char* pattern;  ///< uniform, skewed
  bool graph;
  int64_t bytes;
  std::string name() const { return std::string(graph ? "graph/" : "") + pattern; }
  std::string rowName() const {
    return std::string("alltoallv/") + implName(impl) + "/" + name() + "/bytes:" + std::to_string(bytes);
  }
};
/// One MoE row: path, dispatch or combine, graph or eager, tokens per rank.
struct MoeCase {
  MoePath path;
  bool combine;
  bool graph;
  int tokens;
  std::string name() const { return std::string(graph ? "graph/T=" : "T=") + std::to_string(tokens); }
  std::string rowName() const {
    return std::string("moe/") + moeImpl(path, combine) + "/" + (graph ? "graph/" : "") + "T=" + std::to_string(tokens);
  }
};

/// Every alltoallv row, in order (NCCL's alltoall is uniform only; the host-count path cannot be captured).
inline std::vector<Case> cases() {
  std::vector<Case> out;
  for (int64_t bytes : sizes()) {
    for (Impl impl : {Impl::kPeerlabPush, Impl::kPeerlabTwoPhase, Impl::kPeerlabPull, Impl::kNcclAlltoAll,
                      Impl::kNcclDevice, Impl::kNcclHostCounts}) {
      for (const char* pattern : {"uniform", "skewed"}) {
        if (impl == Impl::kNcclAlltoAll && std::string(pattern) != "uniform") continue;
        for (bool graph : {false, true}) {
          if (graph && impl == Impl::kNcclHostCounts) continue;
          out.push_back({impl, pattern, graph, bytes});
        }
      }
    }
  }
  return out;
}

/// Every MoE row, in order (combine is bf16 in both payloads: no fp8 combine; the NCCL path cannot be captured).
inline std::vector<MoeCase> moeCases() {
  std::vector<MoeCase> out;
  for (int tokens : moeTokens()) {
    for (MoePath path : {MoePath::kPeerlab, MoePath::kPeerlabTwoPhase, MoePath::kNccl, MoePath::kPeerlabLowLatency,
                         MoePath::kPeerlabLowLatencyFp8}) {
      for (bool combine : {false, true}) {
        if (combine && path == MoePath::kPeerlabLowLatencyFp8) continue;
        for (bool graph : {false, true}) {
          if (graph && path == MoePath::kNccl) continue;
          out.push_back({path, combine, graph, tokens});
        }
      }
    }
  }
  return out;
}

/// Calls of a row: warm-up calls, calls per timed sample, samples. The same on every rank (multi-rank rule), more for
/// small sizes; knob batch overrides the calls per sample.
struct Calls {
  int warmup;
  int batch;
  int samples;
};
inline Calls callsFor(int64_t bytes) {
  return bytes <= (1 << 20) ? Calls{20, 20, 25} : bytes <= (64 << 20) ? Calls{5, 10, 12} : Calls{3, 10, 8};
}
inline Calls moeCallsFor(int tokens) {
  return tokens >= 1024 ? Calls{3, 2, 8} : Calls{10, 10, 20};
}

/// Knobs (bench/common/plan.h) the benchmark declares.
inline constexpr const char* kBatchKnob = "batch";

}  // namespace peerlab::alltoallv_suite
