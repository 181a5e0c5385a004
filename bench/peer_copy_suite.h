#pragma once
/// The peer_copy benchmark's rows, shared by the benchmark (peer_copy_bench.cu) and its suite spec
/// (peer_copy_suite.cc): the copy sizes, the batch and sample count of every copy row, the names of its cases and
/// its knobs.

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace peerlab::peer_copy_suite {

inline constexpr int64_t kMiB = int64_t{1} << 20;
inline constexpr int64_t kMinBytes = int64_t{4} << 10;
inline constexpr int64_t kMaxBytes = int64_t{1} << 30;
/// The driver-staged anchor (cudaMemcpyPeerAsync with peer access off) copies this much, on 0->1.
inline constexpr int64_t kAnchorBytes = 256 * kMiB;

/// Knobs (bench/common/plan.h) the benchmark declares.
inline constexpr const char* kSmCopyKnob = "sm_copy";
inline constexpr const char* kSmCopySweepKnob = "sm_copy_sweep";
inline constexpr const char* kChaseSmLoadsKnob = "chase_sm_loads";
inline constexpr const char* kChaseInRoundsKnob = "chase_in_rounds";

/// The copy paths: the run file's impl and the row name's path.
struct CopyCase {
  const char* impl;
  const char* path;
  bool staged;
};
inline constexpr CopyCase kCopies[] = {{"peerlab.ce", "ce", false},
                                       {"peerlab.sm_pull", "sm_pull", false},
                                       {"peerlab.sm_push", "sm_push", false},
                                       {"peerlab.staged", "staged", true}};
inline constexpr const char* kAnchorImpl = "cuda.memcpy_peer_noP2P";
inline constexpr const char* kEnableImpl = "peerlab.enable";

/// The latencies: flags (one per unordered pair, name "one_way"), pointer chases (one per ordered pair, name
/// "dependent_load"; pointer_chase_sms walks on every SM in turn).
struct LatencyCase {
  const char* impl;
  const char* label;
};
inline constexpr LatencyCase kFlags[] = {{"peerlab.flag", "flag"}, {"peerlab.flag_acq_rel", "flag_acq_rel"}};
inline constexpr LatencyCase kChases[] = {{"peerlab.pointer_chase", "pointer_chase"},
                                          {"peerlab.pointer_chase_random", "pointer_chase_random"},
                                          {"peerlab.pointer_chase_ld", "pointer_chase_ld"},
                                          {"peerlab.pointer_chase_sms", "pointer_chase_sms"}};

/// Copy sizes: 4 KiB .. 1 GiB by 4.
inline std::vector<int64_t> sizes() {
  std::vector<int64_t> out;
  for (int64_t b = kMinBytes; b <= kMaxBytes; b *= 4)
    out.push_back(b);
  return out;
}

/// Copies per timed batch. A slow copy (host-staged, or the driver's anchor) batches 16 MiB, a fast one 64 MiB;
/// host-staged batches at most 16 copies, the others 64.
inline int64_t batchFor(int64_t bytes, bool slow, bool staged) {
  return std::clamp<int64_t>((slow ? 16 : 64) * kMiB / bytes, 1, staged ? 16 : 64);
}
/// Timed samples (a verified warm-up batch runs first).
inline int samplesFor(int64_t bytes, bool slow) {
  if (bytes >= kMaxBytes) return 5;
  if (bytes >= 256 * kMiB) return slow ? 5 : 10;
  return slow ? 10 : 25;
}

/// "0->1", "0<->1"
inline std::string pairName(int a, int b, bool both) {
  return std::to_string(a) + (both ? "<->" : "->") + std::to_string(b);
}

}  // namespace peerlab::peer_copy_suite
