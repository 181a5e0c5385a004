#pragma once
/// Baselines: the run file `qualify --baseline` and `report --compare` hold new runs against, made by `peerlab baseline
/// make` from one or more runs of one kind that pass their own checks.

#include <string>
#include <vector>

#include "harness/report/report.h"
#include "reference/core/status.h"

namespace peerlab::report {

/// A run and the file it came from (for messages and the baseline's record of its sources).
struct NamedRun {
  std::string file;
  Run run;
};

struct BaselineSummary {
  int runs = 0;
  int results = 0;   ///< results in the baseline
  int left_out = 0;  ///< results not measured by every run (left out: a baseline holds what every run measured)
  int not_ok = 0;    ///< results whose status was not ok in some run (kept as the newest run gave them)
};

/// Whether a run file is a baseline (it holds "baseline": what peerlab baseline make records), and from how many runs.
bool isBaseline(const Run& run);
int baselineRunCount(const Run& run);

/// The baseline of `runs`: the newest run's fingerprint, kind, node and plan, and every result all runs measured
/// (ctest rows excepted: they time the build's tests, not the machine), each the median of the runs' medians
/// (time_us, algbw_gbps, busbw_gbps), with the median of their p10_us and p90_us and "baseline_runs" and
/// "runs_time_us" saying what it rests on. `invalid_argument` names the file when runs are of different hardware
/// (report::hardwareMismatch), one fails its own checks (report::verdictOf: a baseline is made from good runs), or one
/// ran with stand-ins or injected faults (Injection, or cells marked injected: a baseline is made from real machines).
StatusOr<Run> makeBaseline(const std::vector<NamedRun>& runs, BaselineSummary* summary = nullptr);

}  // namespace peerlab::report
