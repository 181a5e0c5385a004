#pragma once
/// The benchmark suites `peerlab bench` and `qualify` run: which binary, how it is parametrized across GPU pairs,
/// what --quick and --full run, and the base of each process's deadline. (The wall-time estimate is estimate.h's.)
/// A suite's binary is built by the peerlab_qualify target: its peerlab_add_bench call in bench/CMakeLists.txt says
/// QUALIFY (qualify_target_test checks every binary named here).

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "harness/report/plan_record.h"

namespace peerlab::qualify {

/// One benchmark process (stored with the plan in a run file).
using BenchJob = report::PlanJob;

/// How a suite covers the GPUs.
enum class JobShape {
  kWholeMachine,  ///< one process; the benchmark iterates the visible pairs itself (pairs passed as a filter)
  kPerPair,       ///< one 2-rank process per ordered pair (e.g. zcopy_bench --ranks=2 --src=0 --dst=1)
  kCollective,    ///< one N-rank process over all GPUs (alltoallv_bench --ranks=N)
};

struct SuiteSpec {
  std::string name;    ///< the run-file suite: peer_copy, zcopy, alltoallv, moe, probe
  std::string binary;  ///< bench executable: libexec/peerlab or beside peerlab (harness/layout), or --bench-dir
  JobShape shape = JobShape::kWholeMachine;
  int min_gpus = 2;
  double quick_deadline_s = 60;  ///< deadline base of one process (the deadline is a multiple of it, runner.h)
  double full_deadline_s = 300;
  /// --benchmark_filter for a mode ("quick"/"full") and the ordered pairs to cover (`all_pairs`: every pair of the
  /// machine); "" runs every benchmark of the binary.
  std::function<std::string(const std::string& mode, const std::vector<std::pair<int, int>>& pairs, bool all_pairs)>
      filter;
  std::string description;
  bool in_all = true;  ///< run when no suite is named (false for views of another suite's binary, e.g. moe)
  /// Where set: why the suite cannot run on this machine, "" when it can (the plan lists it as not available).
  std::function<std::string()> unavailable = nullptr;
  /// Where set: the suite's processes for a mode, the GPUs and the pairs, instead of what its shape gives.
  std::function<std::vector<BenchJob>(const std::string& mode, int gpus, const std::vector<std::pair<int, int>>& pairs,
                                      bool all_pairs)>
      jobs = nullptr;
};

/// Every suite, in run order.
const std::vector<SuiteSpec>& suiteSpecs();
/// The spec of a suite by name, nullptr when unknown.
const SuiteSpec* findSuite(const std::string& name);
/// "peer_copy, zcopy, alltoallv, moe, probe, ..."
std::string suiteNames();
/// The suites qualify runs when none is named (its --help lists them from here), in run order.
std::vector<std::string> qualifyDefaultSuites();
/// "peer_copy,zcopy,alltoallv,host_copy,transport"
std::string qualifyDefaultSuitesText();
/// Every executable qualify and bench can start: each suite's binary and `peerlab` itself (the probe's parent and
/// worker), without duplicates.
std::vector<std::string> plannedExecutables();

/// The regex alternatives naming ordered pairs the way the benchmarks do: "0->1" one way, "0<->1" both ways
/// ("[0-9]+<?->[0-9]+" when every pair is covered).
std::string pairRegex(const std::vector<std::pair<int, int>>& pairs, bool all_pairs);

/// The processes of one suite for a mode (quick/full), the GPUs and the ordered pairs to cover.
std::vector<BenchJob> jobsFor(const SuiteSpec& spec, const std::string& mode, int gpus,
                              const std::vector<std::pair<int, int>>& pairs, bool all_pairs);

}  // namespace peerlab::qualify
