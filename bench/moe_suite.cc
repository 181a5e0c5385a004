// The moe suite: the MoE dispatch/combine rows of bench/alltoallv_bench.cu alone (the alltoallv process already runs
// them, so qualify names it only when asked).
#include "harness/qualify/cost_model.h"
#include "harness/qualify/plan.h"
#include "harness/qualify/suites.h"

namespace peerlab::qualify {

JobEstimate estimateAlltoallvProcess(const BenchJob& job, const Plan& plan, bool alltoallv_rows);

SuiteSpec moeSuite() {
  SuiteSpec s;
  s.name = "moe";
  s.binary = "alltoallv_bench";
  s.shape = JobShape::kCollective;
  s.min_gpus = 2;
  s.order = 31;
  s.filter = [](Level level, const std::vector<std::pair<int, int>>&, bool) -> std::string {
    return level == Level::kFull ? "^moe/" : "^moe/.*T=(1|128|4096)/";
  };
  s.deadline_s[0] = 30;
  s.deadline_s[1] = 60;
  s.deadline_s[2] = 300;
  s.estimate = [](const BenchJob& job, const Plan& plan) { return estimateAlltoallvProcess(job, plan, false); };
  s.description = "MoE dispatch/combine over the alltoallv (part of the alltoallv suite's process)";
  s.in_all = false;
  return s;
}

}  // namespace peerlab::qualify
