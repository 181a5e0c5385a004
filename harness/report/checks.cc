#include "harness/report/checks.h"

#include <cctype>

#include "harness/report/actions.h"
#include "harness/report/json_in.h"

namespace peerlab::report {

using nlohmann::json;

const char* checkStatusName(CheckStatus s) {
  switch (s) {
    case CheckStatus::kPass:
      return "pass";
    case CheckStatus::kWarn:
      return "warn";
    case CheckStatus::kUnsupported:
      return "unsupported";
    case CheckStatus::kSkipped:
      return "skipped";
    case CheckStatus::kFail:
      return "fail";
  }
  return "fail";
}

std::string checkStatusLabel(CheckStatus s) {
  std::string l = checkStatusName(s);
  for (char& c : l)
    c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return l;
}

std::optional<CheckStatus> checkStatusFromName(const std::string& name) {
  for (CheckStatus s :
       {CheckStatus::kPass, CheckStatus::kWarn, CheckStatus::kUnsupported, CheckStatus::kSkipped, CheckStatus::kFail}) {
    if (name == checkStatusName(s)) return s;
  }
  return std::nullopt;
}

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
  return readJson([&] {
    const In a(doc, where);
    if (a.size() > 1000000) a.fail("holds more checks than the 1000000 allowed");
    std::vector<Check> out;
    for (size_t i = 0; i < a.size(); ++i) {
      const In j = a.item(i);
      Check c;
      c.name = j.at("name").str();
      c.category = j.str("category", "", kMaxNameBytes);
      c.measured = j.str("measured", "");
      c.expected = j.str("expected", "");
      c.basis = j.str("basis", "");
      c.reason = j.str("reason", "");
      c.measured_value = j.num("measured_value", -1e300, 1e300);
      c.expected_value = j.num("expected_value", -1e300, 1e300);
      // Only the id is read back; an id this peerlab does not know is left out.
      if (auto a = j.opt("action")) {
        if (a->json().is_object()) {
          const std::string id = a->str("id", "", kMaxNameBytes);
          if (actionById(id)) c.action = id;
        }
      }
      if (auto s = j.opt("status")) {
        auto status = checkStatusFromName(s->str(kMaxNameBytes));
        if (!status) s->fail("\"" + s->str() + "\" is not one of pass, warn, unsupported, skipped, fail");
        c.status = *status;
      } else {
        // Written before statuses: a health check that passed kept its verdict in "measured".
        const bool pass = j.at("pass").boolean();
        c.status = !pass                                                   ? CheckStatus::kFail
                   : c.category == "health" && c.measured == "warn"        ? CheckStatus::kWarn
                   : c.category == "health" && c.measured == "unsupported" ? CheckStatus::kUnsupported
                                                                           : CheckStatus::kPass;
      }
      out.push_back(std::move(c));
    }
    return out;
  });
}

}  // namespace peerlab::report
