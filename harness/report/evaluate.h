#pragma once
/// The one checks engine: (plan, results, thresholds) -> checks. `peerlab qualify` (live and --results), `peerlab
/// report`, the history store and the scorecard all take their verdict from here, so the same run gets the same
/// verdict and the same counts whichever command or page shows it.
///
/// Checks, in this order: topology (the plan's topology against what CUDA saw), health (one per GPU and health
/// result, and benchmarks taken at held-down clocks), probe (claimed cells must verify; "not run" when the plan did
/// not run it), data (every suite's results ran and verified), bandwidth (every expected figure of every scope: pair,
/// host, device, gpu, gpu_pcie), latency (every bound), coverage (every suite the plan ran has results; every rule
/// whose implementations ran reached the sizes it needs), baseline (against a baseline run, or as stored).

#include <optional>
#include <string>
#include <vector>

#include "harness/report/checks.h"
#include "harness/report/compare.h"
#include "harness/report/plan_record.h"
#include "harness/report/report.h"

namespace peerlab::report {

struct EvaluateOptions {
  const Run* baseline = nullptr;  ///< compare every result against it; without it, stored baseline checks are kept
  NoiseRule baseline_rule;        ///< what a change against the baseline must exceed (the one noise rule)
};

/// The checks of `run` against `plan` (nullptr: a run without a plan gets its probe, health and data checks).
std::vector<Check> evaluateChecks(const Run& run, const RunPlan* plan, const EvaluateOptions& options = {});

struct RunVerdict {
  std::vector<Check> checks;
  CheckCounts counts;
  std::optional<bool> stored_pass;  ///< the verdict the run file states ("qualify"."verdict"), when it states one
  bool pass() const { return counts.pass(); }
  /// The run file says PASS but its results fail.
  bool storedPassContradicted() const { return stored_pass.value_or(false) && !pass(); }
};

/// The run's plan: run.plan, else extra["plan"] read now (a run assembled in memory); nullopt when it has none or
/// the stored plan does not read.
std::optional<RunPlan> planOfRun(const Run& run);

/// The verdict of a run against its own stored plan (planOfRun): what `report`, `qualify --results` without a new
/// config, and the history store compute.
RunVerdict verdictOf(const Run& run, const EvaluateOptions& options = {});

/// The one matcher of expectations and results (the checks, the plan, the report's pair matrices and the history
/// site all use it): the same suite, impl and name by glob, and the result within the expectation's scope (pair: its
/// ordered pair; host: the GPU, a host copy naming no destination or itself; device: the GPU with itself; gpu and
/// gpu_pcie: the whole machine). Sizes (min_bytes) and status are for the caller.
bool expectationApplies(const Expectation& e, const Result& r);

/// The bandwidth a result should reach by `expectations` (the first that applies at the result's size and gives a
/// figure), for pages that show a figure as a percentage of what was expected.
struct ExpectedFigure {
  std::string metric;  ///< algbw_gbps or busbw_gbps
  double gbps = 0;
  std::string basis;
};
std::optional<ExpectedFigure> expectedFigure(const std::vector<Expectation>& expectations, const Result& r);
inline std::optional<ExpectedFigure> expectedFigure(const RunPlan& plan, const Result& r) {
  return expectedFigure(plan.expectations, r);
}

/// What a run says of injected faults or a stand-in probe worker ("PEERLAB_PROBE_INJECT=corrupt:0-1 on 2 cells"), ""
/// when its verdicts are the machine's own. Every output shows it: such a failure is not a driver fault.
std::string injectionNote(const Run& run);

/// "2 rules disabled by the config: host_copy_ce, peer_copy_ce_uni" when the run's plan lists rules its config
/// switched off (their checks were never made), "" otherwise. Every output states it beside the counts.
std::string disabledRulesNote(const Run& run);

}  // namespace peerlab::report
