// The moe suite: the MoE dispatch/combine rows of bench/alltoallv_bench.cu alone. The alltoallv process already runs
// them, so qualify names it only when asked, and never beside alltoallv. Rows: bench/alltoallv_suite.h.
#include "bench/alltoallv_suite.h"
#include "harness/qualify/cost_model.h"
#include "harness/qualify/suites.h"

namespace peerlab::qualify {

// Shared with the alltoallv suite (bench/alltoallv_suite.cc).
std::vector<SuiteRow> alltoallvRows();
JobEstimate estimateAlltoallvProcess(const BenchJob& job, const report::PlanTopology& t);
std::vector<BenchJob> alltoallvProcesses(const Suite& suite, const SuiteRequest& req,
                                         const std::vector<report::RowSelection>& rows);
std::vector<std::string> moeSpotCases();

namespace {

SuiteInfo describe() {
  SuiteInfo s;
  s.name = "moe";
  s.binary = "alltoallv_bench";
  s.min_gpus = 2;
  s.order = 31;
  s.deadline_s[0] = 30;
  s.deadline_s[1] = 60;
  s.deadline_s[2] = 300;
  s.description = "MoE dispatch/combine over the alltoallv (part of the alltoallv suite's process)";
  s.in_all = false;
  s.rides_with = "alltoallv";
  // Its rows come from the alltoallv process (that suite's result_suites carry them).
  s.result_facts = {{.suite = "moe",
                     .bytes_convention =
                         "one bf16 row (hidden 7168 x 2 bytes) per (token, selected expert), the local rank included, "
                         "as DeepEP and pplx-kernels count them; algbw = those bytes / time, busbw = algbw x (n-1)/n; "
                         "compared on algbw",
                     .collective = true}};
  return s;
}

class MoeSuite final : public Suite {
 public:
  MoeSuite() : Suite(describe()) {}

  std::vector<BenchJob> plan(const SuiteRequest& req) const override {
    const std::vector<std::string> cases =
        req.level == Level::kFull ? std::vector<std::string>{"*T=*"} : moeSpotCases();
    return alltoallvProcesses(*this, req, {{cases, {}, {}, {}}});
  }

  std::vector<SuiteRow> rows(const BenchJob&, const report::PlanTopology&) const override { return alltoallvRows(); }

  JobEstimate estimate(const BenchJob& job, const report::PlanTopology& t) const override {
    return estimateAlltoallvProcess(job, t);
  }
};

}  // namespace

std::unique_ptr<Suite> moeSuite() {
  return std::make_unique<MoeSuite>();
}

}  // namespace peerlab::qualify
