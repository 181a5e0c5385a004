#pragma once
/// Which figure of a result is its performance metric: one rule shared by history, compare and the report pages.

#include <optional>
#include <string>

#include "harness/report/report.h"

namespace peerlab::report {

/// Below this size a transfer's time is dominated by latency, so it is compared in time, not bandwidth.
inline constexpr double kLatencyBytesLimit = 1024.0 * 1024.0;

struct SeriesMetric {
  std::string name;  ///< "time_us" or "algbw_gbps" (the result field it reads)
  std::string unit;  ///< "us" or "GB/s"
  bool higher_is_better = false;
};

/// The metric a result is tracked by: time_us below kLatencyBytesLimit or when it carries no bandwidth, algbw_gbps
/// above. Nothing for results that are not performance figures: ctest wall times (suite `test`) and probe verdicts.
std::optional<SeriesMetric> seriesMetric(const Result& r);

/// The result's value of `metric`; nothing unless the result is ok and the value is a positive number.
std::optional<double> metricValue(const Result& r, const SeriesMetric& metric);

/// (new - old) / old x 100 signed so that a positive number is a worsening for `metric`.
double worseningPct(const SeriesMetric& metric, double before, double after);

}  // namespace peerlab::report
