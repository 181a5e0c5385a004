#include "harness/report/verdict.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "reference/testing/testing.h"

namespace peerlab::report {
namespace {

std::string failures(const RunVerdict& v) {
  std::string s;
  for (const Check& c : v.checks) {
    if (!c.pass) s += c.category + " | " + c.name + " | " + c.reason + "\n";
  }
  return s;
}

report::Run committedRun() {
  auto run = readRun(peerlab::testing::sourcePath("reports/runs/2026-11-21-nvidia-h200-x4-db99ff9.json"));
  EXPECT_TRUE(run.isOk()) << run.status().toString();
  return run.isOk() ? *run : report::Run{};
}

// A one-GPU qualify: the plan notes the pair suites as not applicable; only its jobs' suites must have results.
TEST(Verdict, OneGpuQualifyRecomputesToPass) {
  auto run = readRun(peerlab::testing::sourcePath("reports/runs/2026-11-25-nvidia-h100-x1-a99f8ae.json"));
  ASSERT_TRUE(run.isOk()) << run.status().toString();
  const RunVerdict v = recomputeVerdict(*run);
  EXPECT_TRUE(v.pass) << failures(v);
  EXPECT_FALSE(v.storedPassContradicted());
}

TEST(Verdict, CommittedPassingRunRecomputesToPass) {
  const report::Run run = committedRun();
  const RunVerdict v = recomputeVerdict(run);
  ASSERT_TRUE(v.stored_pass.has_value());
  EXPECT_TRUE(*v.stored_pass);
  EXPECT_TRUE(v.pass) << failures(v);
  EXPECT_FALSE(v.storedPassContradicted());
  // Every category is recomputed: probe methods, data per suite, bandwidth expectations, latency bounds, suites.
  std::map<std::string, int> byCategory;
  for (const Check& c : v.checks)
    ++byCategory[c.category];
  EXPECT_GE(byCategory["probe"], 1);
  EXPECT_GE(byCategory["data"], 5);
  EXPECT_GE(byCategory["bandwidth"], 60);
  EXPECT_GE(byCategory["latency"], 10);
  EXPECT_GE(byCategory["coverage"], 3);
}

TEST(Verdict, StoredPassOverCorruptClaimedCellIsFail) {
  report::Run run = committedRun();
  bool edited = false;
  for (Result& r : run.results) {
    if (r.suite == "probe" && r.extra.value("claimed", false) && r.src == 1 && r.dst == 2) {
      r.status = "corrupt";
      r.wrong = 12;
      edited = true;
      break;
    }
  }
  ASSERT_TRUE(edited);
  const RunVerdict v = recomputeVerdict(run);
  EXPECT_FALSE(v.pass);
  EXPECT_TRUE(v.storedPassContradicted());
  EXPECT_NE(failures(v).find("claimed by the driver but not verified: ce_write/4096 1->2 corrupt"), std::string::npos)
      << failures(v);
}

TEST(Verdict, MissingSuiteIsFail) {
  report::Run run = committedRun();
  std::erase_if(run.results, [](const Result& r) { return r.suite == "zcopy"; });
  const RunVerdict v = recomputeVerdict(run);
  EXPECT_FALSE(v.pass);
  EXPECT_NE(failures(v).find("suite zcopy has results"), std::string::npos) << failures(v);
}

TEST(Verdict, WrongElementsAndMissedExpectationsFail) {
  report::Run run = committedRun();
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
  const RunVerdict v = recomputeVerdict(run);
  EXPECT_FALSE(v.pass);
  const std::string f = failures(v);
  EXPECT_NE(f.find("alltoallv: results ran and verified"), std::string::npos) << f;
  EXPECT_NE(f.find("3 wrong elements"), std::string::npos) << f;
  EXPECT_NE(f.find("bandwidth | peer_copy peerlab.ce uni 0->1"), std::string::npos) << f;
}

TEST(Verdict, RunWithoutPlanGetsProbeAndDataChecks) {
  report::Run run;
  Result r;
  r.suite = "peer_copy";
  r.name = "uni";
  r.impl = "peerlab.ce";
  r.wrong = 0;
  run.results.push_back(r);
  EXPECT_TRUE(recomputeVerdict(run).pass);
  EXPECT_FALSE(recomputeVerdict(run).stored_pass.has_value());
  run.results[0].status = "failed: timeout";
  EXPECT_FALSE(recomputeVerdict(run).pass);
  run.results[0].status = "ok";
  // Health: warn passes, fail fails.
  Result h;
  h.suite = "health";
  h.impl = "nvml";
  h.name = "ecc";
  h.src = 0;
  h.status = "warn";
  run.results.push_back(h);
  EXPECT_TRUE(recomputeVerdict(run).pass);
  run.results.back().status = "fail";
  EXPECT_FALSE(recomputeVerdict(run).pass);
}

}  // namespace
}  // namespace peerlab::report
