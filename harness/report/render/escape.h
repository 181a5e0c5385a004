#pragma once
/// The escapers of the render room, one per format: text in HTML (every page), JSON inside a <script> element (the
/// charts' configs), text in XML (junit.xml) and text and code in Markdown (summary.md, the repro bundle's README.md).

#include <nlohmann/json_fwd.hpp>

#include <string>
#include <string_view>

namespace peerlab::report {

/// Escapes &, <, >, " and ' for HTML text and attribute values.
std::string htmlEscape(std::string_view text);
/// JSON for a <script> element: <, > and & written as \u003c, \u003e, \u0026, so that no value can end the element
/// or open a comment ("</script>", "<!--").
std::string scriptJson(const nlohmann::json& doc);

/// Escapes text for XML attributes and content. What XML 1.0 does not take is shown as an escape instead: control
/// characters other than tab, newline and return as \x1b, bytes that are not UTF-8 as \xff, U+FFFE and U+FFFF (and
/// the discouraged C1 controls) as \uFFFE.
std::string xmlEscape(std::string_view text);

/// What markdownCell does with a backtick: keep it (summary.md, whose own texts hold code spans), or write it as '
/// where run text shares a line with code spans of the page's own, which a stray backtick would pair with.
enum class Backticks { kKeep, kAsQuotes };
/// Text from a run in Markdown (a table cell, a list item): HTML in it is shown, never interpreted, and it cannot
/// break a table or a line.
std::string markdownCell(const std::string& text, Backticks backticks = Backticks::kKeep);
/// A Markdown code span holding `text` verbatim (newlines as spaces).
std::string markdownCode(const std::string& text);

}  // namespace peerlab::report
