#include "harness/report/metric.h"

#include <cmath>

#include "harness/qualify/suites.h"

namespace peerlab::report {

bool comparedOnBusbw(const std::string& suite) {
  return qualify::resultFacts(suite).compared_on_busbw;
}

SeriesMetric timeMetric() {
  return {"time_us", "us", false};
}

SeriesMetric bandwidthMetric(const std::string& suite, bool bus_recorded) {
  if (bus_recorded && comparedOnBusbw(suite)) return {"busbw_gbps", "GB/s", true};
  return {"algbw_gbps", "GB/s", true};
}

std::optional<SeriesMetric> seriesMetric(const Result& r) {
  if (r.suite == "test" || r.suite == "health" || qualify::resultFacts(r.suite).kind == qualify::RowKind::kVerdicts) {
    return std::nullopt;
  }
  if (!r.bytes || *r.bytes < kLatencyMaxBytes) return timeMetric();
  return bandwidthMetric(r.suite);
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
