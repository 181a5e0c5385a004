// The checks engine on committed run files and on runs edited from them: the verdict comes from the results and the
// stored plan, every expectation scope counts, a plan's "not run" is shown as skipped, reasons carry the numbers.
#include "harness/report/evaluate.h"
#include "harness/testing/runs.h"

#include <gtest/gtest.h>

#include <map>

#include "reference/testing/testing.h"

namespace peerlab::report {
namespace {

std::string failures(const RunVerdict& v) {
  std::string s;
  for (const Check& c : v.checks) {
    if (c.failed()) s += c.category + " | " + c.name + " | " + c.reason + "\n";
  }
  return s;
}

using peerlab::testing::checkNamed;
using peerlab::testing::healthRow;

report::Run committed(const std::string& name) {
  return peerlab::testing::committedRun("reports/runs/" + name);
}

report::Run x4() {
  return committed("2026-11-21-h200-x4-nvswitch-db99ff9.json.gz");
}
report::Run h100() {
  return committed("2026-11-25-h100-x1-a99f8ae.json.gz");
}

// A one-GPU qualify: pair suites are notes, not jobs; the probe did not run and says so.
TEST(Evaluate, OneGpuQualifyIsPassWithTheProbeNotRun) {
  const RunVerdict v = verdictOf(h100());
  EXPECT_TRUE(v.pass()) << failures(v);
  EXPECT_FALSE(v.storedPassContradicted());
  const Check* probe = checkNamed(v.checks, "verified probe");
  ASSERT_NE(probe, nullptr);
  EXPECT_EQ(probe->status, CheckStatus::kSkipped);
  EXPECT_NE(probe->reason.find("not run: the topology has no GPU pair"), std::string::npos) << probe->reason;
  EXPECT_EQ(v.counts.skipped, 1);
  EXPECT_EQ(v.counts.unsupported, 4);
  EXPECT_EQ(v.counts.passed + v.counts.unsupported + v.counts.skipped, v.counts.total);
}

TEST(Evaluate, CommittedPassingRunIsPassInEveryCategory) {
  const RunVerdict v = verdictOf(x4());
  ASSERT_TRUE(v.stored_pass.has_value());
  EXPECT_TRUE(*v.stored_pass);
  EXPECT_TRUE(v.pass()) << failures(v);
  std::map<std::string, int> byCategory;
  for (const Check& c : v.checks)
    ++byCategory[c.category];
  EXPECT_GE(byCategory["topology"], 3);
  EXPECT_GE(byCategory["probe"], 1);
  EXPECT_GE(byCategory["data"], 5);
  EXPECT_GE(byCategory["bandwidth"], 60);
  EXPECT_GE(byCategory["latency"], 10);
  EXPECT_GE(byCategory["coverage"], 3);
}

// Host-scope expectations (one per GPU, results without a destination) are checked: a slow host copy fails.
TEST(Evaluate, HostScopeExpectationsAreChecked) {
  report::Run run = h100();
  int edited = 0;
  for (Result& r : run.results) {
    if (r.suite == "host_copy" && r.impl == "peerlab.ce" && (r.name == "h2d" || r.name == "d2h") && r.bytes &&
        *r.bytes >= (64 << 20) && r.status == "ok") {
      r.algbw_gbps = 5;
      r.busbw_gbps = 5;
      ++edited;
    }
  }
  ASSERT_GT(edited, 0);
  const RunVerdict v = verdictOf(run);
  EXPECT_FALSE(v.pass());
  EXPECT_TRUE(v.storedPassContradicted());
  const Check* h2d = checkNamed(v.checks, "host_copy peerlab.ce h2d gpu 0 host numa 0");
  ASSERT_NE(h2d, nullptr) << failures(v);
  EXPECT_TRUE(h2d->failed());
  EXPECT_EQ(h2d->measured, "5.0 GB/s algbw at 256 MiB");
  EXPECT_EQ(h2d->expected, ">= 50.4 GB/s");
  EXPECT_NE(h2d->basis.find("scope host"), std::string::npos) << h2d->basis;
  EXPECT_NE(h2d->reason.find("9.9% of the expected figure"), std::string::npos) << h2d->reason;
  EXPECT_EQ(v.counts.failed, 2) << failures(v);
}

TEST(Evaluate, ClaimedCorruptCellFailsOnceAsOneCell) {
  report::Run run = x4();
  int edited = 0;
  for (Result& r : run.results) {
    if (r.suite == "probe" && r.extra.value("claimed", false) && r.src == 1 && r.dst == 2 &&
        r.name.rfind("ce_write/", 0) == 0) {
      r.status = "corrupt";
      r.wrong = 12;
      ++edited;
    }
  }
  ASSERT_GE(edited, 1);
  const RunVerdict v = verdictOf(run);
  EXPECT_FALSE(v.pass());
  EXPECT_TRUE(v.storedPassContradicted());
  const Check* ce = checkNamed(v.checks, "probe ce_write: claimed cells verify");
  ASSERT_NE(ce, nullptr);
  // A cell is an ordered pair and a method, whatever the number of sizes probed.
  EXPECT_EQ(ce->measured, "11 of 12 claimed cells verified (12 cells)");
  EXPECT_NE(ce->reason.find("1->2 corrupt"), std::string::npos) << ce->reason;
}

TEST(Evaluate, MissingSuiteAndProcessFailureRecordsFail) {
  report::Run run = x4();
  std::erase_if(run.results, [](const Result& r) { return r.suite == "zcopy"; });
  run.results.push_back(
      peerlab::testing::statusRow("zcopy", "process", "zcopy_bench", "failed: zcopy_bench not found"));
  const RunVerdict v = verdictOf(run);
  EXPECT_FALSE(v.pass());
  const Check* coverage = checkNamed(v.checks, "suite zcopy has results");
  ASSERT_NE(coverage, nullptr);
  EXPECT_TRUE(coverage->failed());
  EXPECT_EQ(coverage->measured, "0 results (+1 process failures)");
  EXPECT_NE(coverage->reason.find("zcopy_bench not found"), std::string::npos) << coverage->reason;
}

TEST(Evaluate, WrongElementsAndSlowPairsFail) {
  report::Run run = x4();
  for (Result& r : run.results) {
    if (r.suite == "alltoallv" && r.impl == "peerlab.alltoallv") {
      r.wrong = 3;
      break;
    }
  }
  for (Result& r : run.results) {
    if (r.suite == "peer_copy" && r.impl == "peerlab.ce" && r.name == "uni" && r.src == 0 && r.dst == 1 && r.bytes &&
        *r.bytes >= 64 << 20) {
      r.algbw_gbps = *r.algbw_gbps * 0.5;
      r.busbw_gbps = *r.busbw_gbps * 0.5;
    }
  }
  const RunVerdict v = verdictOf(run);
  EXPECT_FALSE(v.pass());
  const std::string f = failures(v);
  EXPECT_NE(f.find("data | alltoallv: results ran and verified"), std::string::npos) << f;
  EXPECT_NE(f.find("3 wrong elements"), std::string::npos) << f;
  EXPECT_NE(f.find("bandwidth | peer_copy peerlab.ce uni 0->1"), std::string::npos) << f;
}

TEST(Evaluate, HealthReasonsTravelAndStatusesCountApart) {
  report::Run run = h100();
  for (Result& r : run.results) {
    if (r.suite == "health" && r.name == "xid") {
      r.status = "fail";
      r.detail = "XID 79 (GPU has fallen off the bus) at 12.3 s";
    }
    if (r.suite == "health" && r.name == "pcie_errors") {
      r.status = "warn";
      r.detail = "154 correctable errors/s (2131 in 13.8 s)";
    }
  }
  const RunVerdict v = verdictOf(run);
  const Check* xid = checkNamed(v.checks, "xid GPU 0");
  ASSERT_NE(xid, nullptr);
  EXPECT_TRUE(xid->failed());
  EXPECT_EQ(xid->reason, "XID 79 (GPU has fallen off the bus) at 12.3 s");
  const Check* pcie = checkNamed(v.checks, "pcie_errors GPU 0");
  ASSERT_NE(pcie, nullptr);
  EXPECT_EQ(pcie->status, CheckStatus::kWarn);
  EXPECT_EQ(v.counts.warnings, 1);
  EXPECT_EQ(v.counts.failed, 1);
}

// A run without a plan: its probe cells, health and data are checked, and nothing else is invented.
TEST(Evaluate, RunWithoutPlanGetsProbeHealthAndDataChecks) {
  report::Run run;
  Result r;
  r.suite = "peer_copy";
  r.name = "uni";
  r.impl = "peerlab.ce";
  r.wrong = 0;
  run.results.push_back(r);
  RunVerdict v = verdictOf(run);
  EXPECT_TRUE(v.pass());
  EXPECT_FALSE(v.stored_pass.has_value());
  EXPECT_EQ(v.counts.total, 1);
  run.results[0].status = "failed: timeout";
  EXPECT_FALSE(verdictOf(run).pass());
  run.results[0].status = "ok";
  run.results.push_back(healthRow(0, "ecc", "warn"));
  v = verdictOf(run);
  EXPECT_TRUE(v.pass());
  EXPECT_EQ(v.counts.warnings, 1);
  run.results.back().status = "fail";
  EXPECT_FALSE(verdictOf(run).pass());
}

// Stored baseline checks are kept (and say so) when the baseline run is not given again.
TEST(Evaluate, StoredBaselineChecksAreKept) {
  report::Run run = x4();
  Check b;
  b.category = "baseline";
  b.name = "peer_copy uni peerlab.ce 0->1 256 MiB";
  b.status = CheckStatus::kFail;
  b.reason = "REGRESSED (-12.0%)";
  run.extra["qualify"]["checks"].push_back(toJson(b));
  const RunVerdict v = verdictOf(run);
  const Check* kept = checkNamed(v.checks, b.name);
  ASSERT_NE(kept, nullptr);
  EXPECT_TRUE(kept->failed());
  EXPECT_NE(kept->reason.find("as stored"), std::string::npos) << kept->reason;
  EXPECT_FALSE(v.pass());
}

TEST(Evaluate, CountsAreFormattedOneWay) {
  std::vector<Check> checks(6);
  checks[1].status = CheckStatus::kFail;
  checks[2].status = CheckStatus::kWarn;
  checks[3].status = CheckStatus::kUnsupported;
  checks[4].status = CheckStatus::kSkipped;
  checks[5].status = CheckStatus::kUnsupported;
  const CheckCounts n = countChecks(checks);
  EXPECT_EQ(formatCounts(n), "6 checks: 1 passed, 1 failed, 1 warning, 2 unsupported, 1 skipped");
  EXPECT_STREQ(verdictWord(n), "FAIL");
  // Statuses survive the run file; checks written before statuses read as they were meant.
  auto back = checksFromJson(toJson(checks));
  ASSERT_TRUE(back.isOk());
  EXPECT_EQ(countChecks(*back).unsupported, 2);
  nlohmann::json old = {{{"category", "health"}, {"name", "ecc GPU 0"}, {"pass", true}, {"measured", "warn"}},
                        {{"category", "bandwidth"}, {"name", "x"}, {"pass", false}}};
  auto legacy = checksFromJson(old);
  ASSERT_TRUE(legacy.isOk());
  EXPECT_EQ((*legacy)[0].status, CheckStatus::kWarn);
  EXPECT_EQ((*legacy)[1].status, CheckStatus::kFail);
}

}  // namespace
}  // namespace peerlab::report

namespace peerlab::report {
namespace {

// Nothing checked is not a pass: a run with no results and no plan is EMPTY, in every count and word.
TEST(Evaluate, ZeroChecksIsItsOwnVerdict) {
  report::Run empty = x4();
  empty.results.clear();
  empty.plan.reset();
  empty.extra.erase("plan");
  empty.extra.erase("qualify");
  const RunVerdict v = verdictOf(empty);
  EXPECT_EQ(v.counts.total, 0);
  EXPECT_TRUE(v.counts.empty());
  EXPECT_FALSE(v.pass());
  EXPECT_EQ(std::string(verdictWord(v.counts)), "EMPTY");
  EXPECT_EQ(toJson(v.counts)["verdict"], "EMPTY");
  // One check is enough to be a verdict again.
  report::Run one = empty;
  one.results.push_back(healthRow(0, "xid", "ok"));
  EXPECT_EQ(std::string(verdictWord(verdictOf(one).counts)), "PASS");
}

// A rule whose impl or name selects none of its suite's results (a typo in a config) is a skipped check every output
// shows (not checked, and why); a rule for a suite that did not run says nothing.
TEST(Evaluate, ARuleThatSelectsNothingIsReported) {
  report::Run run = x4();
  ASSERT_TRUE(run.plan.has_value());
  RunPlan plan = *run.plan;
  Expectation typo = plan.expectations.front();
  typo.rule = "peer_copy_typo";
  typo.suite = "peer_copy";
  typo.impl = "peerlab.cee";
  plan.expectations.push_back(typo);
  LatencyRule lat;
  lat.id = "zcopy_typo";
  lat.suite = "zcopy";
  lat.impl = "peerlab.gett";
  lat.max_us = 10;
  plan.latency.push_back(lat);
  Expectation absent = plan.expectations.front();
  absent.rule = "transport_absent";
  absent.suite = "transport";
  plan.expectations.push_back(absent);
  const std::vector<Check> checks = evaluateChecks(run, &plan);
  const Check* e = checkNamed(checks, "expect.peer_copy_typo selects a result");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->status, CheckStatus::kSkipped);
  EXPECT_NE(e->reason.find("not checked: the rule selects none of the"), std::string::npos) << e->reason;
  EXPECT_NE(e->reason.find("a typo in the config's impl or name"), std::string::npos) << e->reason;
  EXPECT_NE(e->reason.find("peerlab.ce"), std::string::npos) << e->reason;  // what the suite does have
  EXPECT_NE(e->basis.find("impl peerlab.cee"), std::string::npos) << e->basis;
  const Check* l = checkNamed(checks, "latency.zcopy_typo selects a result");
  ASSERT_NE(l, nullptr);
  EXPECT_EQ(l->status, CheckStatus::kSkipped);
  EXPECT_EQ(checkNamed(checks, "expect.transport_absent selects a result"), nullptr);
  // Counted and shown as not checked, never as passed, never as a failure.
  const CheckCounts n = countChecks(checks);
  EXPECT_GE(n.skipped, 2);
  EXPECT_TRUE(n.pass());
}

// The one matcher: pair, host (a host copy names no destination), device and machine scopes.
TEST(Evaluate, OneMatcherForExpectationsAndResults) {
  Expectation pair;
  pair.suite = "peer_copy";
  pair.impl = "peerlab.*";
  pair.name = "uni";
  pair.src = 0;
  pair.dst = 1;
  Result r;
  r.suite = "peer_copy";
  r.impl = "peerlab.ce";
  r.name = "uni";
  r.src = 0;
  r.dst = 1;
  EXPECT_TRUE(expectationApplies(pair, r));
  r.dst = 2;
  EXPECT_FALSE(expectationApplies(pair, r));
  Expectation host = pair;
  host.scope = "host";
  host.dst.reset();
  r.dst.reset();
  EXPECT_TRUE(expectationApplies(host, r));
  r.src = 1;
  EXPECT_FALSE(expectationApplies(host, r));
  Expectation machine = pair;
  machine.scope = "gpu";
  machine.src.reset();
  machine.dst.reset();
  EXPECT_TRUE(expectationApplies(machine, r));
  r.impl = "nccl.sendrecv";
  EXPECT_FALSE(expectationApplies(machine, r));
  // The pages' figure: the first that applies at the result's size and gives a number.
  r.impl = "peerlab.ce";
  r.bytes = 1 << 20;
  machine.gbps = 100;
  machine.min_bytes = 1 << 22;
  EXPECT_FALSE(expectedFigure(std::vector<Expectation>{machine}, r).has_value());
  r.bytes = 1 << 22;
  ASSERT_TRUE(expectedFigure(std::vector<Expectation>{machine}, r).has_value());
  EXPECT_DOUBLE_EQ(expectedFigure(std::vector<Expectation>{machine}, r)->gbps, 100);
}

}  // namespace
}  // namespace peerlab::report
