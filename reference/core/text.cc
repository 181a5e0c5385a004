#include "reference/core/text.h"

#include <algorithm>
#include <cctype>
#include <cstdio>

namespace peerlab {
namespace {

// Length of the UTF-8 sequence starting at s[i] (1-4), or 0 when the bytes there are not UTF-8.
size_t utf8Length(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  size_t n = 0;
  if (c >= 0xc2 && c <= 0xdf) {
    n = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k)
    if ((b(i + k) & 0xc0) != 0x80) return 0;
  // Overlong three- and four-byte forms, surrogates and code points above U+10FFFF.
  if (c == 0xe0 && b(i + 1) < 0xa0) return 0;
  if (c == 0xed && b(i + 1) >= 0xa0) return 0;
  if (c == 0xf0 && b(i + 1) < 0x90) return 0;
  if (c == 0xf4 && b(i + 1) >= 0x90) return 0;
  return n;
}

bool startsWithNoCase(std::string_view s, size_t at, std::string_view word) {
  if (at + word.size() > s.size()) return false;
  for (size_t k = 0; k < word.size(); ++k) {
    char c = s[at + k];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c != word[k]) return false;
  }
  return true;
}

}  // namespace

std::string printable(std::string_view text, size_t max_bytes) {
  const bool cut = text.size() > max_bytes;
  if (cut) text = text.substr(0, max_bytes);
  std::string out;
  out.reserve(text.size() + 3);
  char buf[8];
  for (size_t i = 0; i < text.size();) {
    const char c = text[i];
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x80) {
      if (c == '\n') {
        out += "\\n";
      } else if (c == '\r') {
        out += "\\r";
      } else if (c == '\t') {
        out += "\\t";
      } else if (u < 0x20 || u == 0x7f) {
        std::snprintf(buf, sizeof(buf), "\\x%02x", u);
        out += buf;
      } else {
        out += c;
      }
      ++i;
      continue;
    }
    const size_t n = utf8Length(text, i);
    if (n == 0) {
      std::snprintf(buf, sizeof(buf), "\\x%02x", u);
      out += buf;
      ++i;
    } else if (n == 2 && u == 0xc2 && static_cast<unsigned char>(text[i + 1]) < 0xa0) {
      // C1 controls (U+0080..U+009F): CSI among them starts a terminal escape sequence.
      std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned char>(text[i + 1]));
      out += buf;
      i += 2;
    } else {
      out.append(text.substr(i, n));
      i += n;
    }
  }
  if (cut) out += "...";
  return out;
}

std::string redactSecrets(std::string_view text) {
  std::string out(text);
  // user:password@ after "://".
  for (size_t scheme = out.find("://"); scheme != std::string::npos; scheme = out.find("://", scheme + 3)) {
    const size_t start = scheme + 3;
    const size_t end = out.find_first_of(" \t\"'", start);
    const size_t at = out.rfind('@', end == std::string::npos ? out.size() : end);
    if (at == std::string::npos || at < start) continue;
    const size_t colon = out.find(':', start);
    if (colon == std::string::npos || colon > at) continue;
    out.replace(colon + 1, at - colon - 1, "***");
  }
  // password=... as a URL parameter or a conninfo keyword (password = 'x y').
  for (size_t i = 0; i < out.size(); ++i) {
    if (!startsWithNoCase(out, i, "password")) continue;
    if (i > 0 && (std::isalnum(static_cast<unsigned char>(out[i - 1])) || out[i - 1] == '_')) continue;
    size_t v = i + 8;
    while (v < out.size() && out[v] == ' ')
      ++v;
    if (v >= out.size() || out[v] != '=') continue;
    ++v;
    while (v < out.size() && out[v] == ' ')
      ++v;
    size_t end = v;
    // libpq takes a backslash before any character of a value (an escaped quote, an escaped space): what follows a
    // backslash is part of the password, never its end.
    if (end < out.size() && out[end] == '\'') {
      ++end;
      while (end < out.size() && out[end] != '\'')
        end += out[end] == '\\' ? 2 : 1;
      end = std::min(out.size(), end + 1);
    } else {
      while (end < out.size() && out[end] != '&' && out[end] != ' ' && out[end] != '#' && out[end] != '"')
        end += out[end] == '\\' ? 2 : 1;
      end = std::min(end, out.size());
    }
    out.replace(v, end - v, "***");
    i = v + 3;
  }
  return out;
}

}  // namespace peerlab
