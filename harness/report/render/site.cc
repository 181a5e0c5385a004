#include "harness/report/render/site.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include "harness/report/compare.h"
#include "harness/report/render/chart_page.h"
#include "harness/report/render/fleet_page.h"
#include "harness/report/render/site_model.h"
#include "reference/core/files.h"
#include "reference/core/text.h"

namespace peerlab::report {

using nlohmann::json;

namespace {

std::string fmtNum(const std::optional<double>& v) {
  return v ? shortNumber(*v) : "-";
}

std::string fmtPct(const std::optional<double>& v) {
  return v ? formatted("%+.1f%%", *v) : "-";
}

/// A change point's p-value as the permutation count bounds it: "p < 0.01", "p=0.0123" (report::formatPValue).
std::string fmtP(const std::optional<double>& p, const std::optional<double>& floor) {
  if (!p) return "-";
  return formatPValue(*p, floor);
}

std::string metricAxis(const std::string& metric, const std::string& unit) {
  std::string name = metric;
  for (const char* suffix : {"_gbps", "_us"}) {
    const std::string s = suffix;
    if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) {
      name.resize(name.size() - s.size());
    }
  }
  return name + " (" + (unit.empty() ? "?" : unit) + ")";
}

/// A GPU ordinal or count as text: whole numbers up to a million as themselves, anything else as a short number.
std::string ordinal(long long v) {
  if (v >= 0 && v <= 1000000) return std::to_string(v);
  return shortNumber(static_cast<double>(v));
}

/// "peer_copy uni peerlab.ce 0->1 256 MiB x2" from a series or regression.
std::string describe(const SiteSeriesKey& s) {
  std::string d = s.suite + " " + s.name + " " + s.impl;
  // A pair as "0->1"; one GPU's own figure (host copies: no destination) as "gpu 0".
  if (s.src && s.dst && *s.src != *s.dst) {
    d += " " + ordinal(*s.src) + "->" + ordinal(*s.dst);
  } else if (s.src || s.dst) {
    d += " gpu " + ordinal(s.src ? *s.src : *s.dst);
  }
  if (s.bytes && *s.bytes > 0) d += " " + formatBytes(*s.bytes);
  if (s.ranks > 1) d += " x" + ordinal(s.ranks);
  return d;
}

std::string shortSha(const std::string& sha) {
  return sha.substr(0, 7);
}

/// "2026-11-21 12:44" from an ISO timestamp.
std::string shortTime(const std::string& ts) {
  std::string t = ts.substr(0, 16);
  if (t.size() > 10 && t[10] == 'T') t[10] = ' ';
  return t;
}

/// Characters of the kind kept in its page name (the hash suffix keeps names unique).
constexpr size_t kPageNamePrefix = 40;

/// The runs of a kind in time order, each with its axis label.
constexpr size_t kMaxTrendRuns = 200;

struct RunAxis {
  size_t total_runs = 0;
  std::vector<std::string> labels;
  std::map<std::string, std::string> label_of;  ///< run key -> label
};

std::string runKey(const SitePoint& point) {
  if (point.run_id) return std::to_string(*point.run_id);
  return point.timestamp + "|" + point.git_sha;
}

RunAxis buildAxis(const std::vector<SiteSeries>& series) {
  struct RunInfo {
    std::string key, timestamp, sha;
  };
  std::map<std::string, RunInfo> runs;
  for (const SiteSeries& s : series) {
    for (const SitePoint& p : s.points) {
      const std::string key = runKey(p);
      runs.emplace(key, RunInfo{key, p.timestamp, p.git_sha});
    }
  }
  std::vector<RunInfo> ordered;
  for (auto& [key, info] : runs)
    ordered.push_back(info);
  std::sort(ordered.begin(), ordered.end(), [](const RunInfo& a, const RunInfo& b) {
    return a.timestamp != b.timestamp ? a.timestamp < b.timestamp : a.key < b.key;
  });
  RunAxis axis;
  axis.total_runs = ordered.size();
  // Only the latest runs are drawn: a trend page stays small enough for a browser with years of nightly runs.
  if (ordered.size() > kMaxTrendRuns) ordered.erase(ordered.begin(), ordered.end() - kMaxTrendRuns);
  std::set<std::string> used;
  for (const RunInfo& r : ordered) {
    std::string label = shortTime(r.timestamp);
    if (!r.sha.empty()) label += " " + shortSha(r.sha);
    if (label.empty()) label = r.key;
    if (!used.insert(label).second) {
      label += " #" + r.key;
      used.insert(label);
    }
    axis.labels.push_back(label);
    axis.label_of[r.key] = label;
  }
  return axis;
}

// The run's date and commit are the point's x label; the tooltip adds the spread (and the driver on marker points).
std::string pointNote(const SitePoint& p) {
  if (p.p10 && p.p90) return "p10-p90 " + shortNumber(*p.p10) + "-" + shortNumber(*p.p90);
  return "";
}

std::string seriesLabel(const SiteSeries& s, bool with_host) {
  std::string label = describe(s.key);
  if (with_host && !s.host.empty()) label += " @" + s.host;
  return label;
}

/// Trend plots: series grouped by "group" (and unit), at most kMaxSeriesPerChart per plot.
std::string renderTrends(const std::vector<SiteSeries>& series, int* charts) {
  const RunAxis axis = buildAxis(series);
  std::vector<std::string> order;
  std::map<std::string, std::vector<size_t>> members;
  for (size_t i = 0; i < series.size(); ++i) {
    const SiteSeries& s = series[i];
    std::string group = s.group;
    if (group.empty()) group = s.key.suite + " " + s.key.metric;
    const std::string key = group + "\x1f" + s.key.unit;
    if (!members.count(key)) order.push_back(key);
    members[key].push_back(i);
  }
  std::ostringstream out;
  out << "<h2>Trends</h2>\n";
  if (series.empty()) out << "<p class=\"muted\">No performance series.</p>\n";
  out << "<p class=\"muted\">One point per run (oldest left, labelled with its date and commit). Triangles mark change "
         "points, diamonds a driver change; hover a point for its p10-p90 spread. A chart shows one implementation; "
         "its "
         "lines are the pairs and sizes. A series is drawn from two runs on.";
  if (axis.total_runs > axis.labels.size()) {
    out << " Showing the latest " << axis.labels.size() << " of " << axis.total_runs << " runs.";
  }
  out << "</p>\n";
  // How the bytes behind each suite's bandwidth are counted.
  std::set<std::string> suites;
  for (const SiteSeries& s : series)
    suites.insert(s.key.suite);
  std::string bytes;
  for (const std::string& suite : suites) {
    if (const std::string b = bytesConvention(suite); !b.empty())
      bytes += "<li>" + htmlEscape(suite + ": " + b) + "</li>";
  }
  if (!bytes.empty())
    out << "<p class=\"muted\">GB/s is 10<sup>9</sup> bytes per second. Bytes:</p><ul class=\"muted\">" << bytes
        << "</ul>\n";
  out << "<div class=\"charts\">\n";
  std::ostringstream single;
  size_t singleRows = 0;
  for (const std::string& key : order) {
    const std::vector<size_t>& idx = members[key];
    const std::string group = key.substr(0, key.find('\x1f'));
    std::set<std::string> hosts;
    for (size_t i : idx)
      hosts.insert(series[i].host);
    // Series of one run (or none) have no trend: listed in a table below, not drawn as a one-dot chart.
    std::vector<size_t> drawable;
    for (size_t i : idx) {
      size_t points = 0;
      for (const SitePoint& pt : series[i].points)
        points += pt.value.has_value() && axis.label_of.count(runKey(pt));
      if (points >= 2) {
        drawable.push_back(i);
        continue;
      }
      const SiteSeries& s = series[i];
      const SitePoint* last = s.points.empty() ? nullptr : &s.points.back();
      single << "<tr><td class=\"l\">" << htmlEscape(group) << "</td><td class=\"l\">"
             << htmlEscape(seriesLabel(s, hosts.size() > 1)) << "</td><td>"
             << (last ? fmtNum(last->value) : std::string("-")) << "</td><td class=\"l\">" << htmlEscape(s.key.unit)
             << "</td><td class=\"l\">"
             << (last ? htmlEscape(shortTime(last->timestamp) + " " + shortSha(last->git_sha)) : std::string("-"))
             << "</td></tr>\n";
      ++singleRows;
    }
    const auto parts = splitEvenly(drawable.size(), kMaxSeriesPerChart);
    for (size_t part = 0; part < parts.size(); ++part) {
      LineChart chart;
      chart.title =
          group + (parts.size() > 1 ? " (" + std::to_string(part + 1) + "/" + std::to_string(parts.size()) + ")" : "");
      chart.x_label = "run (date, commit)";
      const SiteSeries& first = series[drawable[parts[part].first]];
      chart.y_label = metricAxis(first.key.metric, first.key.unit);
      // Trends zoom to the data so a few percent show; the axis title says so.
      chart.y_autoscale = true;
      chart.x_labels = axis.labels;
      // Markers in greys: red is kept for failed checks.
      ChartMarkers changes{"change point", "#222222", "triangle", json::array()};
      ChartMarkers drivers{"driver change", "#8a8a8a", "rectRot", json::array()};
      for (size_t m = parts[part].first; m < parts[part].second; ++m) {
        const SiteSeries& s = series[drawable[m]];
        ChartSeries cs;
        cs.label = seriesLabel(s, hosts.size() > 1);
        const std::string& impl = s.key.impl;
        cs.dashed = impl.rfind("nccl.", 0) == 0 || impl.rfind("cuda.", 0) == 0;
        const std::vector<SitePoint>& pts = s.points;
        std::string prevDriver;
        for (size_t p = 0; p < pts.size(); ++p) {
          const SitePoint& pt = pts[p];
          const auto& v = pt.value;
          const auto label = axis.label_of.find(runKey(pt));
          if (!v || label == axis.label_of.end()) continue;
          const std::string& x = label->second;
          cs.points.push_back({{"x", x}, {"y", *v}, {"note", pointNote(pt)}});
          const std::string& drv = pt.driver;
          if (p > 0 && !drv.empty() && !prevDriver.empty() && drv != prevDriver) {
            drivers.points.push_back({{"x", x}, {"y", *v}, {"note", "driver " + prevDriver + " -> " + drv}});
          }
          if (!drv.empty()) prevDriver = drv;
        }
        for (const SiteChangePoint& cp : s.change_points) {
          // A change point outside the points (a hand-built model) is not drawn.
          if (cp.index < 0 || static_cast<size_t>(cp.index) >= pts.size()) continue;
          const SitePoint& pt = pts[static_cast<size_t>(cp.index)];
          const auto label = axis.label_of.find(runKey(pt));
          if (!pt.value || label == axis.label_of.end()) continue;
          changes.points.push_back(
              {{"x", label->second},
               {"y", *pt.value},
               {"note", cs.label + ": " + fmtNum(cp.before) + " -> " + fmtNum(cp.after) + " (" + fmtPct(cp.change_pct) +
                            ", " + fmtP(cp.p_value, cp.p_floor) + "), commit " + shortSha(pt.git_sha)}});
        }
        chart.series.push_back(std::move(cs));
      }
      if (!changes.points.empty()) chart.markers.push_back(std::move(changes));
      if (!drivers.points.empty()) chart.markers.push_back(std::move(drivers));
      out << chartBlock(chart);
      ++*charts;
    }
  }
  out << "</div>\n";
  if (singleRows > 0) {
    out << "<h3>Series with a single run</h3>\n<p class=\"muted\">" << singleRows << " series "
        << (singleRows == 1 ? "has" : "have")
        << " one run so far: no trend to draw yet.</p>\n<div class=\"tablebox\"><table class=\"single-run\"><tr><th "
           "class=\"l\">group</th><th class=\"l\">series</th><th>value</th><th class=\"l\">unit</th><th "
           "class=\"l\">run</th></tr>\n"
        << single.str() << "</table></div>\n";
  }
  return out.str();
}

/// How many of a kind's series are long enough for the change-point test, and how long that is.
struct Testable {
  bool known = false;  ///< the model says (a model without the counts says nothing either way)
  long long testable = 0, too_short = 0, min_runs = 0;
  bool none() const { return known && testable == 0; }
};

Testable testableOf(const KindModel& kind) {
  Testable t;
  if (!kind.testable) return t;
  t.known = true;
  t.testable = kind.testable->series_testable;
  t.too_short = kind.testable->series_too_short;
  t.min_runs = kind.testable->min_runs_to_test;
  return t;
}

std::string tooFewText(const Testable& t) {
  return "too few runs to test: a change point needs " + std::to_string(t.min_runs / 2) + " runs on each side (" +
         std::to_string(t.min_runs) + " in a series)";
}

std::string renderRegressions(const std::vector<SiteRegression>& regressions, const Testable& t) {
  std::ostringstream out;
  out << "<h2>Regressions</h2>\n";
  if (regressions.empty()) {
    if (t.none()) {
      out << "<p class=\"muted\">Not tested: " << htmlEscape(tooFewText(t)) << "; no series has that many yet.</p>\n";
    } else {
      out << "<p class=\"ok\">No series' latest change point is a worsening beyond the threshold";
      if (t.known) out << " (" << t.testable << " series tested";
      if (t.known && t.too_short > 0) out << "; " << t.too_short << " too short to test, " << htmlEscape(tooFewText(t));
      out << (t.known ? ")." : ".") << "</p>\n";
    }
    return out.str();
  }
  out << "<p class=\"muted\">p: the larger of E-Divisive's permutation test (the share of shuffled series whose "
         "statistic is at least the change point's; with N permutations it cannot tell a p below 1/(N+1), shown as "
         "p &lt; that bound) and Welch's t-test between the segments either side.";
  if (t.too_short > 0) out << " " << t.too_short << " series too short to test (" << htmlEscape(tooFewText(t)) << ").";
  out << "</p>\n";
  out << "<div class=\"tablebox\"><table class=\"regressions\"><tr><th class=\"l\">series</th><th "
         "class=\"l\">host</th><th "
         "class=\"l\">metric</th><th>before</th><th>after</th><th>change</th><th>p</th><th class=\"l\">first run "
         "after</th><th class=\"l\">fingerprint changes</th></tr>\n";
  for (const SiteRegression& r : regressions) {
    std::string changes;
    for (const std::string& c : r.fingerprint_changes)
      changes += (changes.empty() ? "" : "; ") + c;
    out << "<tr><td class=\"l\">" << htmlEscape(describe(r.key)) << "</td><td class=\"l\">" << htmlEscape(r.host)
        << "</td><td class=\"l\">" << htmlEscape(r.key.metric) << "</td><td>" << fmtNum(r.before) << "</td><td>"
        << fmtNum(r.after) << "</td><td class=\"cell-fail\">" << fmtPct(r.change_pct) << "</td><td>"
        << htmlEscape(fmtP(r.p_value, r.p_floor)) << "</td><td class=\"l\">" << htmlEscape(shortSha(r.git_sha)) << " "
        << htmlEscape(shortTime(r.timestamp)) << "</td><td class=\"l\">"
        << htmlEscape(changes.empty() ? "none" : changes) << "</td></tr>\n";
  }
  out << "</table></div>\n";
  return out.str();
}

std::string renderFleet(const std::vector<SiteOutlier>& fleet, const std::vector<SiteSeries>& series) {
  std::map<std::string, std::string> described;
  for (const SiteSeries& s : series)
    described[s.id] = describe(s.key);
  std::ostringstream out;
  out << "<h2>Fleet outliers</h2>\n";
  if (fleet.empty()) {
    out << "<p class=\"ok\">No host's latest figure sits outside the fleet.</p>\n";
    return out.str();
  }
  out << "<div class=\"tablebox\"><table class=\"fleet\"><tr><th class=\"l\">node</th><th>newest run</th><th "
         "class=\"l\">series</th><th>value</th><th>fleet "
         "median</th><th>MAD</th><th>robust z</th></tr>\n";
  for (const SiteOutlier& f : fleet) {
    const std::string& id = f.series_id;
    const std::string what = described.count(id) ? described[id] : id;
    // The node by the one name nodes are listed under (NodeName, else identity and host), and how old its newest run
    // is: a figure from a week ago is no statement about today.
    const std::string& label = f.label.empty() ? f.host : f.label;
    out << "<tr><td class=\"l\">" << htmlEscape(label) << "</td><td>"
        << htmlEscape(f.age.empty() ? "-" : f.age + " ago") << "</td><td class=\"l\">" << htmlEscape(what)
        << "</td><td>" << fmtNum(f.value) << "</td><td>" << fmtNum(f.median) << "</td><td>" << fmtNum(f.mad)
        << "</td><td class=\"cell-warn\">" << fmtNum(f.z) << "</td></tr>\n";
  }
  out << "</table></div>\n";
  return out.str();
}

std::string renderHeatmap(const SiteHeatmap& hm) {
  const int gpus = hm.gpus;
  if (gpus < 1 || gpus > kMaxHeatmapGpus) {
    return "<p class=\"muted\">" + htmlEscape(hm.title) + ": not drawn (needs \"gpus\" from 1 to " +
           std::to_string(kMaxHeatmapGpus) + " and a \"cells\" array)</p>";
  }
  std::vector<HeatCell> cells(static_cast<size_t>(gpus) * static_cast<size_t>(gpus));
  for (const SiteHeatCell& c : hm.cells) {
    if (c.src < 0 || c.dst < 0 || c.src >= gpus || c.dst >= gpus) continue;
    HeatCell& cell = cells[static_cast<size_t>(c.src) * static_cast<size_t>(gpus) + static_cast<size_t>(c.dst)];
    cell.value = c.value;
    cell.expected = c.expected;
  }
  std::string out = heatmapTable(hm.title, hm.unit, gpus, cells);
  if (hm.left_out > 0) {
    out += "<p class=\"muted\">" + ordinal(hm.left_out) + " result" + (hm.left_out == 1 ? "" : "s") +
           " naming a GPU outside the run's GPUs left out</p>";
  }
  return out;
}

std::string renderKindPage(const KindModel& kind, const std::string& generated, int* charts_out) {
  const std::string& name = kind.kind;
  const std::vector<SiteSeries>& series = kind.series;
  const std::vector<SiteRegression>& regressions = kind.regressions;
  std::ostringstream out;
  out << pageBegin("peerlab history: " + name);
  out << "<h1>peerlab history: " << htmlEscape(name) << "</h1>\n<p class=\"muted\"><a href=\"index.html\">all "
      << "machine kinds</a> &middot; <a href=\"" << htmlEscape(fleetPageName(name)) << "\">fleet: nodes x checks</a>"
      << " &middot; generated " << htmlEscape(generated) << " &middot; " << series.size() << " series</p>\n";
  const Testable testable = testableOf(kind);
  if (!regressions.empty()) {
    out << "<p class=\"verdict-fail\">" << regressions.size() << " regression" << (regressions.size() == 1 ? "" : "s")
        << "</p>\n";
  } else if (testable.none()) {
    out << "<p class=\"verdict-none\">regressions: " << htmlEscape(tooFewText(testable)) << "</p>\n";
  } else {
    out << "<p class=\"verdict-pass\">no regressions</p>\n";
  }
  out << injectedRunsSection(kind);
  out << renderRegressions(regressions, testable);
  out << renderFleet(kind.fleet, series);
  out << "<h2>Pair heatmaps (latest run)</h2>\n";
  if (kind.heatmaps.empty()) out << "<p class=\"muted\">No pair results in the latest run.</p>\n";
  out << "<div class=\"tiles\">";
  for (const SiteHeatmap& hm : kind.heatmaps)
    out << "<div class=\"tile\">" << renderHeatmap(hm) << "</div>";
  out << "</div>\n";
  int charts = 0;
  out << renderTrends(series, &charts);
  // Chart.js is one file beside the pages (chart.min.js), not inlined into each.
  out << pageEnd(charts > 0 ? ChartJsUse::kShared : ChartJsUse::kNone);
  *charts_out += charts;
  return out.str();
}

/// The latest run's verdict and counts as stored at ingest, and its cell class; "-" when none is known.
std::pair<std::string, std::string> verdictCell(const KindModel& kind) {
  if (!kind.latest_verdict || kind.latest_verdict->verdict.empty()) return {"-", "muted"};
  const SiteVerdict& v = *kind.latest_verdict;
  // Every verdict as stored; EMPTY checked nothing and is never a pass.
  const std::string cls = v.verdict == "PASS" ? "cell-ok" : v.verdict == "EMPTY" ? "cell-warn" : "cell-fail";
  // Counts not stored (runs from before they were kept) show as "?".
  auto n = [&](int CheckCounts::*count) { return v.checks ? std::to_string((*v.checks).*count) : std::string("?"); };
  return {v.verdict + ": " + n(&CheckCounts::total) + " checks: " + n(&CheckCounts::passed) + " passed, " +
              n(&CheckCounts::failed) + " failed, " + n(&CheckCounts::warnings) + " warnings, " +
              n(&CheckCounts::unsupported) + " unsupported, " + n(&CheckCounts::skipped) + " skipped",
          cls};
}

/// A kind's row on the index: series, runs, latest run and its verdict, regressions and fleet outliers.
std::string indexRow(const KindModel& kind, const std::string& page) {
  std::set<std::string> runs;
  std::string latest;
  for (const SiteSeries& s : kind.series) {
    for (const SitePoint& p : s.points) {
      runs.insert(runKey(p));
      latest = std::max(latest, p.timestamp);
    }
  }
  // The kind's newest run that counts and how many there are, whether or not they left points to draw.
  const size_t runCount = std::max(runs.size(), static_cast<size_t>(std::max(kind.runs, 0)));
  if (kind.latest_verdict) latest = std::max(latest, kind.latest_verdict->run.time);
  const size_t regressions = kind.regressions.size();
  const size_t fleet = kind.fleet.size();
  const auto [verdict, verdictClass] = verdictCell(kind);
  const size_t injected = kind.injected_runs.size();
  const Testable testable = testableOf(kind);
  std::string regressionCell = "<td class=\"" + std::string(regressions ? "cell-fail" : "cell-ok") + "\">" +
                               std::to_string(regressions) + "</td>";
  if (!regressions && testable.none()) {
    regressionCell =
        "<td class=\"cell-skip\" title=\"" + htmlEscape(tooFewText(testable)) + "\">too few runs to test</td>";
  }
  std::ostringstream out;
  out << "<tr><td class=\"l\"><a href=\"" << htmlEscape(page) << "\">" << htmlEscape(kind.kind) << "</a> (<a href=\""
      << htmlEscape(fleetPageName(kind.kind)) << "\">fleet</a>)</td><td>" << kind.series.size() << "</td><td>"
      << runCount
      << (injected ? " <span class=\"warn\">+" + std::to_string(injected) + " injected, not counted</span>" : "")
      << "</td><td>" << htmlEscape(shortTime(latest)) << "</td><td class=\"l " << verdictClass << "\">"
      << htmlEscape(verdict) << "</td>" << regressionCell << "<td class=\"" << (fleet ? "cell-warn" : "cell-ok")
      << "\">" << fleet << "</td></tr>\n";
  return out.str();
}

// Nodes the scheduler's records name that have no counted run (found out of service before they were ever
// qualified, or qualified only with stand-ins).
std::string unrunSection(const std::vector<SiteNode>& unrun) {
  if (unrun.empty()) return "";
  std::ostringstream out;
  out << "<h2>Nodes without a counted run</h2>\n<div class=\"tablebox\"><table class=\"fleet-nodes\"><tr><th "
         "class=\"l\">node</th><th class=\"l\">state</th><th>recorded</th></tr>\n";
  for (const SiteNode& n : unrun) {
    out << "<tr><td class=\"l\">" << htmlEscape(n.name) << "</td><td class=\"l"
        << (n.state != "in_service" ? " cell-warn" : "") << "\">"
        << htmlEscape(n.state + (n.reason.empty() ? "" : ": " + n.reason)) << "</td><td>"
        << htmlEscape(shortTime(n.state_recorded_at)) << "</td></tr>\n";
  }
  out << "</table></div>\n";
  return out.str();
}

std::string renderIndex(const SiteModel& model, const std::vector<std::string>& pages,
                        const std::vector<std::string>& problems) {
  std::ostringstream out;
  out << pageBegin("peerlab history");
  out << "<h1>peerlab history</h1>\n<p class=\"muted\">generated " << htmlEscape(model.generated) << "</p>\n";
  out << "<table class=\"kinds\"><tr><th class=\"l\">machine kind</th><th>series</th><th>runs</th><th>latest "
         "run</th><th class=\"l\">its verdict (the checks engine's, as qualify and report give it)</th>"
         "<th>regressions</th><th>fleet outliers</th></tr>\n";
  for (size_t k = 0; k < model.kinds.size(); ++k) {
    if (pages[k].empty()) {
      out << "<tr><td class=\"l\">" << htmlEscape(model.kinds[k].kind)
          << "</td><td class=\"l cell-fail\" colspan=\"6\">not rendered: " << htmlEscape(problems[k]) << "</td></tr>\n";
      continue;
    }
    out << indexRow(model.kinds[k], pages[k]);
  }
  out << "</table>\n";
  if (model.kinds.empty()) out << "<p class=\"muted\">No runs in the history yet.</p>\n";
  out << unrunSection(model.unrun_nodes);
  out << pageEnd(ChartJsUse::kNone);
  return out.str();
}

/// Writes one kind's trend page and its fleet page.
Status writeKindPages(const KindModel& kind, const std::filesystem::path& dir, const std::string& page,
                      const std::string& generated, int* charts) {
  // NOTE: an exception here would be a bug; it costs this kind only.
  try {
    PEERLAB_RETURN_IF_ERROR(writeTextFile((dir / page).string(), renderKindPage(kind, generated, charts)));
    return writeTextFile((dir / fleetPageName(kind.kind)).string(), renderFleetPage(kind, generated));
  } catch (const std::exception& e) {
    return PEERLAB_INTERNAL(std::string("cannot render: ") + e.what());
  }
}

}  // namespace

std::string kindPageName(const std::string& kind) {
  // FNV-1a 64 of the whole kind: pages of kinds that sanitize alike ("a/b", "a_b") differ.
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : kind)
    h = (h ^ c) * 0x100000001b3ull;
  std::string prefix;
  for (char c : kind) {
    if (prefix.size() >= kPageNamePrefix) break;
    const bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
    prefix += keep ? c : '_';
  }
  char hash[24];
  std::snprintf(hash, sizeof(hash), "%012llx", static_cast<unsigned long long>(h >> 16));
  return "kind-" + prefix + "-" + hash + ".html";
}

Status renderHistorySite(const SiteModel& model, const std::string& out_dir, std::vector<std::string>* failures) {
  const std::filesystem::path dir(out_dir);
  const std::vector<KindModel>& kinds = model.kinds;
  PEERLAB_RETURN_IF_ERROR(checkSiteKinds(kinds.size()));
  int charts = 0;
  std::vector<std::string> pages(kinds.size());
  std::vector<std::string> problems(kinds.size());
  std::map<std::string, std::string> pageOwner;
  std::vector<std::string> failed;
  for (size_t k = 0; k < kinds.size(); ++k) {
    const KindModel& kind = kinds[k];
    std::string problem = kind.unreadable;
    if (problem.empty()) {
      const std::string page = kindPageName(kind.kind);
      auto [owner, fresh] = pageOwner.emplace(page, kind.kind);
      Status st = fresh ? writeKindPages(kind, dir, page, model.generated, &charts)
                        : PEERLAB_INVALID_ARGUMENT("its page name " + page + " is taken by the kind \"" +
                                                   printable(owner->second, 80) + "\"");
      if (st.isOk()) pages[k] = page;
      problem = st.message();
    }
    if (!problem.empty()) {
      problems[k] = problem;
      failed.push_back("kind \"" + printable(kind.kind, 80) + "\": " + problem);
    }
  }
  // The one copy of Chart.js every kind page loads.
  if (charts > 0 && !chartJsSource().empty()) {
    PEERLAB_RETURN_IF_ERROR(writeTextFile((dir / kSharedChartJsName).string(), chartJsSource()));
  }
  PEERLAB_RETURN_IF_ERROR(writeTextFile((dir / "index.html").string(), renderIndex(model, pages, problems)));
  if (failures != nullptr) *failures = failed;
  if (failed.empty()) return Status();
  std::string all;
  for (const std::string& f : failed)
    all += (all.empty() ? "" : "; ") + f;
  return PEERLAB_INVALID_ARGUMENT(std::to_string(failed.size()) + " of " + std::to_string(kinds.size()) +
                                  " kinds not rendered (index.html and the other pages written): " + all);
}

}  // namespace peerlab::report
