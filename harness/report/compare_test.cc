#include "harness/report/compare.h"

#include <gtest/gtest.h>

#include "reference/core/testing.h"

namespace peerlab::report {
namespace {

Result bw(const std::string& suite, const std::string& impl, int src, int dst, double bytes, double gbps) {
  Result r;
  r.suite = suite;
  r.name = "uni";
  r.impl = impl;
  r.src = src;
  r.dst = dst;
  r.bytes = bytes;
  r.algbw_gbps = gbps;
  r.time_us = bytes / gbps / 1e3;
  r.wrong = 0;
  return r;
}

Result lat(const std::string& impl, double us) {
  Result r;
  r.suite = "zcopy";
  r.name = "pingpong";
  r.impl = impl;
  r.src = 0;
  r.dst = 1;
  r.ranks = 2;
  r.bytes = 8;
  r.time_us = us;
  return r;
}

const CompareRow& rowFor(const CompareReport& rep, const std::string& impl) {
  for (const CompareRow& r : rep.rows) {
    const Result& x = r.fresh ? *r.fresh : *r.base;
    if (x.impl == impl) return r;
  }
  static CompareRow none;
  ADD_FAILURE() << "no row for " << impl;
  return none;
}

TEST(Compare, BandwidthHigherIsBetter) {
  report::Run base, fresh;
  base.results = {bw("peer_copy", "a", 0, 1, 1 << 28, 400), bw("peer_copy", "b", 0, 1, 1 << 28, 400),
                  bw("peer_copy", "c", 0, 1, 1 << 28, 400)};
  fresh.results = {bw("peer_copy", "a", 0, 1, 1 << 28, 440), bw("peer_copy", "b", 0, 1, 1 << 28, 360),
                   bw("peer_copy", "c", 0, 1, 1 << 28, 388)};
  CompareReport rep = compareRuns(base, fresh);
  ASSERT_EQ(rep.rows.size(), 3u);
  EXPECT_EQ(rowFor(rep, "a").verdict, Verdict::kImproved);
  EXPECT_EQ(rowFor(rep, "a").metric, "algbw_gbps");
  EXPECT_NEAR(*rowFor(rep, "a").change_pct, 10.0, 1e-9);
  EXPECT_EQ(rowFor(rep, "b").verdict, Verdict::kRegressed);
  EXPECT_NEAR(*rowFor(rep, "b").change_pct, -10.0, 1e-9);
  EXPECT_EQ(rowFor(rep, "c").verdict, Verdict::kSame);  // -3% is within the default 5%
  EXPECT_EQ(rep.regressions(), 1);
}

TEST(Compare, TimeLowerIsBetterWhenNoBandwidth) {
  report::Run base, fresh;
  base.results = {lat("fast", 10), lat("slow", 10), lat("noise", 10)};
  fresh.results = {lat("fast", 8), lat("slow", 12), lat("noise", 10.4)};
  CompareReport rep = compareRuns(base, fresh);
  EXPECT_EQ(rowFor(rep, "fast").metric, "time_us");
  EXPECT_EQ(rowFor(rep, "fast").verdict, Verdict::kImproved);
  EXPECT_EQ(rowFor(rep, "slow").verdict, Verdict::kRegressed);
  EXPECT_NEAR(*rowFor(rep, "slow").change_pct, 20.0, 1e-9);
  EXPECT_EQ(rowFor(rep, "noise").verdict, Verdict::kSame);
}

TEST(Compare, ThresholdIsHonoured) {
  report::Run base, fresh;
  base.results = {bw("peer_copy", "a", 0, 1, 4096, 100)};
  fresh.results = {bw("peer_copy", "a", 0, 1, 4096, 93)};
  EXPECT_EQ(compareRuns(base, fresh, {5.0}).rows[0].verdict, Verdict::kRegressed);
  EXPECT_EQ(compareRuns(base, fresh, {10.0}).rows[0].verdict, Verdict::kSame);
}

TEST(Compare, MissingOnEitherSideIsListed) {
  report::Run base, fresh;
  base.results = {bw("peer_copy", "a", 0, 1, 4096, 100), bw("peer_copy", "gone", 0, 1, 4096, 100)};
  fresh.results = {bw("peer_copy", "a", 0, 1, 4096, 100), bw("peer_copy", "added", 0, 1, 4096, 100)};
  CompareReport rep = compareRuns(base, fresh);
  ASSERT_EQ(rep.rows.size(), 3u);
  EXPECT_EQ(rowFor(rep, "gone").verdict, Verdict::kOnlyBase);
  EXPECT_EQ(rowFor(rep, "added").verdict, Verdict::kOnlyNew);
  EXPECT_EQ(rep.regressions(), 0);
  const std::string table = formatCompare(rep);
  EXPECT_NE(table.find("only in base"), std::string::npos);
  EXPECT_NE(table.find("only in new"), std::string::npos);
}

TEST(Compare, IdentityIncludesPairSizeAndRanks) {
  report::Run base, fresh;
  base.results = {bw("peer_copy", "a", 0, 1, 4096, 100)};
  fresh.results = {bw("peer_copy", "a", 1, 0, 4096, 100), bw("peer_copy", "a", 0, 1, 8192, 100)};
  Result ranks = bw("peer_copy", "a", 0, 1, 4096, 100);
  ranks.ranks = 2;
  fresh.results.push_back(ranks);
  CompareReport rep = compareRuns(base, fresh);
  EXPECT_EQ(rep.count(Verdict::kOnlyBase), 1);
  EXPECT_EQ(rep.count(Verdict::kOnlyNew), 3);
}

TEST(Compare, StatusRegressionsRegardlessOfNumbers) {
  report::Run base, fresh;
  Result ok = bw("peer_copy", "failed", 0, 1, 4096, 100);
  Result bad = ok;
  bad.status = "failed: cudaMemcpyPeerAsync: invalid argument";
  bad.algbw_gbps = 500;  // a faster number never hides a failure
  base.results.push_back(ok);
  fresh.results.push_back(bad);

  Result probeOk;
  probeOk.suite = "probe";
  probeOk.name = "ce_write/4096";
  probeOk.impl = "peerlab.probe";
  probeOk.src = 0;
  probeOk.dst = 1;
  probeOk.time_us = 12;
  Result probeCorrupt = probeOk;
  probeCorrupt.status = "corrupt";
  probeCorrupt.time_us = 1;
  base.results.push_back(probeOk);
  fresh.results.push_back(probeCorrupt);

  Result skipped = bw("peer_copy", "skipped", 0, 1, 4096, 100);
  Result nowSkipped = skipped;
  nowSkipped.status = "skipped: needs 2 GPUs";
  base.results.push_back(skipped);
  fresh.results.push_back(nowSkipped);

  Result wrong = bw("peer_copy", "wrong", 0, 1, 4096, 100);
  Result nowWrong = wrong;
  nowWrong.wrong = 17;
  base.results.push_back(wrong);
  fresh.results.push_back(nowWrong);

  CompareReport rep = compareRuns(base, fresh);
  EXPECT_EQ(rowFor(rep, "failed").verdict, Verdict::kStatusRegressed);
  EXPECT_EQ(rowFor(rep, "failed").metric, "status");
  EXPECT_EQ(rowFor(rep, "peerlab.probe").verdict, Verdict::kStatusRegressed);
  EXPECT_EQ(rowFor(rep, "skipped").verdict, Verdict::kStatusRegressed);
  EXPECT_EQ(rowFor(rep, "wrong").verdict, Verdict::kStatusRegressed);
  EXPECT_EQ(rep.regressions(), 4);
  const std::string table = formatCompare(rep);
  EXPECT_NE(table.find("STATUS REGRESSED"), std::string::npos) << table;
  EXPECT_NE(table.find("corrupt"), std::string::npos) << table;
}

TEST(Compare, FixedAndUnchangedStatus) {
  report::Run base, fresh;
  Result a = bw("peer_copy", "fixed", 0, 1, 4096, 100);
  Result aBad = a;
  aBad.status = "failed: timeout";
  base.results.push_back(aBad);
  fresh.results.push_back(a);
  Result s = bw("peer_copy", "skip", 0, 1, 4096, 100);
  s.status = "skipped: torch is not importable";
  base.results.push_back(s);
  fresh.results.push_back(s);
  Result probe;
  probe.suite = "probe";
  probe.name = "sm_store/4096";
  probe.impl = "peerlab.probe";
  probe.status = "unsupported";
  Result probeOk = probe;
  probeOk.status = "ok";
  base.results.push_back(probe);
  fresh.results.push_back(probeOk);
  CompareReport rep = compareRuns(base, fresh);
  EXPECT_EQ(rowFor(rep, "fixed").verdict, Verdict::kFixed);
  EXPECT_EQ(rowFor(rep, "skip").verdict, Verdict::kUnchangedStatus);
  EXPECT_EQ(rowFor(rep, "peerlab.probe").verdict, Verdict::kFixed);
  EXPECT_EQ(rep.regressions(), 0);
}

TEST(Compare, DuplicateKeysMatchByOccurrence) {
  report::Run base, fresh;
  base.results = {bw("peer_copy", "a", 0, 1, 4096, 100), bw("peer_copy", "a", 0, 1, 4096, 200)};
  fresh.results = {bw("peer_copy", "a", 0, 1, 4096, 100), bw("peer_copy", "a", 0, 1, 4096, 100)};
  CompareReport rep = compareRuns(base, fresh);
  ASSERT_EQ(rep.rows.size(), 2u);
  EXPECT_EQ(rep.rows[0].verdict, Verdict::kSame);
  EXPECT_EQ(rep.rows[1].verdict, Verdict::kRegressed);
}

TEST(Compare, TableNamesMetricPerRow) {
  report::Run base, fresh;
  base.results = {bw("peer_copy", "a", 0, 1, 1 << 20, 100), lat("z", 10)};
  fresh.results = {bw("peer_copy", "a", 0, 1, 1 << 20, 50), lat("z", 5)};
  const std::string table = formatCompare(compareRuns(base, fresh));
  EXPECT_NE(table.find("peer_copy uni a 0->1 1 MiB"), std::string::npos) << table;
  EXPECT_NE(table.find("algbw GB/s"), std::string::npos) << table;
  EXPECT_NE(table.find("time us"), std::string::npos) << table;
  EXPECT_NE(table.find("-50.00%"), std::string::npos) << table;
  EXPECT_NE(table.find("1 regressed"), std::string::npos) << table;
  EXPECT_NE(table.find("1 improved"), std::string::npos) << table;
  // Only changes: both rows changed, so both stay; a same row would go.
  EXPECT_NE(formatCompare(compareRuns(base, fresh), true).find("REGRESSED"), std::string::npos);
  EXPECT_EQ(formatCompare(compareRuns(base, base), true).find("peer_copy uni"), std::string::npos);
}

TEST(Compare, ParseThreshold) {
  EXPECT_DOUBLE_EQ(*parseThresholdPct("5"), 5.0);
  EXPECT_DOUBLE_EQ(*parseThresholdPct("2.5%"), 2.5);
  EXPECT_FALSE(parseThresholdPct("five").isOk());
  EXPECT_FALSE(parseThresholdPct("-1").isOk());
  EXPECT_FALSE(parseThresholdPct("").isOk());
  EXPECT_FALSE(parseThresholdPct("5x").isOk());
}

TEST(Compare, FormatBytes) {
  EXPECT_EQ(formatBytes(8), "8 B");
  EXPECT_EQ(formatBytes(4096), "4 KiB");
  EXPECT_EQ(formatBytes(268435456), "256 MiB");
  EXPECT_EQ(formatBytes(1.5 * 1024 * 1024 * 1024), "1.5 GiB");
}

TEST(Compare, HealthVerdictsRank) {
  EXPECT_EQ(statusRank("ok"), 2);
  EXPECT_EQ(statusRank("warn"), 1);
  EXPECT_EQ(statusRank("unsupported"), 1);
  EXPECT_EQ(statusRank("fail"), 0);
}

}  // namespace
}  // namespace peerlab::report
