#include "harness/report/junit.h"

#include <cstdio>
#include <map>
#include <sstream>

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
  int failures = 0;
  for (const Check& c : checks) {
    const std::string cat = c.category.empty() ? "general" : c.category;
    if (!byCategory.count(cat)) order.push_back(cat);
    byCategory[cat].push_back(&c);
    failures += c.pass ? 0 : 1;
  }
  char t[32];
  std::snprintf(t, sizeof(t), "%.3f", options.time_s);
  std::ostringstream x;
  x << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  x << "<testsuites name=\"" << xmlEscape(options.name) << "\" tests=\"" << checks.size() << "\" failures=\""
    << failures << "\" errors=\"0\" time=\"" << t << "\">\n";
  for (const std::string& cat : order) {
    const auto& list = byCategory[cat];
    int f = 0, skipped = 0;
    for (const Check* c : list) {
      f += c->pass ? 0 : 1;
      skipped += checkVerdict(*c) == "unsupported";
    }
    const std::string suite = options.name + "." + cat;
    x << "  <testsuite name=\"" << xmlEscape(suite) << "\" tests=\"" << list.size() << "\" failures=\"" << f
      << "\" errors=\"0\" skipped=\"" << skipped << "\" time=\"0\"";
    if (!options.timestamp.empty()) x << " timestamp=\"" << xmlEscape(options.timestamp) << "\"";
    if (!options.hostname.empty()) x << " hostname=\"" << xmlEscape(options.hostname) << "\"";
    x << ">\n";
    for (const Check* c : list) {
      x << "    <testcase classname=\"" << xmlEscape(suite) << "\" name=\"" << xmlEscape(c->name) << "\" time=\"0\">\n";
      std::string numbers = "measured " + (c->measured.empty() ? std::string("-") : c->measured) + "; expected " +
                            (c->expected.empty() ? std::string("-") : c->expected);
      if (checkVerdict(*c) == "unsupported") x << "      <skipped message=\"" << xmlEscape(c->reason) << "\"/>\n";
      if (!c->pass) {
        x << "      <failure type=\"check failed\" message=\"" << xmlEscape(numbers + ": " + c->reason) << "\">"
          << xmlEscape(c->name + "\n" + numbers + "\n" + c->reason) << "</failure>\n";
      }
      x << "      <system-out>" << xmlEscape(numbers + "\n" + c->reason) << "</system-out>\n";
      x << "    </testcase>\n";
    }
    x << "  </testsuite>\n";
  }
  x << "</testsuites>\n";
  return x.str();
}

}  // namespace peerlab::report
