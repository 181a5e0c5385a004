#pragma once
/// Views of a run shared by the HTML report and summary.md: bandwidth and time against size (median over pairs),
/// latency tables, pair matrices per method, the probe matrix.

#include <optional>
#include <string>
#include <vector>

#include "harness/report/report.h"

namespace peerlab::report {

/// Suites whose rows are collectives over all ranks (busbw is their figure) rather than pair transfers (their specs'
/// facts: harness/qualify/suite_spec.h ResultFacts).
bool isCollectiveSuite(const std::string& suite);
/// Suites whose rows are claimed-against-verified verdicts (the verified probe's), not measurements.
bool isVerdictSuite(const std::string& suite);
/// Implementations that are baselines drawn beside peerlab's own (nccl.*, torch.*, nvshmem.*, cuda.*).
bool isBaselineImpl(const std::string& impl);

/// Number of GPUs the run covers: the fingerprint's, or one past the highest ordinal in its results.
int gpuCount(const Run& run);
/// Suites present in the run, in a fixed order (probe, peer_copy, peer_latency, peer_enable, zcopy, alltoallv, moe,
/// then others).
std::vector<std::string> suitesIn(const Run& run);

struct SeriesPoint {
  double bytes = 0;
  double median = 0;
  double min = 0;
  double max = 0;
  int n = 0;  ///< results behind the point (pairs)
};

/// One line of a plot: one implementation and case of a suite, each size aggregated over pairs.
struct Series {
  std::string suite;
  std::string impl;
  std::string name;
  int ranks = 1;
  std::string metric;               ///< algbw_gbps, busbw_gbps or time_us
  std::vector<SeriesPoint> points;  ///< ascending bytes
  std::string label() const;        ///< "peerlab.ce uni" (+ " x4" with ranks > 1)
};

/// Bandwidth against size for one suite: busbw for collectives, algbw otherwise; ok results with bytes only.
std::vector<Series> bandwidthSeries(const Run& run, const std::string& suite);
/// Time against size for one suite (ok results with bytes and time_us).
std::vector<Series> timeSeries(const Run& run, const std::string& suite);

/// A latency table row: one implementation, case and size, aggregated over pairs.
struct LatencyRow {
  std::string suite;
  std::string impl;
  std::string name;
  std::optional<double> bytes;
  int ranks = 1;
  int n = 0;
  double median_us = 0;
  double min_us = 0;
  double max_us = 0;
};
/// Small-message results (bytes <= max_bytes, or no size) with a time; probe rows excluded, peer copies at their
/// smallest size only.
std::vector<LatencyRow> latencyRows(const Run& run, double max_bytes = 65536);

/// Bandwidth per ordered pair for one method at one size (the largest measured).
struct PairGrid {
  std::string suite;
  std::string impl;
  std::string name;
  int ranks = 1;
  double bytes = 0;
  int gpus = 0;
  std::vector<std::optional<double>> value;  ///< gpus x gpus, row src, column dst; algbw of ok results
  std::vector<std::string> status;           ///< gpus x gpus; "" where there is no result
  std::string label() const;
};
/// Most grid cells (GPUs x GPUs per grid) the pages draw for one run; grids beyond are counted, not drawn.
inline constexpr size_t kMaxGridCells = size_t{1} << 18;
/// Pair grids in first-seen order, at most `max_cells` cells in all; `omitted` counts the grids left out.
std::vector<PairGrid> pairGrids(const Run& run, size_t max_cells = kMaxGridCells, int* omitted = nullptr);

/// One probe cell: an ordered pair and a method, the worst verdict over the sizes probed. Probe cells are counted this
/// way (ordered pair x method) by every output.
struct ProbeCell {
  std::string method;  ///< "ce_write" from "ce_write/4096"
  int src = 0;
  int dst = 0;
  std::string verdict;
  std::optional<bool> claimed;  ///< what the driver claimed, when the run says
  std::string detail;           ///< sizes and times
};
/// Cells in first-seen order of method, then pair.
std::vector<ProbeCell> probeCells(const Run& run);
/// Severity of a probe verdict, to pick the worst over sizes: -1 none, 0 ok, 1 unsupported/skipped, 2 error, 3 hang,
/// 4 corrupt.
int probeSeverity(const std::string& verdict);

/// The probe matrix of one method: the worst verdict over sizes per ordered pair, and what the driver claimed.
struct ProbeGrid {
  std::string method;  ///< "ce_write" from "ce_write/4096"
  int gpus = 0;
  std::vector<std::string> verdict;          ///< gpus x gpus; "" where the pair was not probed
  std::vector<std::optional<bool>> claimed;  ///< gpus x gpus
  std::vector<std::string> detail;           ///< gpus x gpus; sizes and times, for the tooltip
};
std::vector<ProbeGrid> probeGrids(const Run& run);

/// Probe verdict counts over cells (ordered pair x method): claimed-but-failed and verified-but-unclaimed are the
/// mismatches.
struct ProbeSummary {
  int cells = 0;
  int methods = 0;
  int pairs = 0;  ///< ordered pairs probed
  int ok = 0;
  int unsupported = 0;
  int failed = 0;                               ///< corrupt, hang, error or anything else not ok/unsupported
  std::vector<std::string> claimed_but_failed;  ///< "ce_write 0->1: corrupt"
  std::vector<std::string> works_unclaimed;     ///< "sm_store 2->3"
};
ProbeSummary summarizeProbe(const Run& run);

/// Median of values (empty: 0).
double medianOf(std::vector<double> values);

}  // namespace peerlab::report
