#pragma once
/// What a benchmark suite is to `peerlab qualify` and `peerlab bench`: one Suite, written beside its benchmark
/// (bench/<suite>_suite.cc), owns its binary and its facts (the GPUs it needs, the rules of reports/qualify.toml its
/// rows feed, its deadlines, its place on the pages), the rows its benchmark has, the processes it runs for a level
/// and a topology, each with the typed plan its binary reads (harness/report/bench_plan.h), and the time that plan
/// takes. The build collects every bench/*_suite.cc into the registry (harness/qualify/CMakeLists.txt): nothing else
/// names a suite, its binary or its rows.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "harness/report/bench_plan.h"
#include "harness/report/level.h"
#include "harness/report/plan_record.h"

namespace peerlab::qualify {

/// The level (harness/report/level.h: the one type and parser; the names stay here for the planner's callers).
using report::kLevels;
using report::Level;
using report::levelName;
using report::levelNames;
using report::parseLevel;

/// One benchmark process (stored with the plan in a run file).
using BenchJob = report::PlanJob;

/// One process's estimated wall time and what it rests on (harness/qualify/cost_model.h has the rates).
struct JobEstimate {
  double seconds = 0;
  double start_s = 0;  ///< process start
  double cases = 0;    ///< benchmark cases it runs
  double fixed_s = 0;  ///< their fixed costs
  double data_s = 0;   ///< the bytes they move, at the link rates
  std::string basis;   ///< "model: 60 cases, ..." or "measured: median of 3 runs"
};

/// What a suite's processes are made for.
struct SuiteRequest {
  Level level = Level::kStandard;
  int gpus = 0;
  std::vector<std::pair<int, int>> pairs;          ///< the ordered pairs to cover
  bool all_pairs = true;                           ///< `pairs` is every pair of the machine
  const report::PlanTopology* topology = nullptr;  ///< the machine (never null when makePlan asks)
  bool concurrent = true;                          ///< disjoint pairs may run at once where their paths share no link
};

/// One row a suite's benchmark has: its key (what a plan selects: report::RowKey), its Google Benchmark name (what a
/// --benchmark_filter of earlier versions matched), the group it runs in with other rows at once (the rows of one group
/// take as long as the slowest; -1: alone) and its pair round.
struct SuiteRow {
  report::RowKey key;
  std::string gbench_name;
  int group = -1;
  int round = -1;  ///< the pair round it runs in (-1: not a row of rounds)
};

/// What the checks and the pages make of the rows of a run-file suite.
enum class RowKind {
  kMeasured,    ///< bandwidth or time: size plots, pair matrices, latency tables, the noise rule
  kHostCopies,  ///< host <-> GPU copies: a section of their own per GPU and NUMA node, no pair matrices
  kVerdicts,    ///< claimed-against-verified cells (the verified probe): their own section and checks, no metric
};

/// The facts of one run-file suite a suite's rows carry, for the checks engine and the pages (harness/report reads
/// them through resultFacts() in suites.h and names no suite).
struct ResultFacts {
  std::string suite{};  ///< the run-file suite
  RowKind kind = RowKind::kMeasured;
  std::string section{};  ///< the title of its own page section (kHostCopies, kVerdicts)
  /// How it counts the bytes behind its bandwidth (GB/s is 10^9 bytes per second everywhere); "": no bandwidth shown.
  std::string bytes_convention{};
  bool collective = false;           ///< a collective over ranks (its rows carry a rank count)
  bool compared_on_busbw = false;    ///< the noise rule and the history compare its bus bandwidth, not algbw
  bool latency_at_smallest = false;  ///< a bandwidth sweep: only its smallest size says something about latency
};

/// A suite's fixed facts.
struct SuiteInfo {
  std::string name;    ///< the plan's suite name (and the run-file suite of most of its rows)
  std::string binary;  ///< bench executable: libexec/peerlab or beside peerlab (harness/layout), or --bench-dir
  int min_gpus = 2;
  int order = 100;  ///< where its rows sit on the pages (smaller first)
  /// The run-file suites its rows carry, in page order (peer_copy_bench: peer_enable, peer_copy, peer_latency).
  std::vector<std::string> result_suites;
  /// The facts of the run-file suites its rows carry, where they differ from measured rows' defaults.
  std::vector<ResultFacts> result_facts;
  /// The rules of reports/qualify.toml ([expect.*] and [latency.*] ids) its rows feed.
  std::vector<std::string> rules;
  /// The levels qualify runs it at when no suite is named (bench runs every in_all suite at any level).
  std::vector<Level> levels = {Level::kStandard, Level::kFull};
  bool in_all = true;  ///< run when no suite is named (false for views of another suite's binary, e.g. moe)
  /// A suite whose process already runs this one's rows (moe: alltoallv): this one is not planned beside it.
  std::string rides_with;
  /// Deadline base of one process per level (the runner's deadline is a multiple of it), for a 4-GPU machine.
  double deadline_s[kLevels] = {30, 60, 300};
  std::string description;
};

/// A benchmark suite.
class Suite {
 public:
  explicit Suite(SuiteInfo info) : info_(std::move(info)) {}
  virtual ~Suite() = default;
  Suite(const Suite&) = delete;
  Suite& operator=(const Suite&) = delete;

  const SuiteInfo& info() const { return info_; }
  const std::string& name() const { return info_.name; }
  bool runsAt(Level level) const;

  /// Why the suite cannot run on this machine ("" when it can): the plan lists it as not available.
  virtual std::string unavailable() const { return ""; }
  /// Its processes for a request, each with the plan its binary reads (BenchJob::work).
  virtual std::vector<BenchJob> plan(const SuiteRequest& request) const = 0;
  /// Every row its benchmark has for the pairs and GPUs `job` covers (the plan's work selects among them), in the
  /// order the benchmark registers them.
  virtual std::vector<SuiteRow> rows(const BenchJob& job, const report::PlanTopology& topology) const = 0;
  /// The estimated wall time of one of its processes, from the rows its plan runs.
  virtual JobEstimate estimate(const BenchJob& job, const report::PlanTopology& topology) const = 0;
  /// The plan of a process recorded before plans were typed (BenchJob::legacy_args, legacy_env): the rows its
  /// --benchmark_filter selected among rows(), and the knobs its environment set. Old runs are estimated from it.
  virtual report::BenchPlan legacyPlan(const BenchJob& job, const report::PlanTopology& topology) const;

 private:
  SuiteInfo info_;
};

/// Every registered suite, in page order.
const std::vector<std::unique_ptr<Suite>>& suites();

}  // namespace peerlab::qualify
