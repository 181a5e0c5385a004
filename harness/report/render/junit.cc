#include "harness/report/render/junit.h"

#include <map>
#include <sstream>

#include "harness/report/actions.h"
#include "harness/report/format.h"
#include "harness/report/render/escape.h"

namespace peerlab::report {

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
  const std::string t = formatted("%.3f", options.time_s);
  std::ostringstream x;
  x << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  // A comment may not hold "--".
  std::string comment = std::string(verdictWord(all)) + ": " + formatCounts(all) +
                        (options.disabled_rules.empty() ? "" : "; " + options.disabled_rules) +
                        (options.injected.empty() ? "" : "; INJECTED: " + options.injected);
  for (size_t p; (p = comment.find("--")) != std::string::npos;)
    comment.replace(p, 2, "- -");
  x << "<!-- " << xmlEscape(comment) << " -->\n";
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
    if (!options.disabled_rules.empty() || !options.injected.empty()) {
      x << "    <properties>\n";
      if (!options.disabled_rules.empty())
        x << "      <property name=\"disabled_rules\" value=\"" << xmlEscape(options.disabled_rules) << "\"/>\n";
      if (!options.injected.empty())
        x << "      <property name=\"injected\" value=\"" << xmlEscape(options.injected) << "\"/>\n";
      x << "    </properties>\n";
    }
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
