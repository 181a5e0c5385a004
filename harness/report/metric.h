#pragma once
/// The one rule that decides which figure of a result is its performance metric, shared by `report --compare`, the
/// history store and the site: time where latency dominates, bandwidth above; verdict-only results have none.

#include <optional>
#include <string>

#include "harness/report/report.h"

namespace peerlab::report {

/// Below this size a transfer's time is mostly fixed cost (launch, signal, protocol), so it is compared in time.
inline constexpr double kLatencyMaxBytes = 1024.0 * 1024.0;

struct SeriesMetric {
  std::string field;              ///< "time_us", "algbw_gbps" or "busbw_gbps": the result key the value comes from
  std::string unit;               ///< "us" or "GB/s"
  bool higher_is_better = false;  ///< true for bandwidth
};

/// Whether a suite's bandwidth is compared and drawn as bus bandwidth (nccl-tests' busbw): its spec says so
/// (ResultFacts::compared_on_busbw: alltoallv). MoE dispatch and combine are compared on algbw (logical bytes per
/// selection over time), a figure whose definition never changed.
bool comparedOnBusbw(const std::string& suite);

/// The time metric: `time_us`, lower is better.
SeriesMetric timeMetric();
/// The bandwidth metric of a suite's rows, higher is better: `busbw_gbps` where comparedOnBusbw, else `algbw_gbps`.
/// `bus_recorded` false (the run's rows of the suite carry no busbw, as runs of early versions): `algbw_gbps`, so that
/// such a run's plots still show its bandwidth.
SeriesMetric bandwidthMetric(const std::string& suite, bool bus_recorded = true);

/// The metric of a result, decided by its identity only (suite, impl, name, bytes), never by which numbers it
/// happens to carry, so every run of one series uses the same metric:
/// - suites `test` (ctest wall times), `probe` and `health` (verdicts): none;
/// - no size, or fewer than kLatencyMaxBytes bytes (latency suites carry 0): `time_us`, lower is better;
/// - otherwise bandwidth, higher is better: `busbw_gbps` for alltoallv, `algbw_gbps` else (MoE too:
///   its busbw_gbps meant algbw in runs of some versions, so it is never compared).
std::optional<SeriesMetric> seriesMetric(const Result& r);

/// The result's value of `metric` (nullopt when absent, not finite, or not positive).
std::optional<double> metricValue(const Result& r, const SeriesMetric& metric);

}  // namespace peerlab::report
