#include "harness/report/render/site.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "harness/report/compare.h"
#include "harness/report/render/chart_page.h"
#include "harness/report/render/fleet_page.h"
#include "reference/core/files.h"
#include "reference/core/text.h"

namespace peerlab::report {

using nlohmann::json;

namespace {

std::string str(const json& j, const char* key) {
  if (!j.is_object() || !j.contains(key)) return "";
  const json& v = j[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "";
  return v.dump();
}

std::optional<double> num(const json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_number()) return std::nullopt;
  const double v = j[key].get<double>();
  if (!std::isfinite(v)) return std::nullopt;
  return v;
}

/// The array at `key`, or an empty one (by reference: models hold millions of points).
const json& arrayAt(const json& j, const char* key) {
  static const json kEmpty = json::array();
  if (!j.is_object()) return kEmpty;
  const auto it = j.find(key);
  return it != j.end() && it->is_array() ? *it : kEmpty;
}

std::string fmtNum(const std::optional<double>& v) {
  return v ? shortNumber(*v) : "-";
}

std::string fmtPct(const std::optional<double>& v) {
  return v ? formatted("%+.1f%%", *v) : "-";
}

/// A change point's p-value as the permutation count bounds it: "p < 0.01", "p=0.0123" (report::formatPValue).
std::string fmtP(const json& cp) {
  const auto p = num(cp, "p_value");
  if (!p) return "-";
  return formatPValue(*p, num(cp, "p_floor"));
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

/// A GPU ordinal or rank count as text: whole numbers in int range as themselves, anything else as a short number.
std::string ordinal(const std::optional<double>& v) {
  if (!v) return "?";
  if (*v >= 0 && *v <= 1e6 && *v == std::floor(*v)) return std::to_string(static_cast<long>(*v));
  return shortNumber(*v);
}

/// "peer_copy uni peerlab.ce 0->1 256 MiB x2" from a series or regression object.
std::string describe(const json& s) {
  std::string d = str(s, "suite") + " " + str(s, "name") + " " + str(s, "impl");
  const auto src = num(s, "src");
  const auto dst = num(s, "dst");
  // A pair as "0->1"; one GPU's own figure (host copies: no destination) as "gpu 0".
  if (src && dst && *src != *dst) {
    d += " " + ordinal(src) + "->" + ordinal(dst);
  } else if (src || dst) {
    d += " gpu " + ordinal(src ? src : dst);
  }
  if (const auto bytes = num(s, "bytes"); bytes && *bytes > 0) d += " " + formatBytes(*bytes);
  if (const auto ranks = num(s, "ranks"); ranks && *ranks > 1) d += " x" + ordinal(ranks);
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

Status checkArray(const json& j, const char* key, const std::string& where) {
  if (j.contains(key) && !j[key].is_array()) return PEERLAB_INVALID_ARGUMENT(where + "." + key + ": must be an array");
  return Status();
}

Status validateRoot(const json& model) {
  if (!model.is_object()) return PEERLAB_INVALID_ARGUMENT("history site model: must be an object");
  if (!model.contains("kinds") || !model["kinds"].is_array()) {
    return PEERLAB_INVALID_ARGUMENT("history site model: needs a \"kinds\" array");
  }
  return checkArray(model, "unrun_nodes", "history site model");
}

// One kind's part of the model; `where` is "kinds[k]".
Status validateKind(const json& kind, const std::string& where) {
  if (!kind.is_object() || !kind.contains("kind") || !kind["kind"].is_string() ||
      kind["kind"].get<std::string>().empty()) {
    return PEERLAB_INVALID_ARGUMENT(where + ": needs a non-empty string \"kind\"");
  }
  for (const char* key : {"series", "regressions", "fleet", "heatmaps", "nodes"})
    PEERLAB_RETURN_IF_ERROR(checkArray(kind, key, where));
  const json& series = arrayAt(kind, "series");
  for (size_t i = 0; i < series.size(); ++i) {
    const std::string sw = where + ".series[" + std::to_string(i) + "]";
    const json& s = series[i];
    if (!s.is_object() || !s.contains("points") || !s["points"].is_array()) {
      return PEERLAB_INVALID_ARGUMENT(sw + ": needs a \"points\" array");
    }
    PEERLAB_RETURN_IF_ERROR(checkArray(s, "change_points", sw));
    for (size_t p = 0; p < s["points"].size(); ++p) {
      const json& pt = s["points"][p];
      if (!pt.is_object() || (pt.contains("value") && !pt["value"].is_number() && !pt["value"].is_null())) {
        return PEERLAB_INVALID_ARGUMENT(sw + ".points[" + std::to_string(p) + "]: \"value\" must be a number");
      }
    }
    for (size_t c = 0; c < arrayAt(s, "change_points").size(); ++c) {
      const json& cp = s["change_points"][c];
      const auto idx = num(cp, "index");
      if (!idx || *idx < 0 || *idx >= static_cast<double>(s["points"].size())) {
        return PEERLAB_INVALID_ARGUMENT(sw + ".change_points[" + std::to_string(c) +
                                        "]: \"index\" must point into \"points\"");
      }
    }
  }
  return Status();
}

/// Characters of the kind kept in its page name (the hash suffix keeps names unique).
constexpr size_t kPageNamePrefix = 40;

/// Largest heatmap side drawn.
constexpr int kMaxHeatmapSide = 128;

/// The runs of a kind in time order, each with its axis label.
constexpr size_t kMaxTrendRuns = 200;

struct RunAxis {
  size_t total_runs = 0;
  std::vector<std::string> labels;
  std::map<std::string, std::string> label_of;  ///< run key -> label
};

std::string runKey(const json& point) {
  if (point.contains("run_id")) return point["run_id"].dump();
  return str(point, "timestamp") + "|" + str(point, "git_sha");
}

RunAxis buildAxis(const json& series) {
  struct RunInfo {
    std::string key, timestamp, sha;
  };
  std::map<std::string, RunInfo> runs;
  for (const json& s : series) {
    for (const json& p : s["points"]) {
      const std::string key = runKey(p);
      runs.emplace(key, RunInfo{key, str(p, "timestamp"), str(p, "git_sha")});
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
std::string pointNote(const json& p) {
  const auto p10 = num(p, "p10");
  const auto p90 = num(p, "p90");
  if (p10 && p90) return "p10-p90 " + shortNumber(*p10) + "-" + shortNumber(*p90);
  return "";
}

std::string seriesLabel(const json& s, bool with_host) {
  std::string label = describe(s);
  if (with_host && !str(s, "host").empty()) label += " @" + str(s, "host");
  return label;
}

/// Trend plots: series grouped by "group" (and unit), at most kMaxSeriesPerChart per plot.
std::string renderTrends(const json& series, int* charts) {
  const RunAxis axis = buildAxis(series);
  std::vector<std::string> order;
  std::map<std::string, std::vector<size_t>> members;
  for (size_t i = 0; i < series.size(); ++i) {
    const json& s = series[i];
    std::string group = str(s, "group");
    if (group.empty()) group = str(s, "suite") + " " + str(s, "metric");
    const std::string key = group + "\x1f" + str(s, "unit");
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
  for (const json& s : series)
    suites.insert(str(s, "suite"));
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
      hosts.insert(str(series[i], "host"));
    // Series of one run (or none) have no trend: listed in a table below, not drawn as a one-dot chart.
    std::vector<size_t> drawable;
    for (size_t i : idx) {
      size_t points = 0;
      for (const json& pt : series[i]["points"])
        points += num(pt, "value").has_value() && axis.label_of.count(runKey(pt));
      if (points >= 2) {
        drawable.push_back(i);
        continue;
      }
      const json& s = series[i];
      const json* last = s["points"].empty() ? nullptr : &s["points"].back();
      single << "<tr><td class=\"l\">" << htmlEscape(group) << "</td><td class=\"l\">"
             << htmlEscape(seriesLabel(s, hosts.size() > 1)) << "</td><td>"
             << (last ? fmtNum(num(*last, "value")) : std::string("-")) << "</td><td class=\"l\">"
             << htmlEscape(str(s, "unit")) << "</td><td class=\"l\">"
             << (last ? htmlEscape(shortTime(str(*last, "timestamp")) + " " + shortSha(str(*last, "git_sha")))
                      : std::string("-"))
             << "</td></tr>\n";
      ++singleRows;
    }
    const auto parts = splitEvenly(drawable.size(), kMaxSeriesPerChart);
    for (size_t part = 0; part < parts.size(); ++part) {
      LineChart chart;
      chart.title =
          group + (parts.size() > 1 ? " (" + std::to_string(part + 1) + "/" + std::to_string(parts.size()) + ")" : "");
      chart.x_label = "run (date, commit)";
      const json& first = series[drawable[parts[part].first]];
      chart.y_label = metricAxis(str(first, "metric"), str(first, "unit"));
      // Trends zoom to the data so a few percent show; the axis title says so.
      chart.y_autoscale = true;
      chart.x_labels = axis.labels;
      // Markers in greys: red is kept for failed checks.
      ChartMarkers changes{"change point", "#222222", "triangle", json::array()};
      ChartMarkers drivers{"driver change", "#8a8a8a", "rectRot", json::array()};
      for (size_t m = parts[part].first; m < parts[part].second; ++m) {
        const json& s = series[drawable[m]];
        ChartSeries cs;
        cs.label = seriesLabel(s, hosts.size() > 1);
        const std::string impl = str(s, "impl");
        cs.dashed = impl.rfind("nccl.", 0) == 0 || impl.rfind("cuda.", 0) == 0;
        const json& pts = s["points"];
        std::string prevDriver;
        for (size_t p = 0; p < pts.size(); ++p) {
          const json& pt = pts[p];
          const auto v = num(pt, "value");
          const auto label = axis.label_of.find(runKey(pt));
          if (!v || label == axis.label_of.end()) continue;
          const std::string& x = label->second;
          cs.points.push_back({{"x", x}, {"y", *v}, {"note", pointNote(pt)}});
          const std::string drv = str(pt, "driver");
          if (p > 0 && !drv.empty() && !prevDriver.empty() && drv != prevDriver) {
            drivers.points.push_back({{"x", x}, {"y", *v}, {"note", "driver " + prevDriver + " -> " + drv}});
          }
          if (!drv.empty()) prevDriver = drv;
        }
        for (const json& cp : arrayAt(s, "change_points")) {
          const size_t at = static_cast<size_t>(*num(cp, "index"));
          const json& pt = pts[at];
          const auto v = num(pt, "value");
          const auto label = axis.label_of.find(runKey(pt));
          if (!v || label == axis.label_of.end()) continue;
          changes.points.push_back({{"x", label->second},
                                    {"y", *v},
                                    {"note", cs.label + ": " + fmtNum(num(cp, "before")) + " -> " +
                                                 fmtNum(num(cp, "after")) + " (" + fmtPct(num(cp, "change_pct")) +
                                                 ", " + fmtP(cp) + "), commit " + shortSha(str(pt, "git_sha"))}});
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

Testable testableOf(const json& kind) {
  Testable t;
  t.known = num(kind, "series_testable").has_value();
  auto n = [&](const char* key) { return num(kind, key).value_or(0); };
  t.testable = static_cast<long long>(n("series_testable"));
  t.too_short = static_cast<long long>(n("series_too_short"));
  t.min_runs = static_cast<long long>(n("min_runs_to_test"));
  return t;
}

std::string tooFewText(const Testable& t) {
  return "too few runs to test: a change point needs " + std::to_string(t.min_runs / 2) + " runs on each side (" +
         std::to_string(t.min_runs) + " in a series)";
}

std::string renderRegressions(const json& regressions, const Testable& t) {
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
  for (const json& r : regressions) {
    std::string changes;
    for (const json& c : arrayAt(r, "fingerprint_changes"))
      changes += (changes.empty() ? "" : "; ") + (c.is_string() ? c.get<std::string>() : c.dump());
    out << "<tr><td class=\"l\">" << htmlEscape(describe(r)) << "</td><td class=\"l\">" << htmlEscape(str(r, "host"))
        << "</td><td class=\"l\">" << htmlEscape(str(r, "metric")) << "</td><td>" << fmtNum(num(r, "before"))
        << "</td><td>" << fmtNum(num(r, "after")) << "</td><td class=\"cell-fail\">" << fmtPct(num(r, "change_pct"))
        << "</td><td>" << htmlEscape(fmtP(r)) << "</td><td class=\"l\">" << htmlEscape(shortSha(str(r, "git_sha")))
        << " " << htmlEscape(shortTime(str(r, "timestamp"))) << "</td><td class=\"l\">"
        << htmlEscape(changes.empty() ? "none" : changes) << "</td></tr>\n";
  }
  out << "</table></div>\n";
  return out.str();
}

std::string renderFleet(const json& fleet, const json& series) {
  std::map<std::string, std::string> described;
  for (const json& s : series)
    described[str(s, "id")] = describe(s);
  std::ostringstream out;
  out << "<h2>Fleet outliers</h2>\n";
  if (fleet.empty()) {
    out << "<p class=\"ok\">No host's latest figure sits outside the fleet.</p>\n";
    return out.str();
  }
  out << "<div class=\"tablebox\"><table class=\"fleet\"><tr><th class=\"l\">node</th><th>newest run</th><th "
         "class=\"l\">series</th><th>value</th><th>fleet "
         "median</th><th>MAD</th><th>robust z</th></tr>\n";
  for (const json& f : fleet) {
    const std::string id = str(f, "series_id");
    const std::string what = described.count(id) ? described[id] : id;
    // The node by the one name nodes are listed under (NodeName, else identity and host), and how old its newest run
    // is: a figure from a week ago is no statement about today.
    const std::string label = str(f, "label").empty() ? str(f, "host") : str(f, "label");
    const std::string age = str(f, "age");
    out << "<tr><td class=\"l\">" << htmlEscape(label) << "</td><td>" << htmlEscape(age.empty() ? "-" : age + " ago")
        << "</td><td class=\"l\">" << htmlEscape(what) << "</td><td>" << fmtNum(num(f, "value")) << "</td><td>"
        << fmtNum(num(f, "median")) << "</td><td>" << fmtNum(num(f, "mad")) << "</td><td class=\"cell-warn\">"
        << fmtNum(num(f, "z")) << "</td></tr>\n";
  }
  out << "</table></div>\n";
  return out.str();
}

std::string renderHeatmap(const json& hm) {
  const auto count = num(hm, "gpus");
  const std::string title = str(hm, "title");
  if (!count || *count < 1 || *count > kMaxHeatmapSide || *count != std::floor(*count) || !hm.contains("cells") ||
      !hm["cells"].is_array()) {
    return "<p class=\"muted\">" + htmlEscape(title) + ": not drawn (needs \"gpus\" from 1 to " +
           std::to_string(kMaxHeatmapSide) + " and a \"cells\" array)</p>";
  }
  const int gpus = static_cast<int>(*count);
  std::vector<HeatCell> cells(static_cast<size_t>(gpus) * static_cast<size_t>(gpus));
  for (const json& c : hm["cells"]) {
    const auto src = num(c, "src");
    const auto dst = num(c, "dst");
    if (!src || !dst || *src < 0 || *dst < 0 || *src >= gpus || *dst >= gpus) continue;
    HeatCell& cell = cells[static_cast<size_t>(*src) * static_cast<size_t>(gpus) + static_cast<size_t>(*dst)];
    cell.value = num(c, "value");
    cell.expected = num(c, "expected");
  }
  std::string out = heatmapTable(title, str(hm, "unit"), gpus, cells);
  if (const auto left = num(hm, "left_out"); left && *left > 0) {
    out += "<p class=\"muted\">" + ordinal(left) + " result" + (*left == 1 ? "" : "s") +
           " naming a GPU outside the run's GPUs left out</p>";
  }
  return out;
}

std::string renderKindPage(const json& kind, const std::string& generated, int* charts_out) {
  const std::string name = kind["kind"].get<std::string>();
  const json& series = arrayAt(kind, "series");
  const json& regressions = arrayAt(kind, "regressions");
  const json& fleet = arrayAt(kind, "fleet");
  const json& heatmaps = arrayAt(kind, "heatmaps");
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
  out << renderFleet(fleet, series);
  out << "<h2>Pair heatmaps (latest run)</h2>\n";
  if (heatmaps.empty()) out << "<p class=\"muted\">No pair results in the latest run.</p>\n";
  out << "<div class=\"tiles\">";
  for (const json& hm : heatmaps)
    out << "<div class=\"tile\">" << renderHeatmap(hm) << "</div>";
  out << "</div>\n";
  int charts = 0;
  out << renderTrends(series, &charts);
  // Chart.js is one file beside the pages (chart.min.js), not inlined into each.
  out << pageEnd(charts > 0 ? ChartJsUse::kShared : ChartJsUse::kNone);
  *charts_out += charts;
  return out.str();
}

std::string renderIndex(const json& model, const std::vector<std::string>& pages,
                        const std::vector<std::string>& problems) {
  const std::string generated = str(model, "generated");
  std::ostringstream out;
  out << pageBegin("peerlab history");
  out << "<h1>peerlab history</h1>\n<p class=\"muted\">generated " << htmlEscape(generated) << "</p>\n";
  out << "<table class=\"kinds\"><tr><th class=\"l\">machine kind</th><th>series</th><th>runs</th><th>latest "
         "run</th><th class=\"l\">its verdict (the checks engine's, as qualify and report give it)</th>"
         "<th>regressions</th><th>fleet outliers</th></tr>\n";
  const json& kinds = model["kinds"];
  for (size_t k = 0; k < kinds.size(); ++k) {
    const json& kind = kinds[k];
    if (pages[k].empty()) {
      const std::string name = kind.is_object() && kind.contains("kind") && kind["kind"].is_string()
                                   ? kind["kind"].get<std::string>()
                                   : "kinds[" + std::to_string(k) + "]";
      out << "<tr><td class=\"l\">" << htmlEscape(name)
          << "</td><td class=\"l cell-fail\" colspan=\"6\">not rendered: " << htmlEscape(problems[k]) << "</td></tr>\n";
      continue;
    }
    const std::string name = kind["kind"].get<std::string>();
    const json& series = arrayAt(kind, "series");
    std::set<std::string> runs;
    std::string latest;
    for (const json& s : series) {
      for (const json& p : s["points"]) {
        runs.insert(runKey(p));
        latest = std::max(latest, str(p, "timestamp"));
      }
    }
    // The kind's newest run that counts and how many there are, whether or not they left points to draw.
    size_t runCount = runs.size();
    if (const auto counted = num(kind, "runs"); counted && *counted > static_cast<double>(runCount))
      runCount = static_cast<size_t>(*counted);
    if (kind.contains("latest_verdict") && kind["latest_verdict"].is_object())
      latest = std::max(latest, str(kind["latest_verdict"], "time"));
    const size_t regressions = arrayAt(kind, "regressions").size();
    const size_t fleet = arrayAt(kind, "fleet").size();
    // The latest run's verdict and counts, as stored at ingest.
    std::string verdict = "-", verdictClass = "muted";
    if (kind.contains("latest_verdict") && kind["latest_verdict"].is_object()) {
      const json& v = kind["latest_verdict"];
      const std::string word = str(v, "verdict");
      if (!word.empty()) {
        verdict = word;
        // Every verdict as stored; EMPTY checked nothing and is never a pass.
        verdictClass = word == "PASS" ? "cell-ok" : word == "EMPTY" ? "cell-warn" : "cell-fail";
        if (v.contains("checks") && v["checks"].is_object()) {
          const json& c = v["checks"];
          auto n = [&](const char* key) {
            return c.contains(key) && c[key].is_number_integer() ? std::to_string(c[key].get<long long>())
                                                                 : std::string("?");
          };
          verdict += ": " + n("total") + " checks: " + n("passed") + " passed, " + n("failed") + " failed, " +
                     n("warnings") + " warnings, " + n("unsupported") + " unsupported, " + n("skipped") + " skipped";
        }
      }
    }
    const size_t injected = arrayAt(kind, "injected_runs").size();
    const Testable testable = testableOf(kind);
    std::string regressionCell = "<td class=\"" + std::string(regressions ? "cell-fail" : "cell-ok") + "\">" +
                                 std::to_string(regressions) + "</td>";
    if (!regressions && testable.none()) {
      regressionCell =
          "<td class=\"cell-skip\" title=\"" + htmlEscape(tooFewText(testable)) + "\">too few runs to test</td>";
    }
    out << "<tr><td class=\"l\"><a href=\"" << htmlEscape(pages[k]) << "\">" << htmlEscape(name) << "</a> (<a href=\""
        << htmlEscape(fleetPageName(name)) << "\">fleet</a>)</td><td>" << series.size() << "</td><td>" << runCount
        << (injected ? " <span class=\"warn\">+" + std::to_string(injected) + " injected, not counted</span>" : "")
        << "</td><td>" << htmlEscape(shortTime(latest)) << "</td><td class=\"l " << verdictClass << "\">"
        << htmlEscape(verdict) << "</td>" << regressionCell << "<td class=\"" << (fleet ? "cell-warn" : "cell-ok")
        << "\">" << fleet << "</td></tr>\n";
  }
  out << "</table>\n";
  if (kinds.empty()) out << "<p class=\"muted\">No runs in the history yet.</p>\n";
  // Nodes the scheduler's records name that have no counted run (found out of service before they were ever
  // qualified, or qualified only with stand-ins).
  const json& unrun = arrayAt(model, "unrun_nodes");
  if (!unrun.empty()) {
    out << "<h2>Nodes without a counted run</h2>\n<div class=\"tablebox\"><table class=\"fleet-nodes\"><tr><th "
           "class=\"l\">node</th><th class=\"l\">state</th><th>recorded</th></tr>\n";
    for (const json& n : unrun) {
      const std::string state = str(n, "state"), reason = str(n, "reason");
      out << "<tr><td class=\"l\">" << htmlEscape(str(n, "name")) << "</td><td class=\"l"
          << (state != "in_service" ? " cell-warn" : "") << "\">"
          << htmlEscape(state + (reason.empty() ? "" : ": " + reason)) << "</td><td>"
          << htmlEscape(shortTime(str(n, "state_recorded_at"))) << "</td></tr>\n";
    }
    out << "</table></div>\n";
  }
  out << pageEnd(ChartJsUse::kNone);
  return out.str();
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

Status renderHistorySite(const json& model, const std::string& out_dir, std::vector<std::string>* failures) {
  PEERLAB_RETURN_IF_ERROR(validateRoot(model));
  const std::filesystem::path dir(out_dir);
  const std::string generated = str(model, "generated");
  const json& kinds = model["kinds"];
  if (kinds.size() > kMaxSiteKinds) {
    return PEERLAB_INVALID_ARGUMENT("the history holds " + std::to_string(kinds.size()) +
                                    " machine kinds; a site shows at most " + std::to_string(kMaxSiteKinds) +
                                    " (nothing written)");
  }
  int charts = 0;
  std::vector<std::string> pages(kinds.size());
  std::vector<std::string> problems(kinds.size());
  std::map<std::string, std::string> pageOwner;
  std::vector<std::string> failed;
  for (size_t k = 0; k < kinds.size(); ++k) {
    const json& kind = kinds[k];
    const std::string where = "kinds[" + std::to_string(k) + "]";
    Status st = validateKind(kind, where);
    std::string name = where;
    if (kind.is_object() && kind.contains("kind") && kind["kind"].is_string()) name = kind["kind"].get<std::string>();
    if (st.isOk()) {
      const std::string page = kindPageName(name);
      auto [owner, fresh] = pageOwner.emplace(page, name);
      if (!fresh) {
        st = PEERLAB_INVALID_ARGUMENT("its page name " + page + " is taken by the kind \"" +
                                      printable(owner->second, 80) + "\"");
      } else {
        // NOTE: rendering reads the model defensively; an exception here would be a bug, and it costs this kind only.
        try {
          st = writeTextFile((dir / page).string(), renderKindPage(kind, generated, &charts));
          if (st.isOk()) st = writeTextFile((dir / fleetPageName(name)).string(), renderFleetPage(kind, generated));
        } catch (const std::exception& e) {
          st = PEERLAB_INTERNAL(std::string("cannot render: ") + e.what());
        }
        if (st.isOk()) pages[k] = page;
      }
    }
    if (!st.isOk()) {
      problems[k] = st.message();
      failed.push_back("kind \"" + printable(name, 80) + "\": " + st.message());
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
