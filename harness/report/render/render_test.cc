#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "harness/report/evaluate.h"
#include "harness/report/render/chart_page.h"
#include "harness/report/render/console.h"
#include "harness/report/render/html.h"
#include "harness/report/render/junit.h"
#include "harness/report/render/summary.h"
#include "harness/report/render/views.h"
#include "harness/testing/runs.h"
#include "reference/testing/testing.h"

namespace peerlab::report {
namespace {

using peerlab::testing::checkOf;
using peerlab::testing::healthRow;
using peerlab::testing::latencyRow;

// The report of a run with its checks evaluated once, as `peerlab report` renders it.
std::string reportPage(const Run& run) {
  return renderHtml(run, verdictOf(run).checks);
}

size_t countOf(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t p = text.find(needle); p != std::string::npos; p = text.find(needle, p + needle.size()))
    ++n;
  return n;
}

// A synthetic run of `gpus` GPUs: peer copies over every ordered pair and sizes, an NCCL baseline, a probe matrix
// with one claimed-but-corrupt cell, latency rows, a failure.
Run syntheticRun(int gpus) {
  report::Run run = peerlab::testing::machineRun("synthetic-" + std::to_string(gpus), gpus);
  run.timestamp = "2026-11-21T09:00:00Z";
  for (int s = 0; s < gpus; ++s) {
    for (int d = 0; d < gpus; ++d) {
      if (s == d) continue;
      for (double bytes = 4096; bytes <= (1 << 28); bytes *= 16) {
        for (const char* impl : {"peerlab.ce", "nccl.sendrecv"}) {
          const double gbps = 390.0 * bytes / (bytes + 2e6) * (impl[0] == 'n' ? 0.8 : 1.0) + s * 0.5;
          Result r = peerlab::testing::bandwidthRow("peer_copy", impl, s, d, bytes, gbps);
          r.busbw_gbps = r.algbw_gbps;
          run.results.push_back(r);
        }
      }
      Result p = peerlab::testing::probeCellRow("probe", s, d, (s == 0 && d == 1) ? "corrupt" : "ok", true);
      p.bytes = 4096;
      p.time_us = 12;
      run.results.push_back(p);
      run.results.push_back(latencyRow("zcopy", "pingpong", "peerlab.sm_signal", s, d, 8, 1.4 + 0.01 * d));
    }
  }
  Result failed = peerlab::testing::statusRow("alltoallv", "uniform", "peerlab.alltoallv",
                                              "failed: device error word 0x3 (timeout waiting for rank 2)");
  failed.ranks = gpus;
  run.results.push_back(failed);
  return run;
}

// The Chart.js library inlined into the page is third-party text; the checks below look at peerlab's own markup.
std::string withoutLibrary(std::string html) {
  const std::string lib = chartJsSource();
  if (!lib.empty()) {
    const size_t at = html.find(lib);
    if (at != std::string::npos) html.erase(at, lib.size());
  }
  return html;
}

// Every chart block: its series count (data-series) and config.
std::vector<int> chartSeries(const std::string& html) {
  std::vector<int> out;
  std::regex block("class=\"plchart\" data-series=\"([0-9]+)\"");
  for (auto it = std::sregex_iterator(html.begin(), html.end(), block); it != std::sregex_iterator(); ++it)
    out.push_back(std::stoi((*it)[1]));
  return out;
}

// The page's title names the machine as every title does (kind and node, the host name beside them), not by a
// host name that on cloud VMs names nothing.
TEST(Html, TitleNamesTheMachineByKindAndNode) {
  PEERLAB_ASSERT_OK_AND_ASSIGN(report::Run run,
                               readRun(testing::sourcePath("reports/runs/2026-11-25-h100-x1-a99f8ae.json.gz")));
  ASSERT_FALSE(run.kind.name.empty());
  const std::string html = withoutLibrary(reportPage(run));
  const std::string title = "peerlab report: " + htmlEscape(machineTitle(run));
  EXPECT_NE(html.find("<h1>" + title + "</h1>"), std::string::npos) << title;
  EXPECT_NE(title.find(run.kind.name), std::string::npos);
}

TEST(Html, SampleRunIsSelfContained) {
  PEERLAB_ASSERT_OK_AND_ASSIGN(report::Run run, readRun(testing::sourcePath("reports/schema/sample-run.json")));
  const std::string full = reportPage(run);
  const std::string html = withoutLibrary(full);
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(html.find("</html>"), std::string::npos);
  // Nothing fetched from elsewhere: no external scripts, styles, fonts or images.
  for (const char* banned : {"http://", "https://", "<link", "src=", "@import", "url("}) {
    EXPECT_EQ(html.find(banned), std::string::npos) << banned;
  }
  EXPECT_EQ(full.find("<script src"), std::string::npos);
  // Every case of the sample was measured at one size: tables, no charts, so Chart.js is not inlined either.
  EXPECT_EQ(countOf(html, "<script>"), 1u);  // the boot script
  EXPECT_EQ(full.find("Chart.js v3"), std::string::npos);
  EXPECT_TRUE(chartSeries(html).empty());
  EXPECT_NE(html.find("<table class=\"series\"><caption>peer_copy uni: bandwidth (GB/s)</caption>"), std::string::npos);
  // The fingerprint is shown, GPUs with UUID and bus id.
  EXPECT_NE(html.find("GPU-52a9f1d6-eb48-d3af-68b0-09f060076b98"), std::string::npos);
  EXPECT_NE(html.find("0000:00:07.0"), std::string::npos);
  EXPECT_NE(html.find("580.159.04"), std::string::npos);
  // The sample run's skipped torch row is listed with its reason.
  EXPECT_NE(html.find("skipped: torch is not importable"), std::string::npos);
  // A pair matrix and the probe matrix.
  EXPECT_NE(html.find("<table class=\"probe\""), std::string::npos);
  EXPECT_NE(html.find("<table class=\"heatmap\""), std::string::npos);
}

TEST(Html, ScalesToSixteenGpusAndMarksProbeMismatches) {
  report::Run run = syntheticRun(16);
  const std::string html = withoutLibrary(reportPage(run));
  // 16x16 cells per pair matrix and probe matrix.
  EXPECT_NE(html.find("<h3>peer_copy peerlab.ce uni at 256 MiB, algbw</h3>"), std::string::npos);
  EXPECT_GE(countOf(html, "data-fraction="), 2u * 240u);
  EXPECT_GE(countOf(html, "class=\"pcell"), 240u);
  EXPECT_EQ(countOf(html, "pcell p-bad claimed-failed"), 1u);
  EXPECT_NE(html.find("ce_write 0-&gt;1: corrupt"), std::string::npos);
  // NCCL drawn dashed beside peerlab, in the same chart.
  EXPECT_NE(html.find("\"label\":\"nccl.sendrecv\""), std::string::npos);
  EXPECT_NE(html.find("\"borderDash\":[6,4]"), std::string::npos);
  // Axes carry units.
  EXPECT_NE(html.find("\"text\":\"message size (bytes, log2 scale)\""), std::string::npos);
  EXPECT_NE(html.find("\"text\":\"bandwidth (GB/s)\""), std::string::npos);
  EXPECT_NE(html.find("\"text\":\"time (us, log scale)\""), std::string::npos);
  // Latency table and the failure with its reason.
  EXPECT_NE(html.find("id=\"latency\""), std::string::npos);
  EXPECT_NE(html.find("timeout waiting for rank 2"), std::string::npos);
  // No plot coordinate is NaN or infinite.
  EXPECT_EQ(html.find("nan"), std::string::npos);
  EXPECT_EQ(html.find("inf\""), std::string::npos);
}

// A stored plan whose pairs have unknown NVLinks (null, as qualify writes them where the topology cannot say) or
// members of the wrong type draws its topology table all the same.
TEST(Html, PlanTopologyWithUnknownLinksIsDrawn) {
  report::Run run = newRun();
  nlohmann::json pairs = nlohmann::json::array();
  pairs.push_back({{"src", 0}, {"dst", 1}, {"nvlinks", nullptr}, {"pci", "SYS"}});
  pairs.push_back({{"src", 1}, {"dst", 0}, {"nvlinks", 4}, {"pci", nullptr}});
  pairs.push_back({{"src", "0"}, {"dst", 1.5}, {"nvlinks", "many"}});
  pairs.push_back(7);
  run.extra["plan"] = {{"topology", {{"source", nullptr}, {"gpus", nlohmann::json::array({1, 2})}, {"pairs", pairs}}}};
  const std::string html = reportPage(run);
  EXPECT_NE(html.find("<td>SYS</td>"), std::string::npos);
  EXPECT_NE(html.find("<td>NV4</td>"), std::string::npos);
}

TEST(Html, AtMostEightSeriesPerChart) {
  report::Run run = syntheticRun(2);
  // 20 implementations of one case: split over three charts.
  for (int i = 0; i < 20; ++i) {
    for (double bytes = 4096; bytes <= (1 << 24); bytes *= 16) {
      Result r =
          latencyRow("zcopy", "uni", "peerlab.variant" + std::to_string(i), 0, 1, bytes, 2 + bytes / (1e5 + i * 1e4));
      r.algbw_gbps = bytes / *r.time_us / 1e3;
      run.results.push_back(r);
    }
  }
  const std::string html = withoutLibrary(reportPage(run));
  const std::vector<int> series = chartSeries(html);
  int total = 0, zcopyUni = 0;
  for (int n : series) {
    EXPECT_GE(n, 1);
    EXPECT_LE(n, static_cast<int>(kMaxSeriesPerChart));
    total += n;
  }
  for (const char* part : {"(1/3)", "(2/3)", "(3/3)"})
    zcopyUni += countOf(html, std::string("zcopy uni x2: bandwidth (GB/s) ") + part) > 0;
  EXPECT_EQ(zcopyUni, 3);
  EXPECT_GE(total, 40);  // 20 bandwidth + 20 time series at least
}

// Cases read in numeric order: T=8 before T=32 before T=128 (not "T=128" < "T=32" as text), eager before graph.
TEST(Html, CasesAreInNumericOrder) {
  report::Run run = syntheticRun(2);
  for (const char* name : {"graph/T=8", "T=128", "T=8", "T=32", "T=4096"}) {
    Result r;
    r.suite = "moe";
    r.name = name;
    r.impl = "peerlab.dispatch";
    r.ranks = 2;
    r.bytes = 1 << 20;
    r.time_us = 50;
    r.algbw_gbps = 20;
    run.results.push_back(r);
  }
  const std::string html = withoutLibrary(reportPage(run));
  std::vector<size_t> at;
  for (const char* title : {"moe T=8 x2", "moe T=32 x2", "moe T=128 x2", "moe T=4096 x2", "moe graph/T=8 x2"}) {
    at.push_back(html.find(title));
    ASSERT_NE(at.back(), std::string::npos) << title;
  }
  EXPECT_TRUE(std::is_sorted(at.begin(), at.end()));
}

// Latency suites: no "0 B" bandwidth matrix of zeros, a pair matrix in microseconds where the slow pair stands out.
TEST(Html, LatencySuitesShowMicrosecondMatrices) {
  report::Run run = syntheticRun(4);
  for (int s = 0; s < 4; ++s) {
    for (int d = 0; d < 4; ++d) {
      if (s == d) continue;
      Result r = latencyRow("peer_latency", "one_way", "peerlab.flag", s, d, 0, s == 2 && d == 3 ? 2.1 : 0.7, 1);
      r.algbw_gbps = 0;
      r.busbw_gbps = 0;
      r.wrong = 0;
      run.results.push_back(r);
    }
  }
  const std::string page = withoutLibrary(reportPage(run));
  // The raw results table at the end lists every record as stored; the views above it must not show "0 B".
  const std::string html = page.substr(0, page.find("id=\"results\""));
  EXPECT_EQ(html.find("0 B"), std::string::npos) << html.substr(html.find("0 B") - 300, 400);
  EXPECT_NE(html.find("<h3>peer_latency peerlab.flag one_way (latency)</h3>"), std::string::npos);
  EXPECT_NE(html.find("title=\"2-&gt;3: 2.10 us\" data-fraction=\"0.333\">2.10</td>"), std::string::npos);
  // Three times the row's fastest: amber (no check compares these cells, so never red).
  EXPECT_NE(html.find("background:hsl(40, 65%, 80%)\" title=\"2-&gt;3: 2.10 us\""), std::string::npos);
}

// With the plan's expectations in the run, bandwidth cells show % of the expected figure; a weak link is red.
TEST(Html, PairMatrixAgainstExpectedFigure) {
  report::Run run = syntheticRun(4);
  run.extra["plan"]["expectations"] = nlohmann::json::array({{{"suite", "peer_copy"},
                                                              {"impl", "peerlab.ce"},
                                                              {"name", "uni"},
                                                              {"src", nullptr},
                                                              {"dst", nullptr},
                                                              {"metric", "algbw_gbps"},
                                                              {"gbps", 382.5},
                                                              {"min_bytes", 67108864.0},
                                                              {"rule", "ce_uni"},
                                                              {"basis", "NV18"}}});
  for (Result& r : run.results) {
    if (r.suite == "peer_copy" && r.impl == "peerlab.ce" && r.src == 1 && r.dst == 2) r.algbw_gbps = 191.25;
  }
  const std::string html = withoutLibrary(reportPage(run));
  EXPECT_NE(html.find("Percent of the expected figure"), std::string::npos);
  EXPECT_NE(html.find("title=\"1-&gt;2: 191.2 GB/s of 382.5 GB/s expected\" data-fraction=\"0.500\">50.0%</td>"),
            std::string::npos);
}

TEST(Html, CtestTimesInSecondsAndNotPlotted) {
  report::Run run = syntheticRun(2);
  Result t = peerlab::testing::statusRow("test", "core_gpu_test", "ctest", "ok");
  t.time_us = 2634480;
  run.results.push_back(t);
  const std::string html = withoutLibrary(reportPage(run));
  EXPECT_NE(html.find("<td>core_gpu_test</td><td>ok</td><td class=\"num\">2.6</td>"), std::string::npos);
  EXPECT_EQ(html.find("2634480"), std::string::npos) << html.substr(html.find("2634480") - 300, 400);
  EXPECT_EQ(html.find("2.63e+06"), std::string::npos);
  EXPECT_EQ(html.find("test core_gpu_test"), std::string::npos);
}

TEST(Html, CellColourNeverFallsAsTheFractionRises) {
  // Against the row's best (no check): amber -> green, never red; a cell at 93% is never greener than one at 100%.
  // Against a checked figure: red below it (the check fails), green from it.
  auto hue = [](double f, bool checked) {
    const std::string c = fractionColour(f, checked);
    int h = -1;
    EXPECT_EQ(std::sscanf(c.c_str(), "hsl(%d,", &h), 1) << c;
    EXPECT_NE(c.find(", 65%, 80%)"), std::string::npos) << c;  // one lightness for every cell
    return h;
  };
  for (bool checked : {false, true}) {
    int previous = -1;
    for (int i = 0; i <= 130; ++i) {
      const int h = hue(i / 100.0, checked);
      EXPECT_GE(h, previous) << "fraction " << i / 100.0;
      if (!checked) {
        EXPECT_GE(h, 40) << "unchecked cells are never red";
      }
      previous = h;
    }
  }
  EXPECT_LT(hue(0.93, false), hue(1.0, false));
  EXPECT_EQ(hue(0.5, false), 40);
  EXPECT_EQ(hue(1.0, false), 120);
  EXPECT_EQ(hue(0.99, true), 0);
  EXPECT_EQ(hue(1.0, true), 120);
  EXPECT_EQ(fractionColour(std::nan("")), "#eeeeee");
}

TEST(Html, HostCopyAndHealthTables) {
  report::Run run = syntheticRun(2);
  for (int g = 0; g < 2; ++g) {
    for (const char* impl : {"peerlab.ce", "peerlab.sm", "cuda.pageable"}) {
      for (const char* name : {"h2d", "d2h", "bidir", "latency"}) {
        Result r;
        r.suite = "host_copy";
        r.impl = impl;
        r.name = name;
        r.src = g;
        const bool lat = std::string(name) == "latency";
        r.bytes = lat ? 8 : 268435456.0;
        r.algbw_gbps = lat ? 0.001 : (g == 1 ? 27.0 : 54.0);
        r.busbw_gbps = r.algbw_gbps;
        r.time_us = lat ? 2.5 : *r.bytes / *r.algbw_gbps / 1e3;
        r.numa = g;
        r.wrong = 0;
        run.results.push_back(r);
      }
    }
    for (const char* check : {"pcie_link", "ecc", "xid", "fabric"}) {
      Result h = healthRow(g, check, "ok", "fine");
      if (g == 1 && std::string(check) == "pcie_link") {
        h.status = "fail";
        h.detail = "Gen4 x8, expected Gen5 x16";
      }
      if (g == 0 && std::string(check) == "ecc") {
        h.status = "warn";
        h.detail = "12 corrected errors";
      }
      if (std::string(check) == "fabric") h.status = "unsupported";
      run.results.push_back(h);
    }
  }
  // A check of the whole machine, no GPU: its row says "host", never "-1".
  run.results.push_back(healthRow(-1, "driver", "ok", "580.159.04"));
  const std::string html = withoutLibrary(reportPage(run));
  EXPECT_NE(html.find("id=\"host_copy\""), std::string::npos);
  // Column titles may wrap after '.' and '_'.
  EXPECT_NE(html.find("<th>peerlab.<wbr>ce h2d</th>"), std::string::npos);
  EXPECT_NE(html.find("<th>cuda.<wbr>pageable latency</th>"), std::string::npos);
  // GPU 1 at half the bandwidth of GPU 0: amber (a weak link, but no failed check).
  EXPECT_NE(html.find("style=\"background:hsl(40, 65%, 80%)\" title=\"27.0 GB/s\""), std::string::npos)
      << html.substr(html.find("id=\"host_copy\""), 1500);
  EXPECT_NE(html.find("<td>1</td><td>1</td>"), std::string::npos);  // GPU 1, NUMA node 1
  EXPECT_NE(html.find("id=\"health\""), std::string::npos);
  EXPECT_NE(html.find("2 GPUs and the host checked: 1 failing, 1 warning, "), std::string::npos);
  EXPECT_NE(html.find("<td class=\"cell-fail\" title=\"Gen4 x8, expected Gen5 x16\"><strong>fail</strong>"),
            std::string::npos);
  EXPECT_NE(html.find("<td class=\"cell-warn\" title=\"12 corrected errors\"><strong>warn</strong>"),
            std::string::npos);
  EXPECT_NE(html.find("<td class=\"cell-skip\" title=\"fine\"><strong>unsupported</strong>"), std::string::npos);
  EXPECT_NE(html.find("<tr><td>host</td>"), std::string::npos);
  EXPECT_EQ(html.find("<td>-1</td>"), std::string::npos);
  EXPECT_EQ(html.find("GPU -1"), std::string::npos);
  EXPECT_EQ(html.find("0-&gt;?"), std::string::npos);
  // Health checks are not latencies.
  EXPECT_EQ(html.find("<h3>health</h3>"), std::string::npos);
}

// Health counters that are not zero but under their thresholds are information (blue), with the count per GPU and
// the rate; zero counters stay plain ok; where bandwidth is shown the page says how its bytes are counted.
TEST(Html, CountersUnderThresholdAreInformationAndBytesAreExplained) {
  report::Run run = syntheticRun(2);
  Result crc =
      healthRow(0, "nvlink_errors", "ok",
                "6812 CRC errors (84.1/s, warn above 100/s), 0 replays, 0 recoveries (fail above 0) in 81.0 s; link 0: "
                "330 CRC, 0 replay, 0 recovery");
  run.results.push_back(crc);
  Result clean = crc;
  clean.src = 1;
  clean.detail = "0 CRC errors (0.0/s, warn above 100/s), 0 replays, 0 recoveries (fail above 0) in 81.0 s";
  run.results.push_back(clean);
  Result ecc = crc;
  ecc.name = "ecc";
  ecc.detail = "volatile 0 uncorrected, 0 corrected; aggregate 0 uncorrected, 3 corrected";
  run.results.push_back(ecc);
  Result moe;
  moe.suite = "moe";
  moe.name = "T=128";
  moe.impl = "peerlab.dispatch";
  moe.ranks = 2;
  moe.bytes = 14680064;
  moe.time_us = 15.3;
  moe.algbw_gbps = 961.0;
  run.results.push_back(moe);
  const std::string html = withoutLibrary(reportPage(run));
  EXPECT_NE(html.find("<td class=\"cell-info\" title=\"6812 CRC errors (84.1/s"), std::string::npos);
  EXPECT_NE(html.find("<span class=\"info\">6812 NVLink CRC errors, 84.1/s</span>"), std::string::npos);
  EXPECT_NE(html.find("<span class=\"info\">3 corrected ECC errors</span>"), std::string::npos);
  EXPECT_NE(html.find("<td class=\"cell-ok\" title=\"0 CRC errors (0.0/s"), std::string::npos);
  EXPECT_NE(html.find("2 ok with counters under their thresholds (information)"), std::string::npos);
  EXPECT_NE(html.find("Bytes: one bf16 row (hidden 7168 x 2 bytes) per (token, selected expert)"), std::string::npos);
  EXPECT_NE(html.find("GB/s is 10<sup>9</sup> bytes per second"), std::string::npos);
  const std::string md = renderSummary(run, {});
  EXPECT_NE(md.find("- moe: one bf16 row"), std::string::npos) << md;
}

TEST(Html, BenchmarkProcessesAreListed) {
  report::Run run = syntheticRun(2);
  run.extra["bench"] = {{"mode", "quick"},
                        {"jobs",
                         {{{"label", "peer_copy (2 pairs)"}, {"results", 40}, {"wall_s", 31.5}, {"exit", "ok"}},
                          {{"label", "zcopy 0->1"},
                           {"results", 0},
                           {"wall_s", 180.0},
                           {"exit", "zcopy_bench --ranks=2: exceeded its deadline of 180 s and was killed"}}}}};
  const std::string html = reportPage(run);
  EXPECT_NE(html.find("id=\"processes\""), std::string::npos);
  EXPECT_NE(html.find("<tr class=\"bad\"><td>zcopy 0-&gt;1</td>"), std::string::npos)
      << html.substr(html.find("processes"), 800);
  EXPECT_NE(html.find("exceeded its deadline of 180 s"), std::string::npos);
}

TEST(Html, RunWithoutResultsStillRenders) {
  report::Run run = newRun();
  run.fingerprint.hostname = "empty";
  std::string html = reportPage(run);
  EXPECT_EQ(html.find("class=\"plchart\""), std::string::npos);
  EXPECT_EQ(html.find("Not in this run"), std::string::npos);  // no plan: nothing was meant to run
  // The suites its plan ran that left no rows are named.
  run.extra["plan"] = {{"level", "standard"},
                       {"jobs",
                        {{{"suite", "zcopy"}, {"binary", "zcopy_bench"}, {"label", "zcopy (2 pairs, 2 rounds)"}},
                         {{"suite", "host_copy"}, {"binary", "host_copy_bench"}, {"label", "host_copy (2 GPUs)"}}}}};
  ASSERT_TRUE(attachPlan(run).isOk());
  html = reportPage(run);
  EXPECT_NE(html.find("Not in this run: zcopy, host_copy"), std::string::npos);
}

TEST(Html, ChecksShowVerdictAndEscape) {
  report::Run run = syntheticRun(2);
  std::vector<Check> checks = {
      checkOf("bandwidth", "peer_copy <ce> 0->1", CheckStatus::kFail, "300 GB/s", ">= 382 GB/s", "below", 300, 382),
      checkOf("probe", "claimed cells verify", CheckStatus::kPass, "ok", "ok", "fine")};
  const std::string html = renderHtml(run, checks);
  EXPECT_NE(html.find("<span class=\"badge fail\">FAIL</span>"), std::string::npos);
  EXPECT_NE(html.find("peer_copy &lt;ce&gt; 0-&gt;1"), std::string::npos);
  EXPECT_EQ(html.find("<ce>"), std::string::npos);
  EXPECT_NE(html.find("2 checks: 1 passed, 1 failed, 0 warnings, 0 unsupported, 0 skipped"), std::string::npos);
}

TEST(Html, UnsupportedAndWarningChecksAreNotCountedAsPassed) {
  report::Run run = syntheticRun(1);
  const std::vector<Check> checks = {
      checkOf("health", "nvlink_state GPU 0", CheckStatus::kUnsupported, "unsupported", "up", "not supported"),
      checkOf("health", "ecc GPU 0", CheckStatus::kWarn, "warn", "no past errors", "1 in the past"),
      checkOf("health", "xid GPU 0", CheckStatus::kPass, "ok", "none", "none")};
  const std::string html = renderHtml(run, checks);
  EXPECT_NE(html.find("3 checks: 1 passed, 0 failed, 1 warning, 1 unsupported, 0 skipped"), std::string::npos);
  // The reasons are visible text, not only tooltips.
  EXPECT_NE(html.find("<td class=\"long\">1 in the past</td>"), std::string::npos);
}

TEST(Aggregate, SeriesPairGridsAndProbe) {
  report::Run run = syntheticRun(4);
  auto series = bandwidthSeries(run, "peer_copy");
  ASSERT_EQ(series.size(), 2u);
  EXPECT_EQ(series[0].impl, "peerlab.ce");   // peerlab first, baselines after
  EXPECT_EQ(series[0].points.size(), 5u);    // 4 KiB, 64 KiB, 1 MiB, 16 MiB, 256 MiB
  EXPECT_EQ(series[0].points.back().n, 12);  // every ordered pair of 4 GPUs
  EXPECT_LT(series[0].points.back().min, series[0].points.back().max);
  auto grids = pairGrids(run);
  ASSERT_FALSE(grids.empty());
  EXPECT_EQ(grids[0].gpus, 4);
  EXPECT_DOUBLE_EQ(grids[0].bytes, 268435456.0);
  EXPECT_FALSE(grids[0].value[0].has_value());  // diagonal
  EXPECT_TRUE(grids[0].value[1].has_value());
  ProbeSummary ps = summarizeProbe(run);
  EXPECT_EQ(ps.cells, 12);
  EXPECT_EQ(ps.ok, 11);
  EXPECT_EQ(ps.failed, 1);
  ASSERT_EQ(ps.claimed_but_failed.size(), 1u);
  EXPECT_EQ(ps.claimed_but_failed[0], "ce_write 0->1: corrupt");
  auto lat = latencyRows(run);
  ASSERT_FALSE(lat.empty());
  bool zcopy = false;
  for (const auto& l : lat) {
    if (l.suite == "zcopy") {
      zcopy = true;
      EXPECT_EQ(l.n, 12);
      EXPECT_NEAR(l.min_us, 1.4, 1e-9);
    }
  }
  EXPECT_TRUE(zcopy);
}

std::string printableForTest(const std::string& s) {
  std::string out;
  char buf[8];
  for (unsigned char c : s) {
    std::snprintf(buf, sizeof(buf), "\\x%02x", c);
    out += buf;
  }
  return out;
}

std::string tempFile(const std::string& name, const std::string& content) {
  auto dir = std::filesystem::temp_directory_path() / ("peerlab-render-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto path = dir / name;
  std::ofstream(path) << content;
  return path.string();
}

TEST(Junit, WellFormedAndParsesBack) {
  std::vector<Check> checks = {checkOf("bandwidth", "peer_copy peerlab.ce uni 0->1", CheckStatus::kFail,
                                       "300.0 GB/s at 256 MiB", ">= 382.5 GB/s (NV18 x 26.5625 x 0.80)",
                                       "78% of the expected figure & below \"the\" <floor>", 300, 382.5),
                               checkOf("bandwidth", "peer_copy peerlab.ce uni 1->0", CheckStatus::kPass, "390 GB/s",
                                       ">= 382.5 GB/s", "ok", 390, 382.5),
                               checkOf("probe", std::string("claimed cells verify \x01 ctrl"), CheckStatus::kPass,
                                       "12 of 12", "12 of 12", "all verified")};
  JunitOptions opts;
  opts.hostname = "h200-box";
  opts.timestamp = "2026-11-21T09:00:00Z";
  const std::string xml = renderJunit(checks, opts);
  EXPECT_EQ(xml.find('\x01'), std::string::npos);
  EXPECT_NE(xml.find("tests=\"3\" failures=\"1\""), std::string::npos);
  const std::string path = tempFile("junit.xml", xml);
  // Parse it back with a real XML parser and check the structure.
  const std::string cmd =
      "python3 -c \"import sys, xml.etree.ElementTree as ET\n"
      "r = ET.parse(sys.argv[1]).getroot()\n"
      "assert r.tag == 'testsuites', r.tag\n"
      "cases = r.findall('./testsuite/testcase')\n"
      "assert len(cases) == 3, len(cases)\n"
      "fails = [c for c in cases if c.find('failure') is not None]\n"
      "assert len(fails) == 1\n"
      "m = fails[0].find('failure').get('message')\n"
      "assert '300.0 GB/s' in m and '382.5' in m and '<floor>' in m, m\n"
      "assert fails[0].get('classname') == 'peerlab.qualify.bandwidth'\n"
      "print('parsed', len(cases))\" " +
      path + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[512];
  while (fgets(buf, sizeof(buf), p))
    out += buf;
  const int rc = pclose(p);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("parsed 3"), std::string::npos) << out;
}

// Whatever a check's strings hold (U+FFFE, U+FFFF, C0 and C1 controls, bytes that are not UTF-8, a UTF-8 surrogate,
// "]]>", "--"), junit.xml is XML 1.0 that Python's parser reads, with each such character shown as an escape.
TEST(Junit, AnyStringIsValidXmlWithForbiddenCharactersShownAsEscapes) {
  const std::string nasty = std::string("a\xEF\xBF\xBF b\xEF\xBF\xBE c\x01 d\x1b[31m e\xff f\xed\xa0\x80 g\xc2\x85 h") +
                            "]]> -- <!-- & \t\n\x7f";
  std::vector<Check> checks = {
      checkOf("bandwidth", "name " + nasty, CheckStatus::kFail, nasty, nasty, "reason " + nasty),
      checkOf("probe", nasty, CheckStatus::kSkipped, "", "", nasty)};
  JunitOptions opts;
  opts.hostname = nasty;
  opts.disabled_rules = "1 rule disabled by the config: " + nasty;
  const std::string xml = renderJunit(checks, opts);
  for (const char* raw : {"\xEF\xBF\xBF", "\xEF\xBF\xBE", "\x01", "\x1b", "\xff", "\xed\xa0\x80", "\xc2\x85", "\x7f"})
    EXPECT_EQ(xml.find(raw), std::string::npos) << "raw " << printableForTest(raw);
  for (const char* shown : {"\\uFFFF", "\\uFFFE", "\\x01", "\\x1b[31m", "\\xff", "\\xed\\xa0\\x80", "\\u0085"})
    EXPECT_NE(xml.find(shown), std::string::npos) << shown;
  const std::string path = tempFile("junit-nasty.xml", xml);
  const std::string cmd =
      "python3 -c \"import sys, xml.etree.ElementTree as ET\n"
      "r = ET.parse(sys.argv[1]).getroot()\n"
      "cases = r.findall('./testsuite/testcase')\n"
      "assert len(cases) == 2, len(cases)\n"
      "m = cases[0].find('failure').get('message')\n"
      "assert '\\\\\\\\uFFFF' in m and ']]>' in m and '<!--' in m, m\n"
      "props = r.findall('./testsuite/properties/property')\n"
      "assert props and props[0].get('name') == 'disabled_rules', props\n"
      "print('parsed', len(cases))\" " +
      path + " 2>&1";
  if (std::system("python3 -c pass >/dev/null 2>&1") != 0) GTEST_SKIP() << "python3 is not installed";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[512];
  while (fgets(buf, sizeof(buf), p))
    out += buf;
  EXPECT_EQ(pclose(p), 0) << out;
  EXPECT_NE(out.find("parsed 2"), std::string::npos) << out;
}

// HTML in a run's strings reaches summary.md as text: a Markdown renderer passes inline HTML through.
TEST(Summary, HtmlFromARunIsShownNotInterpreted) {
  report::Run run = syntheticRun(2);
  run.fingerprint.hostname = "<script>alert(1)</script>";
  run.fingerprint.gpus[0].name = "<img src=x onerror=alert(2)>";
  run.fingerprint.driver = "<!-- the rest is hidden";
  run.tool = "peerlab <b>bold</b>";
  run.results.back().status = "failed: <iframe src=x>";
  std::vector<Check> checks = {checkOf("bandwidth", "<svg onload=alert(3)>", CheckStatus::kFail, "<u>1</u>", "&amp;",
                                       "<style>body{display:none}</style>")};
  SummaryOptions opts;
  opts.command = "peerlab qualify --out `x` <b>";
  opts.notes = {"<a href=javascript:alert(4)>note</a>"};
  opts.files = {"<script>file</script>"};
  const std::string md = renderSummary(run, checks, opts);
  for (const char* tag : {"<script", "<img", "<!--", "<b>bold", "<iframe", "<svg", "<u>", "<style", "<a href"})
    EXPECT_EQ(md.find(tag), std::string::npos) << tag << "\n" << md;
  EXPECT_NE(md.find("&lt;script>alert(1)&lt;/script>"), std::string::npos) << md;
  EXPECT_NE(md.find("&lt;img src=x onerror=alert(2)>"), std::string::npos) << md;
  EXPECT_NE(md.find("&amp;amp;"), std::string::npos) << md;
  // The command line is a code span (shown verbatim, never interpreted), fenced past its own backticks.
  EXPECT_NE(md.find("- command: ``peerlab qualify --out `x` <b>``"), std::string::npos) << md;
}

TEST(Summary, FailedChecksFirstWithNumbers) {
  report::Run run = syntheticRun(4);
  std::vector<Check> checks = {
      checkOf("probe", "claimed cells verify", CheckStatus::kPass, "11 of 12", "12 of 12", "ok"),
      checkOf("bandwidth", "peer_copy peerlab.ce uni 0->1", CheckStatus::kFail, "300.0 GB/s", ">= 382.5 GB/s",
              "below | expected", 300, 382.5)};
  SummaryOptions opts;
  opts.command = "peerlab qualify --out x";
  opts.files = {"results.json", "report.html"};
  const std::string md = renderSummary(run, checks, opts);
  EXPECT_EQ(md.rfind("# peerlab qualify: FAIL on synthetic-4", 0), 0u) << md;
  EXPECT_NE(md.find("2 checks: 1 passed, 1 failed, 0 warnings, 0 unsupported, 0 skipped"), std::string::npos);
  const size_t failedAt = md.find("## Checks that did not pass");
  ASSERT_NE(failedAt, std::string::npos);
  EXPECT_LT(failedAt, md.find("## All checks"));
  EXPECT_NE(md.find("| **FAIL** | bandwidth: peer_copy peerlab.ce uni 0->1 | 300.0 GB/s | >= 382.5 GB/s | below \\| "
                    "expected |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("Claimed by the driver but not verified:\n- ce_write 0->1: corrupt"), std::string::npos) << md;
  EXPECT_NE(md.find("## Peak bandwidth (GB/s)"), std::string::npos);
  EXPECT_NE(md.find("| peer_copy | peerlab.ce uni | algbw | 256 MiB | 12 |"), std::string::npos) << md;
  EXPECT_NE(md.find("## Latency (us)"), std::string::npos);
  EXPECT_NE(md.find("alltoallv uniform peerlab.alltoallv x4: failed: device error word"), std::string::npos) << md;
  EXPECT_NE(md.find("- report.html"), std::string::npos);
  // All pass: the title says so.
  checks[1].status = CheckStatus::kPass;
  EXPECT_EQ(renderSummary(run, checks).rfind("# peerlab qualify: PASS", 0), 0u);
}

TEST(Checks, HealthWarningsAndUnsupportedAreNeverShownAsPassed) {
  report::Run run = syntheticRun(2);
  std::vector<Check> checks = {
      checkOf("health", "ecc GPU 0", CheckStatus::kWarn, "warn", "ok",
              "past uncorrected errors: 1 (SRAM 1 parity in SM 1)"),
      checkOf("health", "fabric GPU 0", CheckStatus::kUnsupported, "unsupported", "ok", "fabric state: not supported"),
      checkOf("health", "xid GPU 0", CheckStatus::kPass, "ok", "ok", "no XID in 60.0 s watched"),
      checkOf("health", "pcie_link GPU 0", CheckStatus::kFail, "fail", "ok", "Gen3 x8 of Gen5 x16")};
  const std::string md = renderSummary(run, checks);
  EXPECT_NE(md.find("| WARN | health: ecc GPU 0 | warn | ok | past uncorrected errors: 1 (SRAM 1 parity in SM 1) |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| UNSUPPORTED | health: fabric GPU 0 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| PASS | health: xid GPU 0 |"), std::string::npos) << md;
  const std::string xml = renderJunit(checks);
  EXPECT_NE(xml.find("skipped=\"1\" passed=\"1\" warnings=\"1\" unsupported=\"1\""), std::string::npos) << xml;
  EXPECT_NE(xml.find("<skipped message=\"UNSUPPORTED: fabric state: not supported\"/>"), std::string::npos) << xml;
  const std::string html = renderHtml(run, checks);
  EXPECT_NE(html.find("<span class=\"pill unsupported\">UNSUPPORTED</span>"), std::string::npos);
  EXPECT_NE(html.find("<span class=\"pill warn\">WARN</span>"), std::string::npos);
  const std::string console = formatCheckLines(checks);
  EXPECT_EQ(console.rfind("FAIL health: pcie_link GPU 0: measured fail, expected ok: Gen3 x8 of Gen5 x16\n", 0), 0u)
      << console;
  EXPECT_NE(console.find("WARN health: ecc GPU 0"), std::string::npos);
  EXPECT_EQ(console.find("xid GPU 0"), std::string::npos);
}

}  // namespace
}  // namespace peerlab::report
