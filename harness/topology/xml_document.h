#pragma once
/// Topology XML files read through libxml2 into a plain element tree (names, attributes with entities decoded,
/// children, line numbers; text ignored), which the NCCL reader walks and the hwloc pre-checks inspect. libxml2
/// gives a malformed or truncated file its one-line reason; no network access and no external entities are loaded,
/// and a document that declares any entity (internal or external) is refused before it is expanded.

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "reference/core/status.h"

namespace peerlab::topology {

struct XmlElement {
  std::string name;
  std::vector<std::pair<std::string, std::string>> attributes;  ///< in document order
  std::vector<XmlElement> children;
  int line = 0;  ///< line of the opening tag, from 1

  /// The attribute's value, or nullptr when absent.
  const std::string* attribute(std::string_view key) const;
};

/// Parses one document with libxml2; `invalid_argument` with "line N: <libxml2's first error>" when it is not
/// well-formed XML (nesting deeper than libxml2's limit of 256 included). Input quoted in the reason goes through
/// printable().
StatusOr<XmlElement> parseXml(std::string_view text);

/// How much of one input value a message quotes.
constexpr size_t kQuoteLimit = 64;

/// Input text as it may be quoted in a one-line message: control characters escaped as \n, \r, \t or \xNN; text
/// longer than `max_bytes` is cut there and ends in "...".
/// peerlab::printable (reference/core/text.h), the one helper every message uses.
std::string printable(std::string_view text, size_t max_bytes = std::string_view::npos);

}  // namespace peerlab::topology
