#include "harness/report/metric.h"

#include <cmath>

namespace peerlab::report {

std::optional<SeriesMetric> seriesMetric(const Result& r) {
  if (r.suite == "test" || r.suite == "probe") return std::nullopt;
  const bool hasBandwidth = r.algbw_gbps && *r.algbw_gbps > 0;
  const bool small = !r.bytes || *r.bytes < kLatencyBytesLimit;
  if (small || !hasBandwidth) return SeriesMetric{"time_us", "us", false};
  return SeriesMetric{"algbw_gbps", "GB/s", true};
}

std::optional<double> metricValue(const Result& r, const SeriesMetric& metric) {
  if (r.status != "ok") return std::nullopt;
  const std::optional<double>& v = metric.name == "algbw_gbps" ? r.algbw_gbps : r.time_us;
  if (!v || !std::isfinite(*v) || *v <= 0) return std::nullopt;
  return v;
}

double worseningPct(const SeriesMetric& metric, double before, double after) {
  if (before == 0) return 0;
  const double change = (after - before) / before * 100.0;
  return metric.higher_is_better ? -change : change;
}

}  // namespace peerlab::report
