// The HTML report in a real browser: headless Chromium loads each report, its own script counts the plots that
// rendered, and the console must stay free of errors. Chromium is required (ci/test.sh installs it);
// Without Chromium, or with PEERLAB_SKIP_BROWSER_TEST=1, these tests skip with the reason.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <regex>

#include "harness/qualify/browser.h"
#include "harness/report/html.h"
#include "harness/report/report.h"
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

int promisedPlots(const std::string& html) {
  std::smatch m;
  if (!std::regex_search(html, m, std::regex("name=\"peerlab-plots\" content=\"([0-9]+)\""))) return -1;
  return std::stoi(m[1]);
}

// Loads `html` in Chromium; returns the page's own verdict and checks the console.
std::string loadAndCheck(const std::string& name, const std::string& html, int* drawn) {
  const std::string path = scratchDir("browser-" + name) + "/report.html";
  EXPECT_TRUE(writeTextFile(path, html).isOk());
  auto load = qualify::loadPage(path, 120);
  EXPECT_TRUE(load.isOk()) << load.status().message();
  if (!load.isOk()) return "not loaded";
  // Uncaught exceptions and console messages show up in Chromium's log; the report writes none.
  for (const char* bad : {"Uncaught", "CONSOLE"}) {
    EXPECT_EQ(load->log.find(bad), std::string::npos) << name << ": " << load->log.substr(load->log.find(bad), 300);
  }
  *drawn = std::atoi(qualify::htmlAttribute(load->dom, "data-peerlab-plots").c_str());
  return qualify::htmlAttribute(load->dom, "data-peerlab-ready");
}

TEST(HtmlBrowser, ReportsRenderTheirPlots) {
  PEERLAB_REQUIRE_BROWSER();
  auto sample = report::readRun(sourcePath("reports/schema/sample-run.json"));
  ASSERT_TRUE(sample.isOk());
  report::Run withChecks = bigRun(4);
  report::HtmlOptions checks;
  checks.checks = std::vector<report::Check>{
      {"bandwidth", "peer_copy peerlab.ce uni 3->5", false, "310 GB/s", ">= 382.5 GB/s", "below <the> floor", 310,
       382.5},
      {"probe", "probe ce_write: claimed cells verify", true, "12 of 12", "12 of 12", "ok", {}, {}}};
  struct Case {
    std::string name;
    std::string html;
    int min_plots;
  };
  const std::vector<Case> cases = {
      {"sample", report::renderHtml(*sample), 3},
      {"sixteen", report::renderHtml(bigRun(16)), 8},
      {"checks", report::renderHtml(withChecks, checks), 8},
      {"empty", report::renderHtml(report::newRun()), 0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const int promised = promisedPlots(c.html);
    ASSERT_GE(promised, c.min_plots);
    int drawn = -1;
    EXPECT_EQ(loadAndCheck(c.name, c.html, &drawn), "ok");
    EXPECT_EQ(drawn, promised);
  }
}

TEST(HtmlBrowser, BrokenPlotIsDetected) {
  PEERLAB_REQUIRE_BROWSER();
  auto sample = report::readRun(sourcePath("reports/schema/sample-run.json"));
  ASSERT_TRUE(sample.isOk());
  std::string html = report::renderHtml(*sample);
  // A plot that draws nothing: the page's check must say so.
  html.replace(html.find("<div class=\"tiles\">"), 19,
               "<div class=\"tiles\"><svg class=\"plot\" aria-label=\"blank\"></svg>");
  int drawn = -1;
  const std::string ready = loadAndCheck("broken", html, &drawn);
  EXPECT_EQ(ready.rfind("error: ", 0), 0u) << ready;
  EXPECT_NE(ready.find("blank"), std::string::npos) << ready;
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
