#pragma once
/// The zcopy benchmark's rows, shared by the benchmark (zcopy_bench.cu) and its suite spec (zcopy_suite.cc): the
/// cases it registers, in order, their sizes and how many messages each sample moves. The spec plans and estimates
/// from these, the benchmark runs them: one list.

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace peerlab::zcopy_suite {

inline constexpr int64_t kLatencyMax = int64_t{64} << 10;  ///< up to here a row is a ping-pong
inline constexpr int64_t kMaxBytes = int64_t{1} << 30;
/// The size every pair's rows are checked at (the rules' bandwidth size) and a serial sample copies.
inline constexpr int64_t kSpotBytes = int64_t{256} << 20;

/// Knobs (bench/common/plan.h) the benchmark declares.
inline constexpr const char* kHandleKnob = "handle";
inline constexpr const char* kVariantsKnob = "variants";
inline constexpr const char* kProgrammaticKnob = "programmatic";
inline constexpr const char* kKernelThreadsKnob = "kernel_threads";

enum class Impl { kGet = 0, kPut = 1, kSm = 2, kNccl = 3, kNcclGraph = 4 };
enum class Mode { kEager, kGraph, kKernel };
// kDefault: eager and graph bodies through a MemOpBatch, get/put graphs with memory-operation nodes.
// kCalls: every call straight to the stream (eager, or the graph's body). kGraphKernels: get/put graphs with
// one-thread sync kernels, calls straight to the stream.
enum class Variant { kDefault, kCalls, kGraphKernels };

/// One case at one size.
struct Spec {
  Impl impl = Impl::kGet;
  Mode mode = Mode::kEager;
  Variant variant = Variant::kDefault;
  int64_t bytes = 0;
  bool pingpong() const { return bytes <= kLatencyMax; }
  bool nccl() const { return impl == Impl::kNccl || impl == Impl::kNcclGraph; }
  bool batched() const { return variant == Variant::kDefault; }
};

inline const char* implName(Impl i) {
  switch (i) {
    case Impl::kGet:
      return "peerlab.get";
    case Impl::kPut:
      return "peerlab.put";
    case Impl::kSm:
      return "peerlab.sm_signal";
    case Impl::kNccl:
      return "nccl.sendrecv";
    case Impl::kNcclGraph:
      return "nccl.sendrecv_graph";
  }
  return "unknown";
}

/// The row's name in the run file ("uni", "graph/uni", "kernel/uni", ...).
inline std::string recordName(const Spec& s) {
  if (s.nccl()) return "uni";
  switch (s.mode) {
    case Mode::kEager:
      return s.variant == Variant::kCalls ? "calls/uni" : "uni";
    case Mode::kGraph:
      return s.variant == Variant::kCalls          ? "graph-calls/uni"
             : s.variant == Variant::kGraphKernels ? "graph-kernels/uni"
                                                   : "graph/uni";
    case Mode::kKernel:
      return "kernel/uni";
  }
  return "unknown";
}

/// Latency: 8 B .. 64 KiB by 8; bandwidth: 1 MiB .. 1 GiB by 4, and 128 MiB.
inline std::vector<int64_t> sizes() {
  std::vector<int64_t> out = {8, 64, 512, 4096, 32 * 1024, kLatencyMax};
  for (int64_t b = int64_t{1} << 20; b <= kMaxBytes; b *= 4) {
    out.push_back(b);
    if (b == (int64_t{64} << 20)) out.push_back(int64_t{128} << 20);
  }
  return out;
}

/// Every case the benchmark registers for a pair, in order: per size get, put and sm_signal (eager and graph;
/// sm_signal's persistent kernel at latency sizes; the comparison variants where asked for), then NCCL's eager and
/// graph send/recv.
inline std::vector<Spec> specs(bool calls, bool graph_kernels) {
  std::vector<Spec> out;
  for (int64_t bytes : sizes()) {
    const bool latency = bytes <= kLatencyMax;
    for (Impl i : {Impl::kGet, Impl::kPut, Impl::kSm}) {
      out.push_back({i, Mode::kEager, Variant::kDefault, bytes});
      out.push_back({i, Mode::kGraph, Variant::kDefault, bytes});
      if (i == Impl::kSm && latency) out.push_back({i, Mode::kKernel, Variant::kDefault, bytes});
      if (latency && calls) {
        out.push_back({i, Mode::kEager, Variant::kCalls, bytes});
        out.push_back({i, Mode::kGraph, Variant::kCalls, bytes});
      }
      if (latency && graph_kernels && i != Impl::kSm) out.push_back({i, Mode::kGraph, Variant::kGraphKernels, bytes});
    }
    out.push_back({Impl::kNccl, Mode::kEager, Variant::kDefault, bytes});
    out.push_back({Impl::kNcclGraph, Mode::kGraph, Variant::kDefault, bytes});
  }
  return out;
}

/// Units (round trips or one-way messages) per sample, and samples per row (a warm-up sample comes first): large
/// messages take fewer samples of fewer messages.
inline int unitsPerSample(const Spec& s) {
  if (s.pingpong()) return s.mode == Mode::kKernel ? 200 : 20;
  return static_cast<int>(std::clamp<int64_t>((int64_t{256} << 20) / s.bytes, 2, 32));
}
inline int sampleCount(const Spec& s) {
  return s.pingpong() ? 25 : s.bytes >= (int64_t{256} << 20) ? 5 : 10;
}

/// "BM_Zcopy/peerlab.put/uni/0->1/bytes:8"
inline std::string rowName(const Spec& s, int src, int dst) {
  return std::string("BM_Zcopy/") + implName(s.impl) + "/" + recordName(s) + "/" + std::to_string(src) + "->" +
         std::to_string(dst) + "/bytes:" + std::to_string(s.bytes);
}

}  // namespace peerlab::zcopy_suite
