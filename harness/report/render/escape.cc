#include "harness/report/render/escape.h"

#include <nlohmann/json.hpp>

#include <algorithm>

#include "harness/report/format.h"

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

// The entity of a character that markup must not hold as itself (&, <, >, " and '), or nullptr; `apos` is how '
// is written (XML's &apos;, HTML's &#39;).
const char* markupEntity(char32_t c, const char* apos) {
  switch (c) {
    case '&':
      return "&amp;";
    case '<':
      return "&lt;";
    case '>':
      return "&gt;";
    case '"':
      return "&quot;";
    case '\'':
      return apos;
    default:
      return nullptr;
  }
}

}  // namespace

std::string xmlEscape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    char32_t cp = 0;
    const size_t n = decodeUtf8(text, i, cp);
    if (n == 0) {
      // A byte that is not UTF-8.
      out += formatted("\\x%02x", static_cast<unsigned>(static_cast<unsigned char>(text[i])));
      ++i;
      continue;
    }
    if (const char* entity = markupEntity(cp, "&apos;")) {
      out += entity;
    } else if ((cp < 0x20 && cp != '\t' && cp != '\n' && cp != '\r') || cp == 0x7f) {
      // XML 1.0 allows no control character but tab, newline and carriage return (DEL is discouraged).
      out += formatted("\\x%02x", static_cast<unsigned>(cp));
    } else if ((cp >= 0x80 && cp <= 0x9f) || cp == 0xfffe || cp == 0xffff) {
      // C1 controls (discouraged) and U+FFFE/U+FFFF (not characters in XML 1.0).
      out += formatted("\\u%04X", static_cast<unsigned>(cp));
    } else {
      out.append(text.substr(i, n));
    }
    i += n;
  }
  return out;
}

// Text from a run in Markdown: HTML in it is shown, never interpreted (a renderer of summary.md passes inline HTML
// through: <script>, <img onerror>, <!-- would hide the rest), and it cannot break a table or a line. '<' and '&'
// are enough: no tag, comment or entity starts without one ('>' stays readable in "0->1").
std::string markdownCell(const std::string& text, Backticks backticks) {
  std::string out;
  for (char ch : text) {
    if (ch == '`' && backticks == Backticks::kAsQuotes) {
      out += '\'';
    } else if (ch == '|') {
      out += "\\|";
    } else if (ch == '\n' || ch == '\r') {
      out += ' ';
    } else if (ch == '<') {
      out += "&lt;";
    } else if (ch == '&') {
      out += "&amp;";
    } else {
      out += ch;
    }
  }
  return out;
}

// A Markdown code span holding `text` verbatim: fenced by more backticks than any run of them inside (no HTML is
// interpreted in a code span).
std::string markdownCode(const std::string& text) {
  size_t longest = 0, run = 0;
  std::string flat;
  for (char ch : text) {
    run = ch == '`' ? run + 1 : 0;
    longest = std::max(longest, run);
    flat += ch == '\n' || ch == '\r' ? ' ' : ch;
  }
  const std::string fence(longest + 1, '`');
  const bool pad = !flat.empty() && (flat.front() == '`' || flat.back() == '`');
  return fence + (pad ? " " : "") + flat + (pad ? " " : "") + fence;
}

std::string htmlEscape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (const char* entity = markupEntity(static_cast<unsigned char>(c), "&#39;")) {
      out += entity;
    } else {
      out += c;
    }
  }
  return out;
}

std::string scriptJson(const nlohmann::json& doc) {
  const std::string text = doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string out;
  out.reserve(text.size());
  // Inside a string these escapes mean the same characters; outside strings JSON has none of them.
  for (char c : text) {
    if (c == '<') {
      out += "\\u003c";
    } else if (c == '>') {
      out += "\\u003e";
    } else if (c == '&') {
      out += "\\u0026";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace peerlab::report
