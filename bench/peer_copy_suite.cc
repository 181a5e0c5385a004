// The peer_copy suite (bench/peer_copy_bench.cu) as qualify and bench run it: one process over every ordered pair;
// where the schedule lets disjoint pairs run at once (harness/qualify/schedule.h), their copies and pointer chases run
// in rounds, after a serial sample of one pair they are checked against. Rows: peer enable (first, repeat) on 0<->1,
// the driver-staged anchor on 0->1, copies (copy engine, SM pull/push, host-staged; one way and both ways; 4 KiB ..
// 1 GiB by 4), flag latencies per unordered pair and pointer chases per ordered pair (bench/peer_copy_suite.h).
#include "bench/peer_copy_suite.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "harness/qualify/cost_model.h"
#include "harness/qualify/schedule.h"
#include "harness/qualify/suites.h"

namespace peerlab::qualify {
namespace {

using namespace cost;
namespace pc = peer_copy_suite;

// Calibrated on 2x and 4x H100 through NVSwitch (reports/qualify/2026-11-28-h100-x4-nvswitch-c6c3604-*): the process's
// start grows ~0.1 s per GPU (one context each), a copy case costs ~30 ms besides its bytes (pattern, poison, two
// checks), a latency case ~70 ms (the flags ping-pong 10,000 times), and the chase on every SM in turn ~0.5 s walking
// half the chain (4,096 loads, 132 SMs; measured on 4x H200), ~0.1 s with the standard level's 512 loads per SM.
constexpr double kCopyFixedS = 0.03;
constexpr double kLatencyS = 0.07;
constexpr double kEverySmS = 0.5;
constexpr double kEverySmShortS = 0.1;
// The loads per SM the chase on every SM times below full (the SMs' spread stays visible at an eighth of the cost).
constexpr const char* kStandardSmLoads = "512";

// The size quick and standard copy a pair with: 1 GiB over NVLink, where the link reaches its rate (256 MiB is ~2%
// short of it on NV18, too close to the expected figure for a verdict); 256 MiB where the plan knows no NVLink of the
// pair's own (PCIe, or links the topology does not give), where it already moves at the rate and costs a quarter of
// the time at PCIe rates.
int64_t spotBytes(const report::PlanTopology& t, int s, int d) {
  return pairHasOwnLinks(t, s, d) ? pc::kMaxBytes : 256 * pc::kMiB;
}

std::vector<std::string> copyCases(bool quick) {
  if (quick) return {"peerlab.ce/uni"};
  std::vector<std::string> out;
  for (const char* impl : {"peerlab.ce", "peerlab.sm_pull", "peerlab.sm_push"})
    for (const char* name : {"uni", "bidir"})
      out.push_back(std::string(impl) + "/" + name);
  return out;
}

// The rows a level runs on `pairs` (`all`: every pair of the machine). Quick: one copy-engine spot check per ordered
// pair. Standard: the anchors (peer enable, the driver-staged copy, every latency) and every SM/CE path at each pair's
// spot size (the bandwidth rules take each pair's best at >= 64 MiB; smaller sizes feed no check); the host-staged
// path (no rule judges it; a pair at a time through host memory, it cost 64 of the 16-GPU plan's seconds) stays in
// full. Full: every row of the pairs.
std::vector<report::RowSelection> rowsFor(Level level, const std::vector<std::pair<int, int>>& pairs, bool all,
                                          const report::PlanTopology& t) {
  using report::RowSelection;
  const std::vector<std::string> anchors = {std::string(pc::kEnableImpl) + "/*", std::string(pc::kAnchorImpl) + "/uni"};
  if (level == Level::kFull) {
    if (all) return {};
    return {RowSelection{anchors, {}, {}, {}}, RowSelection{{}, {}, pairs, {}}};
  }
  std::vector<RowSelection> out;
  if (level != Level::kQuick) {
    out.push_back({anchors, {}, {}, {}});
    std::vector<std::string> latencies;
    for (const pc::LatencyCase& c : pc::kFlags)
      latencies.push_back(std::string(c.impl) + "/*");
    for (const pc::LatencyCase& c : pc::kChases)
      latencies.push_back(std::string(c.impl) + "/*");
    out.push_back({latencies, {}, all ? std::vector<std::pair<int, int>>{} : pairs, {}});
  }
  // The pairs by the size they are copied with.
  std::vector<std::pair<int, int>> gib, mib;
  for (const auto& [s, d] : pairs)
    (spotBytes(t, s, d) == pc::kMaxBytes ? gib : mib).push_back({s, d});
  for (const auto& [set, bytes] : {std::pair{&gib, pc::kMaxBytes}, std::pair{&mib, 256 * pc::kMiB}}) {
    if (set->empty()) continue;
    const bool every = all && set->size() == pairs.size();
    out.push_back({copyCases(level == Level::kQuick), {bytes}, every ? std::vector<std::pair<int, int>>{} : *set, {}});
  }
  return out;
}

SuiteInfo describe() {
  SuiteInfo s;
  s.name = "peer_copy";
  s.binary = "peer_copy_bench";
  s.min_gpus = 2;
  s.order = 10;
  s.result_suites = {"peer_enable", "peer_copy", "peer_latency"};
  s.result_facts = {
      {.suite = "peer_copy",
       .bytes_convention = "the bytes copied from the source GPU to the destination; bidir: both directions added",
       .latency_at_smallest = true}};
  s.rules = {"peer_copy_ce_uni", "peer_copy_ce_bidir", "peer_copy_sm_uni", "peer_copy_sm_bidir", "peer_latency"};
  s.levels = {Level::kQuick, Level::kStandard, Level::kFull};
  s.deadline_s[0] = 60;
  s.deadline_s[1] = 240;
  s.deadline_s[2] = 1800;
  s.description =
      "peer enable cost, peer copies (copy engine, SM pull/push, host-staged; one way and both ways) and peer latency, "
      "every ordered pair (quick: a copy-engine spot check per pair)";
  return s;
}

class PeerCopySuite final : public Suite {
 public:
  PeerCopySuite() : Suite(describe()) {}

  // One process over every pair. Where the schedule runs pairs at once, the copy rows (and pointer chases) of a
  // round's pairs run together, after a serial sample of the first pair of the first round of several they are
  // checked against.
  std::vector<BenchJob> plan(const SuiteRequest& req) const override {
    const report::PlanTopology& t = *req.topology;
    BenchJob j;
    j.suite = name();
    j.binary = info().binary;
    j.work.suite = name();
    j.work.rows = rowsFor(req.level, req.pairs, req.all_pairs, t);
    j.work.rules = info().rules;
    j.deadline_s =
        info().deadline_s[static_cast<int>(req.level)] * std::max(1.0, static_cast<double>(req.pairs.size()) / 12.0);
    j.work.deadline_s = j.deadline_s;
    j.budget_s = j.deadline_s;
    j.label = name() + " (" + std::to_string(req.pairs.size()) + " pairs)";
    if (req.level == Level::kStandard) j.work.knobs[pc::kChaseSmLoadsKnob] = kStandardSmLoads;
    // A spot check takes the samples of the largest size, whatever its pair's spot size.
    if (req.level == Level::kQuick) j.work.samples = pc::samplesFor(pc::kMaxBytes, false);
    // Both ways at once (bidir, below quick) loads a path in both directions: the schedule keeps such pairs apart.
    const bool both_ways = req.level != Level::kQuick;
    const PairSchedule schedule =
        req.pairs.empty() ? PairSchedule{} : schedulePairs(t, req.pairs, req.concurrent, both_ways);
    j.schedule_basis = schedule.basis;
    if (!schedule.concurrent) return {j};
    j.work.rounds = schedule.rounds;
    // The serial sample: each sample pair alone, on the one-way copies the level runs, at the pair's spot size.
    BenchJob guard = j;
    guard.work.rounds.clear();
    guard.work.rows.clear();
    guard.work.knobs.clear();
    const std::vector<std::string> uni =
        req.level == Level::kQuick
            ? copyCases(true)
            : std::vector<std::string>{"peerlab.ce/uni", "peerlab.sm_pull/uni", "peerlab.sm_push/uni"};
    for (const auto& p : schedule.samples) {
      guard.work.rounds.push_back({p});
      guard.work.rows.push_back({uni, {spotBytes(t, p.first, p.second)}, {p}, {}});
    }
    guard.deadline_s =
        info().deadline_s[static_cast<int>(req.level)] / 4 * static_cast<double>(schedule.samples.size());
    guard.work.deadline_s = guard.deadline_s;
    guard.budget_s = guard.deadline_s;
    guard.schedule_basis.clear();
    const auto first = schedule.samples.front();
    guard.label = name() + " serial sample " +
                  (schedule.samples.size() == 1 ? std::to_string(first.first) + "->" + std::to_string(first.second)
                                                : "(" + std::to_string(schedule.samples.size()) + " pairs)");
    guard.guard_for = j.label;
    return {guard, j};
  }

  std::vector<SuiteRow> rows(const BenchJob& job, const report::PlanTopology& t) const override {
    std::vector<SuiteRow> out;
    auto add = [&](report::RowKey key, std::string gbench, int group = -1, int round = -1) {
      out.push_back({std::move(key), std::move(gbench), group, round});
    };
    auto pairKey = [](const char* impl, const std::string& name, int64_t bytes, int a, int b, bool both) {
      report::RowKey k;
      k.impl = impl;
      k.name = name;
      k.bytes = bytes;
      k.src = a;
      k.dst = b;
      k.both_ways = both;
      return k;
    };
    for (const char* which : {"first", "repeat"})
      add(pairKey(pc::kEnableImpl, which, -1, 0, 1, true), std::string("BM_PeerEnable/") + which + "/0<->1");
    add(pairKey(pc::kAnchorImpl, "uni", pc::kAnchorBytes, 0, 1, false),
        "BM_PeerCopy/cuda_memcpy_peer_noP2P/uni/0->1/bytes:" + std::to_string(pc::kAnchorBytes));
    auto copyName = [](const pc::CopyCase& c, bool bidir, int a, int b, int64_t bytes) {
      return std::string("BM_PeerCopy/") + c.path + "/" + (bidir ? "bidir" : "uni") + "/" + pc::pairName(a, b, bidir) +
             "/bytes:" + std::to_string(bytes);
    };
    const auto& rounds = job.work.rounds;
    int group = 0;
    for (size_t r = 0; r < rounds.size(); ++r) {
      for (const pc::CopyCase& c : pc::kCopies) {
        for (bool bidir : {false, true}) {
          for (int64_t bytes : pc::sizes()) {
            // Host-staged copies are driven from one thread: a pair at a time.
            for (const auto& [a, b] : rounds[r]) {
              if (bidir && a > b) continue;
              add(pairKey(c.impl, bidir ? "bidir" : "uni", bytes, a, b, bidir), copyName(c, bidir, a, b, bytes),
                  c.staged ? -1 : group, static_cast<int>(r));
            }
            ++group;
          }
        }
      }
    }
    // Without rounds: every ordered pair of the machine, one at a time.
    std::vector<int> gpus;
    for (const report::PlanGpu& g : t.gpus)
      gpus.push_back(g.index);
    std::sort(gpus.begin(), gpus.end());
    if (rounds.empty()) {
      for (const pc::CopyCase& c : pc::kCopies) {
        for (bool bidir : {false, true}) {
          for (int a : gpus) {
            for (int b : gpus) {
              if (a == b || (bidir && b < a)) continue;
              for (int64_t bytes : pc::sizes())
                add(pairKey(c.impl, bidir ? "bidir" : "uni", bytes, a, b, bidir), copyName(c, bidir, a, b, bytes));
            }
          }
        }
      }
    }
    // Flags per unordered pair; pointer chases per ordered pair, in the rounds where the copies run in rounds (unless
    // knob chase_in_rounds=0).
    std::vector<std::pair<int, int>> ordered;
    for (const auto& round : rounds)
      ordered.insert(ordered.end(), round.begin(), round.end());
    if (rounds.empty()) {
      for (int a : gpus)
        for (int b : gpus)
          if (a != b) ordered.emplace_back(a, b);
    }
    std::set<std::pair<int, int>> unordered;
    for (const auto& [a, b] : ordered)
      unordered.insert({std::min(a, b), std::max(a, b)});
    for (const pc::LatencyCase& c : pc::kFlags) {
      for (const auto& [a, b] : unordered)
        add(pairKey(c.impl, "one_way", -1, a, b, true),
            std::string("BM_PeerLatency/") + c.label + "/" + pc::pairName(a, b, true));
    }
    const bool chase_rounds = !rounds.empty() && job.work.knob(pc::kChaseInRoundsKnob) != "0";
    for (const pc::LatencyCase& c : pc::kChases) {
      if (chase_rounds) {
        for (size_t r = 0; r < rounds.size(); ++r) {
          for (const auto& [a, b] : rounds[r])
            add(pairKey(c.impl, "dependent_load", -1, a, b, false),
                std::string("BM_PeerLatency/") + c.label + "/" + pc::pairName(a, b, false), group, static_cast<int>(r));
          ++group;
        }
        continue;
      }
      for (const auto& [a, b] : ordered)
        add(pairKey(c.impl, "dependent_load", -1, a, b, false),
            std::string("BM_PeerLatency/") + c.label + "/" + pc::pairName(a, b, false));
    }
    return out;
  }

  JobEstimate estimate(const BenchJob& job, const report::PlanTopology& t) const override {
    const std::vector<SuiteRow> all = rows(job, t);
    const bool short_sms = !job.work.knob(pc::kChaseSmLoadsKnob).empty();
    const Tally tally = tallyRows(all, job.work, [&](const SuiteRow& row) {
      Tally x;
      const report::RowKey& k = row.key;
      if (k.impl == pc::kEnableImpl) {
        x.add(1, kCopyFixedS);
      } else if (k.name == "one_way" || k.name == "dependent_load") {
        x.add(1, k.impl == std::string("peerlab.pointer_chase_sms") ? (short_sms ? kEverySmShortS : kEverySmS)
                                                                    : kLatencyS);
      } else {
        // A copy: at the pair's link rate, or through host memory (host-staged, the driver's anchor) at half the
        // slower host link.
        const bool staged = k.impl == std::string("peerlab.staged");
        const bool slow = staged || k.impl == pc::kAnchorImpl;
        const double b = static_cast<double>(k.bytes);
        const double samples = job.work.samples > 0 ? job.work.samples : pc::samplesFor(k.bytes, slow);
        const double ops = static_cast<double>(pc::batchFor(k.bytes, slow, staged)) * (samples + 1.0);
        const double rate = slow          ? std::min(hostRate(t, k.src), hostRate(t, k.dst)) / 2
                            : k.both_ways ? std::min(pairRate(t, k.src, k.dst), pairRate(t, k.dst, k.src))
                                          : pairRate(t, k.src, k.dst);
        x.add(1, kCopyFixedS, seconds(b, ops, rate));
      }
      return x;
    });
    // The benchmark sets up every GPU it sees (a context, streams, buffers), whatever pairs it copies.
    const double g = static_cast<double>(std::max<size_t>(t.gpus.size(), 2));
    return fromTally(kProcessStartS + 0.1 * g, tally);
  }

  // Earlier versions set the chase's loads per SM and its rounds by environment.
  report::BenchPlan legacyPlan(const BenchJob& job, const report::PlanTopology& t) const override {
    BenchJob named = job;
    if (const std::string loads = legacyEnv(job, "PEERLAB_CHASE_SM_LOADS"); !loads.empty())
      named.work.knobs[pc::kChaseSmLoadsKnob] = loads;
    if (!job.work.rounds.empty() && legacyEnv(job, "PEERLAB_CHASE_AT_ONCE") != "1")
      named.work.knobs[pc::kChaseInRoundsKnob] = "0";
    report::BenchPlan work = Suite::legacyPlan(named, t);
    work.knobs = named.work.knobs;
    return work;
  }
};

}  // namespace

std::unique_ptr<Suite> peerCopySuite() {
  return std::make_unique<PeerCopySuite>();
}

}  // namespace peerlab::qualify
