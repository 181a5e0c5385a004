#include "harness/report/baseline.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <string>

#include "harness/report/compare.h"
#include "harness/report/evaluate.h"
#include "reference/testing/testing.h"

namespace peerlab::report {
namespace {

NamedRun committed(const std::string& rel) {
  auto run = readRun(peerlab::testing::sourcePath(rel));
  EXPECT_TRUE(run.isOk()) << run.status().toString();
  return {rel, run.isOk() ? *run : Run{}};
}

TEST(Baseline, TheMedianOfRunsOfOneKind) {
  const NamedRun a = committed("reports/runs/2026-11-21-h200-x4-nvswitch-3710ae0.json.gz");
  const NamedRun b = committed("reports/runs/2026-11-21-h200-x4-nvswitch-db99ff9.json.gz");
  BaselineSummary sum;
  PEERLAB_ASSERT_OK_AND_ASSIGN(report::Run base, makeBaseline({a, b}, &sum));
  EXPECT_EQ(sum.runs, 2);
  EXPECT_EQ(base.kind.name, "h200-x4-nvswitch");
  EXPECT_EQ(base.git_sha, b.run.git_sha);  // the newest run's
  EXPECT_GT(sum.results, 1000);
  ASSERT_TRUE(base.plan.has_value());
  for (const Result& r : base.results) {
    EXPECT_NE(r.suite, "test") << "ctest rows time the build, not the machine";
    EXPECT_EQ(r.extra.value("baseline_runs", 0), 2) << describeResult(r);
  }
  // A result's figures are the median (here the mean) of the two runs'.
  const std::string key = "peer_copy|uni|peerlab.ce|0|1|268435456|1";
  std::optional<double> x, y, m;
  for (const Result& r : a.run.results)
    if (resultKey(r) == key) x = r.algbw_gbps;
  for (const Result& r : b.run.results)
    if (resultKey(r) == key) y = r.algbw_gbps;
  for (const Result& r : base.results)
    if (resultKey(r) == key) m = r.algbw_gbps;
  ASSERT_TRUE(x && y && m);
  EXPECT_NEAR(*m, (*x + *y) / 2, 1e-9);
  // It reads back through the one reader, and records where it came from.
  PEERLAB_ASSERT_OK_AND_ASSIGN(report::Run back, fromJson(toJson(base)));
  EXPECT_EQ(back.results.size(), base.results.size());
  EXPECT_EQ(back.extra["baseline"]["runs"], 2);
  EXPECT_EQ(back.extra["baseline"]["from"][0]["file"], a.file);
}

TEST(Baseline, RefusesOtherHardwareAndRunsThatFail) {
  const NamedRun x4 = committed("reports/runs/2026-11-21-h200-x4-nvswitch-db99ff9.json.gz");
  const NamedRun x2 = committed("reports/runs/2026-11-21-h200-x2-nvswitch-542d5c6.json.gz");
  auto mixed = makeBaseline({x4, x2});
  ASSERT_FALSE(mixed.isOk());
  EXPECT_NE(mixed.status().message().find("different hardware"), std::string::npos) << mixed.status().message();
  EXPECT_NE(mixed.status().message().find(x2.file), std::string::npos) << mixed.status().message();
  NamedRun bad = x4;
  for (Result& r : bad.run.results) {
    if (r.suite == "peer_copy" && r.status == "ok") {
      r.status = "failed: cudaMemcpyPeerAsync: invalid argument";
      break;
    }
  }
  auto failing = makeBaseline({bad});
  ASSERT_FALSE(failing.isOk());
  EXPECT_NE(failing.status().message().find("fails its own checks"), std::string::npos) << failing.status().message();
  EXPECT_FALSE(makeBaseline({}).isOk());
}

// Every committed baseline passes the newest committed run of its kind from the machines it was made on that measured
// every suite it holds, checked as `qualify --results NEWEST --baseline B` checks it (the checks engine with the
// baseline, the default noise rule). Runs of other boards of the kind are left out: boards of one kind differ beyond
// the noise in a few small-message rows (docs/compare.md: 15 of 1369 rows between two 4x H100 boards), which is what
// a baseline is for; a run that left a suite out (a node without a transport library) misses the baseline's rows.
TEST(Baseline, CommittedBaselinesPassTheNewestRunOfTheirKind) {
  const std::string root = peerlab::testing::sourcePath(".");
  std::vector<NamedRun> runs;
  for (const char* dir : {"reports/runs", "reports/qualify"}) {
    for (const auto& e : std::filesystem::recursive_directory_iterator(root + "/" + dir)) {
      // Run files, and each bundle's results.json (reports/qualify holds other JSON beside them).
      const std::string name = e.path().filename().string();
      const bool runFile = std::string(dir) == "reports/runs" ? isRunFileName(name)
                                                              : name == "results.json" || name == "results.json.gz";
      if (runFile) runs.push_back(committed(std::filesystem::relative(e.path(), root).string()));
    }
  }
  int baselines = 0;
  for (const auto& e : std::filesystem::directory_iterator(root + "/reports/baselines")) {
    if (!isRunFileName(e.path().string())) continue;
    ++baselines;
    const NamedRun base = committed(std::filesystem::relative(e.path(), root).string());
    SCOPED_TRACE(base.file);
    // Named by its kind, holding results.
    EXPECT_EQ(e.path().filename().string(), base.run.kind.name + ".json.gz");
    ASSERT_FALSE(base.run.results.empty());
    std::set<std::string> nodes, suites;
    for (const auto& f : base.run.extra["baseline"]["from"])
      if (f.contains("node") && f["node"].is_string()) nodes.insert(f["node"].get<std::string>());
    for (const Result& r : base.run.results)
      suites.insert(r.suite);
    ASSERT_FALSE(nodes.empty()) << "the baseline names the machines it was made on";
    const NamedRun* newest = nullptr;
    for (const NamedRun& r : runs) {
      if (r.run.kind.name != base.run.kind.name || !nodes.count(r.run.node.id)) continue;
      std::set<std::string> measured;
      for (const Result& x : r.run.results)
        measured.insert(x.suite);
      if (!std::includes(measured.begin(), measured.end(), suites.begin(), suites.end())) continue;
      if (!newest || parseIsoTimestamp(r.run.timestamp) > parseIsoTimestamp(newest->run.timestamp)) newest = &r;
    }
    ASSERT_NE(newest, nullptr) << "no committed run of kind " << base.run.kind.name;
    SCOPED_TRACE("newest: " + newest->file);
    PEERLAB_EXPECT_OK(checkSameHardware(base.run, newest->run, "baseline", "--allow-other-hardware"));
    EvaluateOptions o;
    o.baseline = &base.run;
    const RunVerdict v = verdictOf(newest->run, o);
    int baselineChecks = 0;
    for (const Check& c : v.checks) {
      if (c.category != "baseline") continue;
      ++baselineChecks;
      EXPECT_NE(c.status, CheckStatus::kFail)
          << c.name << ": " << c.measured << " vs " << c.expected << " (" << c.reason << "; " << c.basis << ")";
    }
    EXPECT_GT(baselineChecks, 10);
    EXPECT_TRUE(v.pass()) << formatCounts(v.counts);
  }
  EXPECT_GE(baselines, 4);
}

}  // namespace
}  // namespace peerlab::report
