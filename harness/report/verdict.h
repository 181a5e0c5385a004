#pragma once
/// The verdict of a run recomputed from its results, never taken from what the run file says: probe cells the
/// driver claims must verify, data checks must find no wrong element, the plan's expectations and latency bounds
/// stored in the run must hold, and every suite the plan ran must have results.

#include <optional>
#include <string>
#include <vector>

#include "harness/report/checks.h"
#include "harness/report/report.h"

namespace peerlab::report {

struct RunVerdict {
  std::optional<bool> stored_pass;  ///< the stored qualify verdict ("qualify"."verdict" PASS/FAIL), when present
  bool pass = true;                 ///< every recomputed check passed
  /// Recomputed checks (categories probe, data, bandwidth, latency, coverage), then the stored checks that cannot be
  /// recomputed from results (topology, baseline).
  std::vector<Check> checks;
  /// True when the stored verdict says PASS but the data says otherwise.
  bool storedPassContradicted() const { return stored_pass.value_or(false) && !pass; }
};

/// The bandwidth a result should reach by the plan stored in its run (the first matching expectation).
struct ExpectedFigure {
  std::string metric;  ///< algbw_gbps or busbw_gbps
  double gbps = 0;
  std::string basis;  ///< "NV18 x 26.5625 GB/s x 0.80"
};
std::optional<ExpectedFigure> expectedFigure(const Run& run, const Result& r);

/// Recomputes the verdict of `run` from its results and the plan stored in it (run.extra "plan": "expectations",
/// "latency", "jobs", "probe"). A run without a plan gets the probe and data checks only.
RunVerdict recomputeVerdict(const Run& run);

}  // namespace peerlab::report
