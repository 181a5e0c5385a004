#pragma once
/// The host_copy benchmark's rows, shared by the benchmark (host_copy_bench.cu) and its suite spec
/// (host_copy_suite.cc): the kinds of row it registers, in order, their sizes and batches, and their case keys. A
/// row's case key is its run-file impl and name plus the NUMA node of its host memory for the per-GPU copies
/// ("peerlab.ce/h2d/numa:local"), so that a plan can run a GPU's own node alone.

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace peerlab::host_copy_suite {

inline constexpr int64_t kMiB = int64_t{1} << 20;
inline constexpr int64_t kMaxBytes = 256 * kMiB;

enum class Impl { kPlain, kCe, kSm, kPageable };

inline const char* implName(Impl i) {
  switch (i) {
    case Impl::kPlain:
      return "cuda.memcpy_async";
    case Impl::kCe:
      return "peerlab.ce";
    case Impl::kSm:
      return "peerlab.sm";
    case Impl::kPageable:
      return "cuda.pageable";
  }
  return "?";
}

/// One kind of copy row.
struct Kind {
  Impl impl = Impl::kCe;
  std::string name;  ///< h2d, d2h, bidir, all_h2d, all_d2h
  bool remote = false;
  int64_t bytes = 0;
};

/// Sizes of the copy rows: 1 MiB, 16 MiB and 256 MiB.
inline std::vector<int64_t> sizes() {
  return {kMiB, 16 * kMiB, kMaxBytes};
}

/// The per-GPU kinds, in order: per size the plain loop, then the copy engine on the GPU's own node and on another
/// (h2d, d2h, both at once), then SM and pageable copies on the GPU's node.
inline std::vector<Kind> gpuKinds() {
  std::vector<Kind> out;
  for (int64_t bytes : sizes()) {
    // The plain loop first, so that the peerlab.ce row after it can report vs_plain.
    for (const char* name : {"h2d", "d2h", "bidir"}) {
      out.push_back({Impl::kPlain, name, false, bytes});
      out.push_back({Impl::kCe, name, false, bytes});
      out.push_back({Impl::kCe, name, true, bytes});
    }
    for (const char* name : {"h2d", "d2h"}) {
      out.push_back({Impl::kSm, name, false, bytes});
      out.push_back({Impl::kPageable, name, false, bytes});
    }
  }
  return out;
}

/// The every-GPU-at-once kinds, in order (after the per-GPU rows).
inline std::vector<Kind> allKinds() {
  std::vector<Kind> out;
  for (int64_t bytes : sizes()) {
    for (const char* name : {"all_h2d", "all_d2h"}) {
      out.push_back({Impl::kPlain, name, false, bytes});
      out.push_back({Impl::kCe, name, false, bytes});
    }
  }
  return out;
}

/// Copies per timed batch (pageable: one) and the samples asked for (peerlab's and the plain loop's stop after 3
/// quiet samples, and go on to 4x while the spread is wide).
inline int64_t batchFor(Impl impl, int64_t bytes) {
  if (impl == Impl::kPageable) return 1;
  return std::clamp<int64_t>((int64_t{1} << 30) / bytes, 1, 64);
}
inline int samplesFor(Impl impl, int64_t bytes) {
  if (impl == Impl::kPageable) return 3;
  return bytes >= kMaxBytes ? 7 : 15;
}

/// The case key of a kind: "peerlab.ce/h2d/numa:local", "cuda.memcpy_async/all_h2d".
inline std::string caseName(const Kind& k, bool per_gpu) {
  return per_gpu ? k.name + (k.remote ? "/numa:remote" : "/numa:local") : k.name;
}

/// "BM_HostCopy/peerlab.ce/h2d/gpu:0/numa:local/bytes:268435456", "BM_HostCopy/peerlab.ce/all_h2d/bytes:..."
inline std::string rowName(const Kind& k, int gpu) {
  std::string name = std::string("BM_HostCopy/") + implName(k.impl) + "/" + k.name;
  if (gpu >= 0) name += "/gpu:" + std::to_string(gpu) + (k.remote ? "/numa:remote" : "/numa:local");
  return name + "/bytes:" + std::to_string(k.bytes);
}

/// The host latency and the device-local copy, per GPU.
inline constexpr const char* kLatencyImpl = "peerlab.sm";
inline constexpr const char* kLatencyName = "latency";
inline constexpr const char* kLocalImpl = "peerlab.ce";
inline constexpr const char* kLocalName = "device_local";
inline std::string latencyRowName(int gpu) {
  return "BM_HostLatency/peerlab.sm/latency/gpu:" + std::to_string(gpu) + "/numa:local";
}
inline std::string localRowName(int gpu) {
  return "BM_DeviceLocal/peerlab.ce/device_local/gpu:" + std::to_string(gpu) + "/bytes:" + std::to_string(kMaxBytes);
}

}  // namespace peerlab::host_copy_suite
