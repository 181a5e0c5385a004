#include "harness/report/render/site.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "harness/report/render/chart_page.h"
#include "harness/testing/site.h"
#include "reference/testing/temp_dir.h"
#include "reference/testing/testing.h"

namespace peerlab::report {
namespace {

namespace fs = std::filesystem;

using peerlab::testing::readFile;

size_t countOf(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t p = text.find(needle); p != std::string::npos; p = text.find(needle, p + needle.size()))
    ++n;
  return n;
}

/// A model as JSON (a file, a fuzz input) read and rendered: the reader's refusal, or the renderer's status.
Status renderJson(const nlohmann::json& model, const fs::path& dir, std::vector<std::string>* failures = nullptr) {
  PEERLAB_ASSIGN_OR_RETURN(SiteModel read, siteModelFromJson(model));
  return renderHistorySite(read, dir.string(), failures);
}

const std::string kPageX4 = kindPageName("h200-x4-nvswitch");
const std::string kPageX2 = kindPageName("h200-x2-nvswitch");

class SiteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("peerlab_site_test_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override {
    if (!std::getenv("PEERLAB_KEEP_SITE")) fs::remove_all(dir_);
  }
  fs::path dir_;
};

TEST_F(SiteTest, WritesIndexAndOnePagePerKind) {
  PEERLAB_ASSERT_OK(renderHistorySite(testing::historyModel(), dir_.string()));
  const std::string index = readFile((dir_ / "index.html").string());
  ASSERT_TRUE(fs::exists(dir_ / kPageX4));
  ASSERT_TRUE(fs::exists(dir_ / kPageX2));
  EXPECT_NE(index.find("href=\"" + kindPageName("h200-x4-nvswitch") + "\""), std::string::npos);
  EXPECT_NE(index.find("href=\"" + kindPageName("h200-x2-nvswitch") + "\""), std::string::npos);
  // The x4 kind has one regression and one fleet outlier, shown in the index.
  EXPECT_NE(index.find("<td class=\"cell-fail\">1</td>"), std::string::npos) << index;
  EXPECT_NE(index.find("<td class=\"cell-warn\">1</td>"), std::string::npos);
}

TEST_F(SiteTest, SplitsGroupsToAtMostEightSeriesPerPlot) {
  PEERLAB_ASSERT_OK(renderHistorySite(testing::historyModel(12, 2, 10), dir_.string()));
  const std::string page = readFile((dir_ / kPageX4).string());
  // 2 groups of 10 series -> 2 plots each, plus the latency group: 5 plots.
  EXPECT_EQ(countOf(page, "class=\"plchart\""), 5u);
  std::regex series("data-series=\"([0-9]+)\"");
  int plots = 0;
  int total = 0;
  for (auto it = std::sregex_iterator(page.begin(), page.end(), series); it != std::sregex_iterator(); ++it) {
    const int n = std::stoi((*it)[1]);
    EXPECT_LE(n, static_cast<int>(kMaxSeriesPerChart));
    EXPECT_GE(n, 1);
    total += n;
    ++plots;
  }
  EXPECT_EQ(plots, 5);
  EXPECT_EQ(total, 21);
  EXPECT_NE(page.find("peer_copy uni peerlab.ce (GB/s) (1/2)"), std::string::npos);
  // Axes carry units, and a trend's zoomed axis says so.
  EXPECT_NE(page.find("\"text\":\"algbw (GB/s) (axis zoomed to the data)\""), std::string::npos);
  EXPECT_NE(page.find("\"text\":\"time (us) (axis zoomed to the data)\""), std::string::npos);
  EXPECT_NE(page.find("\"beginAtZero\":false"), std::string::npos);
}

TEST_F(SiteTest, MarksChangePointsAndDriverChanges) {
  PEERLAB_ASSERT_OK(renderHistorySite(testing::historyModel(), dir_.string()));
  const std::string page = readFile((dir_ / kPageX4).string());
  EXPECT_NE(page.find("\"label\":\"change point\""), std::string::npos);
  EXPECT_NE(page.find("-5.0%, p=0.001"), std::string::npos);
  EXPECT_NE(page.find("driver 580.159.04 -\\u003e 590.10.01"), std::string::npos);
  // Every point's x label names its run's date and commit.
  EXPECT_NE(page.find("\"2026-11-07 02:00 1000006\""), std::string::npos);
  EXPECT_NE(page.find("p10-p90 "), std::string::npos);
}

TEST_F(SiteTest, RegressionsAndFleetListed) {
  PEERLAB_ASSERT_OK(renderHistorySite(testing::historyModel(), dir_.string()));
  const std::string page = readFile((dir_ / kPageX4).string());
  EXPECT_NE(page.find("peer_copy uni peerlab.ce 0-&gt;1 256 MiB"), std::string::npos);
  EXPECT_NE(page.find("<td class=\"cell-fail\">-5.0%</td>"), std::string::npos);
  EXPECT_NE(page.find("driver 580.159.04 -&gt; 590.10.01"), std::string::npos);
  EXPECT_NE(page.find("node-q"), std::string::npos);
  EXPECT_NE(page.find("-44.9"), std::string::npos);
  const std::string small = readFile((dir_ / kPageX2).string());
  EXPECT_NE(small.find("No series' latest change point is a worsening"), std::string::npos);
}

TEST_F(SiteTest, WeakLinkStandsOutInHeatmaps) {
  PEERLAB_ASSERT_OK(renderHistorySite(testing::historyModel(), dir_.string()));
  const std::string page = readFile((dir_ / kPageX4).string());
  // Bandwidth as % of expected: the 1->2 link at 50% is red, the others (99.3%) green.
  EXPECT_NE(page.find("background:hsl(0, 65%, 80%)\" title=\"1-&gt;2: 191.2 GB/s of 382.5 GB/s expected\" "
                      "data-fraction=\"0.500\">50.0%"),
            std::string::npos);
  EXPECT_EQ(countOf(page, "data-fraction=\"0.993\">99.3%</td>"), 11u);
  // Latency in microseconds, against the row's fastest: 2.1 us is a third of 0.7 us: red.
  EXPECT_NE(page.find("data-fraction=\"0.333\">2.10</td>"), std::string::npos);
  EXPECT_NE(page.find("Microseconds per pair"), std::string::npos);
}

TEST_F(SiteTest, MalformedModelRootWritesNothing) {
  EXPECT_EQ(renderJson(nlohmann::json::array(), dir_).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(renderJson({{"kinds", 3}}, dir_).code(), StatusCode::kInvalidArgument);
  const Status unrun = renderJson({{"kinds", nlohmann::json::array()}, {"unrun_nodes", 1}}, dir_);
  EXPECT_NE(unrun.message().find("unrun_nodes: must be an array"), std::string::npos) << unrun.message();
  EXPECT_FALSE(fs::exists(dir_));
}

// The model as JSON reads back to the same model: `history html --model` writes what a reader takes.
TEST(SiteModelJson, ReadsBackWhatItWrites) {
  const nlohmann::json written = toJson(testing::historyModel());
  PEERLAB_ASSERT_OK_AND_ASSIGN(SiteModel read, siteModelFromJson(written));
  EXPECT_EQ(toJson(read), written);
  ASSERT_EQ(read.kinds.size(), 2u);
  EXPECT_EQ(read.kinds[0].series[0].change_points[0].index, 6);
  EXPECT_EQ(read.kinds[0].heatmaps[0].cells.size(), 12u);
  // A field of the wrong type reads as absent; a heatmap that cannot be drawn reads with no GPUs.
  nlohmann::json odd = written;
  odd["kinds"][0]["series"][0]["points"][0]["p10"] = "low";
  odd["kinds"][0]["heatmaps"][0]["gpus"] = 2.5;
  PEERLAB_ASSERT_OK_AND_ASSIGN(SiteModel oddRead, siteModelFromJson(odd));
  EXPECT_FALSE(oddRead.kinds[0].series[0].points[0].p10.has_value());
  EXPECT_EQ(oddRead.kinds[0].heatmaps[0].gpus, 0);
  EXPECT_TRUE(oddRead.kinds[0].unreadable.empty());
}

// A malformed kind is named and left out; the other kinds and the index are written all the same.
TEST_F(SiteTest, MalformedKindIsLeftOutAndTheRestWritten) {
  nlohmann::json model = toJson(testing::historyModel());
  model["kinds"][0]["series"][0]["change_points"][0]["index"] = 999;
  model["kinds"].push_back({{"kind", 42}});
  std::vector<std::string> failures;
  Status st = renderJson(model, dir_, &failures);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  ASSERT_EQ(failures.size(), 2u) << st.message();
  EXPECT_NE(failures[0].find("kind \"h200-x4-nvswitch\": kinds[0].series[0].change_points[0]"), std::string::npos)
      << failures[0];
  EXPECT_NE(failures[1].find("kinds[2]: needs a non-empty string \"kind\""), std::string::npos) << failures[1];
  EXPECT_NE(st.message().find("2 of 3 kinds not rendered"), std::string::npos) << st.message();
  EXPECT_FALSE(fs::exists(dir_ / kPageX4));
  EXPECT_TRUE(fs::exists(dir_ / kPageX2));
  const std::string index = readFile((dir_ / "index.html").string());
  EXPECT_EQ(countOf(index, "not rendered: "), 2u) << index;
  EXPECT_NE(index.find("href=\"" + kPageX2 + "\""), std::string::npos);
}

// Page names: short, stable, unique for kinds that sanitize alike, and usable for any kind a run file may carry.
TEST(SitePages, NamesAreShortStableAndUnique) {
  EXPECT_EQ(kindPageName("a/b"), kindPageName("a/b"));
  EXPECT_NE(kindPageName("a/b"), kindPageName("a_b"));
  EXPECT_NE(kindPageName("a/b"), kindPageName("a:b"));
  EXPECT_EQ(kindPageName("a/b").rfind("kind-a_b-", 0), 0u) << kindPageName("a/b");
  const std::string longKind(300, 'x');
  EXPECT_LE(kindPageName(longKind).size(), 64u);
  EXPECT_NE(kindPageName(longKind), kindPageName(longKind + "y"));
  for (const std::string& kind :
       {std::string("../../etc/passwd"), std::string("<script>"), std::string("nul\0in", 6), std::string("\x1b[2J")}) {
    const std::string page = kindPageName(kind);
    EXPECT_EQ(page.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"),
              std::string::npos)
        << page;
    EXPECT_EQ(page.find(".."), std::string::npos) << page;
  }
}

TEST_F(SiteTest, KindsThatSanitizeAlikeAndLongKindsAllGetPages) {
  SiteModel model = testing::historyModel();
  KindModel base = model.kinds[1];
  model.kinds.clear();
  for (const std::string& kind : {std::string("a/b"), std::string("a_b"), std::string(300, 'k')}) {
    base.kind = kind;
    model.kinds.push_back(base);
  }
  PEERLAB_ASSERT_OK(renderHistorySite(model, dir_.string()));
  const std::string index = readFile((dir_ / "index.html").string());
  for (const KindModel& k : model.kinds) {
    const std::string page = kindPageName(k.kind);
    EXPECT_TRUE(fs::is_regular_file(dir_ / page)) << page;
    EXPECT_NE(index.find("href=\"" + page + "\""), std::string::npos) << page;
  }
}

// Numbers the store never holds but a model may: pairs far out of range, huge heatmaps, text where numbers go.
TEST_F(SiteTest, OddNumbersInTheModelRenderWithoutHarm) {
  nlohmann::json model = toJson(testing::historyModel());
  nlohmann::json& kind = model["kinds"][0];
  kind["series"][0]["src"] = 1e300;
  kind["series"][1]["dst"] = -2147483648.0;
  kind["regressions"][0]["src"] = "zero";
  kind["heatmaps"].push_back(
      {{"title", "too big"}, {"unit", "GB/s"}, {"gpus", 5000}, {"cells", nlohmann::json::array()}});
  kind["heatmaps"].push_back({{"title", "no cells"}, {"unit", "GB/s"}, {"gpus", 2}});
  kind["heatmaps"][0]["cells"].push_back({{"src", 2147483647}, {"dst", -1}, {"value", 1.0}});
  kind["heatmaps"][0]["left_out"] = 3;
  PEERLAB_ASSERT_OK(renderJson(model, dir_));
  const std::string page = readFile((dir_ / kPageX4).string());
  EXPECT_NE(page.find("too big: not drawn"), std::string::npos);
  EXPECT_NE(page.find("no cells: not drawn"), std::string::npos);
  EXPECT_NE(page.find("3 results naming a GPU outside the run's GPUs left out"), std::string::npos);
}

// Chart.js is one file beside the pages, written once per site; the index, which draws no chart, neither loads it nor
// says it is missing. Without Chart.js the pages with charts say why.
TEST_F(SiteTest, ChartJsIsWrittenOnceAndSharedByThePages) {
  if (chartJsSource().empty()) GTEST_SKIP() << "Chart.js (libjs-chart.js) not installed: " << chartJs().problem;
  PEERLAB_ASSERT_OK(renderHistorySite(testing::historyModel(), dir_.string()));
  ASSERT_TRUE(fs::is_regular_file(dir_ / kSharedChartJsName));
  EXPECT_EQ(readFile((dir_ / kSharedChartJsName).string()), chartJsSource());
  for (const std::string& page : {kPageX4, kPageX2}) {
    const std::string html = readFile((dir_ / page).string());
    EXPECT_EQ(html.find("Chart.js v3"), std::string::npos) << page << ": the library is not inlined";
    EXPECT_EQ(countOf(html, "<script src=\"chart.min.js\"></script>"), 1u) << page;
    EXPECT_LT(html.size(), chartJsSource().size()) << page;
  }
  const std::string index = readFile((dir_ / "index.html").string());
  EXPECT_EQ(index.find("chart.min.js"), std::string::npos);
  EXPECT_EQ(index.find("Charts are unavailable"), std::string::npos);
  ::setenv("PEERLAB_CHARTJS", "", 1);
  fs::remove_all(dir_);
  PEERLAB_ASSERT_OK(renderHistorySite(testing::historyModel(), dir_.string()));
  ::unsetenv("PEERLAB_CHARTJS");
  EXPECT_FALSE(fs::exists(dir_ / kSharedChartJsName));
  const std::string bare = readFile((dir_ / kPageX4).string());
  EXPECT_EQ(bare.find("<script src"), std::string::npos);
  EXPECT_NE(bare.find("Charts are unavailable: $PEERLAB_CHARTJS is empty"), std::string::npos);
}

// The file $PEERLAB_CHARTJS names is read with limits: a device that never ends, a FIFO nobody writes, a directory
// and a file beyond the size cap are refused at once, and the pages say why.
TEST_F(SiteTest, ChartJsFromTheEnvironmentIsReadWithLimits) {
  fs::create_directories(dir_);
  const std::string fifo = (dir_ / "fifo.js").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string big = (dir_ / "big.js").string();
  std::ofstream(big) << std::string(kMaxChartJsBytes + 1, 'x');
  struct Case {
    std::string path;
    std::string says;
  };
  const std::vector<Case> cases = {{"/dev/zero", "not a regular file"},
                                   {fifo, "not a regular file"},
                                   {dir_.string(), "not a regular file"},
                                   {big, "larger than the 4 MiB allowed"},
                                   {(dir_ / "missing.js").string(), "no such file"}};
  for (const Case& c : cases) {
    ::setenv("PEERLAB_CHARTJS", c.path.c_str(), 1);
    const auto t0 = std::chrono::steady_clock::now();
    const ChartJsFile& lib = chartJs();
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5)) << c.path;
    EXPECT_TRUE(lib.source.empty()) << c.path;
    EXPECT_NE(lib.problem.find(c.says), std::string::npos) << c.path << ": " << lib.problem;
    EXPECT_NE(lib.problem.find("$PEERLAB_CHARTJS " + c.path), std::string::npos) << lib.problem;
    const fs::path site = dir_ / "site";
    PEERLAB_ASSERT_OK(renderHistorySite(testing::historyModel(), site.string()));
    EXPECT_NE(readFile((site / kPageX4).string()).find(c.says), std::string::npos) << c.path;
    EXPECT_FALSE(fs::exists(site / kSharedChartJsName));
  }
  ::unsetenv("PEERLAB_CHARTJS");
}

// A site shows at most kMaxSiteKinds machine kinds; a model with more is refused before anything is written.
TEST_F(SiteTest, TooManyKindsAreRefusedAndNothingWritten) {
  SiteModel model;
  model.generated = "2026-01-01T00:00:00Z";
  for (size_t k = 0; k <= kMaxSiteKinds; ++k) {
    KindModel kind;
    kind.kind = "kind-" + std::to_string(k);
    model.kinds.push_back(kind);
  }
  Status st = renderHistorySite(model, dir_.string());
  EXPECT_FALSE(st.isOk());
  EXPECT_NE(st.message().find("1001 machine kinds; a site shows at most 1000"), std::string::npos) << st.message();
  // Read from JSON, the same model is refused by the reader.
  Status read = renderJson(toJson(model), dir_);
  EXPECT_NE(read.message().find("1001 machine kinds; a site shows at most 1000"), std::string::npos) << read.message();
  EXPECT_FALSE(fs::exists(dir_));
  model.kinds.pop_back();
  PEERLAB_ASSERT_OK(renderHistorySite(model, dir_.string()));
}

// A kind with one run draws no one-dot charts: its series are listed in a table until a second run comes.
TEST_F(SiteTest, SeriesOfOneRunAreATableNotCharts) {
  const SiteModel model = testing::historyModel(1, 2, 10);
  PEERLAB_ASSERT_OK(renderHistorySite(model, dir_.string()));
  const std::string page = readFile((dir_ / kPageX4).string());
  size_t series = 0;
  for (const KindModel& k : model.kinds)
    if (k.kind == "h200-x4-nvswitch") series = k.series.size();
  EXPECT_EQ(countOf(page, "class=\"plchart\""), 0u);
  EXPECT_NE(page.find("<h3>Series with a single run</h3>"), std::string::npos);
  const size_t table = page.find("<table class=\"single-run\">");
  ASSERT_NE(table, std::string::npos);
  EXPECT_EQ(countOf(page.substr(table, page.find("</table>", table) - table), "<tr><td"), series);
  EXPECT_GE(series, 20u);
  EXPECT_EQ(page.find(kSharedChartJsName), std::string::npos);
  // Two runs: charts again.
  PEERLAB_ASSERT_OK(renderHistorySite(testing::historyModel(2, 2, 10), dir_.string()));
  const std::string two = readFile((dir_ / kPageX4).string());
  EXPECT_GT(countOf(two, "class=\"plchart\""), 0u);
  EXPECT_EQ(two.find("Series with a single run"), std::string::npos);
}

// Where bandwidth is shown, the page says how its bytes are counted; red is kept for failed checks (change points
// are grey markers).
TEST_F(SiteTest, BytesConventionStatedAndMarkersNotRed) {
  PEERLAB_ASSERT_OK(renderHistorySite(testing::historyModel(), dir_.string()));
  const std::string page = readFile((dir_ / kPageX4).string());
  EXPECT_NE(page.find("GB/s is 10<sup>9</sup> bytes per second"), std::string::npos);
  EXPECT_NE(page.find("peer_copy: the bytes copied from the source GPU to the destination"), std::string::npos);
  EXPECT_EQ(page.find("#d62728"), std::string::npos);
}

TEST(ChartPage, SplitEvenly) {
  auto parts = splitEvenly(20, 8);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0], std::make_pair(size_t{0}, size_t{7}));
  EXPECT_EQ(parts[2].second, 20u);
  EXPECT_EQ(splitEvenly(8, 8).size(), 1u);
  EXPECT_TRUE(splitEvenly(0, 8).empty());
}

}  // namespace
}  // namespace peerlab::report

namespace peerlab::report {
namespace {

// Scale: 1,100 series of 1,000 runs (the nightly-dashboard history of one kind). Run by hand with
// --gtest_also_run_disabled_tests; it prints the time taken.
TEST(SiteScale, DISABLED_ThousandRunsElevenHundredSeries) {
  const SiteModel model = testing::historyModel(1000, 110, 10);
  const auto dir = std::filesystem::temp_directory_path() / "peerlab_site_scale";
  const auto t0 = std::chrono::steady_clock::now();
  PEERLAB_ASSERT_OK(renderHistorySite(model, dir.string()));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("site of %zu series x 1000 runs: %.2f s, page %ju bytes\n", model.kinds[0].series.size(), s,
              static_cast<uintmax_t>(std::filesystem::file_size(dir / kPageX4)));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace peerlab::report
