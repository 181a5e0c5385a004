#include "harness/report/compare.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <set>

#include "harness/report/metric.h"
#include "harness/report/stats.h"
#include "harness/testing/runs.h"
#include "reference/testing/testing.h"

namespace peerlab::report {
namespace {

Result bw(const std::string& suite, const std::string& impl, int src, int dst, double bytes, double gbps) {
  return peerlab::testing::bandwidthRow(suite, impl, src, dst, bytes, gbps);
}

Result lat(const std::string& impl, double us) {
  return peerlab::testing::latencyRow("zcopy", "pingpong", impl, 0, 1, 8, us);
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

// A p-value below what the permutation count can tell is printed as that bound, never as the smaller number Welch's
// test beside it gave.
TEST(Compare, PValuesArePrintedAsThePermutationsBoundThem) {
  EXPECT_EQ(formatPValue(2.8e-76, 0.01), "p < 0.01");
  EXPECT_EQ(formatPValue(0, 0.01), "p < 0.01");
  EXPECT_EQ(formatPValue(0.01, 0.01), "p=0.01");
  EXPECT_EQ(formatPValue(0.0123, std::nullopt), "p=0.0123");
  EXPECT_EQ(formatPValue(1e-5, 1.0 / 1000), "p < 0.001");
  RunsTest test;
  test.name = "e-divisive";
  test.significant = true;
  test.p_value = 0;
  test.p_floor = 0.01;
  Side before, after;
  before.value = 100;
  before.runs = 10;
  after.value = 80;
  after.runs = 10;
  NoiseRule rule;
  rule.jitter_us = 0;
  const ChangeDecision d = decideChange(true, before, after, rule, &test);
  EXPECT_NE(d.rule.find("e-divisive p < 0.01 n=10 runs/10 runs"), std::string::npos) << d.rule;
  EXPECT_EQ(toJson(d)["p_floor"], 0.01);
}

TEST(Compare, BandwidthHigherIsBetter) {
  report::Run base, fresh;
  base.results = {bw("peer_copy", "a", 0, 1, 1 << 28, 400), bw("peer_copy", "b", 0, 1, 1 << 28, 400),
                  bw("peer_copy", "c", 0, 1, 1 << 28, 400)};
  fresh.results = {bw("peer_copy", "a", 0, 1, 1 << 28, 460), bw("peer_copy", "b", 0, 1, 1 << 28, 340),
                   bw("peer_copy", "c", 0, 1, 1 << 28, 364)};
  CompareReport rep = compareRuns(base, fresh);
  ASSERT_EQ(rep.rows.size(), 3u);
  EXPECT_EQ(rowFor(rep, "a").verdict, Verdict::kImproved);
  EXPECT_EQ(rowFor(rep, "a").metric, "algbw_gbps");
  EXPECT_NEAR(*rowFor(rep, "a").change_pct, 15.0, 1e-9);
  EXPECT_EQ(rowFor(rep, "b").verdict, Verdict::kRegressed);
  EXPECT_NEAR(*rowFor(rep, "b").change_pct, -15.0, 1e-9);
  EXPECT_EQ(rowFor(rep, "c").verdict, Verdict::kSame);  // -9% is within the default 10%
  EXPECT_EQ(rep.regressions(), 1);
}

// Two processes of one build (a host-copy row measured on one H100 twice): the second process ran 5.3% slower with a
// 9.4% spread of its own. Apart p10..p90 ranges alone would call that a regression; a step smaller than a run's own
// spread is not. A step beyond both the threshold and the spread still is.
TEST(Compare, StepWithinARunsOwnSpreadIsNotARegression) {
  auto cell = [](const std::string& impl, double time_us, double p10, double p90) {
    Result r = bw("host_copy", impl, 0, -1, 268435456.0, 268435456.0 / time_us / 1e3);
    r.dst.reset();
    r.extra["p10_us"] = p10;
    r.extra["p90_us"] = p90;
    return r;
  };
  report::Run base, fresh;
  base.results = {cell("within", 4871.0, 4866.6, 4880.0), cell("beyond", 4871.0, 4866.6, 4880.0)};
  fresh.results = {cell("within", 5144.4, 4971.6, 5455.4), cell("beyond", 5844.4, 5771.6, 5955.4)};
  CompareReport rep = compareRuns(base, fresh);
  EXPECT_EQ(rowFor(rep, "within").verdict, Verdict::kSame) << rowFor(rep, "within").noise_pct;
  EXPECT_NEAR(rowFor(rep, "within").noise_pct, 9.4, 0.1);
  EXPECT_EQ(rowFor(rep, "beyond").verdict, Verdict::kRegressed);
  EXPECT_EQ(rep.regressions(), 1);
}

TEST(Compare, TimeLowerIsBetterWhenNoBandwidth) {
  report::Run base, fresh;
  base.results = {lat("fast", 10), lat("slow", 10), lat("noise", 10), lat("jitter", 10)};
  fresh.results = {lat("fast", 2), lat("slow", 18), lat("noise", 10.4), lat("jitter", 16)};
  CompareReport rep = compareRuns(base, fresh);
  EXPECT_EQ(rowFor(rep, "fast").metric, "time_us");
  EXPECT_EQ(rowFor(rep, "fast").verdict, Verdict::kImproved);
  EXPECT_EQ(rowFor(rep, "slow").verdict, Verdict::kRegressed);
  EXPECT_NEAR(*rowFor(rep, "slow").change_pct, 80.0, 1e-9);
  EXPECT_EQ(rowFor(rep, "noise").verdict, Verdict::kSame);
  // +60% of 10 us is 6 us: within the 7.5 us two processes' times move by (the minimum effect is 75% here).
  EXPECT_EQ(rowFor(rep, "jitter").verdict, Verdict::kSame);
  ASSERT_TRUE(rowFor(rep, "jitter").decision.has_value());
  EXPECT_NEAR(rowFor(rep, "jitter").decision->jitter_pct, 75.0, 1e-9);
  EXPECT_NEAR(rowFor(rep, "jitter").decision->min_effect_pct, 75.0, 1e-9);
  // Without the jitter (a rule for one process's samples) the same step counts.
  NoiseRule strict;
  strict.jitter_us = 0;
  EXPECT_EQ(rowFor(compareRuns(base, fresh, strict), "jitter").verdict, Verdict::kRegressed);
}

TEST(Compare, ThresholdIsHonoured) {
  report::Run base, fresh;
  base.results = {bw("peer_copy", "a", 0, 1, 1 << 28, 100)};
  fresh.results = {bw("peer_copy", "a", 0, 1, 1 << 28, 93)};
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

TEST(Compare, IdentityIncludesTheHostMemorysNumaNode) {
  // The same host copy with host memory on another NUMA node is another measurement, never a regression of it.
  Result local = bw("host_copy", "peerlab.ce", 0, 0, 268435456.0, 54.0);
  local.name = "h2d";
  local.dst.reset();
  local.numa = 0;
  Result remote = local;
  remote.numa = 1;
  remote.algbw_gbps = 27.0;
  report::Run base, fresh;
  base.results = {local, remote};
  fresh.results = {remote, local};
  CompareReport same = compareRuns(base, fresh);
  EXPECT_EQ(same.count(Verdict::kOnlyBase), 0);
  EXPECT_EQ(same.count(Verdict::kOnlyNew), 0);
  EXPECT_EQ(same.count(Verdict::kRegressed), 0);
  fresh.results = {remote};
  CompareReport missing = compareRuns(base, fresh);
  EXPECT_EQ(missing.count(Verdict::kOnlyBase), 1);
  EXPECT_EQ(describeResult(local), "host_copy h2d peerlab.ce gpu 0 host numa 0 256 MiB");
  EXPECT_EQ(describeResult(remote), "host_copy h2d peerlab.ce gpu 0 host numa 1 256 MiB");
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
  base.results = {bw("peer_copy", "a", 0, 1, 1 << 28, 100), bw("peer_copy", "a", 0, 1, 1 << 28, 200)};
  fresh.results = {bw("peer_copy", "a", 0, 1, 1 << 28, 100), bw("peer_copy", "a", 0, 1, 1 << 28, 100)};
  CompareReport rep = compareRuns(base, fresh);
  ASSERT_EQ(rep.rows.size(), 2u);
  EXPECT_EQ(rep.rows[0].verdict, Verdict::kSame);
  EXPECT_EQ(rep.rows[1].verdict, Verdict::kRegressed);
}

TEST(Compare, TableNamesMetricPerRow) {
  report::Run base, fresh;
  base.results = {bw("peer_copy", "a", 0, 1, 1 << 20, 100), lat("z", 10)};
  fresh.results = {bw("peer_copy", "a", 0, 1, 1 << 20, 50), lat("z", 2)};
  const std::string table = formatCompare(compareRuns(base, fresh));
  EXPECT_NE(table.find("peer_copy uni a 0->1 1 MiB"), std::string::npos) << table;
  EXPECT_NE(table.find("algbw GB/s"), std::string::npos) << table;
  EXPECT_NE(table.find("time us"), std::string::npos) << table;
  EXPECT_NE(table.find("-50.00%"), std::string::npos) << table;
  EXPECT_NE(table.find("-80.00%"), std::string::npos) << table;
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

// p-values computed with scipy.stats.mannwhitneyu(a, b, alternative="two-sided") (scipy 1.17, method "auto").
TEST(MannWhitney, MatchesScipy) {
  EXPECT_NEAR(mannWhitneyPValue({1, 2, 3, 4, 5}, {6, 7, 8, 9, 10}), 0.007936507936507936, 1e-12);
  EXPECT_NEAR(mannWhitneyPValue({5, 6, 7, 8}, {1, 2, 3, 4}), 0.02857142857142857, 1e-12);
  EXPECT_NEAR(mannWhitneyPValue({1.1, 2.3, 3.5, 4.2, 5.9, 6.1}, {4.5, 7.2, 8.1, 9.3, 10.1, 3.3, 6.6}),
              0.03496503496503496, 1e-12);
  // Ties: normal approximation with tie and continuity correction.
  EXPECT_NEAR(mannWhitneyPValue({1, 2, 2, 3, 4, 5, 5, 6}, {3, 4, 4, 5, 6, 7, 8, 8, 9}), 0.03714012623439529, 1e-9);
  const std::vector<double> a = {100.0025, 100.5975, 99.4517, 98.2188,  99.0907,  98.0167,  100.1203,
                                 102.6804, 99.0156,  98.7591, 100.9797, 100.7138, 100.2108, 98.1391,
                                 99.9415,  101.3906, 97.3116, 99.0848,  96.1976,  97.4209};
  const std::vector<double> b = {98.3165,  101.5298, 99.4651,  102.5425, 102.3135, 101.6261, 96.9665,
                                 100.9226, 101.903,  102.2266, 98.9397,  101.0445, 100.043,  100.3823,
                                 104.1218, 100.3849, 101.935,  103.7688, 100.8328, 101.7766};
  EXPECT_NEAR(mannWhitneyPValue(a, b), 0.002560615287144587, 1e-9);
  EXPECT_NEAR(mannWhitneyPValue(std::vector<double>(a.begin(), a.begin() + 6), b), 0.010693654171915042, 1e-9);
  EXPECT_DOUBLE_EQ(mannWhitneyPValue({}, b), 1.0);
}

TEST(SeriesMetric, LatencySizesInTimeBandwidthAboveVerdictsNone) {
  Result r = bw("peer_copy", "peerlab.ce", 0, 1, 8, 0.001);
  EXPECT_EQ(seriesMetric(r)->field, "time_us");
  r.bytes = 1 << 20;
  EXPECT_EQ(seriesMetric(r)->field, "algbw_gbps");
  EXPECT_TRUE(seriesMetric(r)->higher_is_better);
  r.suite = "alltoallv";
  EXPECT_EQ(seriesMetric(r)->field, "busbw_gbps");
  r.bytes.reset();
  EXPECT_EQ(seriesMetric(r)->field, "time_us");
  // MoE rows of older runs stored algbw in busbw_gbps: MoE is compared on algbw, whose meaning never changed.
  r.suite = "moe";
  r.bytes = 1 << 20;
  EXPECT_EQ(seriesMetric(r)->field, "algbw_gbps");
  r.bytes.reset();
  for (const char* suite : {"test", "probe", "health"}) {
    r.suite = suite;
    EXPECT_FALSE(seriesMetric(r).has_value()) << suite;
  }
}

// A run of 4 GPUs: peer copies from 8 B to 256 MiB over every pair, latency cells, ctest wall times; every result
// carries 10 samples drawn with 2% relative noise around its true time (times `scale`).
Run noisyRun(uint32_t seed, double scale = 1.0, bool with_samples = true) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> noise(1.0, 0.02);
  Run run;
  run.fingerprint = {"node-a", "580.159.04", "13.0", "2.28.3", {}, {}};
  auto addSamples = [&](Result& r, double us) {
    std::vector<double> s;
    for (int i = 0; i < 10; ++i)
      s.push_back(us * noise(rng));
    std::vector<double> sorted = s;
    std::sort(sorted.begin(), sorted.end());
    r.time_us = (sorted[4] + sorted[5]) / 2;
    if (r.bytes && *r.bytes > 0) r.algbw_gbps = *r.bytes / *r.time_us / 1e3;
    r.extra["p10_us"] = sorted[1];
    r.extra["p90_us"] = sorted[8];
    if (with_samples) r.extra["samples_us"] = s;
  };
  for (int src = 0; src < 4; ++src) {
    for (int dst = 0; dst < 4; ++dst) {
      if (src == dst) continue;
      for (double bytes = 8; bytes <= (1 << 28); bytes *= 8) {
        Result r = bw("peer_copy", "peerlab.ce", src, dst, bytes, 1);
        addSamples(r, (2.0 + bytes / 380e3) * scale);
        run.results.push_back(r);
      }
      Result l = lat("peerlab.flag", 1);
      l.suite = "peer_latency";
      l.src = src;
      l.dst = dst;
      l.bytes = 0;
      addSamples(l, 0.7 * scale);
      run.results.push_back(l);
    }
  }
  for (int t = 0; t < 6; ++t) {
    Result c;
    c.suite = "test";
    c.impl = "ctest";
    c.name = "test_" + std::to_string(t);
    // Wall times of tests swing far more than 5% from run to run: never a performance figure.
    c.time_us = 1e6 * (1 + t) * (1 + 0.3 * (noise(rng) - 1) / 0.02);
    run.results.push_back(c);
  }
  return run;
}

TEST(CompareNoise, HealthyRunsOfOneBuildHaveNoRegression) {
  int rows = 0;
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    const CompareReport rep = compareRuns(noisyRun(seed), noisyRun(seed + 1000));
    rows += static_cast<int>(rep.rows.size());
    EXPECT_EQ(rep.regressions(), 0) << "seed " << seed << "\n" << formatCompare(rep, true);
    EXPECT_EQ(rep.missing(), 0);
    EXPECT_TRUE(rep.fingerprint_changes.empty());
  }
  EXPECT_EQ(rows, 20 * (12 * 10 + 6));
}

TEST(CompareNoise, HealthyRunsWithoutSamplesUseP10P90) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    const CompareReport rep = compareRuns(noisyRun(seed, 1.0, false), noisyRun(seed + 1000, 1.0, false));
    EXPECT_EQ(rep.regressions(), 0) << "seed " << seed << "\n" << formatCompare(rep, true);
    for (const CompareRow& r : rep.rows) {
      if (r.metric == "status") continue;
      EXPECT_EQ(r.test, "p10/p90");
    }
  }
}

// One process's samples, no jitter between processes (the rule a U test of repetitions alone would give): a 10% step
// with 2% noise is found in every cell.
TEST(CompareNoise, TenPercentShiftWithSamplesIsFound) {
  NoiseRule samplesOnly;
  samplesOnly.threshold_pct = 5;
  samplesOnly.jitter_us = 0;
  samplesOnly.spread_factor = 1;
  const CompareReport rep = compareRuns(noisyRun(7), noisyRun(8, 1.10), samplesOnly);
  int measured = 0;
  for (const CompareRow& r : rep.rows) {
    if (r.metric == "status") continue;
    ++measured;
    EXPECT_EQ(r.test, "u-test");
    EXPECT_EQ(r.verdict, Verdict::kRegressed) << describeResult(*r.fresh) << " " << *r.change_pct;
    EXPECT_LT(*r.p_value, 0.001);
  }
  EXPECT_EQ(measured, 12 * 10);
  // Small sizes are compared in time (+10%), large ones in bandwidth (-9.1%).
  EXPECT_EQ(rowFor(rep, "peerlab.flag").metric, "time_us");
  EXPECT_NEAR(*rep.rows[0].change_pct, 10.0, 4.0);
  EXPECT_EQ(rep.rows[0].metric, "time_us");
  const CompareRow& big = rep.rows[8];  // 128 MiB
  EXPECT_EQ(big.metric, "algbw_gbps");
  EXPECT_NEAR(*big.change_pct, -9.1, 3.0);
  // A 10% improvement is not a regression.
  EXPECT_EQ(compareRuns(noisyRun(7), noisyRun(8, 0.90), samplesOnly).regressions(), 0);
  // With the default rule a 5% step is below the minimum effect; a 25% one is found where the timing jitter between two
  // processes (7.5 us) does not cover it.
  EXPECT_EQ(compareRuns(noisyRun(7), noisyRun(8, 1.05)).regressions(), 0);
  const CompareReport step = compareRuns(noisyRun(7), noisyRun(8, 1.25));
  EXPECT_EQ(step.rows[8].verdict, Verdict::kRegressed);  // 128 MiB, in bandwidth
  EXPECT_EQ(step.rows[0].verdict, Verdict::kSame);       // 8 B at 2 us: +0.5 us is jitter
}

TEST(CompareNoise, SignificantButSmallIsNoise) {
  // 1.5% slower: significant in many cells, yet below the minimum effect.
  const CompareReport rep = compareRuns(noisyRun(3), noisyRun(4, 1.015));
  EXPECT_EQ(rep.regressions(), 0) << formatCompare(rep, true);
  int significant = 0;
  for (const CompareRow& r : rep.rows)
    significant += r.significant && r.metric != "status";
  EXPECT_GT(significant, 10);
}

TEST(CompareNoise, MissingHalfTheResultsIsListedAndFails) {
  const report::Run base = noisyRun(1);
  report::Run fresh = noisyRun(2);
  fresh.results.resize(fresh.results.size() / 2);
  const CompareReport rep = compareRuns(base, fresh);
  EXPECT_EQ(rep.missing(), static_cast<int>(base.results.size() - fresh.results.size()));
  const std::string table = formatCompare(rep, true);
  EXPECT_NE(table.find("MISSING in the new run (63)"), std::string::npos) << table;
}

TEST(CompareNoise, FingerprintChangesPrintedFirst) {
  report::Run base = noisyRun(1);
  report::Run fresh = noisyRun(2);
  fresh.fingerprint.driver = "590.10.01";
  fresh.fingerprint.nccl = "2.29.1";
  base.fingerprint.gpus = {{0, "GPU-a", "0000:01:00.0", "NVIDIA H200"}, {1, "GPU-b", "0000:02:00.0", "NVIDIA H200"}};
  fresh.fingerprint.gpus = {{0, "GPU-a", "0000:01:00.0", "NVIDIA H200"}};
  const CompareReport rep = compareRuns(base, fresh);
  ASSERT_EQ(rep.fingerprint_changes.size(), 3u);
  EXPECT_EQ(rep.fingerprint_changes[0], "driver 580.159.04 -> 590.10.01");
  EXPECT_EQ(rep.fingerprint_changes[1], "NCCL 2.28.3 -> 2.29.1");
  EXPECT_EQ(rep.fingerprint_changes[2], "GPUs: 2x NVIDIA H200 -> 1x NVIDIA H200");
  const std::string table = formatCompare(rep);
  // The noise rule first, then the fingerprint changes, then the rows.
  EXPECT_EQ(table.find("noise rule: a change counts when"), 0u) << table;
  EXPECT_LT(table.find("FINGERPRINT CHANGED:\n  driver 580.159.04 -> 590.10.01"), table.find("result ")) << table;
}

// A committed run against a healthy rerun of itself: every measured cell redrawn (seeded) within the p10..p90 range
// that run measured for it, as a second run of the same build on the same machine lands.
TEST(CompareNoise, CommittedRunAgainstAHealthyRerun) {
  const std::string dir = peerlab::testing::sourcePath("reports/runs/");
  auto base = readRun(dir + "2026-11-21-h200-x4-nvswitch-db99ff9.json.gz");
  ASSERT_TRUE(base.isOk()) << base.status().toString();
  report::Run rerun = *base;
  std::mt19937 rng(20);
  int redrawn = 0;
  for (Result& r : rerun.results) {
    const bool spread = r.extra.is_object() && r.extra.contains("p10_us") && r.extra["p10_us"].is_number() &&
                        r.extra.contains("p90_us") && r.extra["p90_us"].is_number();
    if (r.status != "ok" || !r.time_us || !spread) continue;
    const double p10 = r.extra["p10_us"].get<double>();
    const double p90 = r.extra["p90_us"].get<double>();
    if (p90 < p10) continue;
    const double t = std::uniform_real_distribution<double>(p10, p90)(rng);
    const double scale = *r.time_us / t;
    // The rerun's own spread: the same width around its new median.
    r.extra["p10_us"] = p10 / scale;
    r.extra["p90_us"] = p90 / scale;
    r.time_us = t;
    if (r.algbw_gbps) r.algbw_gbps = *r.algbw_gbps * scale;
    if (r.busbw_gbps) r.busbw_gbps = *r.busbw_gbps * scale;
    ++redrawn;
  }
  EXPECT_GT(redrawn, 700);
  const CompareReport rep = compareRuns(*base, rerun);
  EXPECT_EQ(rep.regressions(), 0) << formatCompare(rep, true);
  EXPECT_EQ(rep.missing(), 0);
  EXPECT_TRUE(rep.fingerprint_changes.empty());
  // The same file twice: nothing at all.
  EXPECT_EQ(compareRuns(*base, *base).count(Verdict::kSame), static_cast<int>(base->results.size()));
}

// Committed runs of the same machine kind one commit apart, on different boards.
TEST(CompareNoise, CommittedRunPairs) {
  const std::string dir = peerlab::testing::sourcePath("reports/runs/");
  // Two runs one commit apart on different boards of the same kind: the old rule (any cell 5% worse, ctest times and
  // 8-byte bandwidths included) flags far more than the cells whose p10-p90 ranges or samples really moved.
  auto s8 = readRun(dir + "2026-11-21-h200-x4-nvswitch-3710ae0.json.gz");
  auto s9 = readRun(dir + "2026-11-21-h200-x4-nvswitch-db99ff9.json.gz");
  ASSERT_TRUE(s8.isOk() && s9.isOk());
  const CompareReport noisy = compareRuns(*s8, *s9);
  int oldRule = 0;
  for (const CompareRow& r : noisy.rows) {
    if (!r.base || !r.fresh || r.base->status != "ok" || r.fresh->status != "ok") continue;
    const Result& b = *r.base;
    const Result& n = *r.fresh;
    if (b.algbw_gbps && n.algbw_gbps && *b.algbw_gbps > 0) {
      oldRule += (*n.algbw_gbps - *b.algbw_gbps) / *b.algbw_gbps < -0.05;
    } else if (b.time_us && n.time_us && *b.time_us > 0) {
      oldRule += (*n.time_us - *b.time_us) / *b.time_us > 0.05;
    }
  }
  for (const CompareRow& r : noisy.rows) {
    if (r.verdict == Verdict::kRegressed) {
      EXPECT_TRUE(r.significant);
    }
  }
  EXPECT_EQ(noisy.missing(), 0);
  EXPECT_LT(noisy.regressions() * 2, oldRule) << "noise-aware " << noisy.regressions() << ", old rule " << oldRule;
  std::printf("3710ae0 -> db99ff9: %d regressions noise-aware, %d by the old fixed 5%% rule\n", noisy.regressions(),
              oldRule);
}

// Slows `r` by `factor` in time (1 / 0.89: 11% less bandwidth), its p10/p90 with it (a stable row stays stable, only
// shifted).
void slowDown(Result& r, double factor) {
  r.time_us = *r.time_us * factor;
  if (r.algbw_gbps) r.algbw_gbps = *r.algbw_gbps / factor;
  if (r.busbw_gbps) r.busbw_gbps = *r.busbw_gbps / factor;
  for (const char* key : {"p10_us", "p90_us"}) {
    if (r.extra.contains(key) && r.extra[key].is_number()) r.extra[key] = r.extra[key].get<double>() * factor;
  }
}

// The calibration of the noise rule (README "Comparing runs and baselines"): healthy machines of one kind compared
// with each other pass with the default rule: one machine's two processes the same day, two boards of one kind the
// same day, two H100 boards a day or two apart. A real step on the same files is still found: 11% on a stable row, and
// a time beyond the jitter.
TEST(CompareNoise, CalibratedSelfComparisonOfCommittedRunsPasses) {
  const std::string dir = peerlab::testing::sourcePath("reports/");
  struct Pair {
    const char* base;
    const char* fresh;
  };
  const Pair pairs[] = {
      // Two 4x H200 boards 48 minutes apart: NCCL send/recv +27% (1.8 us) at 7 us.
      {"runs/2026-11-21-h200-x4-nvswitch-3710ae0.json.gz", "runs/2026-11-21-h200-x4-nvswitch-db99ff9.json.gz"},
      {"runs/2026-11-26-h200-x2-nvswitch-27fc483.json.gz",
       "qualify/2026-11-26-h200-x2-nvswitch-27fc483/results.json.gz"},
      {"runs/2026-11-26-h100-x2-nvswitch-a47c0bb.json.gz",
       "qualify/2026-11-26-h100-x2-nvswitch-6b15c97/results.json.gz"},
      {"runs/2026-11-25-h100-x1-a99f8ae.json.gz", "qualify/2026-11-26-h100-x1-6b15c97/results.json.gz"},
      {"qualify/2026-11-26-h100-x2-nvswitch-6b15c97/results.json.gz",
       "qualify/2026-11-28-h100-x2-nvswitch-ad514f1-standard/results.json.gz"},
      // One 4x H100 machine's two standard qualify runs 7 minutes apart: NCCL, UCX and NIXL times move by up to 52%
      // (8 us) either way between the processes, a 70 us UCX time by +10.1% (7.1 us).
      {"qualify/2026-11-28-h100-x4-nvswitch-c6c3604-standard/results.json.gz",
       "runs/2026-11-28-h100-x4-nvswitch-c6c3604.json.gz"},
      {"qualify/2026-11-28-h100-x4-nvswitch-c6c3604-quick/results.json.gz",
       "qualify/2026-11-28-h100-x4-nvswitch-c6c3604-standard/results.json.gz"},
  };
  for (const Pair& p : pairs) {
    SCOPED_TRACE(std::string(p.base) + " -> " + p.fresh);
    auto base = readRun(dir + p.base);
    auto fresh = readRun(dir + p.fresh);
    ASSERT_TRUE(base.isOk() && fresh.isOk());
    PEERLAB_EXPECT_OK(checkSameHardware(*base, *fresh, "pair", "--allow-other-hardware"));
    const CompareReport rep = compareRuns(*base, *fresh);
    int compared = 0;
    for (const CompareRow& r : rep.rows)
      compared += r.decision.has_value();
    EXPECT_GT(compared, 10);
    EXPECT_EQ(rep.regressions(), 0) << formatCompare(rep, true);
  }
  // On the two 4x H200 boards: a copy engine 11% below its bandwidth on one pair (256 MiB, a row whose p10-p90 spans
  // 0.1%) and a five times slower SM push (4 KiB: 2.5 us -> 12.5 us, beyond the 7.5 us jitter) are found, and nothing
  // else.
  {
    auto base = readRun(dir + "runs/2026-11-21-h200-x4-nvswitch-3710ae0.json.gz");
    auto fresh = readRun(dir + "runs/2026-11-21-h200-x4-nvswitch-db99ff9.json.gz");
    ASSERT_TRUE(base.isOk() && fresh.isOk());
    std::set<std::string> seeded;
    for (Result& r : fresh->results) {
      if (r.suite != "peer_copy" || r.name != "uni" || r.src != 0 || r.dst != 1 || !r.bytes || !r.time_us) continue;
      if ((r.impl == "peerlab.ce" && *r.bytes == 268435456.0) || (r.impl == "peerlab.sm_push" && *r.bytes == 4096.0)) {
        slowDown(r, r.impl == "peerlab.ce" ? 1 / 0.89 : 5.0);
        seeded.insert(describeResult(r));
      }
    }
    ASSERT_EQ(seeded.size(), 2u);
    const CompareReport rep = compareRuns(*base, *fresh);
    std::set<std::string> regressed;
    for (const CompareRow& r : rep.rows)
      if (r.verdict == Verdict::kRegressed) regressed.insert(describeResult(*r.fresh));
    EXPECT_EQ(regressed, seeded) << formatCompare(rep, true);
  }
  // On one 4x H100 machine's two runs: every copy-engine copy of 1 GiB 11% below its bandwidth is found, on every
  // pair and both directions, and nothing else regresses.
  {
    auto base = readRun(dir + "qualify/2026-11-28-h100-x4-nvswitch-c6c3604-standard/results.json.gz");
    auto fresh = readRun(dir + "runs/2026-11-28-h100-x4-nvswitch-c6c3604.json.gz");
    ASSERT_TRUE(base.isOk() && fresh.isOk());
    std::set<std::string> seeded;
    for (Result& r : fresh->results) {
      if (r.suite == "peer_copy" && r.impl == "peerlab.ce" && r.bytes == 1073741824.0 && r.time_us && r.algbw_gbps) {
        slowDown(r, 1 / 0.89);
        seeded.insert(describeResult(r));
      }
    }
    ASSERT_EQ(seeded.size(), 18u);  // 12 ordered pairs one way, 6 pairs both ways
    const CompareReport rep = compareRuns(*base, *fresh);
    std::set<std::string> regressed;
    for (const CompareRow& r : rep.rows) {
      if (r.verdict != Verdict::kRegressed) continue;
      regressed.insert(describeResult(*r.fresh));
      ASSERT_TRUE(r.decision.has_value());
      EXPECT_EQ(r.decision->min_effect_pct, kDefaultThresholdPct) << r.decision->rule;  // a stable row: the threshold
    }
    EXPECT_EQ(regressed, seeded) << formatCompare(rep, true);
  }
}

TEST(Compare, EveryRowCarriesTheRuleThatDecidedIt) {
  report::Run base, fresh;
  Result b = lat("peerlab.sm_signal", 6.68);
  b.extra = {{"p10_us", 6.27}, {"p90_us", 7.18}, {"samples", 25}};
  Result n = lat("peerlab.sm_signal", 8.49);
  n.extra = {{"p10_us", 7.76}, {"p90_us", 8.77}, {"samples", 25}};
  base.results = {b};
  fresh.results = {n};
  const CompareReport rep = compareRuns(base, fresh);
  ASSERT_EQ(rep.rows.size(), 1u);
  const CompareRow& row = rep.rows[0];
  ASSERT_TRUE(row.decision.has_value());
  const ChangeDecision& d = *row.decision;
  // +27.1%, p10-p90 apart, yet within 7.5 us of jitter over 6.68 us (112.3%): the same.
  EXPECT_EQ(row.verdict, Verdict::kSame);
  EXPECT_EQ(d.test, "p10/p90");
  EXPECT_TRUE(d.significant);
  EXPECT_NEAR(d.change_pct, 27.1, 0.1);
  EXPECT_NEAR(d.jitter_pct, 112.28, 0.01);
  EXPECT_NEAR(d.noise_pct, 13.62, 0.01);
  EXPECT_DOUBLE_EQ(d.spread_factor, 3);
  EXPECT_NEAR(d.min_effect_pct, 112.28, 0.01);
  EXPECT_DOUBLE_EQ(d.base_samples, 25);
  EXPECT_EQ(d.rule.find("|+27.1%| <= min 112.3% (jitter 7.5 us / 6.68 us; threshold 10%, 3 x spread 40.9%, jitter "
                        "112.3%); "),
            0u)
      << d.rule;
  EXPECT_NE(d.rule.find("p10-p90 apart n=25/25"), std::string::npos) << d.rule;
  const nlohmann::json j = toJson(d);
  for (const char* key : {"test", "p_value", "significant", "noise_pct", "spread_factor", "between_pct", "jitter_pct",
                          "min_effect_pct", "threshold_pct", "base_samples", "new_samples", "rule"})
    EXPECT_TRUE(j.contains(key)) << key;
  const std::string table = formatCompare(rep);
  EXPECT_NE(table.find("112.3% jitter"), std::string::npos) << table;
  // Against a baseline of several runs, the range of its runs' times replaces the jitter: 6.5..7.0 us is 7.5%, so
  // the 3 x spread (40.9%) decides, and a 50% step counts.
  base.results[0].extra["runs_time_us"] = {6.5, 6.68, 7.0};
  fresh.results[0].time_us = 10.02;
  const CompareReport againstRuns = compareRuns(base, fresh);
  const CompareRow& multi = againstRuns.rows[0];
  ASSERT_TRUE(multi.decision.has_value());
  EXPECT_DOUBLE_EQ(multi.decision->jitter_pct, 0);
  EXPECT_NEAR(multi.decision->between_pct, 7.49, 0.01);
  EXPECT_NEAR(multi.decision->min_effect_pct, 3 * 13.62, 0.05);
  EXPECT_EQ(multi.verdict, Verdict::kRegressed) << multi.decision->rule;
  EXPECT_NE(multi.decision->rule.find("3 x p10-p90 spread 13.6%; threshold 10%, 3 x spread 40.9%, between runs 7.5%"),
            std::string::npos)
      << multi.decision->rule;
  EXPECT_NE(table.find("p10-p90 apart n=25/25"), std::string::npos) << table;
}

// A baseline that records the kind's boards holds a new run to how far those boards stand from it, instead of one
// board's jitter: a board whose small-message time is 2.2x another's passes against a baseline made on the other
// board, a time beyond every board fails.
TEST(Compare, TheFleetsBoardsSetTheNoiseOfABaseline) {
  Side base, fresh;
  base.value = base.time_us.emplace(2.23);
  base.runs = 2;
  base.runs_us = {2.2, 2.25};    // the baseline's own runs, one board: 2.2%
  base.fleet_us = {2.23, 4.97};  // the kind's two boards
  fresh.value = fresh.time_us.emplace(4.9);
  const ChangeDecision within = decideChange(false, base, fresh, NoiseRule{});
  EXPECT_EQ(within.verdict, Verdict::kSame) << within.rule;
  EXPECT_NEAR(within.fleet_pct, (4.97 / 2.23 - 1) * 100, 1e-9);
  EXPECT_EQ(within.fleet_boards, 2);
  EXPECT_DOUBLE_EQ(within.jitter_pct, 0);
  EXPECT_NE(within.rule.find("the farthest of the kind's 2 boards"), std::string::npos) << within.rule;
  EXPECT_NE(within.rule.find("between boards 122.9%"), std::string::npos) << within.rule;
  EXPECT_EQ(within.minEffectCell(), "122.9% fleet");
  fresh.value = fresh.time_us.emplace(6.0);
  EXPECT_EQ(decideChange(false, base, fresh, NoiseRule{}).verdict, Verdict::kRegressed);
  // Without the fleet, the baseline's own runs (2.2% apart) would have failed the other board.
  base.fleet_us.clear();
  fresh.value = fresh.time_us.emplace(4.9);
  EXPECT_EQ(decideChange(false, base, fresh, NoiseRule{}).verdict, Verdict::kRegressed);
  // A bandwidth: the board 2.2x slower in time is 55% lower in bandwidth; that is the allowance.
  Side bw = base, bwFresh;
  bw.fleet_us = {2.23, 4.97};
  bw.value = 100;
  bwFresh.value = 46;
  bwFresh.time_us = 4.85;
  const ChangeDecision band = decideChange(true, bw, bwFresh, NoiseRule{});
  EXPECT_NEAR(band.fleet_pct, (1 - 2.23 / 4.97) * 100, 1e-9);
  EXPECT_EQ(band.verdict, Verdict::kSame) << band.rule;
  // The field reads from a baseline's row.
  Result r;
  r.time_us = 2.23;
  r.extra["fleet_time_us"] = {2.23, 4.97};
  EXPECT_EQ(sideOf(r, 2.23).fleet_us, (std::vector<double>{2.23, 4.97}));
}

// History and fleet judge a change with a test across runs: the rule keeps the threshold and names the test, and a
// within-run spread or the jitter between two processes (which a run-to-run test already covers) are not applied.
TEST(Compare, ATestAcrossRunsReplacesSpreadAndJitter) {
  Side before, after;
  before.value = 10;
  before.time_us = 10;
  before.p10_us = 8;
  before.p90_us = 12;  // a 40% spread: 3 x 40% would hide anything
  before.runs = 6;
  after.value = 11.5;
  after.runs = 4;
  NoiseRule rule;
  rule.threshold_pct = 3;
  RunsTest test;
  test.name = "e-divisive";
  test.significant = true;
  test.p_value = 0.01;
  const ChangeDecision d = decideChange(false, before, after, rule, &test);
  EXPECT_EQ(d.verdict, Verdict::kRegressed) << d.rule;
  EXPECT_DOUBLE_EQ(d.min_effect_pct, 3);
  EXPECT_DOUBLE_EQ(d.noise_pct, 0);
  EXPECT_DOUBLE_EQ(d.jitter_pct, 0);
  EXPECT_EQ(d.rule,
            "|+15.0%| > min 3.0% (threshold 3%; the noise test is across runs); e-divisive p=0.01 n=6 runs/4 runs")
      << d.rule;
  test.significant = false;
  EXPECT_EQ(decideChange(false, before, after, rule, &test).verdict, Verdict::kSame);
}

TEST(Compare, DifferentHardwareIsRefusedNamingBoth) {
  report::Run h200, h100, h200x4;
  h200.fingerprint.gpus = {{0, "GPU-a", "", "NVIDIA H200"}, {1, "GPU-b", "", "NVIDIA H200"}};
  h200.kind.name = "h200-x2-nvswitch";
  h100.fingerprint.gpus = {{0, "GPU-c", "", "NVIDIA H100 80GB HBM3"}, {1, "GPU-d", "", "NVIDIA H100 80GB HBM3"}};
  h100.kind.name = "h100-x2-nvswitch";
  h200x4.fingerprint.gpus = h200.fingerprint.gpus;
  h200x4.fingerprint.gpus.push_back({2, "GPU-e", "", "NVIDIA H200"});
  h200x4.fingerprint.gpus.push_back({3, "GPU-f", "", "NVIDIA H200"});
  h200x4.kind.name = "h200-x4-nvswitch";
  const Status model = checkSameHardware(h200, h100, "a.json and b.json", "--allow-other-hardware");
  ASSERT_FALSE(model.isOk());
  EXPECT_EQ(model.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(model.message().find("a.json and b.json: different hardware: 2x NVIDIA H200 (h200-x2-nvswitch) against 2x "
                                 "NVIDIA H100 80GB HBM3 (h100-x2-nvswitch)"),
            std::string::npos)
      << model.message();
  EXPECT_NE(model.message().find("--allow-other-hardware"), std::string::npos);
  EXPECT_FALSE(checkSameHardware(h200, h200x4, "x", "--f").isOk());
  // The same model and count on other boards is the same hardware.
  report::Run other = h200;
  other.fingerprint.gpus[0].uuid = "GPU-z";
  PEERLAB_EXPECT_OK(checkSameHardware(h200, other, "x", "--f"));
  // One model's NVSwitch box and PCIe box are not.
  other.kind.name = "h200-x2-pcie";
  EXPECT_FALSE(checkSameHardware(h200, other, "x", "--f").isOk());
}

TEST(Compare, HealthVerdictsRank) {
  EXPECT_EQ(statusRank("ok"), 2);
  EXPECT_EQ(statusRank("warn"), 1);
  EXPECT_EQ(statusRank("unsupported"), 1);
  EXPECT_EQ(statusRank("fail"), 0);
}

}  // namespace
}  // namespace peerlab::report
