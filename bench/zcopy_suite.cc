// The zcopy suite (bench/zcopy_bench.cu) as qualify and bench run it: one process of a rank per GPU covering every
// ordered pair in rounds; the pairs of a round run each row at once where their paths share no link
// (harness/qualify/schedule.h), after a serial sample of one of them. Rows: bench/zcopy_suite.h.
#include "bench/zcopy_suite.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "harness/qualify/cost_model.h"
#include "harness/qualify/schedule.h"
#include "harness/qualify/suites.h"

namespace peerlab::qualify {
namespace {

using namespace cost;
namespace zs = zcopy_suite;

// Measured on 4x H200 and H100 (reports/qualify/2026-11-28-*): a pair's context and channels, and each rank's own
// device once (streams, gate, two 1 GiB data windows, the checker); an NCCL communicator per pair where NCCL's rows
// run; a row's fixed cost besides its bytes (pattern, poison, capture, exchange of outcomes).
constexpr double kRankSetupS = 0.2;
constexpr double kPairSetupS = 0.2;
constexpr double kRowFixedS = 0.025;

SuiteInfo describe() {
  SuiteInfo s;
  s.name = "zcopy";
  s.binary = "zcopy_bench";
  s.min_gpus = 2;
  s.order = 20;
  s.result_suites = {"zcopy"};
  s.result_facts = {
      {.suite = "zcopy", .bytes_convention = "the message bytes moved from one process's GPU to the other's"}};
  s.rules = {"zcopy_get", "zcopy_put", "zcopy_sm_signal_kernel", "zcopy_graph", "zcopy_eager"};
  // Per round (a round takes what one pair takes alone).
  s.deadline_s[0] = 20;
  s.deadline_s[1] = 40;
  s.deadline_s[2] = 420;
  s.description = "semaphore zero-copy get/put/sm_signal between two processes over CUDA IPC, with NCCL send/recv";
  return s;
}

// The plan's samples where it sets them, else the size's (bench/zcopy_bench.cu does the same).
double samples(const BenchJob& job, const zs::Spec& spec) {
  return job.work.samples > 0 ? job.work.samples : zs::sampleCount(spec);
}

class ZcopySuite final : public Suite {
 public:
  ZcopySuite() : Suite(describe()) {}

  std::vector<BenchJob> plan(const SuiteRequest& req) const override {
    if (req.pairs.empty()) return {};
    const PairSchedule schedule = schedulePairs(*req.topology, req.pairs, req.concurrent);
    // Below full: peerlab's rows at the sizes the rules judge; NCCL's send/recv rows stand beside them in the full
    // sweep.
    std::vector<report::RowSelection> rows;
    if (req.level != Level::kFull) rows = {{{"peerlab.*"}, {8, 65536, zs::kSpotBytes}, {}, {}}};
    // The serial sample: one put at the rules' size.
    const std::vector<report::RowSelection> guard = {{{"peerlab.put/uni"}, {zs::kSpotBytes}, {}, {}}};
    return guardedPairRounds(*this, info().binary, name(), schedule, std::move(rows), guard,
                             info().deadline_s[static_cast<int>(req.level)]);
  }

  std::vector<SuiteRow> rows(const BenchJob& job, const report::PlanTopology&) const override {
    const std::string variants = job.work.knob(zs::kVariantsKnob);
    const bool all = variants.find("all") != std::string::npos;
    const std::vector<zs::Spec> specs = zs::specs(all || variants.find("calls") != std::string::npos,
                                                  all || variants.find("graph-kernels") != std::string::npos);
    std::vector<SuiteRow> out;
    const auto& rounds = job.work.rounds;
    for (size_t r = 0; r < rounds.size(); ++r) {
      for (size_t g = 0; g < specs.size(); ++g) {
        for (const auto& [src, dst] : rounds[r]) {
          SuiteRow row;
          row.key.impl = zs::implName(specs[g].impl);
          row.key.name = zs::recordName(specs[g]);
          row.key.bytes = specs[g].bytes;
          row.key.src = src;
          row.key.dst = dst;
          row.gbench_name = zs::rowName(specs[g], src, dst);
          // A round's pairs run each row at once.
          row.group = static_cast<int>(r * specs.size() + g);
          row.round = static_cast<int>(r);
          out.push_back(std::move(row));
        }
      }
    }
    return out;
  }

  JobEstimate estimate(const BenchJob& job, const report::PlanTopology& t) const override {
    const std::vector<SuiteRow> all = rows(job, t);
    Tally tally = tallyRows(all, job.work, [&](const SuiteRow& row) {
      Tally x;
      // A ping-pong row's bytes are too few to count; a bandwidth row's messages per sample depend on its size only.
      zs::Spec spec;
      spec.bytes = row.key.bytes;
      const double data = spec.pingpong() ? 0
                                          : seconds(static_cast<double>(row.key.bytes),
                                                    zs::unitsPerSample(spec) * (samples(job, spec) + 1.0),
                                                    pairRate(t, row.key.src, row.key.dst));
      x.add(1, kRowFixedS, data);
      return x;
    });
    // Every round that runs a row sets its pairs up (and an NCCL communicator where NCCL's rows run).
    std::set<int> rounds_run, nccl_rounds;
    for (const SuiteRow& row : all) {
      if (!job.work.runs(row.key)) continue;
      rounds_run.insert(row.round);
      if (row.key.impl.rfind("nccl.", 0) == 0) nccl_rounds.insert(row.round);
    }
    tally.fixed_s +=
        static_cast<double>(rounds_run.size()) * kPairSetupS + static_cast<double>(nccl_rounds.size()) * kNcclInitS;
    // Every rank starts, makes its context and sets its device up at the same time.
    const double extra_ranks = std::max(0, job.ranks - 2);
    JobEstimate e = fromTally(kProcessStartS + kContextS + kExtraRankS * extra_ranks + kRankSetupS, tally);
    e.basis += ", " + std::to_string(job.work.rounds.size()) + (job.work.rounds.size() == 1 ? " round" : " rounds");
    return e;
  }
};

}  // namespace

std::unique_ptr<Suite> zcopySuite() {
  return std::make_unique<ZcopySuite>();
}

}  // namespace peerlab::qualify
