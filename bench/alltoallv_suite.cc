// The alltoallv suite (bench/alltoallv_bench.cu) as qualify and bench run it: one N-rank process per rank count (2,
// 4, ... and every GPU). Rows: alltoallv/<impl>/[graph/]{uniform,skewed}/bytes:N and moe/<impl>/[graph/]T=N (the moe
// suite, bench/moe_suite.cc, runs only those).
#include <algorithm>

#include "harness/qualify/cost_model.h"
#include "harness/qualify/plan.h"
#include "harness/qualify/suites.h"

namespace peerlab::qualify {

// Shared with the moe suite: the process's estimate with or without the alltoallv rows.
JobEstimate estimateAlltoallvProcess(const BenchJob& job, const Plan& plan, bool alltoallv_rows) {
  using namespace cost;
  const report::PlanTopology& t = plan.topology;
  const bool full = plan.options.level == Level::kFull;
  const int n = std::max(2, job.ranks);
  double rate = 0;
  for (int g = 0; g < n; ++g)
    rate = g == 0 ? gpuRate(t, g) : std::min(rate, gpuRate(t, g));
  const double leaving = static_cast<double>(n - 1) / n;
  const double fixed = 0.002 + 0.0075 * n;
  Tally tally;
  if (alltoallv_rows) {
    const std::vector<double> sizes =
        full ? std::vector<double>{4096,      16384,     65536,      262144,     kMiB,       4 * kMiB,
                                   16 * kMiB, 64 * kMiB, 128 * kMiB, 256 * kMiB, 1024 * kMiB}
             : std::vector<double>{4096, 65536, 128 * kMiB};
    for (double b : sizes) {
      // bench/alltoallv_bench.cu planFor: warm-up + batch x samples calls; 20 implementations x patterns x modes.
      const double ops = b <= kMiB ? 20 + 20 * 25 : b <= 64 * kMiB ? 5 + 10 * 12 : 3 + 10 * 8;
      tally.add(20, fixed, seconds(b * leaving, ops, rate));
    }
  }
  // MoE dispatch/combine: 16 paths per token count; a token is hidden 7168 x bf16 sent to top-k 8 experts.
  for (double tokens : {1.0, 128.0, 4096.0}) {
    const double ops = tokens >= 1024 ? 3 + 2 * 8 : 10 + 10 * 20;
    tally.add(16, fixed, seconds(tokens * 7168 * 2 * 8 * leaving, ops, rate));
  }
  return fromTally(kProcessStartS + kContextS * n + kNcclInitS, tally);
}

namespace {

std::string filter(Level level, const std::vector<std::pair<int, int>>&, bool) {
  if (level == Level::kFull) return "";
  // 128 MiB per rank is where the bandwidth targets are set; 4 and 64 KiB are what the small-message latency rule
  // reads (the sizes between feed no check).
  return "/bytes:(4096|65536|134217728)/|/T=(1|128|4096)/";
}

}  // namespace

SuiteSpec alltoallvSuite() {
  SuiteSpec s;
  s.name = "alltoallv";
  s.binary = "alltoallv_bench";
  s.shape = JobShape::kCollective;
  s.min_gpus = 2;
  s.order = 30;
  s.result_suites = {"alltoallv", "moe"};
  s.rules = {"alltoallv_busbw", "alltoallv_graph_small"};
  s.filter = filter;
  s.deadline_s[0] = 75;
  s.deadline_s[1] = 150;
  s.deadline_s[2] = 1200;
  s.estimate = [](const BenchJob& job, const Plan& plan) { return estimateAlltoallvProcess(job, plan, true); };
  s.description = "GPU-initiated alltoallv with device-side counts and MoE dispatch/combine, with the NCCL baselines";
  return s;
}

}  // namespace peerlab::qualify
