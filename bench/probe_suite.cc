// The probe suite (bench/probe_bench.cc): the wall time of the verified probe's whole matrix through its worker
// processes. A benchmark of the probe's speed, not a health figure: qualify runs the verified probe itself (how, at
// each level, is this file's too: verifiedProbeRun) and names this suite only when asked. Row: BM_ProbeMatrix.
#include "harness/qualify/cost_model.h"
#include "harness/qualify/suites.h"

namespace peerlab::qualify {

ProbeRun verifiedProbeRun(Level level) {
  ProbeRun run;
  // Quick: every method on every pair, at small sizes (a pre-job gate answers in seconds).
  if (level == Level::kQuick) run.args = {"--sizes", "4K,1M"};
  run.deadline_s = 900;
  return run;
}

namespace {

SuiteInfo describe() {
  SuiteInfo s;
  s.name = "probe";
  s.binary = "probe_bench";
  s.min_gpus = 2;
  s.order = 0;
  s.result_suites = {"probe"};
  s.result_facts = {{.suite = "probe", .kind = RowKind::kVerdicts, .section = "Probe: claimed against verified"}};
  s.levels = {};
  // One matrix, whatever the pairs: the probe's own deadlines bound each cell.
  s.deadline_s[0] = 60;
  s.deadline_s[1] = 60;
  s.deadline_s[2] = 60;
  s.description = "wall time of the verified probe's whole matrix through its worker processes";
  return s;
}

class ProbeSuite final : public Suite {
 public:
  ProbeSuite() : Suite(describe()) {}

  std::vector<BenchJob> plan(const SuiteRequest& req) const override {
    BenchJob j;
    j.suite = name();
    j.binary = info().binary;
    j.work.suite = name();
    j.deadline_s = info().deadline_s[static_cast<int>(req.level)];
    j.work.deadline_s = j.deadline_s;
    j.budget_s = j.deadline_s;
    j.label = name() + " (" + std::to_string(req.pairs.size()) + " pairs)";
    return {j};
  }

  std::vector<SuiteRow> rows(const BenchJob&, const report::PlanTopology&) const override {
    SuiteRow row;
    row.key.impl = "peerlab.probe";
    row.key.name = "matrix_wall";
    row.gbench_name = "BM_ProbeMatrix";
    return {row};
  }

  JobEstimate estimate(const BenchJob&, const report::PlanTopology& t) const override {
    using namespace cost;
    const double g = static_cast<double>(t.gpus.size());
    const double pairs = static_cast<double>(t.pairs.size());
    // bench/probe_bench.cc: 5 repetitions of the whole matrix through two worker processes.
    Tally tally;
    tally.add(5, 0.3 + 0.05 * pairs);
    return fromTally(kProcessStartS + kContextS * g, tally);
  }
};

}  // namespace

std::unique_ptr<Suite> probeSuite() {
  return std::make_unique<ProbeSuite>();
}

}  // namespace peerlab::qualify
