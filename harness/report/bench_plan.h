#pragma once
/// The plan of one benchmark process: the typed contract between the planner (`peerlab qualify`, `peerlab bench`) and
/// a benchmark binary. The planner writes it into the run file's plan and into a file the process reads
/// (`<bench> --plan=FILE`, bench/common/bench_main.cc); the time estimate is computed from the same object. A row runs
/// when a selection holds it; pairs come as rounds; settings a benchmark declares (bench/common/knobs.h) as knobs.
/// Nothing between the two travels as a row-name pattern or an environment variable.

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "harness/launch/pair_rounds.h"
#include "reference/core/status.h"

namespace peerlab::report {

using launch::OrderedPair;
using launch::PairRoundList;

/// One row of a benchmark as a selection sees it: the case ("<impl>/<name>", as the run file names the row:
/// "peerlab.put/uni", "peerlab.ce/bidir", "cuda.memcpy_peer_noP2P/uni"), its size and the pair or GPU it measures.
struct RowKey {
  std::string impl;
  std::string name;
  int64_t bytes = -1;  ///< -1: a row without a size (latency, enable cost)
  int src = -1;        ///< -1: not a pair row
  int dst = -1;
  bool both_ways = false;  ///< the row measures src <-> dst at once (bidir, flag ping-pong): either order selects it
  int gpu = -1;            ///< -1: not a row of one GPU
};

/// The rows a plan runs: each field narrows the selection; an empty field selects everything of its kind.
struct RowSelection {
  std::vector<std::string> cases;  ///< "<impl>/<name>" patterns (globMatch: "peerlab.*", "*/T=128")
  std::vector<int64_t> sizes;      ///< bytes; a row without a size is held whatever the sizes
  std::vector<OrderedPair> pairs;  ///< ordered pairs; a row without a pair is held whatever the pairs
  std::vector<int> gpus;           ///< GPUs; a row without a GPU is held whatever the GPUs
  bool holds(const RowKey& row) const;
};

/// What one benchmark process runs.
struct BenchPlan {
  std::string suite;               ///< the suite whose spec made it
  std::vector<RowSelection> rows;  ///< a row runs when one of them holds it; empty: every row of the benchmark
  PairRoundList rounds;            ///< two-sided benchmarks: the ordered pairs in rounds (a round's pairs at once)
  std::vector<std::vector<int>> gpu_sets;    ///< GPUs that measure each row at once (each set on links of its own)
  std::map<std::string, std::string> knobs;  ///< settings the benchmark declares, by name
  int samples = 0;                 ///< timed samples of every row (0: the benchmark's own count for each size)
  double deadline_s = 0;           ///< the process's deadline base as planned (0: none given)
  std::vector<std::string> rules;  ///< the rules of reports/qualify.toml its rows feed

  bool runs(const RowKey& row) const;
  /// Every ordered pair of `rounds`, in order.
  std::vector<OrderedPair> pairs() const;
  /// The value of a knob, `fallback` when the plan does not set it.
  std::string knob(const std::string& name, const std::string& fallback = "") const;
};

/// Shell-style glob through fnmatch(3) ('*' any run of characters, '/' included; '?' one; [...] a class): how a
/// plan's cases and the rules' impl and name patterns are matched.
bool globMatch(const std::string& pattern, const std::string& text);

nlohmann::json toJson(const BenchPlan& plan);
/// Reads a plan (a run file's "plan"."jobs"[i]."plan", or the file a benchmark is handed); GPU indices below `gpus`.
/// `invalid_argument` names the JSON path, what is wrong and the value.
StatusOr<BenchPlan> benchPlanFromJson(const nlohmann::json& doc, int gpus, const std::string& where = "$");
/// The plan file a benchmark reads.
Status writeBenchPlan(const std::string& path, const BenchPlan& plan);
StatusOr<BenchPlan> readBenchPlan(const std::string& path);

}  // namespace peerlab::report
