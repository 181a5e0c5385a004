#include "harness/report/render/site_model.h"

#include <cmath>

namespace peerlab::report {

using nlohmann::json;

namespace {

template <typename T>
json orNull(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

json toJson(const SiteRunRef& r) {
  return {{"run_id", r.run_id}, {"time", r.time}, {"git_sha", r.git_sha}};
}

json toJson(const SiteSeries& s) {
  json j = report::toJson(s.key);
  j["id"] = s.id;
  j["group"] = s.group;
  j["host"] = s.host;
  json points = json::array();
  for (const SitePoint& p : s.points) {
    points.push_back({{"run_id", orNull(p.run_id)},
                      {"timestamp", p.timestamp},
                      {"git_sha", p.git_sha},
                      {"driver", p.driver},
                      {"value", orNull(p.value)},
                      {"p10", orNull(p.p10)},
                      {"p90", orNull(p.p90)}});
  }
  j["points"] = std::move(points);
  json changes = json::array();
  for (const SiteChangePoint& c : s.change_points) {
    changes.push_back({{"index", c.index},
                       {"before", orNull(c.before)},
                       {"after", orNull(c.after)},
                       {"change_pct", orNull(c.change_pct)},
                       {"p_value", orNull(c.p_value)},
                       {"p_floor", orNull(c.p_floor)}});
  }
  j["change_points"] = std::move(changes);
  return j;
}

json toJson(const SiteOutlier& f) {
  return {
      {"host", f.host},       {"label", f.label},         {"slurm_node", f.slurm_node}, {"newest_time", f.newest_time},
      {"age", f.age},         {"series_id", f.series_id}, {"value", orNull(f.value)},   {"median", orNull(f.median)},
      {"mad", orNull(f.mad)}, {"z", orNull(f.z)}};
}

json toJson(const SiteHeatmap& h) {
  json j = {{"title", h.title}, {"unit", h.unit}, {"gpus", h.gpus}};
  if (h.left_out > 0) j["left_out"] = h.left_out;
  json cells = json::array();
  for (const SiteHeatCell& c : h.cells)
    cells.push_back({{"src", c.src}, {"dst", c.dst}, {"expected", orNull(c.expected)}, {"value", orNull(c.value)}});
  j["cells"] = std::move(cells);
  return j;
}

template <typename T>
json arrayOf(const std::vector<T>& items) {
  json out = json::array();
  for (const T& item : items)
    out.push_back(toJson(item));
  return out;
}

// Lenient reads: a member of the wrong type reads as absent.
const json* member(const json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  const auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}

std::string text(const json& j, const char* key) {
  const json* v = member(j, key);
  return v && v->is_string() ? v->get<std::string>() : std::string();
}

std::optional<double> number(const json& j, const char* key) {
  const json* v = member(j, key);
  if (!v || !v->is_number()) return std::nullopt;
  const double d = v->get<double>();
  return std::isfinite(d) ? std::optional<double>(d) : std::nullopt;
}

/// A whole number within [lo, hi].
std::optional<long long> whole(const json& j, const char* key, double lo, double hi) {
  const auto v = number(j, key);
  if (!v || *v != std::floor(*v) || *v < lo || *v > hi) return std::nullopt;
  return static_cast<long long>(*v);
}

std::optional<int> smallInt(const json& j, const char* key) {
  const auto v = whole(j, key, -1e9, 1e9);
  return v ? std::optional<int>(static_cast<int>(*v)) : std::nullopt;
}

std::optional<std::int64_t> runId(const json& j, const char* key) {
  return whole(j, key, -9e15, 9e15);
}

/// The array at `key`, or an empty one.
const json& arrayAt(const json& j, const char* key) {
  static const json kEmpty = json::array();
  const json* v = member(j, key);
  return v && v->is_array() ? *v : kEmpty;
}

std::optional<CheckCounts> countsFrom(const json* j) {
  if (!j || !j->is_object() || j->empty()) return std::nullopt;
  auto n = [&](const char* key) { return static_cast<int>(whole(*j, key, 0, 1 << 30).value_or(0)); };
  CheckCounts c;
  c.total = n("total");
  c.passed = n("passed");
  c.failed = n("failed");
  c.warnings = n("warnings");
  c.unsupported = n("unsupported");
  c.skipped = n("skipped");
  return c;
}

SiteSeriesKey keyFrom(const json& j) {
  SiteSeriesKey k;
  k.suite = text(j, "suite");
  k.impl = text(j, "impl");
  k.name = text(j, "name");
  k.src = smallInt(j, "src");
  k.dst = smallInt(j, "dst");
  k.ranks = smallInt(j, "ranks").value_or(1);
  k.bytes = number(j, "bytes");
  k.metric = text(j, "metric");
  k.unit = text(j, "unit");
  return k;
}

StatusOr<SiteSeries> seriesFrom(const json& s, const std::string& where) {
  const json* points = member(s, "points");
  if (!points || !points->is_array()) return PEERLAB_INVALID_ARGUMENT(where + ": needs a \"points\" array");
  if (const json* c = member(s, "change_points"); c && !c->is_array()) {
    return PEERLAB_INVALID_ARGUMENT(where + ".change_points: must be an array");
  }
  SiteSeries out;
  out.key = keyFrom(s);
  out.id = text(s, "id");
  out.group = text(s, "group");
  out.host = text(s, "host");
  for (size_t p = 0; p < points->size(); ++p) {
    const json& pt = (*points)[p];
    const json* value = member(pt, "value");
    if (!pt.is_object() || (value && !value->is_number() && !value->is_null())) {
      return PEERLAB_INVALID_ARGUMENT(where + ".points[" + std::to_string(p) + "]: \"value\" must be a number");
    }
    out.points.push_back({runId(pt, "run_id"), text(pt, "timestamp"), text(pt, "git_sha"), text(pt, "driver"),
                          number(pt, "value"), number(pt, "p10"), number(pt, "p90")});
  }
  const json& changes = arrayAt(s, "change_points");
  for (size_t c = 0; c < changes.size(); ++c) {
    const json& cp = changes[c];
    const auto index = number(cp, "index");
    if (!index || *index < 0 || *index >= static_cast<double>(out.points.size())) {
      return PEERLAB_INVALID_ARGUMENT(where + ".change_points[" + std::to_string(c) +
                                      "]: \"index\" must point into \"points\"");
    }
    out.change_points.push_back({static_cast<int>(*index), number(cp, "before"), number(cp, "after"),
                                 number(cp, "change_pct"), number(cp, "p_value"), number(cp, "p_floor")});
  }
  return out;
}

SiteRegression regressionFrom(const json& j) {
  SiteRegression r;
  r.key = keyFrom(j);
  r.series_id = text(j, "series_id");
  r.machine = text(j, "machine");
  r.host = text(j, "host");
  r.node = text(j, "node");
  r.kind = text(j, "kind");
  r.run_id = runId(j, "run_id").value_or(0);
  r.git_sha = text(j, "git_sha");
  r.timestamp = text(j, "timestamp");
  r.previous_git_sha = text(j, "previous_git_sha");
  r.before = number(j, "before");
  r.after = number(j, "after");
  r.change_pct = number(j, "change_pct");
  r.p_value = number(j, "p_value");
  r.p_floor = number(j, "p_floor");
  r.worsening_pct = number(j, "worsening_pct").value_or(0);
  for (const json& c : arrayAt(j, "fingerprint_changes"))
    r.fingerprint_changes.push_back(c.is_string() ? c.get<std::string>() : c.dump());
  return r;
}

SiteOutlier outlierFrom(const json& j) {
  return {text(j, "host"),      text(j, "label"),   text(j, "slurm_node"), text(j, "newest_time"), text(j, "age"),
          text(j, "series_id"), number(j, "value"), number(j, "median"),   number(j, "mad"),       number(j, "z")};
}

SiteHeatmap heatmapFrom(const json& j) {
  SiteHeatmap h;
  h.title = text(j, "title");
  h.unit = text(j, "unit");
  const json* cells = member(j, "cells");
  // A heatmap that cannot be drawn keeps gpus 0: its page names it.
  if (cells && cells->is_array()) h.gpus = static_cast<int>(whole(j, "gpus", 1, kMaxHeatmapGpus).value_or(0));
  h.left_out = static_cast<int>(whole(j, "left_out", 0, 1e9).value_or(0));
  if (h.gpus == 0) return h;
  for (const json& c : *cells) {
    const auto src = whole(c, "src", 0, h.gpus - 1), dst = whole(c, "dst", 0, h.gpus - 1);
    if (!src || !dst) continue;
    h.cells.push_back({static_cast<int>(*src), static_cast<int>(*dst), number(c, "value"), number(c, "expected")});
  }
  return h;
}

SiteNode nodeFrom(const json& j) {
  SiteNode n;
  n.kind = text(j, "kind");
  n.node = text(j, "node");
  n.host = text(j, "host");
  n.slurm_node = text(j, "slurm_node");
  n.name = text(j, "name");
  n.state = text(j, "state");
  n.reason = text(j, "reason");
  n.state_recorded_at = text(j, "state_recorded_at");
  n.run_id = runId(j, "run_id");
  n.time = text(j, "time");
  n.verdict = text(j, "verdict");
  n.tool = text(j, "tool");
  n.git_sha = text(j, "git_sha");
  n.checks = countsFrom(member(j, "checks"));
  if (const json* d = member(j, "check_details")) n.check_details = checkDetailsFromJson(*d);
  n.outliers = static_cast<int>(whole(j, "outliers", 0, 1e9).value_or(0));
  if (const json* age = member(j, "age"); age && age->is_string()) n.age = age->get<std::string>();
  return n;
}

SiteInjectedRun injectedFrom(const json& j) {
  SiteInjectedRun r;
  r.run_id = runId(j, "run_id");
  r.kind = text(j, "kind");
  r.host = text(j, "host");
  r.node = text(j, "node");
  r.slurm_node = text(j, "slurm_node");
  r.name = text(j, "name");
  r.time = text(j, "time");
  r.verdict = text(j, "verdict");
  r.checks = countsFrom(member(j, "checks"));
  r.injected = text(j, "injected");
  return r;
}

void readExtras(const json& j, KindModel& k) {
  if (const json* v = member(j, "latest_verdict"); v && v->is_object()) {
    k.latest_verdict = SiteVerdict{{runId(*v, "run_id").value_or(0), text(*v, "time"), text(*v, "git_sha")},
                                   text(*v, "verdict"),
                                   countsFrom(member(*v, "checks"))};
  }
  if (const json* v = member(j, "heatmaps_run"); v && v->is_object())
    k.heatmaps_run = SiteRunRef{runId(*v, "run_id").value_or(0), text(*v, "time"), text(*v, "git_sha")};
  k.runs = static_cast<int>(whole(j, "runs", 0, 1e9).value_or(0));
  if (const auto testable = whole(j, "series_testable", 0, 1e9)) {
    k.testable =
        SiteTestable{static_cast<int>(whole(j, "min_runs_to_test", 0, 1e9).value_or(0)), static_cast<int>(*testable),
                     static_cast<int>(whole(j, "series_too_short", 0, 1e9).value_or(0))};
  }
}

// One kind's part of the model; `where` is "kinds[k]".
StatusOr<KindModel> kindFrom(const json& j, const std::string& where) {
  const json* name = member(j, "kind");
  if (!name || !name->is_string() || name->get<std::string>().empty()) {
    return PEERLAB_INVALID_ARGUMENT(where + ": needs a non-empty string \"kind\"");
  }
  for (const char* key : {"series", "regressions", "fleet", "heatmaps", "nodes"}) {
    if (const json* v = member(j, key); v && !v->is_array())
      return PEERLAB_INVALID_ARGUMENT(where + "." + key + ": must be an array");
  }
  KindModel k;
  k.kind = name->get<std::string>();
  const json& series = arrayAt(j, "series");
  for (size_t i = 0; i < series.size(); ++i) {
    PEERLAB_ASSIGN_OR_RETURN(SiteSeries s, seriesFrom(series[i], where + ".series[" + std::to_string(i) + "]"));
    k.series.push_back(std::move(s));
  }
  for (const json& r : arrayAt(j, "regressions"))
    k.regressions.push_back(regressionFrom(r));
  for (const json& f : arrayAt(j, "fleet"))
    k.fleet.push_back(outlierFrom(f));
  for (const json& n : arrayAt(j, "nodes"))
    k.nodes.push_back(nodeFrom(n));
  for (const json& h : arrayAt(j, "heatmaps"))
    k.heatmaps.push_back(heatmapFrom(h));
  for (const json& r : arrayAt(j, "injected_runs"))
    k.injected_runs.push_back(injectedFrom(r));
  readExtras(j, k);
  return k;
}

}  // namespace

Status checkSiteKinds(size_t kinds) {
  if (kinds <= kMaxSiteKinds) return Status();
  return PEERLAB_INVALID_ARGUMENT("the history holds " + std::to_string(kinds) +
                                  " machine kinds; a site shows at most " + std::to_string(kMaxSiteKinds) +
                                  " (nothing written)");
}

json toJson(const SiteSeriesKey& k) {
  return {{"suite", k.suite},         {"impl", k.impl},       {"name", k.name},
          {"src", orNull(k.src)},     {"dst", orNull(k.dst)}, {"ranks", k.ranks},
          {"bytes", orNull(k.bytes)}, {"metric", k.metric},   {"unit", k.unit}};
}

json toJson(const std::optional<CheckCounts>& c) {
  return c ? report::toJson(*c) : json::object();
}

json toJson(const std::optional<SiteCheckDetails>& d) {
  if (!d) return json::object();
  json categories = json::object();
  for (const auto& [name, counts] : d->categories)
    categories[name] = report::toJson(counts);
  json failures = json::array();
  for (const SiteFailedCheck& f : d->failures)
    failures.push_back({{"category", f.category}, {"name", f.name}, {"action", f.action}});
  return {{"categories", std::move(categories)}, {"failures", std::move(failures)}};
}

json toJson(const SiteRegression& r) {
  json j = report::toJson(r.key);
  j["series_id"] = r.series_id;
  j["machine"] = r.machine;
  j["host"] = r.host;
  j["node"] = r.node;
  j["kind"] = r.kind;
  j["run_id"] = r.run_id;
  j["git_sha"] = r.git_sha;
  j["timestamp"] = r.timestamp;
  j["previous_git_sha"] = r.previous_git_sha;
  j["before"] = orNull(r.before);
  j["after"] = orNull(r.after);
  j["change_pct"] = orNull(r.change_pct);
  j["worsening_pct"] = r.worsening_pct;
  j["p_value"] = orNull(r.p_value);
  j["p_floor"] = orNull(r.p_floor);
  j["fingerprint_changes"] = r.fingerprint_changes;
  j["noise_rule"] = report::toJson(r.noise_rule);
  return j;
}

json toJson(const SiteNode& n) {
  json j = {{"kind", n.kind},
            {"node", n.node},
            {"host", n.host},
            {"name", n.name},
            {"outliers", n.outliers},
            {"slurm_node", n.slurm_node},
            {"tool", n.tool},
            {"git_sha", n.git_sha},
            {"state", n.state},
            {"reason", n.reason},
            {"state_recorded_at", n.state_recorded_at},
            {"run_id", orNull(n.run_id)},
            {"time", n.time},
            {"verdict", n.verdict},
            {"checks", toJson(n.checks)},
            {"check_details", toJson(n.check_details)}};
  if (n.age) j["age"] = *n.age;
  return j;
}

json toJson(const SiteInjectedRun& r) {
  return {{"run_id", orNull(r.run_id)}, {"kind", r.kind},        {"host", r.host}, {"node", r.node},
          {"slurm_node", r.slurm_node}, {"name", r.name},        {"time", r.time}, {"verdict", r.verdict},
          {"checks", toJson(r.checks)}, {"injected", r.injected}};
}

json toJson(const KindModel& k) {
  json j = {{"kind", k.kind},
            {"series", arrayOf(k.series)},
            {"regressions", arrayOf(k.regressions)},
            {"fleet", arrayOf(k.fleet)},
            {"nodes", arrayOf(k.nodes)},
            {"heatmaps", arrayOf(k.heatmaps)}};
  if (k.heatmaps_run) j["heatmaps_run"] = toJson(*k.heatmaps_run);
  if (!k.injected_runs.empty()) j["injected_runs"] = arrayOf(k.injected_runs);
  if (k.latest_verdict) {
    json v = toJson(k.latest_verdict->run);
    v["verdict"] = k.latest_verdict->verdict;
    v["checks"] = toJson(k.latest_verdict->checks);
    j["latest_verdict"] = std::move(v);
  }
  if (k.runs > 0) j["runs"] = k.runs;
  if (k.testable) {
    j["min_runs_to_test"] = k.testable->min_runs_to_test;
    j["series_testable"] = k.testable->series_testable;
    j["series_too_short"] = k.testable->series_too_short;
  }
  return j;
}

json toJson(const SiteModel& m) {
  return {{"generated", m.generated}, {"kinds", arrayOf(m.kinds)}, {"unrun_nodes", arrayOf(m.unrun_nodes)}};
}

std::optional<SiteCheckDetails> checkDetailsFromJson(const json& j) {
  if (!j.is_object() || j.empty()) return std::nullopt;
  SiteCheckDetails d;
  if (const json* c = member(j, "categories"); c && c->is_object()) {
    for (const auto& [name, counts] : c->items())
      d.categories[name] = countsFrom(&counts).value_or(CheckCounts{});
  }
  for (const json& f : arrayAt(j, "failures"))
    d.failures.push_back({text(f, "category"), text(f, "name"), text(f, "action")});
  return d;
}

StatusOr<SiteModel> siteModelFromJson(const json& j) {
  if (!j.is_object()) return PEERLAB_INVALID_ARGUMENT("history site model: must be an object");
  const json* kinds = member(j, "kinds");
  if (!kinds || !kinds->is_array()) return PEERLAB_INVALID_ARGUMENT("history site model: needs a \"kinds\" array");
  if (const json* unrun = member(j, "unrun_nodes"); unrun && !unrun->is_array()) {
    return PEERLAB_INVALID_ARGUMENT("history site model.unrun_nodes: must be an array");
  }
  PEERLAB_RETURN_IF_ERROR(checkSiteKinds(kinds->size()));
  SiteModel m;
  m.generated = text(j, "generated");
  for (size_t k = 0; k < kinds->size(); ++k) {
    const json& kind = (*kinds)[k];
    const std::string where = "kinds[" + std::to_string(k) + "]";
    StatusOr<KindModel> read = kindFrom(kind, where);
    if (read.isOk()) {
      m.kinds.push_back(std::move(*read));
      continue;
    }
    // Kept in its place, named as the JSON names it: the site lists it as not rendered.
    KindModel bad;
    const json* name = member(kind, "kind");
    bad.kind = name && name->is_string() ? name->get<std::string>() : where;
    bad.unreadable = read.status().message();
    m.kinds.push_back(std::move(bad));
  }
  for (const json& n : arrayAt(j, "unrun_nodes"))
    m.unrun_nodes.push_back(nodeFrom(n));
  return m;
}

}  // namespace peerlab::report
