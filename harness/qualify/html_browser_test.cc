// The HTML report and the history site in a real browser: headless Chromium loads each page, its own script draws
// the Chart.js charts and marks the page, the console must stay free of errors, and a screenshot of each page is
// written to the build directory (screenshots/). Without Chromium, or with PEERLAB_SKIP_BROWSER_TEST=1, these tests
// skip with the reason; without Chart.js (libjs-chart.js) the chart checks skip with the reason.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <regex>

#include "harness/qualify/browser.h"
#include "harness/report/chart_page.h"
#include "harness/report/html.h"
#include "harness/report/report.h"
#include "harness/report/site.h"
#include "harness/report/site_testing.h"
#include "harness/testing/cli.h"
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
  report::Run run = report::newRun();
  run.fingerprint.hostname = "synthetic-" + std::to_string(gpus);
  run.fingerprint.driver = "580.159.04";
  run.fingerprint.cuda_runtime = "13.0";
  run.fingerprint.nccl = "2.28.3";
  for (int g = 0; g < gpus; ++g)
    run.fingerprint.gpus.push_back({g, "GPU-" + std::to_string(g), "", "NVIDIA H200"});
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
        Result p;
        p.suite = "probe";
        p.name = m;
        p.impl = "peerlab.probe";
        p.src = s;
        p.dst = d;
        p.status = (s + d) % 7 == 0 && m[0] == 's' ? "corrupt" : "ok";
        p.extra["claimed"] = (s + d) % 5 != 0;
        run.results.push_back(p);
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
  Status st = qualify::screenshotReport(path, png, 1280);
  EXPECT_TRUE(st.isOk()) << st.toString();
  EXPECT_GT(std::filesystem::file_size(png), 20000u) << png;
}

TEST(HtmlBrowser, ReportsRenderTheirCharts) {
  PEERLAB_REQUIRE_BROWSER();
  PEERLAB_REQUIRE_CHARTJS();
  auto sample = report::readRun(sourcePath("reports/schema/sample-run.json"));
  ASSERT_TRUE(sample.isOk());
  auto committed = report::readRun(sourcePath("reports/runs/2026-11-21-h200-x4-nvswitch-db99ff9.json"));
  ASSERT_TRUE(committed.isOk());
  report::Run withChecks = bigRun(4);
  report::HtmlOptions checks;
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
  checks.checks = std::vector<report::Check>{slow, probe};
  struct Case {
    std::string name;
    std::string html;
    int min_charts;
  };
  const std::vector<Case> cases = {
      {"sample", report::renderHtml(*sample), 0},  // every case at one size: tables
      {"sixteen", report::renderHtml(bigRun(16)), 2},       {"checks", report::renderHtml(withChecks, checks), 2},
      {"committed-x4", report::renderHtml(*committed), 20}, {"empty", report::renderHtml(report::newRun()), 0},
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
  ASSERT_TRUE(report::renderHistorySite(report::testing::historyModel(12, 2, 10), dir).isOk());
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
  const std::string html = report::renderHtml(bigRun(4));
  ::unsetenv("PEERLAB_CHARTJS");
  EXPECT_EQ(promisedCharts(html), 0);
  EXPECT_EQ(html.find("class=\"plchart\""), std::string::npos);
  EXPECT_NE(html.find("Charts are not drawn: Chart.js (Debian package libjs-chart.js) was not found"),
            std::string::npos);
  EXPECT_NE(html.find("<table class=\"series\">"), std::string::npos);
  const Loaded l = loadAndCheck("nochart", writePage("nochart", html));
  EXPECT_EQ(l.ready, "ok");
  EXPECT_EQ(l.charts, 0);
}

TEST(HtmlBrowser, BrokenChartIsDetected) {
  PEERLAB_REQUIRE_BROWSER();
  PEERLAB_REQUIRE_CHARTJS();
  std::string html = report::renderHtml(bigRun(4));
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

}  // namespace
}  // namespace peerlab::testing
