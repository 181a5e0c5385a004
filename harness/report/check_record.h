#pragma once
/// The stored record of a check, as a run file holds it under "qualify.checks": its status, figures and the id of its
/// recommended action, with its bounded parse (the run reader validates stored checks with it). What checks are made,
/// how they are counted and what an action id means live in the checks engine (harness/report/checks.h, actions.h).

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "reference/core/status.h"

namespace peerlab::report {

/// pass and warn do not fail a run; unsupported (the driver or GPU cannot say) and skipped (not run, and why) are
/// never counted as passed; fail fails the run.
enum class CheckStatus { kPass, kWarn, kUnsupported, kSkipped, kFail };

/// "pass", "warn", "unsupported", "skipped", "fail".
const char* checkStatusName(CheckStatus s);
/// "PASS", "WARN", "UNSUPPORTED", "SKIPPED", "FAIL".
std::string checkStatusLabel(CheckStatus s);
std::optional<CheckStatus> checkStatusFromName(const std::string& name);

/// The category of the verified probe's checks: a check family (not a suite).
inline constexpr const char* kProbeCategory = "probe";

struct Check {
  std::string category;  ///< topology, health, probe, data, bandwidth, latency, coverage, baseline
  std::string name;      ///< "peer_copy peerlab.ce uni 0->1"
  CheckStatus status = CheckStatus::kPass;
  std::string measured;  ///< "381.2 GB/s at 256 MiB"
  std::string expected;  ///< ">= 382.5 GB/s"
  std::string basis;     ///< where the expected figure comes from: "NV18 x 26.5625 GB/s x 0.80 [rule peer_copy_ce_uni]"
  std::string reason;    ///< one line: why this status, with the numbers behind it
  std::optional<double> measured_value;
  std::optional<double> expected_value;
  std::string action;  ///< a failed check: the id of its recommended action (harness/report/actions.h), else ""

  bool failed() const { return status == CheckStatus::kFail; }
};

/// Reads stored checks as written by the checks engine (and by earlier versions, which stored "pass" without a
/// status); `where` is the JSON path in errors, `invalid_argument` names the offending entry. An action's id is kept
/// as stored, a bounded name: what it means is the action table's to say.
StatusOr<std::vector<Check>> checkRecordsFromJson(const nlohmann::json& doc, const std::string& where = "$.checks");

}  // namespace peerlab::report
