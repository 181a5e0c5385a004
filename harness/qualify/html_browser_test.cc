// The HTML report and the history site in a real browser: headless Chromium loads each page, its own script draws
// the Chart.js charts and marks the page, the console must stay free of errors, and a screenshot of each page is
// written to the build directory (screenshots/). Without Chromium, or with PEERLAB_SKIP_BROWSER_TEST=1, these tests
// skip with the reason; without Chart.js (libjs-chart.js) the chart checks skip with the reason.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <regex>
#include <sstream>

#include "harness/qualify/browser.h"
#include "harness/report/evaluate.h"
#include "harness/report/render/chart_page.h"
#include "harness/report/render/html.h"
#include "harness/report/render/site.h"
#include "harness/report/report.h"
#include "harness/testing/cli.h"
#include "harness/testing/runs.h"
#include "harness/testing/site.h"
#include "reference/core/files.h"
#include "reference/testing/testing.h"

namespace peerlab::testing {
namespace {

using report::Result;

#define PEERLAB_REQUIRE_BROWSER()                                                                              \
  do {                                                                                                         \
    const char* skip = std::getenv("PEERLAB_SKIP_BROWSER_TEST");                                               \
    if (skip && std::string(skip) == "1") GTEST_SKIP() << "PEERLAB_SKIP_BROWSER_TEST=1: browser test skipped"; \
    if (qualify::findChromium().empty())                                                                       \
      GTEST_SKIP() << "no Chromium (chromium or chromium-browser) in PATH: install Debian's chromium package"; \
  } while (0)

#define PEERLAB_REQUIRE_CHARTJS()                                                                  \
  do {                                                                                             \
    if (report::chartJsSource().empty())                                                           \
      GTEST_SKIP() << "Chart.js not found (" << report::chartJsPath()                              \
                   << "): install Debian's libjs-chart.js; pages then say charts are unavailable"; \
  } while (0)

report::Run bigRun(int gpus) {
  report::Run run = machineRun("synthetic-" + std::to_string(gpus), gpus);
  for (int s = 0; s < gpus; ++s) {
    for (int d = 0; d < gpus; ++d) {
      if (s == d) continue;
      for (double bytes = 4096; bytes <= (1 << 30); bytes *= 4) {
        for (const char* impl : {"peerlab.ce", "peerlab.sm_pull", "nccl.sendrecv"}) {
          Result r;
          r.suite = "peer_copy";
          r.name = "uni";
          r.impl = impl;
          r.src = s;
          r.dst = d;
          r.bytes = bytes;
          r.algbw_gbps = 390.0 * bytes / (bytes + 4e6) - (s == 3 && d == 5 ? 80 : 0);
          r.time_us = bytes / std::max(1.0, *r.algbw_gbps) / 1e3;
          run.results.push_back(r);
        }
      }
      for (const char* m : {"ce_write/4096", "sm_store/4096", "ipc_vmm/67108864"}) {
        run.results.push_back(
            probeCellRow("probe", s, d, (s + d) % 7 == 0 && m[0] == 's' ? "corrupt" : "ok", (s + d) % 5 != 0, m));
      }
    }
  }
  for (double bytes = 4096; bytes <= (1 << 28); bytes *= 16) {
    Result a;
    a.suite = "alltoallv";
    a.name = "uniform";
    a.impl = "peerlab.alltoallv";
    a.ranks = gpus;
    a.bytes = bytes;
    a.time_us = 8 + bytes / 3e5;
    a.algbw_gbps = bytes / *a.time_us / 1e3;
    a.busbw_gbps = *a.algbw_gbps * (gpus - 1) / gpus;
    run.results.push_back(a);
  }
  return run;
}

// The report of a run with its checks evaluated once, as `peerlab report` renders it.
std::string reportPage(const report::Run& run) {
  return report::renderHtml(run, report::verdictOf(run).checks);
}

size_t countOf(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t p = text.find(needle); p != std::string::npos; p = text.find(needle, p + needle.size()))
    ++n;
  return n;
}

// Chart blocks the page declares.
int promisedCharts(const std::string& html) {
  return static_cast<int>(countOf(html, "class=\"plchart\""));
}

struct Loaded {
  std::string ready;
  int charts = -1;   ///< data-peerlab-charts: charts Chart.js drew
  int canvases = 0;  ///< canvases Chart.js sized (it writes their width and height)
};

// Loads the page at `path` in Chromium; returns the page's own verdict and checks the console.
Loaded loadAndCheck(const std::string& name, const std::string& path, bool console_clean = true) {
  Loaded out;
  auto load = qualify::loadPage(path, 120);
  EXPECT_TRUE(load.isOk()) << load.status().message();
  if (!load.isOk()) {
    out.ready = "not loaded";
    return out;
  }
  // Uncaught exceptions and console messages show up in Chromium's log; the pages write none.
  if (console_clean) {
    for (const char* bad : {"Uncaught", "CONSOLE"}) {
      EXPECT_EQ(load->log.find(bad), std::string::npos) << name << ": " << load->log.substr(load->log.find(bad), 300);
    }
  }
  out.charts = std::atoi(qualify::htmlAttribute(load->dom, "data-peerlab-charts").c_str());
  out.ready = qualify::htmlAttribute(load->dom, "data-peerlab-ready");
  std::regex sized("<canvas[^>]*style=\"display: block;[^\"]*height: [0-9.]+px");
  out.canvases = static_cast<int>(
      std::distance(std::sregex_iterator(load->dom.begin(), load->dom.end(), sized), std::sregex_iterator()));
  return out;
}

std::string writePage(const std::string& name, const std::string& html) {
  const std::string path = scratchDir("browser-" + name) + "/report.html";
  EXPECT_TRUE(writeTextFile(path, html).isOk());
  return path;
}

// A PNG of the page in the build directory, for people (and CI artifacts) to look at.
void screenshot(const std::string& name, const std::string& path) {
  std::filesystem::create_directories("screenshots");
  const std::string png = "screenshots/" + name + ".png";
  auto shot = qualify::screenshotReport(path, png, 1280);
  ASSERT_TRUE(shot.isOk()) << shot.status().toString();
  EXPECT_GT(std::filesystem::file_size(png), 20000u) << png;
}

TEST(HtmlBrowser, ReportsRenderTheirCharts) {
  PEERLAB_REQUIRE_BROWSER();
  PEERLAB_REQUIRE_CHARTJS();
  auto sample = report::readRun(sourcePath("reports/schema/sample-run.json"));
  ASSERT_TRUE(sample.isOk());
  auto committed = report::readRun(sourcePath("reports/runs/2026-11-21-h200-x4-nvswitch-db99ff9.json.gz"));
  ASSERT_TRUE(committed.isOk());
  report::Run withChecks = bigRun(4);
  report::Check slow;
  slow.category = "bandwidth";
  slow.name = "peer_copy peerlab.ce uni 3->5";
  slow.status = report::CheckStatus::kFail;
  slow.measured = "310 GB/s";
  slow.expected = ">= 382.5 GB/s";
  slow.reason = "below <the> floor";
  report::Check probe;
  probe.category = "probe";
  probe.name = "probe ce_write: claimed cells verify";
  probe.measured = probe.expected = "12 of 12";
  probe.reason = "ok";
  const std::vector<report::Check> checks = {slow, probe};
  struct Case {
    std::string name;
    std::string html;
    int min_charts;
  };
  const std::vector<Case> cases = {
      {"sample", reportPage(*sample), 0},  // every case at one size: tables
      {"sixteen", reportPage(bigRun(16)), 2},       {"checks", report::renderHtml(withChecks, checks), 2},
      {"committed-x4", reportPage(*committed), 20}, {"empty", reportPage(report::newRun()), 0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const int promised = promisedCharts(c.html);
    ASSERT_GE(promised, c.min_charts);
    const std::string path = writePage(c.name, c.html);
    const Loaded l = loadAndCheck(c.name, path);
    EXPECT_EQ(l.ready, "ok");
    EXPECT_EQ(l.charts, promised);
    EXPECT_EQ(l.canvases, promised);
    if (c.name == "committed-x4" || c.name == "sample") screenshot("report-" + c.name, path);
  }
}

TEST(HtmlBrowser, HistorySiteRendersItsCharts) {
  PEERLAB_REQUIRE_BROWSER();
  PEERLAB_REQUIRE_CHARTJS();
  const std::string dir = scratchDir("browser-site");
  ASSERT_TRUE(report::renderHistorySite(historyModel(12, 2, 10), dir).isOk());
  const std::string x4 = report::kindPageName("h200-x4-nvswitch");
  for (const std::string& page : {std::string("index.html"), x4, report::kindPageName("h200-x2-nvswitch")}) {
    SCOPED_TRACE(page);
    const std::string html = readFile(dir + "/" + page);
    const int promised = promisedCharts(html);
    if (page == x4) {
      EXPECT_EQ(promised, 5);
    }
    const Loaded l = loadAndCheck(page, dir + "/" + page);
    EXPECT_EQ(l.ready, "ok");
    EXPECT_EQ(l.charts, promised);
    EXPECT_EQ(l.canvases, promised);
    screenshot("site-" + page.substr(0, page.size() - 5), dir + "/" + page);
  }
}

TEST(HtmlBrowser, WithoutChartJsThePageSaysSo) {
  PEERLAB_REQUIRE_BROWSER();
  // Without Chart.js the page draws tables of the same figures and says so once: no empty chart frames.
  ::setenv("PEERLAB_CHARTJS", "", 1);
  const std::string html = reportPage(bigRun(4));
  ::unsetenv("PEERLAB_CHARTJS");
  EXPECT_EQ(promisedCharts(html), 0);
  EXPECT_EQ(html.find("class=\"plchart\""), std::string::npos);
  EXPECT_NE(html.find("Charts are not drawn ($PEERLAB_CHARTJS is empty)"), std::string::npos);
  EXPECT_NE(html.find("<table class=\"series\">"), std::string::npos);
  const Loaded l = loadAndCheck("nochart", writePage("nochart", html));
  EXPECT_EQ(l.ready, "ok");
  EXPECT_EQ(l.charts, 0);
}

TEST(HtmlBrowser, BrokenChartIsDetected) {
  PEERLAB_REQUIRE_BROWSER();
  PEERLAB_REQUIRE_CHARTJS();
  std::string html = reportPage(bigRun(4));
  // A chart whose config is not JSON: the page's script must say so rather than report ok.
  const size_t at = html.find("<div class=\"plchart\"");
  ASSERT_NE(at, std::string::npos);
  html.insert(at,
              "<div class=\"plchart\" data-series=\"1\"><canvas></canvas><script type=\"application/json\">"
              "{broken</script></div>");
  const Loaded l = loadAndCheck("broken", writePage("broken", html), false);
  EXPECT_EQ(l.ready.rfind("error: ", 0), 0u) << l.ready;
}

TEST(HtmlBrowser, ScreenshotCommandWritesPng) {
  PEERLAB_REQUIRE_BROWSER();
  const std::string dir = scratchDir("browser-png");
  CliRun r = runPeerlab({"report", sourcePath("reports/schema/sample-run.json"), "--html", dir + "/r.html",
                         "--screenshot", dir + "/r.png", "--width", "1200"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string png = readFile(dir + "/r.png");
  ASSERT_GT(png.size(), 24u);
  EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  auto be32 = [&](size_t at) {
    return (static_cast<uint32_t>(static_cast<uint8_t>(png[at])) << 24) |
           (static_cast<uint32_t>(static_cast<uint8_t>(png[at + 1])) << 16) |
           (static_cast<uint32_t>(static_cast<uint8_t>(png[at + 2])) << 8) | static_cast<uint8_t>(png[at + 3]);
  };
  EXPECT_EQ(be32(16), 1200u);  // IHDR width
  EXPECT_GE(be32(20), 1000u);  // the whole page, not one screen
  EXPECT_GT(png.size(), 20000u);
}

// A copy of `html` with `script` run after the page's own (which drew the charts), before </body>.
std::string withScript(std::string html, const std::string& script) {
  const size_t at = html.rfind("</body>");
  EXPECT_NE(at, std::string::npos);
  html.insert(at, "<script>" + script + "</script>");
  return html;
}

// A run whose suites share implementations (peerlab.ce copies peer to peer and to the host, nccl.sendrecv is the
// baseline of two suites), with host copies whose remote-NUMA case does not apply, a skipped pair and long strings.
report::Run mixedRun() {
  report::Run run = bigRun(4);
  for (int g = 0; g < 4; ++g) {
    for (const char* impl : {"peerlab.ce", "peerlab.sm", "cuda.memcpy_async"}) {
      for (const char* name : {"h2d", "d2h", "bidir"}) {
        for (bool remote : {false, true}) {
          for (double bytes : {1048576.0, 268435456.0}) {
            Result r;
            r.suite = "host_copy";
            r.impl = impl;
            r.name = name;
            r.src = g;
            r.bytes = bytes;
            r.numa = 0;
            r.extra["numa_local"] = remote ? 0 : 1;
            if (remote) {
              r.status = "skipped: unavailable: GPU " + std::to_string(g) + ": no NUMA node other than the GPU's own";
            } else {
              r.algbw_gbps = 50.0 * bytes / (bytes + 1e6);
              r.time_us = bytes / *r.algbw_gbps / 1e3;
            }
            run.results.push_back(r);
          }
        }
      }
    }
    for (int d = 0; d < 4; ++d) {
      if (g == d) continue;
      for (double bytes : {8.0, 65536.0, 16777216.0}) {
        for (const char* impl : {"peerlab.put", "nccl.sendrecv"}) {
          Result z;
          z.suite = "zcopy";
          z.name = "uni";
          z.impl = impl;
          z.src = g;
          z.dst = d;
          z.ranks = 2;
          z.bytes = bytes;
          z.time_us = 5 + bytes / 3e5;
          z.algbw_gbps = bytes / *z.time_us / 1e3;
          if (g == 1 && d == 2) {
            z.status = "skipped: the pair is not in the plan";
            z.time_us.reset();
            z.algbw_gbps.reset();
          }
          run.results.push_back(z);
        }
      }
    }
  }
  // One implementation measured on one pair only: the other pairs of its matrix do not apply.
  Result staged = run.results.front();
  staged.impl = "peerlab.staged";
  staged.bytes = 268435456.0;
  staged.algbw_gbps = 50.0;
  staged.time_us = *staged.bytes / *staged.algbw_gbps / 1e3;
  run.results.push_back(staged);
  Result longOne = run.results.front();
  longOne.status = "failed: " + std::string(600, 'x');
  run.results.push_back(longOne);
  return run;
}

// One colour per implementation on every chart of a page, as Chart.js draws them: the same implementation in the same
// colour everywhere, implementations of one chart in different colours, none of them red.
TEST(HtmlBrowser, OneColourPerImplementationOnEveryChart) {
  PEERLAB_REQUIRE_BROWSER();
  PEERLAB_REQUIRE_CHARTJS();
  const std::string html = withScript(reportPage(mixedRun()), R"js(
    var seen = {}, clash = [];
    Object.values(Chart.instances).forEach(function (c) {
      var inChart = {};
      c.data.datasets.forEach(function (d) {
        (seen[d.label] = seen[d.label] || {})[d.borderColor] = 1;
        if (inChart[d.borderColor] && inChart[d.borderColor] !== d.label) clash.push(d.label + '/' + inChart[d.borderColor]);
        inChart[d.borderColor] = d.label;
      });
    });
    var out = Object.keys(seen).map(function (k) { return k + '=' + Object.keys(seen[k]).join('+'); }).join(';');
    document.documentElement.setAttribute('data-test-colours', out);
    document.documentElement.setAttribute('data-test-clash', clash.join(';'));
    document.documentElement.setAttribute('data-test-charts', String(Object.keys(Chart.instances).length));
  )js");
  auto load = qualify::loadPage(writePage("colours", html), 120);
  ASSERT_TRUE(load.isOk()) << load.status().message();
  EXPECT_EQ(qualify::htmlAttribute(load->dom, "data-peerlab-ready"), "ok");
  EXPECT_GE(std::atoi(qualify::htmlAttribute(load->dom, "data-test-charts").c_str()), 6);
  const std::string colours = qualify::htmlAttribute(load->dom, "data-test-colours");
  int impls = 0;
  for (size_t at = 0; at < colours.size();) {
    const size_t end = std::min(colours.find(';', at), colours.size());
    const std::string item = colours.substr(at, end - at);
    EXPECT_EQ(item.find('+'), std::string::npos) << "more than one colour: " << item;
    EXPECT_EQ(item.find("#d62728"), std::string::npos) << "red is for failed checks: " << item;
    ++impls;
    at = end + 1;
  }
  EXPECT_GE(impls, 5) << colours;
  for (const char* impl : {"peerlab.ce=", "nccl.sendrecv=", "peerlab.sm_pull=", "peerlab.put="})
    EXPECT_NE(colours.find(impl), std::string::npos) << impl << " in " << colours;
  EXPECT_EQ(qualify::htmlAttribute(load->dom, "data-test-clash"), "");
}

// Red is only for a failed check: a case that does not apply (hatched, n/a) and a skipped pair look different from a
// failure and from each other, and wide tables and long strings stay inside the page's width.
TEST(HtmlBrowser, NotApplicableAndSkippedCellsAreNotRedAndNothingOverflows) {
  PEERLAB_REQUIRE_BROWSER();
  const std::string html = withScript(reportPage(mixedRun()), R"js(
    function bg(sel) {
      var e = document.querySelector(sel);
      return e ? getComputedStyle(e).backgroundImage + ' ' + getComputedStyle(e).backgroundColor : 'none';
    }
    var r = document.documentElement;
    r.setAttribute('data-test-skip', bg('td.cell-skip'));
    r.setAttribute('data-test-na', bg('td.cell-na'));
    r.setAttribute('data-test-fail', bg('td.cell-fail') + '|' + bg('tr.bad td'));
    r.setAttribute('data-test-hostrows', String(document.querySelectorAll('table.host-copy tr.bad').length));
    r.setAttribute('data-test-width', String(document.documentElement.scrollWidth) + ' ' + String(window.innerWidth));
  )js");
  auto load = qualify::loadPage(writePage("cells", html), 120, 1280);
  ASSERT_TRUE(load.isOk()) << load.status().message();
  const std::string skip = qualify::htmlAttribute(load->dom, "data-test-skip");
  const std::string na = qualify::htmlAttribute(load->dom, "data-test-na");
  const std::string failBg = qualify::htmlAttribute(load->dom, "data-test-fail");
  EXPECT_NE(skip, "none");
  EXPECT_NE(na, "none");
  EXPECT_NE(skip.find("repeating-linear-gradient"), std::string::npos) << skip;  // hatched
  EXPECT_NE(skip, na);
  EXPECT_EQ(failBg.find(skip), std::string::npos) << failBg;
  // Reddish means red well above green and blue; neither state is.
  auto reddish = [](const std::string& css) {
    std::smatch m;
    static const std::regex rgb("rgb\\((\\d+), (\\d+), (\\d+)\\)");
    for (auto it = std::sregex_iterator(css.begin(), css.end(), rgb); it != std::sregex_iterator(); ++it) {
      const int r = std::stoi((*it)[1]), g = std::stoi((*it)[2]), b = std::stoi((*it)[3]);
      if (r > g + 40 && r > b + 40) return true;
    }
    return false;
  };
  EXPECT_FALSE(reddish(skip)) << skip;
  EXPECT_FALSE(reddish(na)) << na;
  // The remote-NUMA case that does not apply makes no host-copy row a failure.
  EXPECT_EQ(qualify::htmlAttribute(load->dom, "data-test-hostrows"), "0");
  int scroll = 0, inner = 0;
  ASSERT_EQ(std::sscanf(qualify::htmlAttribute(load->dom, "data-test-width").c_str(), "%d %d", &scroll, &inner), 2);
  EXPECT_LE(scroll, inner) << "the page is wider than the window";
  EXPECT_LE(std::atoi(qualify::htmlAttribute(load->dom, "data-peerlab-width").c_str()), 1280);
}

// The screenshot covers the whole page: a page taller than one part is written in parts whose heights add up to the
// page, and the last part holds the bottom of the page (not a blank or cut image).
TEST(HtmlBrowser, ScreenshotCoversTheWholePage) {
  PEERLAB_REQUIRE_BROWSER();
  report::Run run = mixedRun();
  // Enough rows to make the page taller than one part: the failures table lists each.
  for (int i = 0; i < 200; ++i) {
    Result r = run.results.front();
    r.name = "case-" + std::to_string(i);
    r.status = "failed: case " + std::to_string(i);
    run.results.push_back(r);
  }
  Result last;
  last.suite = "test";
  last.name = "the-very-last-result";
  last.impl = "ctest";
  last.status = "failed: bottom of the page";
  run.results.push_back(last);
  const std::string dir = scratchDir("browser-fullpage");
  const std::string html = dir + "/r.html";
  ASSERT_TRUE(writeTextFile(html, reportPage(run)).isOk());
  // A stale part of an earlier, longer page is removed.
  ASSERT_TRUE(writeTextFile(dir + "/r-9.png", "stale").isOk());
  auto shot = qualify::screenshotReport(html, dir + "/r.png", 1280);
  ASSERT_TRUE(shot.isOk()) << shot.status().toString();
  ASSERT_GT(shot->page_height, qualify::kScreenshotPartPx);
  const size_t parts =
      static_cast<size_t>((shot->page_height + qualify::kScreenshotPartPx - 1) / qualify::kScreenshotPartPx);
  ASSERT_EQ(shot->files.size(), parts);
  EXPECT_FALSE(std::filesystem::exists(dir + "/r-9.png"));
  EXPECT_NE(shot->describe().find(std::to_string(parts) + " parts of at most 16,000 px"), std::string::npos)
      << shot->describe();
  // Each part is a PNG as wide as the window and as high as its share of the page; together they are the page.
  int total = 0;
  for (size_t k = 0; k < parts; ++k) {
    const std::string png = readFile(shot->files[k]);
    ASSERT_GT(png.size(), 24u);
    EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
    auto be32 = [&](size_t at) {
      return static_cast<int>((static_cast<uint32_t>(static_cast<uint8_t>(png[at])) << 24) |
                              (static_cast<uint32_t>(static_cast<uint8_t>(png[at + 1])) << 16) |
                              (static_cast<uint32_t>(static_cast<uint8_t>(png[at + 2])) << 8) |
                              static_cast<uint8_t>(png[at + 3]));
    };
    EXPECT_EQ(be32(16), 1280);
    EXPECT_LE(be32(20), qualify::kScreenshotPartPx);
    total += be32(20);
  }
  EXPECT_EQ(total, shot->page_height);
  // What the last part shows: the page from its offset down, so its bottom is the end of the page (the last section),
  // while the first part's bottom is not. Chromium at the last part's window size and offset tells, through a script
  // that reads the section at the bottom of the window.
  const std::string probe = withScript(readFile(html), R"js(
    var y = +(/probe-y=(\d+)/.exec(location.hash) || [0, window.innerHeight - 80])[1];
    var e = document.elementFromPoint(60, y);
    var s = e ? e.closest('section') : null;
    document.documentElement.setAttribute('data-test-bottom', s ? s.id : (e ? e.tagName : 'none'));
  )js");
  ASSERT_TRUE(writeTextFile(dir + "/probe.html", probe).isOk());
  // The window is a little taller than the part (a headless window's viewport is shorter than its size); the point
  // read is 80 px above the part's bottom edge.
  auto bottomOf = [&](int offset, int height) {
    const std::string profile = dir + "/profile-" + std::to_string(offset);
    std::vector<std::string> argv = {qualify::findChromium(),
                                     "--headless",
                                     "--no-sandbox",
                                     "--disable-gpu",
                                     "--disable-dev-shm-usage",
                                     "--hide-scrollbars",
                                     "--user-data-dir=" + profile,
                                     "--window-size=1280," + std::to_string(height + 300),
                                     "--dump-dom",
                                     "file://" + dir + "/probe.html#peerlab-shot=" + std::to_string(offset) +
                                         "&probe-y=" + std::to_string(height - 80)};
    CliRun r = runCommand(argv, {}, std::chrono::seconds(120));
    return qualify::htmlAttribute(r.out, "data-test-bottom");
  };
  const int lastOffset = static_cast<int>(parts - 1) * qualify::kScreenshotPartPx;
  EXPECT_EQ(bottomOf(lastOffset, shot->page_height - lastOffset), "results");
  EXPECT_NE(bottomOf(0, qualify::kScreenshotPartPx), "results");
}

}  // namespace
}  // namespace peerlab::testing
