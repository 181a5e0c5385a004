#include "harness/report/check_record.h"

#include <cctype>

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

StatusOr<std::vector<Check>> checkRecordsFromJson(const json& doc, const std::string& where) {
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
      // Only the id is read back (the short form and text are the action table's).
      if (auto a = j.opt("action")) {
        if (a->json().is_object()) c.action = a->str("id", "", kMaxNameBytes);
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
