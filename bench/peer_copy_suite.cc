// The peer_copy suite (bench/peer_copy_bench.cu) as qualify and bench run it.
// Rows: BM_PeerEnable/{first,repeat}/0<->1, BM_PeerCopy/cuda_memcpy_peer_noP2P/uni/0->1/bytes:N,
// BM_PeerCopy/{ce,sm_pull,sm_push,staged}/{uni,bidir}/{a->b,a<->b}/bytes:N (4 KiB .. 1 GiB by 4),
// BM_PeerLatency/flag/a<->b, BM_PeerLatency/pointer_chase/a->b. Google Benchmark appends "/iterations:1/manual_time",
// so a size is anchored with a trailing "/", never "$".
#include <algorithm>
#include <cmath>
#include <set>

#include "harness/qualify/cost_model.h"
#include "harness/qualify/plan.h"
#include "harness/qualify/suites.h"

namespace peerlab::qualify {
namespace {

using namespace cost;

std::string filter(Level level, const std::vector<std::pair<int, int>>& pairs, bool all) {
  const std::string pair = pairRegex(pairs, all);
  // Quick: one copy-engine spot check per ordered pair at 1 GiB, where the link reaches its rate (256 MiB is ~2% short
  // of it, too close to the expected figure for a verdict).
  if (level == Level::kQuick) return "^BM_PeerCopy/ce/uni/" + pair + "/bytes:1073741824/";
  if (level == Level::kFull && all) return "";
  const std::string anchors = "BM_PeerEnable/|BM_PeerCopy/cuda_memcpy_peer_noP2P/|BM_PeerLatency/[a-z_]+/" + pair + "/";
  if (level == Level::kFull) return anchors + "|BM_PeerCopy/[a-z_]+/(uni|bidir)/" + pair + "/";
  // Standard: every SM/CE path at 1 GiB, where the link reaches its rate and nvbandwidth's figures are comparable (the
  // bandwidth rules take each pair's best at >= 64 MiB; smaller sizes feed no check), the host-staged path at 256 MiB.
  return anchors + "|BM_PeerCopy/(ce|sm_pull|sm_push)/(uni|bidir)/" + pair +
         "/bytes:1073741824/|BM_PeerCopy/staged/uni/" + pair + "/bytes:268435456/";
}

// bench/peer_copy_bench.cu: batchFor and samplesFor; one verified warm-up batch before the samples.
double peerCopyOps(double bytes, bool slow) {
  const double batch = std::clamp(std::floor((slow ? 16 : 64) * kMiB / bytes), 1.0, slow ? 16.0 : 64.0);
  const double samples = bytes >= 1024 * kMiB ? 5 : bytes >= 256 * kMiB ? (slow ? 5 : 10) : (slow ? 10 : 25);
  return batch * (samples + 1);
}

JobEstimate estimate(const BenchJob&, const Plan& plan) {
  const report::PlanTopology& t = plan.topology;
  const auto& pairs = plan.options.pairs;
  const Level level = plan.options.level;
  std::set<int> gpus;
  std::set<std::pair<int, int>> unordered;
  for (const auto& [s, d] : pairs) {
    gpus.insert(s);
    gpus.insert(d);
    unordered.insert({std::min(s, d), std::max(s, d)});
  }
  const double g = static_cast<double>(std::max<size_t>(gpus.size(), 2));
  const double fixed = 0.004 + 0.005 * g;
  Tally tally;
  if (level == Level::kQuick) {
    for (const auto& [s, d] : pairs)
      tally.add(1, fixed, seconds(1024 * kMiB, peerCopyOps(1024 * kMiB, false), pairRate(t, s, d)));
    return fromTally(kProcessStartS + kContextS * g, tally);
  }
  const bool full = level == Level::kFull;
  // Anchors: peer enable (first and repeat) and the driver-staged copy without P2P, on 0<->1.
  tally.add(2, fixed);
  tally.add(1, fixed, seconds(256 * kMiB, peerCopyOps(256 * kMiB, true), std::min(hostRate(t, 0), hostRate(t, 1)) / 2));
  const std::vector<double> sizes = full ? sizesBy4(4096, 1024 * kMiB) : std::vector<double>{1024 * kMiB};
  const double copiers = 3;  // copy engine, SM pull, SM push
  for (const auto& [s, d] : pairs) {
    const double staged = std::min(hostRate(t, s), hostRate(t, d)) / 2;
    for (double b : sizes)
      tally.add(copiers, fixed, seconds(b, peerCopyOps(b, false), pairRate(t, s, d)));
    if (full) {
      for (double b : sizes)
        tally.add(1, fixed, seconds(b, peerCopyOps(b, true), staged));
    } else {
      tally.add(1, fixed, seconds(256 * kMiB, peerCopyOps(256 * kMiB, true), staged));
    }
    tally.add(4, fixed);  // pointer-chase latencies
  }
  for (const auto& [a, b] : unordered) {
    // Both directions at once: each direction at its own rate, the slower one paces the case.
    const double rate = std::min(pairRate(t, a, b), pairRate(t, b, a));
    for (double bytes : sizes)
      tally.add(copiers + (full ? 1 : 0), fixed, seconds(bytes, peerCopyOps(bytes, false), rate));
    tally.add(2, fixed);  // flag latencies
  }
  return fromTally(kProcessStartS + kContextS * g, tally);
}

}  // namespace

SuiteSpec peerCopySuite() {
  SuiteSpec s;
  s.name = "peer_copy";
  s.binary = "peer_copy_bench";
  s.shape = JobShape::kWholeMachine;
  s.min_gpus = 2;
  s.order = 10;
  s.result_suites = {"peer_enable", "peer_copy", "peer_latency"};
  s.rules = {"peer_copy_ce_uni", "peer_copy_ce_bidir", "peer_copy_sm_uni", "peer_copy_sm_bidir", "peer_latency"};
  s.levels = {Level::kQuick, Level::kStandard, Level::kFull};
  s.filter = filter;
  s.deadline_s[0] = 60;
  s.deadline_s[1] = 240;
  s.deadline_s[2] = 1800;
  s.estimate = estimate;
  s.description =
      "peer enable cost, peer copies (copy engine, SM pull/push, host-staged; one way and both ways) and peer latency, "
      "every ordered pair (quick: a copy-engine spot check per pair)";
  return s;
}

}  // namespace peerlab::qualify
