#include "harness/report/junit.h"

#include <cstdio>
#include <map>
#include <sstream>

#include "harness/report/summary.h"

namespace peerlab::report {

std::string xmlEscape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char ch : text) {
    const auto u = static_cast<unsigned char>(ch);
    switch (ch) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        // XML 1.0 allows no control characters other than tab, newline and carriage return.
        if (u < 0x20 && ch != '\t' && ch != '\n' && ch != '\r') continue;
        out += ch;
    }
  }
  return out;
}

std::string renderJunit(const std::vector<Check>& checks, const JunitOptions& options) {
  std::map<std::string, std::vector<const Check*>> byCategory;
  std::vector<std::string> order;
  for (const Check& c : checks) {
    const std::string cat = c.category.empty() ? "general" : c.category;
    if (!byCategory.count(cat)) order.push_back(cat);
    byCategory[cat].push_back(&c);
  }
  // JUnit knows passed, failed and skipped: unsupported and skipped checks are skipped there; the attributes passed,
  // warnings and unsupported carry the rest of the counts every other output prints.
  auto attributes = [](const CheckCounts& n) {
    std::ostringstream a;
    a << "tests=\"" << n.total << "\" failures=\"" << n.failed << "\" errors=\"0\" skipped=\""
      << n.unsupported + n.skipped << "\" passed=\"" << n.passed << "\" warnings=\"" << n.warnings
      << "\" unsupported=\"" << n.unsupported << "\" not_run=\"" << n.skipped << "\"";
    return a.str();
  };
  const CheckCounts all = countChecks(checks);
  char t[32];
  std::snprintf(t, sizeof(t), "%.3f", options.time_s);
  std::ostringstream x;
  x << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  x << "<!-- " << xmlEscape(std::string(verdictWord(all)) + ": " + formatCounts(all)) << " -->\n";
  x << "<testsuites name=\"" << xmlEscape(options.name) << "\" " << attributes(all) << " time=\"" << t << "\">\n";
  for (const std::string& cat : order) {
    const auto& list = byCategory[cat];
    std::vector<Check> mine;
    for (const Check* c : list)
      mine.push_back(*c);
    const std::string suite = options.name + "." + cat;
    x << "  <testsuite name=\"" << xmlEscape(suite) << "\" " << attributes(countChecks(mine)) << " time=\"0\"";
    if (!options.timestamp.empty()) x << " timestamp=\"" << xmlEscape(options.timestamp) << "\"";
    if (!options.hostname.empty()) x << " hostname=\"" << xmlEscape(options.hostname) << "\"";
    x << ">\n";
    for (const Check* c : list) {
      x << "    <testcase classname=\"" << xmlEscape(suite) << "\" name=\"" << xmlEscape(c->name) << "\" time=\"0\">\n";
      const std::string numbers = "measured " + (c->measured.empty() ? std::string("-") : c->measured) + "; expected " +
                                  (c->expected.empty() ? std::string("-") : c->expected) +
                                  (c->basis.empty() ? "" : " (" + c->basis + ")");
      const std::string status = checkStatusLabel(c->status);
      if (c->status == CheckStatus::kUnsupported || c->status == CheckStatus::kSkipped) {
        x << "      <skipped message=\"" << xmlEscape(status + ": " + c->reason) << "\"/>\n";
      }
      if (c->failed()) {
        const std::string action = actionLine(*c);
        x << "      <failure type=\"check failed\" message=\""
          << xmlEscape(numbers + ": " + c->reason + (action.empty() ? "" : " (action: " + action + ")")) << "\">"
          << xmlEscape(c->name + "\n" + numbers + "\n" + c->reason + (action.empty() ? "" : "\naction: " + action))
          << "</failure>\n";
      }
      x << "      <system-out>" << xmlEscape(status + ": " + numbers + "\n" + c->reason) << "</system-out>\n";
      x << "    </testcase>\n";
    }
    x << "  </testsuite>\n";
  }
  x << "</testsuites>\n";
  return x.str();
}

}  // namespace peerlab::report
