#include "harness/report/render/console.h"

#include "harness/report/actions.h"

namespace peerlab::report {

std::string formatCheckLines(const std::vector<Check>& checks) {
  std::string out;
  for (CheckStatus want : {CheckStatus::kFail, CheckStatus::kWarn, CheckStatus::kUnsupported, CheckStatus::kSkipped}) {
    for (const Check& c : checks) {
      if (c.status != want) continue;
      out += checkStatusLabel(c.status) + " " + c.category + ": " + c.name + ": measured " +
             (c.measured.empty() ? std::string("-") : c.measured) + ", expected " +
             (c.expected.empty() ? std::string("-") : c.expected) + (c.basis.empty() ? "" : " (" + c.basis + ")") +
             ": " + c.reason + "\n";
      if (const std::string a = actionLine(c); !a.empty()) out += "  action: " + a + "\n";
    }
  }
  return out;
}

}  // namespace peerlab::report
