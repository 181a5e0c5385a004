// The render room's escapers: XML that stays valid XML 1.0, Markdown text that cannot open HTML or break a table,
// Markdown code spans that hold any text verbatim.
#include "harness/report/render/escape.h"

#include <gtest/gtest.h>

#include <string>

namespace peerlab::report {
namespace {

TEST(Escape, XmlEscapesMarkupAndShowsWhatXmlCannotHold) {
  EXPECT_EQ(xmlEscape("a<b & \"c\" 'd'>"), "a&lt;b &amp; &quot;c&quot; &apos;d&apos;&gt;");
  // HTML writes ' as &#39; and passes every other byte through as it is (the page is UTF-8).
  EXPECT_EQ(htmlEscape("a<b & \"c\" 'd'> \xe2\x86\x92"), "a&lt;b &amp; &quot;c&quot; &#39;d&#39;&gt; \xe2\x86\x92");
  EXPECT_EQ(xmlEscape("tab\tok\x1b[31m"), "tab\tok\\x1b[31m");
  EXPECT_EQ(xmlEscape(std::string("\xff") + "x"), "\\xffx");
  EXPECT_EQ(xmlEscape("\xef\xbf\xbe"), "\\uFFFE");
  EXPECT_EQ(xmlEscape("0\xe2\x86\x92"
                      "1"),
            "0\xe2\x86\x92"
            "1");
}

TEST(Escape, MarkdownCellShowsHtmlAndKeepsTheTable) {
  EXPECT_EQ(markdownCell("a|b\nc\r<script>&amp; 0->1"), "a\\|b c &lt;script>&amp;amp; 0->1");
  EXPECT_EQ(markdownCell("`peerlab repro`"), "`peerlab repro`");
  EXPECT_EQ(markdownCell("host `rm -rf ~`|", Backticks::kAsQuotes), "host 'rm -rf ~'\\|");
}

TEST(Escape, MarkdownCodeFencesPastEveryBacktickRun) {
  EXPECT_EQ(markdownCode("peerlab probe --json p.json"), "`peerlab probe --json p.json`");
  EXPECT_EQ(markdownCode("a`b``c"), "```a`b``c```");
  EXPECT_EQ(markdownCode("`x"), "`` `x ``");
  EXPECT_EQ(markdownCode("one\ntwo <b>"), "`one two <b>`");
}

}  // namespace
}  // namespace peerlab::report
