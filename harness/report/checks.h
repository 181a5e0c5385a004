#pragma once
/// A qualify check: one measured figure (or verdict) against what the topology, the config or a baseline expects.

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "reference/core/status.h"

namespace peerlab::report {

struct Check {
  std::string category;  ///< topology, probe, data, bandwidth, latency, baseline, coverage
  std::string name;      ///< "peer_copy peerlab.ce uni 0->1"
  bool pass = false;
  std::string measured;  ///< "381.2 GB/s at 256 MiB"
  std::string expected;  ///< ">= 382.5 GB/s (NV18 x 26.5625 GB/s x 0.80)"
  std::string reason;    ///< one line: why it passed or failed
  std::optional<double> measured_value;
  std::optional<double> expected_value;
};

nlohmann::json toJson(const Check& check);
nlohmann::json toJson(const std::vector<Check>& checks);
/// Reads checks written by toJson; `invalid_argument` names the offending entry.
StatusOr<std::vector<Check>> checksFromJson(const nlohmann::json& doc);

/// Number of failed checks.
int failedChecks(const std::vector<Check>& checks);

/// "pass", "fail", or for a passing health check whose verdict (measured) says so, "warn" or "unsupported": a
/// warning does not fail a run, and a check that could not run is never shown as passed.
std::string checkVerdict(const Check& check);

}  // namespace peerlab::report
