#pragma once
/// Qualify checks: every measured figure against the plan's expectations and latency bounds, the probe's verdicts
/// against the driver's claims, every result's data check, and (optionally) every result against a baseline run.

#include <string>
#include <vector>

#include "harness/qualify/config.h"
#include "harness/qualify/plan.h"
#include "harness/report/checks.h"
#include "harness/report/report.h"

namespace peerlab::qualify {

struct CheckInputs {
  const Plan* plan = nullptr;
  const QualifyConfig* config = nullptr;
  const report::Run* run = nullptr;
  const report::Run* baseline = nullptr;  ///< optional
  double baseline_threshold_pct = 5;
  bool probe_expected = true;  ///< the probe was part of the run (its absence is a failure)
};

/// All checks, in a stable order: topology, health, probe, data, bandwidth, latency, coverage, baseline.
std::vector<report::Check> evaluateChecks(const CheckInputs& in);

/// "warn" or "unsupported" for a passing health check that is a warning or could not run; "" otherwise.
std::string healthLevel(const report::Check& check);

}  // namespace peerlab::qualify
