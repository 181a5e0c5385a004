#include "harness/report/baseline.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <string>

#include "harness/report/compare.h"
#include "harness/report/evaluate.h"
#include "harness/testing/runs.h"
#include "reference/testing/testing.h"

namespace peerlab::report {
namespace {

NamedRun committed(const std::string& rel) {
  return {rel, peerlab::testing::committedRun(rel)};
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

// A baseline records the level and pairs it was made at and, from the kind's other runs, each board's time per row.
TEST(Baseline, RecordsLevelPairsAndTheFleet) {
  const NamedRun a = committed("reports/qualify/2026-11-28-h100-x4-nvswitch-c6c3604-standard/results.json.gz");
  const NamedRun b = committed("reports/qualify/2026-11-28-h100-x4-nvswitch-15bd040-standard/results.json.gz");
  const NamedRun quick = committed("reports/qualify/2026-11-28-h100-x4-nvswitch-c6c3604-quick/results.json.gz");
  const NamedRun other = committed("reports/qualify/2026-11-28-h200-x2-nvswitch-604e39b-standard/results.json.gz");
  ASSERT_NE(a.run.node.id, b.run.node.id) << "two boards of one kind";
  BaselineSummary sum;
  PEERLAB_ASSERT_OK_AND_ASSIGN(report::Run base, makeBaseline({a}, &sum, {b, quick, other}));
  EXPECT_EQ(sum.level, "standard");
  EXPECT_EQ(base.extra["baseline"]["level"], "standard");
  EXPECT_EQ(base.extra["baseline"]["pairs"].size(), 12u);  // every ordered pair of 4 GPUs
  EXPECT_EQ(sum.fleet_boards, 2);
  EXPECT_EQ(sum.fleet_runs, 3);  // a, b and the quick run of a's board; the other kind is left out and listed
  ASSERT_EQ(sum.fleet_skipped.size(), 1u);
  EXPECT_NE(sum.fleet_skipped[0].find("another kind"), std::string::npos) << sum.fleet_skipped[0];
  EXPECT_GT(sum.fleet_rows, 1000);
  // A row's fleet times are each board's time: here a's own and b's (a peer_copy row both measured once).
  std::map<std::string, int> seenA, seenB;
  for (const Result& r : a.run.results)
    ++seenA[resultKey(r)];
  for (const Result& r : b.run.results)
    ++seenB[resultKey(r)];
  std::string key;
  std::optional<double> ta, tb;
  for (const Result& r : a.run.results) {
    if (r.suite != "peer_copy" || r.status != "ok" || !r.time_us || seenA[resultKey(r)] != 1) continue;
    if (seenB[resultKey(r)] != 1) continue;
    key = resultKey(r);
    ta = r.time_us;
    break;
  }
  for (const Result& r : b.run.results)
    if (resultKey(r) == key) tb = r.time_us;
  ASSERT_TRUE(ta && tb) << key;
  bool found = false;
  for (const Result& r : base.results) {
    if (resultKey(r) != key) continue;
    found = true;
    ASSERT_TRUE(r.extra.contains("fleet_time_us")) << r.extra.dump();
    std::vector<double> times = r.extra["fleet_time_us"].get<std::vector<double>>();
    std::sort(times.begin(), times.end());
    EXPECT_EQ(times, (std::vector<double>{std::min(*ta, *tb), std::max(*ta, *tb)}));
  }
  EXPECT_TRUE(found);
  // Runs of two levels do not make one baseline.
  auto mixed = makeBaseline({a, quick});
  ASSERT_FALSE(mixed.isOk());
  EXPECT_NE(mixed.status().message().find("a baseline is made from runs of one level"), std::string::npos)
      << mixed.status().message();
}

// The rows both hold are judged; a row of another level is not compared (information), one this run should have
// measured at the baseline's own level is missing (a failure).
TEST(Baseline, ComparesWhatBothHoldAtItsLevel) {
  const NamedRun run = committed("reports/qualify/2026-11-28-h200-x2-nvswitch-604e39b-standard/results.json.gz");
  PEERLAB_ASSERT_OK_AND_ASSIGN(report::Run base, makeBaseline({run}));
  ASSERT_TRUE(base.plan.has_value());
  // The same run with its peer_copy rows of pair 1->0 gone.
  report::Run fewer = run.run;
  const auto gone = [](const Result& r) { return r.suite == "peer_copy" && r.src == 1 && r.dst == 0; };
  const size_t before = fewer.results.size();
  fewer.results.erase(std::remove_if(fewer.results.begin(), fewer.results.end(), gone), fewer.results.end());
  ASSERT_LT(fewer.results.size(), before);
  EvaluateOptions o;
  o.baseline = &base;
  const auto checkNamed = [](const RunVerdict& v, const std::string& name) -> const Check* {
    for (const Check& c : v.checks)
      if (c.category == "baseline" && c.name == name) return &c;
    return nullptr;
  };
  // At the baseline's level the rows are missing.
  const RunVerdict same = verdictOf(fewer, o);
  const Check* missing = checkNamed(same, "baseline results present in this run");
  ASSERT_NE(missing, nullptr);
  EXPECT_EQ(missing->status, CheckStatus::kFail) << missing->reason;
  // Against a baseline of another level they are not compared: listed, not failed.
  base.plan->level = Level::kFull;
  const RunVerdict other = verdictOf(fewer, o);
  missing = checkNamed(other, "baseline results present in this run");
  ASSERT_NE(missing, nullptr);
  EXPECT_EQ(missing->status, CheckStatus::kPass) << missing->reason;
  const Check* info = checkNamed(other, "rows not compared at this level");
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(info->status, CheckStatus::kSkipped);
  EXPECT_NE(info->reason.find("the baseline is of level full, this run of level standard"), std::string::npos)
      << info->reason;
  EXPECT_EQ(info->measured_value, static_cast<double>(before - fewer.results.size()));
  for (const Check& c : other.checks) {
    if (c.category == "baseline") {
      EXPECT_NE(c.status, CheckStatus::kFail) << c.name << ": " << c.reason;
    }
  }
}

// Every committed baseline records its level and passes the newest committed bundle of its kind at that level, from
// whichever board it came, checked as `qualify --results NEWEST --baseline B` checks it (the checks engine with the
// baseline, the default noise rule; small-message rows held to the kind's board-to-board spread). No run is left out.
TEST(Baseline, CommittedBaselinesPassTheNewestBundleOfTheirKindAtTheirLevel) {
  const std::string root = peerlab::testing::sourcePath(".");
  std::vector<NamedRun> bundles;
  for (const auto& e : std::filesystem::recursive_directory_iterator(root + "/reports/qualify")) {
    const std::string name = e.path().filename().string();
    if (name == "results.json" || name == "results.json.gz")
      bundles.push_back(committed(std::filesystem::relative(e.path(), root).string()));
  }
  int baselines = 0;
  for (const auto& e : std::filesystem::directory_iterator(root + "/reports/baselines")) {
    if (!isRunFileName(e.path().string())) continue;
    ++baselines;
    const NamedRun base = committed(std::filesystem::relative(e.path(), root).string());
    SCOPED_TRACE(base.file);
    // Named by its kind, holding results, saying its level.
    EXPECT_EQ(e.path().filename().string(), base.run.kind.name + ".json.gz");
    ASSERT_FALSE(base.run.results.empty());
    const std::string level = runLevel(base.run);
    ASSERT_FALSE(level.empty()) << "a baseline has the plan of the runs it was made from";
    EXPECT_EQ(base.run.extra["baseline"].value("level", ""), level);
    const NamedRun* newest = nullptr;
    for (const NamedRun& r : bundles) {
      if (r.run.kind.name != base.run.kind.name || runLevel(r.run) != level) continue;
      if (!newest || parseIsoTimestamp(r.run.timestamp) > parseIsoTimestamp(newest->run.timestamp)) newest = &r;
    }
    ASSERT_NE(newest, nullptr) << "no committed bundle of kind " << base.run.kind.name << " at level " << level;
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
  EXPECT_GE(baselines, 5);
}

}  // namespace
}  // namespace peerlab::report
