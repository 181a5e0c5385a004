#include "harness/report/checks.h"

#include <algorithm>

namespace peerlab::report {

using nlohmann::json;

json toJson(const Check& c) {
  json j = {{"category", c.category}, {"name", c.name},         {"pass", c.pass},
            {"measured", c.measured}, {"expected", c.expected}, {"reason", c.reason}};
  j["measured_value"] = c.measured_value ? json(*c.measured_value) : json(nullptr);
  j["expected_value"] = c.expected_value ? json(*c.expected_value) : json(nullptr);
  return j;
}

json toJson(const std::vector<Check>& checks) {
  json a = json::array();
  for (const Check& c : checks)
    a.push_back(toJson(c));
  return a;
}

StatusOr<std::vector<Check>> checksFromJson(const json& doc) {
  if (!doc.is_array()) return PEERLAB_INVALID_ARGUMENT("checks: must be an array");
  std::vector<Check> out;
  for (size_t i = 0; i < doc.size(); ++i) {
    const json& j = doc[i];
    const std::string where = "checks[" + std::to_string(i) + "]";
    if (!j.is_object() || !j.contains("name") || !j["name"].is_string() || !j.contains("pass") ||
        !j["pass"].is_boolean()) {
      return PEERLAB_INVALID_ARGUMENT(where + ": needs a string \"name\" and a boolean \"pass\"");
    }
    Check c;
    c.name = j["name"].get<std::string>();
    c.pass = j["pass"].get<bool>();
    auto str = [&](const char* k) { return j.contains(k) && j[k].is_string() ? j[k].get<std::string>() : ""; };
    auto opt = [&](const char* k) -> std::optional<double> {
      if (j.contains(k) && j[k].is_number()) return j[k].get<double>();
      return std::nullopt;
    };
    c.category = str("category");
    c.measured = str("measured");
    c.expected = str("expected");
    c.reason = str("reason");
    c.measured_value = opt("measured_value");
    c.expected_value = opt("expected_value");
    out.push_back(std::move(c));
  }
  return out;
}

std::string checkVerdict(const Check& check) {
  if (!check.pass) return "fail";
  if (check.category == "health" && (check.measured == "warn" || check.measured == "unsupported"))
    return check.measured;
  return "pass";
}

int failedChecks(const std::vector<Check>& checks) {
  return static_cast<int>(std::count_if(checks.begin(), checks.end(), [](const Check& c) { return !c.pass; }));
}

}  // namespace peerlab::report
