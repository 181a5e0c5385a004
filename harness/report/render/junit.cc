#include "harness/report/render/junit.h"

#include <cstdio>
#include <map>
#include <sstream>

#include "harness/report/actions.h"

namespace peerlab::report {

namespace {

// Length of the UTF-8 sequence at s[i] (1-4) and its code point, or 0 when the bytes there are not UTF-8 (overlong
// forms, surrogates and code points beyond U+10FFFF included).
size_t decodeUtf8(std::string_view s, size_t i, char32_t& cp) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  size_t n = 0;
  if (c < 0x80) {
    cp = c;
    return 1;
  }
  if (c >= 0xc2 && c <= 0xdf) {
    n = 2;
    cp = c & 0x1f;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    cp = c & 0x0f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3f);
  }
  if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff) return 0;
  return n;
}

}  // namespace

std::string xmlEscape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  char buf[16];
  for (size_t i = 0; i < text.size();) {
    char32_t cp = 0;
    const size_t n = decodeUtf8(text, i, cp);
    if (n == 0) {
      // A byte that is not UTF-8.
      std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned char>(text[i]));
      out += buf;
      ++i;
      continue;
    }
    switch (cp) {
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
        if ((cp < 0x20 && cp != '\t' && cp != '\n' && cp != '\r') || cp == 0x7f) {
          // XML 1.0 allows no control character but tab, newline and carriage return (DEL is discouraged).
          std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(cp));
          out += buf;
        } else if ((cp >= 0x80 && cp <= 0x9f) || cp == 0xfffe || cp == 0xffff) {
          // C1 controls (discouraged) and U+FFFE/U+FFFF (not characters in XML 1.0).
          std::snprintf(buf, sizeof(buf), "\\u%04X", static_cast<unsigned>(cp));
          out += buf;
        } else {
          out.append(text.substr(i, n));
        }
    }
    i += n;
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
