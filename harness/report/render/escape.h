#pragma once
/// The escapers of the render room, one per format: text in XML (junit.xml) and text and code in Markdown (summary.md,
/// the repro bundle's README.md). Text in HTML and JSON inside a <script> element: htmlEscape and scriptJson
/// (chart_page.h).

#include <string>
#include <string_view>

namespace peerlab::report {

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
