#include "harness/report/checks.h"

#include "harness/report/actions.h"

namespace peerlab::report {

using nlohmann::json;

CheckCounts countChecks(const std::vector<Check>& checks) {
  CheckCounts n;
  for (const Check& c : checks) {
    ++n.total;
    switch (c.status) {
      case CheckStatus::kPass:
        ++n.passed;
        break;
      case CheckStatus::kWarn:
        ++n.warnings;
        break;
      case CheckStatus::kUnsupported:
        ++n.unsupported;
        break;
      case CheckStatus::kSkipped:
        ++n.skipped;
        break;
      case CheckStatus::kFail:
        ++n.failed;
        break;
    }
  }
  return n;
}

const char* verdictWord(const CheckCounts& counts) {
  if (counts.empty()) return "EMPTY";
  return counts.pass() ? "PASS" : "FAIL";
}

std::string formatCounts(const CheckCounts& n) {
  return std::to_string(n.total) + " checks: " + std::to_string(n.passed) + " passed, " + std::to_string(n.failed) +
         " failed, " + std::to_string(n.warnings) + (n.warnings == 1 ? " warning, " : " warnings, ") +
         std::to_string(n.unsupported) + " unsupported, " + std::to_string(n.skipped) + " skipped";
}

std::string firstFailure(const std::vector<Check>& checks) {
  for (const Check& c : checks) {
    if (c.failed()) {
      return c.category + " " + c.name + ": " + c.reason + " (measured " + c.measured + ", expected " + c.expected +
             ")";
    }
  }
  return "";
}

json toJson(const CheckCounts& n) {
  return {{"verdict", verdictWord(n)}, {"total", n.total},       {"passed", n.passed},
          {"failed", n.failed},        {"warnings", n.warnings}, {"unsupported", n.unsupported},
          {"skipped", n.skipped}};
}

json toJson(const Check& c) {
  json j = {{"category", c.category}, {"name", c.name},         {"status", checkStatusName(c.status)},
            {"pass", !c.failed()},    {"measured", c.measured}, {"expected", c.expected},
            {"basis", c.basis},       {"reason", c.reason}};
  j["measured_value"] = c.measured_value ? json(*c.measured_value) : json(nullptr);
  j["expected_value"] = c.expected_value ? json(*c.expected_value) : json(nullptr);
  if (const std::optional<Action> a = actionById(c.action)) {
    j["action"] = {{"id", a->id}, {"short", a->short_text}, {"text", a->text}};
  }
  return j;
}

json toJson(const std::vector<Check>& checks) {
  json a = json::array();
  for (const Check& c : checks)
    a.push_back(toJson(c));
  return a;
}

StatusOr<std::vector<Check>> checksFromJson(const json& doc, const std::string& where) {
  PEERLAB_ASSIGN_OR_RETURN(std::vector<Check> checks, checkRecordsFromJson(doc, where));
  for (Check& c : checks) {
    if (!actionById(c.action)) c.action.clear();
  }
  return checks;
}

}  // namespace peerlab::report
