#pragma once
/// Checks as the engine makes and counts them: the one way checks are counted and a run's verdict folded, and their
/// JSON with the recommended action resolved. Every output (console, summary.md, report.html, junit.xml, results.json,
/// `peerlab report`, the history) prints counts made by countChecks() and a status made by checkStatusName().

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "harness/report/check_record.h"
#include "reference/core/status.h"

namespace peerlab::report {

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

/// A check's JSON with its action's id, short form and text from the action table (none for an id it lacks).
nlohmann::json toJson(const Check& check);
nlohmann::json toJson(const std::vector<Check>& checks);
/// Stored checks (checkRecordsFromJson) with only the action ids this peerlab's table holds kept: an action from
/// elsewhere is dropped rather than shown with a text this peerlab cannot vouch for.
StatusOr<std::vector<Check>> checksFromJson(const nlohmann::json& doc, const std::string& where = "$.checks");

}  // namespace peerlab::report
