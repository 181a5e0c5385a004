// The report layer's one number formatter: each style's digits, and output of any length whole.
#include "harness/report/format.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

namespace peerlab::report {
namespace {

TEST(Format, FigureKeepsTheDigitsThatMatter) {
  EXPECT_EQ(figure(395.2), "395");
  EXPECT_EQ(figure(38.14), "38.1");
  EXPECT_EQ(figure(4.971), "4.97");
  EXPECT_EQ(figure(0.01234), "0.0123");
  EXPECT_EQ(figure(-38.14), "-38.1");
}

TEST(Format, ShortNumberAndTableFigure) {
  EXPECT_EQ(shortNumber(1234.5), "1234");
  EXPECT_EQ(shortNumber(123.45), "123.5");
  EXPECT_EQ(shortNumber(0.0456), "0.046");
  EXPECT_EQ(shortNumber(0.00123), "0.00123");
  EXPECT_EQ(shortNumber(std::nan("")), "-");
  EXPECT_EQ(tableFigure(std::nullopt), "-");
  EXPECT_EQ(tableFigure(2095.47), "2095.5");
  EXPECT_EQ(tableFigure(54.961), "54.96");
  EXPECT_EQ(tableFigure(0.812345), "0.8123");
}

TEST(Format, BytesAndExactNumbers) {
  EXPECT_EQ(formatBytes(8), "8 B");
  EXPECT_EQ(formatBytes(256.0 * 1024 * 1024), "256 MiB");
  EXPECT_EQ(formatBytes(1.5 * 1024 * 1024 * 1024), "1.5 GiB");
  EXPECT_EQ(formatBytes(2048.0 * 1024 * 1024 * 1024 * 1024), "2048 TiB");
  EXPECT_EQ(exactNumber(0.1), "0.10000000000000001");
  EXPECT_EQ(exactNumber(1e300), "1.0000000000000001e+300");
}

TEST(Format, FormattedWritesOutputOfAnyLengthWhole) {
  EXPECT_EQ(formatted("%+.2f%%", 3.14159), "+3.14%");
  EXPECT_EQ(formatted("%012llx", 0xabcdefULL), "000000abcdef");
  EXPECT_EQ(formatted("%s", ""), "");
  const std::string words(1000, 'w');
  EXPECT_EQ(formatted("[%s] %.1f", words.c_str(), 2.25), "[" + words + "] 2.2");
  // 1e300 at "%.0f" is 301 digits: no fixed buffer cuts it.
  EXPECT_EQ(formatted("%.0f", 1e300).size(), 301u);
}

}  // namespace
}  // namespace peerlab::report
