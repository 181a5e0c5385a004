#pragma once
/// Views of a run the pages draw (the HTML report and summary.md): bandwidth and time against size (median over
/// pairs), latency tables, pair matrices per method, the probe matrix and its counts.

#include <optional>
#include <string>
#include <vector>

#include "harness/report/run_rows.h"

namespace peerlab::report {

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

}  // namespace peerlab::report
