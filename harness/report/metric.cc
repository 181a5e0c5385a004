#include "harness/report/metric.h"

#include <cmath>

#include "harness/qualify/suites.h"
#include "harness/report/aggregate.h"

namespace peerlab::report {

std::optional<SeriesMetric> seriesMetric(const Result& r) {
  if (r.suite == "test" || r.suite == "health" || qualify::resultFacts(r.suite).kind == qualify::RowKind::kVerdicts) {
    return std::nullopt;
  }
  if (!r.bytes || *r.bytes < kLatencyMaxBytes) return SeriesMetric{"time_us", "us", false};
  if (comparedOnBusbw(r.suite)) return SeriesMetric{"busbw_gbps", "GB/s", true};
  return SeriesMetric{"algbw_gbps", "GB/s", true};
}

std::optional<double> metricValue(const Result& r, const SeriesMetric& metric) {
  std::optional<double> v;
  if (metric.field == "time_us") v = r.time_us;
  if (metric.field == "algbw_gbps") v = r.algbw_gbps;
  if (metric.field == "busbw_gbps") v = r.busbw_gbps;
  if (!v || !std::isfinite(*v) || *v <= 0) return std::nullopt;
  return v;
}

}  // namespace peerlab::report
