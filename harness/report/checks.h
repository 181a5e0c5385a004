#pragma once
/// A check: one measured figure (or verdict) against what the plan, the config or a baseline expects, with a status,
/// and the one way checks are counted. Every output (console, summary.md, report.html, junit.xml, results.json,
/// `peerlab report`, the history) prints counts made by countChecks() and a status made by checkStatusName().

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

/// The counts every output prints.
struct CheckCounts {
  int total = 0;
  int passed = 0;
  int warnings = 0;
  int unsupported = 0;
  int skipped = 0;
  int failed = 0;
  /// Nothing failed and something was checked: zero checks is not a pass (its verdict is EMPTY).
  bool pass() const { return failed == 0 && total > 0; }
  bool empty() const { return total == 0; }
};

CheckCounts countChecks(const std::vector<Check>& checks);
/// "PASS", "FAIL", or "EMPTY" when nothing was checked (zero checks: a run with no result any check applies to).
const char* verdictWord(const CheckCounts& counts);
/// "91 checks: 87 passed, 1 failed, 1 warning, 2 unsupported, 0 skipped" (every count, always in this order).
std::string formatCounts(const CheckCounts& counts);
nlohmann::json toJson(const CheckCounts& counts);
/// "category name: reason (measured M, expected E)" of the first failed check, "" when none failed.
std::string firstFailure(const std::vector<Check>& checks);

nlohmann::json toJson(const Check& check);
nlohmann::json toJson(const std::vector<Check>& checks);
/// Reads checks written by toJson (and by earlier versions, which stored "pass" without a status); `where` is the
/// JSON path in errors. `invalid_argument` names the offending entry.
StatusOr<std::vector<Check>> checksFromJson(const nlohmann::json& doc, const std::string& where = "$.checks");

}  // namespace peerlab::report
