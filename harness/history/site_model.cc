#include "harness/history/site_model.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <map>
#include <set>
#include <tuple>

#include "harness/report/evaluate.h"
#include "harness/report/render/format.h"
#include "harness/report/report.h"

namespace peerlab::history {
namespace {

std::string groupOf(const Series& s) {
  return s.suite + " " + s.name + " " + s.impl + " (" + s.metric.unit + ")";
}

}  // namespace

std::vector<report::SiteHeatmap> runHeatmaps(const std::vector<StoredResult>& results,
                                             const nlohmann::json& expectations, int gpus) {
  using Key = std::tuple<std::string, std::string, std::string, std::string>;  // suite, name, impl, metric
  // The plan's expectations as stored, read as a plan's are; matched by the one matcher (report::expectedFigure).
  const std::vector<report::Expectation> expected = report::expectationsFromJson(expectations);
  auto expectedFor = [&](const report::Result& r) { return report::expectedFigure(expected, r); };
  std::map<Key, std::vector<const report::Result*>> byKey;
  std::map<Key, int> leftOut;
  const int limit = gpus > 0 ? std::min(gpus, report::kMaxHeatmapGpus) : report::kMaxHeatmapGpus;
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
  std::vector<report::SiteHeatmap> out;
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
    report::SiteHeatmap hm;
    hm.unit = bandwidth ? "GB/s" : "us";
    hm.title = suite + " " + name + " " + impl + " " + report::bytesLabel(size) +
               (anyExpected ? " (% of expected)" : " (" + hm.unit + ")");
    hm.gpus = *used.rbegin() + 1;  // GPU count: ordinals 0..gpus-1
    if (auto lo = leftOut.find(key); lo != leftOut.end()) hm.left_out = lo->second;
    for (auto& [pair, r] : cells) {
      report::SiteHeatCell c{pair.first, pair.second, std::nullopt, std::nullopt};
      // Bandwidth cells carry GB/s and the expected GB/s (the renderer shows the percentage); the figure is the one
      // the expectation names (algbw or busbw), else the series metric's.
      const auto e = bandwidth ? expectedFor(*r) : std::nullopt;
      c.value = report::metricValue(*r, {metric, hm.unit, bandwidth});
      if (e) {
        c.value = e->metric == "busbw_gbps" ? r->busbw_gbps : r->algbw_gbps;
        c.expected = e->gbps;
      }
      hm.cells.push_back(c);
    }
    out.push_back(std::move(hm));
  }
  return out;
}

namespace {

/// The kinds of a site by name, each made on first use.
class KindTable {
 public:
  report::KindModel& of(const std::string& machine) {
    auto [it, fresh] = kinds_.try_emplace(machine);
    // Runs that name neither a kind nor a host still get a page.
    if (fresh) it->second.kind = machine.empty() ? std::string("(no kind or host)") : machine;
    return it->second;
  }
  std::vector<report::KindModel> take() {
    std::vector<report::KindModel> out;
    for (auto& [machine, k] : kinds_)
      out.push_back(std::move(k));
    return out;
  }

 private:
  std::map<std::string, report::KindModel> kinds_;
};

// A site of more kinds than it shows is refused before any series is read.
Status refuseTooManyKinds(HistoryStore& store) {
  PEERLAB_ASSIGN_OR_RETURN(std::vector<RunInfo> runs, store.runs());
  std::set<std::string> machines;
  for (const RunInfo& r : runs)
    machines.insert(r.machine());
  return report::checkSiteKinds(machines.size());
}

// Injected runs (listed, counted nowhere), the latest run of each kind with the verdict the checks engine gave it at
// ingest (runs are oldest first), and how many runs count.
void addRuns(const History& h, KindTable& kinds) {
  for (const RunInfo& r : h.injected)
    kinds.of(r.machine()).injected_runs.push_back(siteInjectedRun(r));
  for (const RunInfo& r : h.runs) {
    report::KindModel& k = kinds.of(r.machine());
    k.latest_verdict = report::SiteVerdict{{r.id, r.time, r.git_sha}, r.verdict, r.checks};
    // Every run that counts, whether or not it has a figure to draw (an EMPTY run has none).
    ++k.runs;
  }
}

report::SiteSeries siteSeries(const History& h, const Series& s, std::string group) {
  report::SiteSeries out;
  out.key = seriesKey(s);
  out.id = s.id;
  out.group = std::move(group);
  out.host = s.points.empty() ? "" : h.run(s.points.back().run_id).host;
  for (const SeriesPoint& p : s.points) {
    const RunInfo& run = h.run(p.run_id);
    out.points.push_back({p.run_id, run.time, run.git_sha, run.driver, p.value, p.p10, p.p90});
  }
  for (const ChangePoint& cp : s.change_points)
    out.change_points.push_back({cp.index, cp.before, cp.after, cp.change_pct, cp.p_value, cp.p_floor});
  return out;
}

// Series in plot groups of at most kMaxSeriesPerPlot, ordered by size, pair and ranks within a group.
void addSeries(const History& h, KindTable& kinds) {
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
      std::string group =
          parts > 1 ? key.second + " " + std::to_string(i / kMaxSeriesPerPlot + 1) + "/" + std::to_string(parts)
                    : key.second;
      kinds.of(members[i]->machine).series.push_back(siteSeries(h, *members[i], std::move(group)));
    }
  }
}

// Whether a kind's series are long enough for the change-point test: min_segment runs on each side of a change.
void addTestable(const History& h, const EDivisiveOptions& detect, KindTable& kinds) {
  const int minRuns = 2 * std::max(1, detect.min_segment);
  std::map<std::string, report::SiteTestable> testable;
  for (const Series& s : h.series) {
    report::SiteTestable& t = testable[s.machine];
    t.min_runs_to_test = minRuns;
    (static_cast<int>(s.points.size()) >= minRuns ? t.series_testable : t.series_too_short) += 1;
  }
  for (const auto& [machine, t] : testable)
    kinds.of(machine).testable = t;
}

// The fleet page: every node with its latest verdict and scheduler state, out of service first; nodes without a
// counted run go to `unrun`. `age` says how old a run is.
template <typename Age>
Status addNodes(HistoryStore& store, const History& h, const std::vector<FleetOutlier>& fleet, const Age& age,
                KindTable& kinds, std::vector<report::SiteNode>& unrun) {
  PEERLAB_ASSIGN_OR_RETURN(std::vector<NodeState> states, store.nodeStates());
  for (const FleetNode& n : fleetNodes(h, states, fleet)) {
    report::SiteNode node = siteNode(n);
    node.age = n.latest ? age(n.latest->time) : "";
    (n.machine.empty() ? unrun : kinds.of(n.machine).nodes).push_back(std::move(node));
  }
  return Status();
}

// Heatmaps from the latest run of each kind that measured GPU pairs (a later run of one suite alone, MoE rows say,
// has none to draw); newest first, so most kinds read one run.
Status addHeatmaps(HistoryStore& store, const History& h, KindTable& kinds) {
  std::set<std::string> drawn;
  for (auto r = h.runs.rbegin(); r != h.runs.rend(); ++r) {
    if (drawn.count(r->machine())) continue;
    std::vector<StoredResult> rows;
    PEERLAB_RETURN_IF_ERROR(store.forEachResultOfRun(r->id, [&](const StoredResult& s) { rows.push_back(s); }));
    std::vector<report::SiteHeatmap> maps = runHeatmaps(rows, r->expectations, static_cast<int>(r->gpus.size()));
    if (maps.empty()) continue;
    report::KindModel& k = kinds.of(r->machine());
    k.heatmaps = std::move(maps);
    k.heatmaps_run = report::SiteRunRef{r->id, r->time, r->git_sha};
    drawn.insert(r->machine());
  }
  return Status();
}

}  // namespace

StatusOr<report::SiteModel> buildSiteModel(HistoryStore& store, const SiteOptions& options) {
  PEERLAB_RETURN_IF_ERROR(refuseTooManyKinds(store));
  PEERLAB_ASSIGN_OR_RETURN(History h, loadHistory(store));
  report::SiteModel model;
  model.generated = options.generated.empty() ? report::utcTimestamp() : options.generated;
  // How old a node's newest run is, beside its name wherever nodes are listed.
  auto age = [&](const std::string& time) {
    const auto s = ageSeconds(time, model.generated);
    return s ? ageText(*s) : std::string();
  };
  detectChangePoints(h, options.detect);
  const std::vector<Regression> regressions = findRegressions(h, options.threshold_pct);
  const std::vector<FleetOutlier> fleet = fleetOutliers(h, options.fleet);

  KindTable kinds;
  addRuns(h, kinds);
  addSeries(h, kinds);
  addTestable(h, options.detect, kinds);
  for (const Regression& r : regressions)
    kinds.of(r.series->machine).regressions.push_back(siteRegression(r));
  for (const FleetOutlier& f : fleet) {
    kinds.of(f.machine).fleet.push_back({f.host, f.label, f.slurm_node, f.newest_time, age(f.newest_time), f.series->id,
                                         f.value, f.median, f.mad, f.z});
  }
  PEERLAB_RETURN_IF_ERROR(addNodes(store, h, fleet, age, kinds, model.unrun_nodes));
  PEERLAB_RETURN_IF_ERROR(addHeatmaps(store, h, kinds));
  model.kinds = kinds.take();
  return model;
}

}  // namespace peerlab::history
