#include "harness/history/site_model.h"

#include "harness/report/render/site.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <map>
#include <set>
#include <tuple>

#include "harness/report/evaluate.h"
#include "harness/report/report.h"

namespace peerlab::history {
namespace {

std::string bytesLabel(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  int u = 0;
  while (b >= 1024 && u < 3) {
    b /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g %s", b, units[u]);
  return buf;
}

std::string groupOf(const Series& s) {
  return s.suite + " " + s.name + " " + s.impl + " (" + s.metric.unit + ")";
}

}  // namespace

nlohmann::json runHeatmaps(const std::vector<StoredResult>& results, const nlohmann::json& expectations, int gpus) {
  using Key = std::tuple<std::string, std::string, std::string, std::string>;  // suite, name, impl, metric
  // The plan's expectations as stored, read as a plan's are; matched by the one matcher (report::expectedFigure).
  const std::vector<report::Expectation> expected = report::expectationsFromJson(expectations);
  auto expectedFor = [&](const report::Result& r) { return report::expectedFigure(expected, r); };
  std::map<Key, std::vector<const report::Result*>> byKey;
  std::map<Key, int> leftOut;
  const int limit = gpus > 0 ? std::min(gpus, kMaxHeatmapGpus) : kMaxHeatmapGpus;
  for (const StoredResult& s : results) {
    const report::Result& r = s.result;
    auto m = report::seriesMetric(r);
    if (!m || r.status != "ok") continue;
    // A cell outside the run's GPUs (or a row the store found invalid) is counted, not drawn.
    if (!s.valid || (r.src && r.dst && (*r.src < 0 || *r.dst < 0 || *r.src >= limit || *r.dst >= limit))) {
      ++leftOut[{r.suite, r.name, r.impl, m->field}];
      continue;
    }
    if (!r.src || !r.dst || !r.bytes || !report::metricValue(r, *m)) continue;
    byKey[{r.suite, r.name, r.impl, m->field}].push_back(&r);
  }
  nlohmann::json out = nlohmann::json::array();
  for (auto& [key, rows] : byKey) {
    const auto& [suite, name, impl, metric] = key;
    const bool bandwidth = metric != "time_us";
    // Bandwidth at the largest size, latency at the smallest.
    double size = *rows.front()->bytes;
    for (const report::Result* r : rows)
      size = bandwidth ? std::max(size, *r->bytes) : std::min(size, *r->bytes);
    std::map<std::pair<int, int>, const report::Result*> cells;
    for (const report::Result* r : rows)
      if (*r->bytes == size) cells.emplace(std::make_pair(*r->src, *r->dst), r);
    if (cells.size() < 2) continue;
    std::set<int> used;
    bool anyExpected = false;
    for (auto& [pair, r] : cells) {
      used.insert(pair.first);
      used.insert(pair.second);
      if (bandwidth && expectedFor(*r)) anyExpected = true;
    }
    nlohmann::json hm;
    const std::string unit = bandwidth ? "GB/s" : "us";
    hm["title"] = suite + " " + name + " " + impl + " " + bytesLabel(size) +
                  (anyExpected ? " (% of expected)" : " (" + unit + ")");
    hm["unit"] = unit;
    hm["gpus"] = *used.rbegin() + 1;  // GPU count: ordinals 0..gpus-1
    if (auto lo = leftOut.find(key); lo != leftOut.end()) hm["left_out"] = lo->second;
    nlohmann::json jc = nlohmann::json::array();
    for (auto& [pair, r] : cells) {
      nlohmann::json c = {{"src", pair.first}, {"dst", pair.second}, {"expected", nullptr}};
      // Bandwidth cells carry GB/s and the expected GB/s (the renderer shows the percentage); the figure is the one
      // the expectation names (algbw or busbw), else the series metric's.
      const auto e = bandwidth ? expectedFor(*r) : std::nullopt;
      std::optional<double> v = report::metricValue(*r, {metric, unit, bandwidth});
      if (e) {
        v = e->metric == "busbw_gbps" ? r->busbw_gbps : r->algbw_gbps;
        c["expected"] = e->gbps;
      }
      c["value"] = v ? nlohmann::json(*v) : nlohmann::json(nullptr);
      jc.push_back(std::move(c));
    }
    hm["cells"] = std::move(jc);
    out.push_back(std::move(hm));
  }
  return out;
}

StatusOr<nlohmann::json> buildSiteModel(HistoryStore& store, const SiteOptions& options) {
  {
    // A site of more kinds than it shows is refused before any series is read.
    PEERLAB_ASSIGN_OR_RETURN(std::vector<RunInfo> runs, store.runs());
    std::set<std::string> machines;
    for (const RunInfo& r : runs)
      machines.insert(r.machine());
    if (machines.size() > report::kMaxSiteKinds) {
      return PEERLAB_INVALID_ARGUMENT("the history holds " + std::to_string(machines.size()) +
                                      " machine kinds; a site shows at most " + std::to_string(report::kMaxSiteKinds) +
                                      " (nothing written)");
    }
  }
  PEERLAB_ASSIGN_OR_RETURN(History h, loadHistory(store));
  const std::string generated = options.generated.empty() ? report::utcTimestamp() : options.generated;
  // How old a node's newest run is, beside its name wherever nodes are listed.
  auto age = [&](const std::string& time) -> nlohmann::json {
    const auto s = ageSeconds(time, generated);
    return s ? nlohmann::json(ageText(*s)) : nlohmann::json("");
  };
  detectChangePoints(h, options.detect);
  const std::vector<Regression> regressions = findRegressions(h, options.threshold_pct);
  const std::vector<FleetOutlier> fleet = fleetOutliers(h, options.fleet);

  std::map<std::string, nlohmann::json> kinds;
  auto kindOf = [&](const std::string& machine) -> nlohmann::json& {
    nlohmann::json& k = kinds[machine];
    if (k.is_null()) {
      // Runs that name neither a kind nor a host still get a page.
      k = {{"kind", machine.empty() ? std::string("(no kind or host)") : machine},
           {"series", nlohmann::json::array()},
           {"regressions", nlohmann::json::array()},
           {"fleet", nlohmann::json::array()},
           {"nodes", nlohmann::json::array()},
           {"heatmaps", nlohmann::json::array()}};
    }
    return k;
  };

  // Runs with stand-ins or injected faults: listed on their kind's pages, counted nowhere.
  for (const RunInfo& r : h.injected) {
    nlohmann::json& k = kindOf(r.machine());
    if (!k.contains("injected_runs")) k["injected_runs"] = nlohmann::json::array();
    k["injected_runs"].push_back(injectedRunJson(r));
  }
  // The latest run of each kind and the verdict the checks engine gave it at ingest (runs are oldest first).
  for (const RunInfo& r : h.runs) {
    nlohmann::json& k = kindOf(r.machine());
    k["latest_verdict"] = {
        {"run_id", r.id}, {"time", r.time}, {"git_sha", r.git_sha}, {"verdict", r.verdict}, {"checks", r.checksJson()}};
    // Every run that counts, whether or not it has a figure to draw (an EMPTY run has none).
    k["runs"] = (k.contains("runs") ? k["runs"].get<int>() : 0) + 1;
  }

  // Series in plot groups of at most kMaxSeriesPerPlot, ordered by size, pair and ranks within a group.
  std::map<std::pair<std::string, std::string>, std::vector<const Series*>> groups;
  for (const Series& s : h.series)
    groups[{s.machine, groupOf(s)}].push_back(&s);
  for (auto& [key, members] : groups) {
    std::stable_sort(members.begin(), members.end(), [](const Series* a, const Series* b) {
      return std::make_tuple(a->bytes.value_or(0), a->src.value_or(-1), a->dst.value_or(-1), a->ranks) <
             std::make_tuple(b->bytes.value_or(0), b->src.value_or(-1), b->dst.value_or(-1), b->ranks);
    });
    const size_t parts = (members.size() + kMaxSeriesPerPlot - 1) / kMaxSeriesPerPlot;
    for (size_t i = 0; i < members.size(); ++i) {
      const Series& s = *members[i];
      nlohmann::json j = seriesFields(s);
      j["id"] = s.id;
      j["group"] = parts > 1
                       ? key.second + " " + std::to_string(i / kMaxSeriesPerPlot + 1) + "/" + std::to_string(parts)
                       : key.second;
      j["host"] = s.points.empty() ? "" : h.run(s.points.back().run_id).host;
      nlohmann::json pts = nlohmann::json::array();
      for (const SeriesPoint& p : s.points) {
        const RunInfo& run = h.run(p.run_id);
        pts.push_back({{"run_id", p.run_id},
                       {"timestamp", run.time},
                       {"git_sha", run.git_sha},
                       {"driver", run.driver},
                       {"value", p.value},
                       {"p10", p.p10 ? nlohmann::json(*p.p10) : nlohmann::json(nullptr)},
                       {"p90", p.p90 ? nlohmann::json(*p.p90) : nlohmann::json(nullptr)}});
      }
      j["points"] = std::move(pts);
      nlohmann::json cps = nlohmann::json::array();
      for (const ChangePoint& cp : s.change_points) {
        cps.push_back({{"index", cp.index},
                       {"before", cp.before},
                       {"after", cp.after},
                       {"change_pct", cp.change_pct},
                       {"p_value", cp.p_value},
                       {"p_floor", cp.p_floor}});
      }
      j["change_points"] = std::move(cps);
      kindOf(s.machine)["series"].push_back(std::move(j));
    }
  }
  // Whether a kind's series are long enough for the change-point test: min_segment runs on each side of a change.
  const int minRuns = 2 * std::max(1, options.detect.min_segment);
  std::map<std::string, std::pair<int, int>> testable;  // machine -> (series long enough, series too short)
  for (const Series& s : h.series) {
    auto& [enough, tooShort] = testable[s.machine];
    (static_cast<int>(s.points.size()) >= minRuns ? enough : tooShort) += 1;
  }
  for (const auto& [machine, counts] : testable) {
    nlohmann::json& k = kindOf(machine);
    k["min_runs_to_test"] = minRuns;
    k["series_testable"] = counts.first;
    k["series_too_short"] = counts.second;
  }
  for (const Regression& r : regressions)
    kindOf(r.series->machine)["regressions"].push_back(toJson(r));
  for (const FleetOutlier& f : fleet) {
    kindOf(f.machine)["fleet"].push_back({{"host", f.host},
                                          {"label", f.label},
                                          {"slurm_node", f.slurm_node},
                                          {"newest_time", f.newest_time},
                                          {"age", age(f.newest_time)},
                                          {"series_id", f.series->id},
                                          {"value", f.value},
                                          {"median", f.median},
                                          {"mad", f.mad},
                                          {"z", f.z}});
  }
  // The fleet page: every node with its latest verdict and scheduler state, out of service first.
  PEERLAB_ASSIGN_OR_RETURN(std::vector<NodeState> states, store.nodeStates());
  nlohmann::json unrun = nlohmann::json::array();
  for (const FleetNode& n : fleetNodes(h, states, fleet)) {
    nlohmann::json j = toJson(n);
    j["age"] = n.latest ? age(n.latest->time) : nlohmann::json("");
    if (n.machine.empty()) {
      unrun.push_back(std::move(j));
    } else {
      kindOf(n.machine)["nodes"].push_back(std::move(j));
    }
  }
  // Heatmaps from the latest run of each kind that measured GPU pairs (a later run of one suite alone, MoE rows say,
  // has none to draw); newest first, so most kinds read one run.
  std::set<std::string> drawn;
  for (auto r = h.runs.rbegin(); r != h.runs.rend(); ++r) {
    if (drawn.count(r->machine())) continue;
    std::vector<StoredResult> rows;
    PEERLAB_RETURN_IF_ERROR(store.forEachResultOfRun(r->id, [&](const StoredResult& s) { rows.push_back(s); }));
    nlohmann::json maps = runHeatmaps(rows, r->expectations, static_cast<int>(r->gpus.size()));
    if (maps.empty()) continue;
    kindOf(r->machine())["heatmaps"] = std::move(maps);
    kindOf(r->machine())["heatmaps_run"] = {{"run_id", r->id}, {"time", r->time}, {"git_sha", r->git_sha}};
    drawn.insert(r->machine());
  }
  nlohmann::json model = {{"generated", generated}, {"kinds", nlohmann::json::array()}, {"unrun_nodes", unrun}};
  for (auto& [machine, k] : kinds)
    model["kinds"].push_back(std::move(k));
  return model;
}

}  // namespace peerlab::history
