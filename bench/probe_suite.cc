// The probe suite (bench/probe_bench.cc): the wall time of the verified probe's whole matrix through its worker
// processes. A benchmark of the probe's speed, not a health figure: qualify runs the verified probe itself and names
// this suite only when asked. Row: BM_ProbeMatrix.
#include "harness/qualify/cost_model.h"
#include "harness/qualify/plan.h"
#include "harness/qualify/suites.h"

namespace peerlab::qualify {

SuiteSpec probeSuite() {
  SuiteSpec s;
  s.name = "probe";
  s.binary = "probe_bench";
  s.shape = JobShape::kWholeMachine;
  s.min_gpus = 2;
  s.order = 0;
  s.result_suites = {"probe"};
  s.levels = {};
  s.deadline_s[0] = 60;
  s.deadline_s[1] = 60;
  s.deadline_s[2] = 60;
  s.estimate = [](const BenchJob&, const Plan& plan) {
    using namespace cost;
    const double g = static_cast<double>(plan.topology.gpus.size());
    const double pairs = static_cast<double>(plan.topology.pairs.size());
    // bench/probe_bench.cc: 5 repetitions of the whole matrix through two worker processes.
    Tally tally;
    tally.add(5, 0.3 + 0.05 * pairs);
    return fromTally(kProcessStartS + kContextS * g, tally);
  };
  s.description = "wall time of the verified probe's whole matrix through its worker processes";
  return s;
}

}  // namespace peerlab::qualify
