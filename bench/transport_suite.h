#pragma once
/// The transport benchmark's rows, shared by the benchmark (transport_bench.cu) and its suite spec
/// (transport_suite.cc): the cases it registers, in order, their sizes and how many transfers each sample moves.

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "reference/transport/transport.h"

namespace peerlab::transport_suite {

inline constexpr int64_t kLatencyMax = int64_t{64} << 10;
/// The size a serial sample writes (the rules' bandwidth size).
inline constexpr int64_t kSpotBytes = int64_t{256} << 20;

/// Knobs (bench/common/plan.h) the benchmark declares.
inline constexpr const char* kLibraryKnob = "library";
inline constexpr const char* kDescriptorBytesKnob = "nixl_descriptor_bytes";
inline constexpr const char* kBackendParamsKnob = "nixl_backend_params";
inline constexpr const char* kProgressThreadKnob = "nixl_progress_thread";

enum class Mode { kUni, kSpin, kYield, kProgress, kStream };

struct Spec {
  transport::Op op = transport::Op::kWrite;
  Mode mode = Mode::kUni;
  int64_t bytes = 0;
  bool pingpong() const { return mode == Mode::kUni && op == transport::Op::kWrite && bytes <= kLatencyMax; }
};

/// nixl.write / nixl.read, ucx.put / ucx.get.
inline std::string implName(transport::Op op, transport::Library library) {
  const bool nixl = library == transport::Library::kNixl;
  if (op == transport::Op::kWrite) return nixl ? "nixl.write" : "ucx.put";
  return nixl ? "nixl.read" : "ucx.get";
}

inline std::string recordName(const Spec& s) {
  switch (s.mode) {
    case Mode::kUni:
      return "uni";
    case Mode::kSpin:
      return "wait/spin/uni";
    case Mode::kYield:
      return "wait/yield/uni";
    case Mode::kProgress:
      return "wait/progress/uni";
    case Mode::kStream:
      return "wait/stream/uni";
  }
  return "uni";
}

/// Single transfers at zcopy_bench's sizes (8 B .. 64 KiB, 1 MiB .. 1 GiB by 4 and 128 MiB); the ways of waiting at
/// 8 B, 4 KiB, 64 KiB, 4 MiB and 64 MiB.
inline std::vector<int64_t> sizes() {
  std::vector<int64_t> out = {8, 64, 512, 4096, 32 * 1024, kLatencyMax};
  for (int64_t b = int64_t{1} << 20; b <= (int64_t{1} << 30); b *= 4) {
    out.push_back(b);
    if (b == (int64_t{64} << 20)) out.push_back(int64_t{128} << 20);
  }
  return out;
}
inline std::vector<int64_t> waitSizes() {
  return {8, 4096, kLatencyMax, int64_t{4} << 20, int64_t{64} << 20};
}

/// Every case the benchmark registers for a pair, in order: write and read at each size, then the waits.
inline std::vector<Spec> specs() {
  std::vector<Spec> out;
  for (int64_t bytes : sizes()) {
    out.push_back({transport::Op::kWrite, Mode::kUni, bytes});
    out.push_back({transport::Op::kRead, Mode::kUni, bytes});
  }
  for (int64_t bytes : waitSizes()) {
    for (Mode m : {Mode::kSpin, Mode::kYield, Mode::kProgress, Mode::kStream})
      out.push_back({transport::Op::kWrite, m, bytes});
  }
  return out;
}

/// Transfers per sample and samples per row (a warm-up sample comes first).
inline int unitsPerSample(const Spec& s) {
  if (s.pingpong()) return 20;
  if (s.bytes <= kLatencyMax) return 50;
  return static_cast<int>(std::clamp<int64_t>((int64_t{256} << 20) / s.bytes, 2, 32));
}
inline int sampleCount(const Spec& s) {
  return s.bytes <= kLatencyMax ? 25 : s.bytes >= (int64_t{256} << 20) ? 5 : 10;
}

/// "BM_Transport/nixl.write/uni/0->1/bytes:8"
inline std::string rowName(const Spec& s, transport::Library library, int src, int dst) {
  return "BM_Transport/" + implName(s.op, library) + "/" + recordName(s) + "/" + std::to_string(src) + "->" +
         std::to_string(dst) + "/bytes:" + std::to_string(s.bytes);
}

}  // namespace peerlab::transport_suite
