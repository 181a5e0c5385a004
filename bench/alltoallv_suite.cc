// The alltoallv suite (bench/alltoallv_bench.cu) as qualify and bench run it: one N-rank process per rank count (2,
// 4, ... and every GPU), each running the alltoallv rows and the MoE dispatch/combine rows (the moe suite,
// bench/moe_suite.cc, runs only those). Rows: bench/alltoallv_suite.h.
#include "bench/alltoallv_suite.h"

#include <algorithm>

#include "harness/qualify/cost_model.h"
#include "harness/qualify/suites.h"

namespace peerlab::qualify {

namespace as = alltoallv_suite;

// The rows of the alltoallv binary (alltoallv and MoE), and their estimate: shared with the moe suite.
std::vector<SuiteRow> alltoallvRows() {
  std::vector<SuiteRow> out;
  for (const as::Case& c : as::cases()) {
    SuiteRow row;
    row.key.impl = as::implName(c.impl);
    row.key.name = c.name();
    row.key.bytes = c.bytes;
    row.gbench_name = c.rowName();
    out.push_back(std::move(row));
  }
  for (const as::MoeCase& c : as::moeCases()) {
    SuiteRow row;
    row.key.impl = as::moeImpl(c.path, c.combine);
    row.key.name = c.name();
    row.gbench_name = c.rowName();
    out.push_back(std::move(row));
  }
  return out;
}

JobEstimate estimateAlltoallvProcess(const BenchJob& job, const report::PlanTopology& t) {
  using namespace cost;
  const int n = std::max(2, job.ranks);
  double rate = 0;
  for (int g = 0; g < n; ++g)
    rate = g == 0 ? gpuRate(t, g) : std::min(rate, gpuRate(t, g));
  const double leaving = static_cast<double>(n - 1) / n;
  const double fixed = 0.002 + 0.0075 * n;
  const int batch = std::atoi(job.work.knob(as::kBatchKnob, "0").c_str());
  const int samples = job.work.samples;
  const Tally tally = tallyRows(alltoallvRows(), job.work, [&](const SuiteRow& row) {
    Tally x;
    if (row.key.bytes >= 0) {
      // Warm-up calls, then batch x samples.
      const as::Calls c = as::callsFor(row.key.bytes);
      const double ops =
          c.warmup + (batch > 0 ? batch : c.batch) * static_cast<double>(samples > 0 ? samples : c.samples);
      x.add(1, fixed, seconds(static_cast<double>(row.key.bytes) * leaving, ops, rate));
      return x;
    }
    // MoE: a token is hidden x bf16 sent to top-k experts.
    const int tokens = std::atoi(row.key.name.substr(row.key.name.find("T=") + 2).c_str());
    const as::Calls c = as::moeCallsFor(tokens);
    const double ops = c.warmup + c.batch * static_cast<double>(samples > 0 ? samples : c.samples);
    x.add(1, fixed, seconds(tokens * as::kMoeHidden * 2.0 * as::kMoeTopK * leaving, ops, rate));
    return x;
  });
  return fromTally(kProcessStartS + kContextS * n + kNcclInitS, tally);
}

// One process per rank count: 2 ranks and every GPU (4 on a 4-GPU machine; 2, 4 and 8 on an 8-GPU one), ranks on
// GPUs 0..n-1, running `rows`.
std::vector<BenchJob> alltoallvProcesses(const Suite& suite, const SuiteRequest& req,
                                         const std::vector<report::RowSelection>& rows) {
  std::vector<int> counts;
  for (int n = 2; n < req.gpus; n *= 2)
    counts.push_back(n);
  counts.push_back(req.gpus);
  const double budget = suite.info().deadline_s[static_cast<int>(req.level)];
  std::vector<BenchJob> jobs;
  for (int n : counts) {
    BenchJob j;
    j.suite = suite.name();
    j.binary = suite.info().binary;
    j.ranks = n;
    j.work.suite = suite.name();
    j.work.rows = rows;
    j.work.rules = suite.info().rules;
    j.deadline_s = n == req.gpus ? budget : budget / 2;
    j.work.deadline_s = j.deadline_s;
    j.budget_s = j.deadline_s;
    j.label = suite.name() + " x" + std::to_string(n);
    jobs.push_back(j);
  }
  return jobs;
}

// The MoE rows below full: 1, 128 and 4096 tokens per rank (graph-replayed and eager).
std::vector<std::string> moeSpotCases() {
  return {"*/T=1", "*/T=128", "*/T=4096"};
}

namespace {

SuiteInfo describe() {
  SuiteInfo s;
  s.name = "alltoallv";
  s.binary = "alltoallv_bench";
  s.min_gpus = 2;
  s.order = 30;
  s.result_suites = {"alltoallv", "moe"};
  s.result_facts = {{.suite = "alltoallv",
                     .bytes_convention = "the size is the bytes one rank sends to all peers together; algbw = size / "
                                         "time, busbw = algbw x (n-1)/n (nccl-tests' alltoall definition)",
                     .collective = true,
                     .compared_on_busbw = true}};
  s.rules = {"alltoallv_busbw", "alltoallv_graph_small"};
  s.deadline_s[0] = 75;
  s.deadline_s[1] = 150;
  s.deadline_s[2] = 1200;
  s.description = "GPU-initiated alltoallv with device-side counts and MoE dispatch/combine, with the NCCL baselines";
  return s;
}

class AlltoallvSuite final : public Suite {
 public:
  AlltoallvSuite() : Suite(describe()) {}

  std::vector<BenchJob> plan(const SuiteRequest& req) const override {
    // Below full: 128 MiB per rank is where the bandwidth targets are set; 4 and 64 KiB are what the small-message
    // latency rule reads (the sizes between feed no check); the MoE rows at three token counts.
    std::vector<report::RowSelection> rows;
    if (req.level != Level::kFull) {
      rows = {{{"*uniform", "*skewed"}, {4096, 65536, int64_t{128} << 20}, {}, {}}, {moeSpotCases(), {}, {}, {}}};
    }
    return alltoallvProcesses(*this, req, rows);
  }

  std::vector<SuiteRow> rows(const BenchJob&, const report::PlanTopology&) const override { return alltoallvRows(); }

  JobEstimate estimate(const BenchJob& job, const report::PlanTopology& t) const override {
    return estimateAlltoallvProcess(job, t);
  }
};

}  // namespace

std::unique_ptr<Suite> alltoallvSuite() {
  return std::make_unique<AlltoallvSuite>();
}

}  // namespace peerlab::qualify
