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
#include "harness/qualify/schedule.h"
#include "harness/qualify/suites.h"

namespace peerlab::qualify {
namespace {

using namespace cost;

constexpr const char* kChaseSmLoadsEnv = "PEERLAB_CHASE_SM_LOADS";
constexpr const char* kChaseAtOnceEnv = "PEERLAB_CHASE_AT_ONCE";

std::string filter(Level level, const std::vector<std::pair<int, int>>& pairs, bool all) {
  const std::string pair = pairRegex(pairs, all);
  // Quick: one copy-engine spot check per ordered pair at 1 GiB, where the link reaches its rate (256 MiB is ~2% short
  // of it, too close to the expected figure for a verdict).
  if (level == Level::kQuick) return "^BM_PeerCopy/ce/uni/" + pair + "/bytes:1073741824/";
  if (level == Level::kFull && all) return "";
  const std::string anchors = "BM_PeerEnable/|BM_PeerCopy/cuda_memcpy_peer_noP2P/|BM_PeerLatency/[a-z_]+/" + pair + "/";
  if (level == Level::kFull) return anchors + "|BM_PeerCopy/[a-z_]+/(uni|bidir)/" + pair + "/";
  // Standard: every SM/CE path at 1 GiB, where the link reaches its rate and nvbandwidth's figures are comparable (the
  // bandwidth rules take each pair's best at >= 64 MiB; smaller sizes feed no check). The host-staged path (no rule
  // judges it; a pair at a time through host memory, it cost 64 of the 16-GPU plan's seconds) stays in full.
  return anchors + "|BM_PeerCopy/(ce|sm_pull|sm_push)/(uni|bidir)/" + pair + "/bytes:1073741824/";
}

// bench/peer_copy_bench.cu: batchFor and samplesFor; one verified warm-up batch before the samples.
double peerCopyOps(double bytes, bool slow) {
  const double batch = std::clamp(std::floor((slow ? 16 : 64) * kMiB / bytes), 1.0, slow ? 16.0 : 64.0);
  const double samples = bytes >= 1024 * kMiB ? 5 : bytes >= 256 * kMiB ? (slow ? 5 : 10) : (slow ? 10 : 25);
  return batch * (samples + 1);
}

JobEstimate estimate(const BenchJob& job, const Plan& plan) {
  const report::PlanTopology& t = plan.topology;
  const auto& pairs = plan.options.pairs;
  if (!job.guard_for.empty()) {
    // A serial sample: three paths one way at 1 GiB on one pair.
    Tally x;
    const auto [s, d] = job.pairs.front();
    x.add(3, 0.03, seconds(1024 * kMiB, peerCopyOps(1024 * kMiB, false), pairRate(t, s, d)));
    return fromTally(kProcessStartS + 2 * kContextS, x);
  }
  // The copy rows of a round's pairs run at once: a round costs what its slowest pair does. Without rounds every
  // pair is a round of its own.
  std::vector<std::vector<std::pair<int, int>>> rounds = job.rounds;
  if (rounds.empty()) {
    for (const auto& p : pairs)
      rounds.push_back({p});
  }
  std::set<int> gpus;
  std::set<std::pair<int, int>> unordered;
  for (const auto& [s, d] : pairs) {
    gpus.insert(s);
    gpus.insert(d);
    unordered.insert({std::min(s, d), std::max(s, d)});
  }
  // Calibrated on 2x and 4x H100 through NVSwitch (reports/qualify/2026-11-28-h100-x4-nvswitch-c6c3604-*): the
  // process's start grows ~0.1 s per GPU (one context each), a copy case costs ~30 ms besides its bytes (pattern,
  // poison, two checks), a latency case ~70 ms (the flags ping-pong 10,000 times), and the chase on every SM in turn
  // ~0.5 s walking half the chain (4,096 loads, 132 SMs; measured on 4x H200), ~0.1 s with the standard level's 512
  // loads per SM.
  const double g = static_cast<double>(std::max<size_t>(gpus.size(), 2));
  const double start = kProcessStartS + 0.1 * g;
  const double fixed = 0.03;
  const double latency = 0.07;
  const Level level = plan.options.level;
  const bool full = level == Level::kFull;
  const double every_sm = jobEnv(job, kChaseSmLoadsEnv).empty() ? 0.5 : 0.1;
  const bool chases_at_once = jobEnv(job, kChaseAtOnceEnv) == "1" && !job.rounds.empty();
  const std::vector<double> sizes = full ? sizesBy4(4096, 1024 * kMiB) : std::vector<double>{1024 * kMiB};
  // The slowest pair of a round (both ways for bidir: only a < b of the round).
  auto slowest = [&](const std::vector<std::pair<int, int>>& round, bool bidir, double bytes) {
    double worst = 0;
    for (const auto& [s, d] : round) {
      if (bidir && s > d) continue;
      const double rate = bidir ? std::min(pairRate(t, s, d), pairRate(t, d, s)) : pairRate(t, s, d);
      worst = std::max(worst, seconds(bytes, peerCopyOps(bytes, false), rate));
    }
    return worst;
  };
  Tally tally;
  if (level == Level::kQuick) {
    for (const auto& round : rounds)
      tally.add(1, fixed, slowest(round, false, 1024 * kMiB));
    return fromTally(start, tally);
  }
  // Anchors: peer enable (first and repeat) and the driver-staged copy without P2P, on 0<->1.
  tally.add(2, fixed);
  tally.add(1, fixed, seconds(256 * kMiB, peerCopyOps(256 * kMiB, true), std::min(hostRate(t, 0), hostRate(t, 1)) / 2));
  const double copiers = 3;  // copy engine, SM pull, SM push
  for (const auto& round : rounds) {
    const bool any_bidir = std::any_of(round.begin(), round.end(), [](const auto& p) { return p.first < p.second; });
    for (double b : sizes) {
      tally.add(copiers, fixed, slowest(round, false, b));
      if (any_bidir) tally.add(copiers, fixed, slowest(round, true, b));
    }
  }
  for (const auto& [s, d] : pairs) {
    const double staged = std::min(hostRate(t, s), hostRate(t, d)) / 2;
    if (full) {
      for (double b : sizes)
        tally.add(1, fixed, seconds(b, peerCopyOps(b, true), staged));
    } else if (jobFilter(job).find("staged") != std::string::npos) {  // earlier code's standard level
      tally.add(1, fixed, seconds(256 * kMiB, peerCopyOps(256 * kMiB, true), staged));
    }
    if (!chases_at_once) {
      tally.add(3, latency);   // pointer-chase latencies on one SM
      tally.add(1, every_sm);  // and on every SM in turn
    }
  }
  // A round's pairs chase at once: a round costs what one pair does.
  if (chases_at_once) {
    for (size_t r = 0; r < rounds.size(); ++r) {
      tally.add(3, latency);
      tally.add(1, every_sm);
    }
  }
  for (const auto& [a, b] : unordered) {
    if (full) {
      const double rate = std::min(hostRate(t, a), hostRate(t, b)) / 2;
      for (double bytes : sizes)
        tally.add(1, fixed, seconds(bytes, peerCopyOps(bytes, true), rate));
    }
    tally.add(2, latency);  // flag latencies
  }
  return fromTally(start, tally);
}

// One process over every pair. Where pairs have NVLinks of their own, the copy rows of a round's pairs run at once
// (PEERLAB_PAIR_ROUNDS), after a serial sample of the first pair of the first round they are checked against.
std::vector<BenchJob> jobs(const SuiteSpec& spec, const SuiteRequest& req) {
  BenchJob j;
  j.suite = spec.name;
  j.binary = spec.binary;
  const std::string f = filter(req.level, req.pairs, req.all_pairs);
  if (!f.empty()) j.args = {"--benchmark_filter=" + f};
  j.deadline_s =
      spec.deadline_s[static_cast<int>(req.level)] * std::max(1.0, static_cast<double>(req.pairs.size()) / 12.0);
  j.budget_s = j.deadline_s;
  j.label = spec.name + " (" + std::to_string(req.pairs.size()) + " pairs)";
  // The chase on every SM times 512 loads per SM below full (the SMs' spread stays visible; half the chain costs
  // ~0.5 s a pair).
  if (req.level == Level::kStandard) j.env.push_back(std::string(kChaseSmLoadsEnv) + "=512");
  const PairSchedule schedule =
      req.topology && !req.pairs.empty() ? schedulePairs(*req.topology, req.pairs, req.concurrent) : PairSchedule{};
  j.schedule_basis = schedule.basis;
  if (!schedule.concurrent) return {j};
  j.rounds = schedule.rounds;
  j.pairs = req.pairs;
  j.env.push_back(pairRoundsEnv(schedule.rounds));
  // The pointer chases in the same rounds (one load in flight per pair: pairs that share no GPU do not contend).
  j.env.push_back(std::string(kChaseAtOnceEnv) + "=1");
  std::pair<int, int> first = schedule.rounds.front().front();
  for (const auto& round : schedule.rounds) {
    if (round.size() > 1) {
      first = round.front();
      break;
    }
  }
  BenchJob guard = j;
  guard.rounds = {{first}};
  guard.pairs = {first};
  guard.env = {pairRoundsEnv(guard.rounds)};
  guard.args = {"--benchmark_filter=^BM_PeerCopy/(ce|sm_pull|sm_push)/uni/" + std::to_string(first.first) + "->" +
                std::to_string(first.second) + "/bytes:1073741824/"};
  guard.deadline_s = spec.deadline_s[static_cast<int>(req.level)] / 4;
  guard.budget_s = guard.deadline_s;
  guard.schedule_basis.clear();
  guard.label = spec.name + " serial sample " + std::to_string(first.first) + "->" + std::to_string(first.second);
  guard.guard_for = j.label;
  return {guard, j};
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
  s.jobs = jobs;
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
