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
  int results = 0;       ///< results in the baseline
  int left_out = 0;      ///< results not measured by every run (left out: a baseline holds what every run measured)
  int not_ok = 0;        ///< results whose status was not ok in some run (kept as the newest run gave them)
  std::string level;     ///< the level the runs were made at (their plan's)
  int fleet_boards = 0;  ///< boards (nodes) of the kind behind the fleet's noise
  int fleet_runs = 0;    ///< runs of the fleet used
  std::vector<std::string> fleet_skipped;  ///< fleet files not used, each with why ("other kind", "fails its checks")
  int fleet_rows = 0;                      ///< baseline results with the times of two boards or more
};

/// Whether a run file is a baseline (it holds "baseline": what peerlab baseline make records), and from how many runs.
bool isBaseline(const Run& run);
int baselineRunCount(const Run& run);

/// The baseline of `runs` (all of one kind and one level): the newest run's fingerprint, kind, node and plan (so its
/// level and pairs), and every result all runs measured (ctest rows excepted: they time the build's tests, not the
/// machine), each the median of the runs' medians (time_us, algbw_gbps, busbw_gbps), with the median of their p10_us
/// and p90_us and "baseline_runs" and "runs_time_us" saying what it rests on. `fleet`: committed runs of the kind (any
/// board, any level, `runs` included or not): each row gets "fleet_time_us", one time per board that measured it (the
/// median of that board's runs), where two boards or more did; the comparison's noise rule holds a new run to that
/// board-to-board range (report::decideChange). Fleet runs of another kind or that fail their own checks are left out
/// and listed in the summary. extra["baseline"] records the level, the pairs, the runs and the fleet.
/// `invalid_argument` names the file when runs are of different hardware (report::hardwareMismatch) or levels, one
/// fails its own checks (report::verdictOf: a baseline is made from good runs), or one ran with stand-ins or injected
/// faults (report::injectionNote: a baseline is made from real machines; such fleet runs are left out and listed).
StatusOr<Run> makeBaseline(const std::vector<NamedRun>& runs, BaselineSummary* summary = nullptr,
                           const std::vector<NamedRun>& fleet = {});

/// The level a run was made at (its plan's: quick, standard or full); "" for a run without a plan.
std::string runLevel(const Run& run);

}  // namespace peerlab::report
