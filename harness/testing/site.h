#pragma once
/// Hand-built history site models for tests (header-only: a test that uses them links peerlab::report_render, as it
/// does anyway to render them).

#include <cstdio>
#include <string>
#include <vector>

#include "harness/report/render/site_model.h"

namespace peerlab::testing {

/// An ISO time on day `run` + 1 of November 2026, 02:00 UTC.
inline std::string siteRunTime(int run) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "2026-11-%02dT02:00:00Z", 1 + run);
  return buf;
}

/// The commit of run `run`: "1000006abcdef0123456789" for run 6.
inline std::string siteRunSha(int run) {
  return std::to_string(1000000 + run) + "abcdef0123456789";
}

/// A series key of `suite`/`impl`/`name` between GPUs `src` and `dst` at `bytes`.
inline report::SiteSeriesKey siteSeriesKey(const std::string& suite, const std::string& impl, const std::string& name,
                                           int src, int dst, double bytes, const std::string& metric,
                                           const std::string& unit) {
  return {suite, impl, name, src, dst, 1, bytes, metric, unit};
}

/// Series `index` of bandwidth group `g` over `runs` runs: around 380 GB/s, 5% lower from run runs/2 in the first
/// series of the first group, the last run on a new driver.
inline report::SiteSeries bandwidthSeries(int g, int index, int runs) {
  const int src = index % 4;
  const int dst = (index / 4 + src + 1) % 4;
  const std::string impl = g == 0 ? "peerlab.ce" : "peerlab.sm_push";
  report::SiteSeries s;
  s.key = siteSeriesKey("peer_copy", impl, "uni", src, dst, 268435456.0 * (1 + index / 12), "algbw_gbps", "GB/s");
  s.id = "s" + std::to_string(g) + "_" + std::to_string(index);
  s.group = "peer_copy uni " + impl + " (GB/s)";
  s.host = "node-a";
  for (int r = 0; r < runs; ++r) {
    double v = 380.0 + ((r * 7 + index * 3) % 5) * 0.8;
    if (g == 0 && index == 0 && r >= runs / 2) v *= 0.95;
    s.points.push_back(
        {r + 1, siteRunTime(r), siteRunSha(r), r == runs - 1 ? "590.10.01" : "580.159.04", v, v * 0.99, v * 1.01});
  }
  if (g == 0 && index == 0) s.change_points.push_back({runs / 2, 381.6, 362.5, -5.0, 0.001, std::nullopt});
  return s;
}

/// Flag latency 0->1 over `runs` runs, around 0.7 us, without a spread.
inline report::SiteSeries latencySeries(int runs) {
  report::SiteSeries s;
  s.key = siteSeriesKey("peer_latency", "peerlab.flag", "one_way", 0, 1, 0, "time_us", "us");
  s.id = "lat0";
  s.group = "peer_latency one_way (us)";
  s.host = "node-a";
  for (int r = 0; r < runs; ++r)
    s.points.push_back({r + 1, siteRunTime(r), siteRunSha(r), "580.159.04", 0.70 + 0.01 * (r % 3), {}, {}});
  return s;
}

/// A 4-GPU bandwidth heatmap at 380 of 382.5 GB/s expected with one weak link (1->2 at 50%), and a latency heatmap
/// at 0.7 us with 1->2 at 2.1 us.
inline std::vector<report::SiteHeatmap> siteHeatmaps() {
  report::SiteHeatmap bw{"peer_copy uni peerlab.ce 256 MiB", "GB/s", 4, 0, {}};
  report::SiteHeatmap lat{"peer_latency one_way peerlab.flag", "us", 4, 0, {}};
  for (int s = 0; s < 4; ++s) {
    for (int d = 0; d < 4; ++d) {
      if (s == d) continue;
      const bool weak = s == 1 && d == 2;
      bw.cells.push_back({s, d, weak ? 191.25 : 380.0, 382.5});
      lat.cells.push_back({s, d, weak ? 2.1 : 0.7, std::nullopt});
    }
  }
  return {bw, lat};
}

/// One kind ("h200-x4-nvswitch") with `runs` runs on one host: `groups` plot groups of `per_group` bandwidth series
/// each, a 5% step down at run runs/2 in the first series (a change point and a regression), a driver change at the
/// last run, a fleet outlier, a 4-GPU bandwidth heatmap with one weak link (1->2 at 50% of expected) and a latency
/// heatmap. A second kind ("h200-x2-nvswitch") has one series and nothing else.
inline report::SiteModel historyModel(int runs = 12, int groups = 2, int per_group = 10) {
  report::KindModel kind;
  kind.kind = "h200-x4-nvswitch";
  for (int g = 0; g < groups; ++g) {
    for (int i = 0; i < per_group; ++i)
      kind.series.push_back(bandwidthSeries(g, i, runs));
  }
  kind.series.push_back(latencySeries(runs));
  report::SiteRegression r;
  r.key = siteSeriesKey("peer_copy", "peerlab.ce", "uni", 0, 1, 268435456.0, "algbw_gbps", "");
  r.host = "node-a";
  r.git_sha = siteRunSha(runs / 2);
  r.timestamp = siteRunTime(runs / 2);
  r.before = 381.6;
  r.after = 362.5;
  r.change_pct = -5.0;
  r.p_value = 0.001;
  r.fingerprint_changes = {"driver 580.159.04 -> 590.10.01"};
  kind.regressions.push_back(r);
  report::SiteOutlier outlier;
  outlier.host = "node-q";
  outlier.series_id = "s0_1";
  outlier.value = 301.0;
  outlier.median = 381.0;
  outlier.mad = 1.2;
  outlier.z = -44.9;
  kind.fleet.push_back(outlier);
  kind.heatmaps = siteHeatmaps();
  report::KindModel small;
  small.kind = "h200-x2-nvswitch";
  small.series.push_back(latencySeries(runs));
  report::SiteModel model;
  model.generated = "2026-11-25T10:00:00Z";
  model.kinds = {kind, small};
  return model;
}

}  // namespace peerlab::testing
