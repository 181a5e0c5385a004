#pragma once
/// What a benchmark suite is to `peerlab qualify` and `peerlab bench`: one SuiteSpec, written beside its benchmark
/// (bench/<suite>_suite.cc), owns the binary, how it covers the GPUs, the filter of each level, its deadlines, its
/// time estimate, the rules of reports/qualify.toml its rows feed and where it sits on the pages. The build collects
/// every bench/*_suite.cc into the registry (harness/qualify/CMakeLists.txt): nothing else names a suite's binary or
/// filter.

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "harness/report/plan_record.h"

namespace peerlab::qualify {

struct Plan;

/// How much qualify runs: quick (seconds: a pre-job gate), standard (every check family, the default), full (every
/// size of every sweep).
enum class Level { kQuick = 0, kStandard = 1, kFull = 2 };
inline constexpr int kLevels = 3;
std::string_view levelName(Level level);
/// "quick", "standard" or "full"; nullopt otherwise.
std::optional<Level> parseLevel(std::string_view name);
/// "quick, standard, full"
std::string levelNames();

/// One benchmark process (stored with the plan in a run file).
using BenchJob = report::PlanJob;

/// How a suite covers the GPUs.
enum class JobShape {
  kWholeMachine,  ///< one process; the benchmark iterates the visible pairs itself (pairs passed as a filter)
  kPairRounds,    ///< one process of a rank per GPU covering every ordered pair in rounds (harness/qualify/schedule.h)
  kCollective,    ///< one N-rank process over all GPUs (alltoallv_bench --ranks=N)
};

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
  std::vector<std::pair<int, int>> pairs;  ///< the ordered pairs to cover
  bool all_pairs = true;                   ///< `pairs` is every pair of the machine
  const report::PlanTopology* topology = nullptr;
  bool concurrent = true;  ///< disjoint pairs may run at once where the links allow it
};

struct SuiteSpec {
  std::string name;    ///< the plan's suite name (and the run-file suite of most of its rows)
  std::string binary;  ///< bench executable: libexec/peerlab or beside peerlab (harness/layout), or --bench-dir
  JobShape shape = JobShape::kWholeMachine;
  int min_gpus = 2;
  int order = 100;  ///< where its rows sit on the pages (smaller first)
  /// The run-file suites its rows carry, in page order (peer_copy_bench: peer_enable, peer_copy, peer_latency).
  std::vector<std::string> result_suites;
  /// The rules of reports/qualify.toml ([expect.*] and [latency.*] ids) its rows feed.
  std::vector<std::string> rules;
  /// The levels qualify runs it at when no suite is named (bench runs every in_all suite at any level).
  std::vector<Level> levels = {Level::kStandard, Level::kFull};
  bool in_all = true;  ///< run when no suite is named (false for views of another suite's binary, e.g. moe)
  /// --benchmark_filter for a level and the ordered pairs to cover (`all_pairs`: every pair of the machine); ""
  /// runs every benchmark of the binary.
  std::function<std::string(Level level, const std::vector<std::pair<int, int>>& pairs, bool all_pairs)> filter;
  /// Deadline base of one process per level (the runner's deadline is a multiple of it), for a 4-GPU machine.
  double deadline_s[kLevels] = {30, 60, 300};
  /// kPairRounds: the rows a serial sample measures to check the concurrent rounds against (a filter).
  std::string guard_filter;
  std::string description;
  /// Where set: why the suite cannot run on this machine, "" when it can (the plan lists it as not available).
  std::function<std::string()> unavailable = nullptr;
  /// Where set: the suite's processes, instead of what its shape gives.
  std::function<std::vector<BenchJob>(const SuiteSpec& spec, const SuiteRequest& request)> jobs = nullptr;
  /// The estimated wall time of one of its processes (a model from its sizes and repetitions).
  std::function<JobEstimate(const BenchJob& job, const Plan& plan)> estimate = nullptr;

  bool runsAt(Level level) const;
};

/// Every registered suite, in page order.
const std::vector<SuiteSpec>& suiteSpecs();

}  // namespace peerlab::qualify
