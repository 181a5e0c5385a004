#include "harness/history/analysis.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <set>
#include <thread>
#include <tuple>
#include <unordered_map>

namespace peerlab::history {
namespace {

std::string numberText(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.15g", v);
  return buf;
}

std::string seriesId(const std::string& machine, const report::Result& r) {
  std::string id = machine + "/" + r.suite + "/" + r.impl + "/" + r.name + "/";
  if (r.src || r.dst) {
    id += (r.src ? std::to_string(*r.src) : std::string("-")) + "->" +
          (r.dst ? std::to_string(*r.dst) : std::string("-"));
    id += "/";
  }
  id += "r" + std::to_string(r.ranks) + "/" + (r.bytes ? numberText(*r.bytes) : std::string("-"));
  return id;
}

}  // namespace

bool machineMatches(const RunInfo& run, const std::string& kind) {
  return run.machine() == kind || run.host == kind || run.nodeOrHost() == kind ||
         (!run.kind.empty() && report::sameHardware(run.kind, kind));
}

StatusOr<History> loadHistory(HistoryStore& store, const HistoryOptions& options) {
  History h;
  PEERLAB_ASSIGN_OR_RETURN(std::vector<RunInfo> all, store.runs());
  for (RunInfo& r : all) {
    if (!options.kind.empty() && !machineMatches(r, options.kind)) continue;
    if (!r.injected.empty()) {
      h.injected.push_back(std::move(r));
      continue;
    }
    h.run_index[r.id] = h.runs.size();
    h.runs.push_back(std::move(r));
  }
  std::unordered_map<std::string, size_t> byId;
  PEERLAB_RETURN_IF_ERROR(store.forEachResult([&](const StoredResult& s) {
    auto run = h.run_index.find(s.run_id);
    if (run == h.run_index.end()) return;
    if (!s.valid) return;
    const report::Result& r = s.result;
    std::optional<report::SeriesMetric> metric = report::seriesMetric(r);
    if (!metric || r.status != "ok") return;
    std::optional<double> value = report::metricValue(r, *metric);
    if (!value || !std::isfinite(*value) || *value <= 0) return;
    const RunInfo& info = h.runs[run->second];
    // Per host: the node within its kind, so that one series never holds two kinds of hardware.
    const std::string machine = options.by_host ? info.machine() + "@" + info.nodeOrHost() : info.machine();
    const std::string id = seriesId(machine, r);
    auto [it, fresh] = byId.emplace(id, h.series.size());
    if (fresh) {
      Series ns;
      ns.id = id;
      ns.machine = machine;
      ns.suite = r.suite;
      ns.impl = r.impl;
      ns.name = r.name;
      ns.src = r.src;
      ns.dst = r.dst;
      ns.ranks = r.ranks;
      ns.bytes = r.bytes;
      ns.metric = *metric;
      h.series.push_back(std::move(ns));
    }
    Series& series = h.series[it->second];
    // A key repeated within one run counts once (its first row).
    if (!series.points.empty() && series.points.back().run_id == s.run_id) return;
    if (series.metric.field != metric->field) return;  // a size that changed metric is not the same series
    SeriesPoint p;
    p.run_id = s.run_id;
    p.value = *value;
    if (metric->field == "time_us") {
      p.p10 = s.p10_us;
      p.p90 = s.p90_us;
    } else if (r.time_us && *r.time_us > 0) {
      if (s.p90_us && *s.p90_us > 0) p.p10 = *value * *r.time_us / *s.p90_us;
      if (s.p10_us && *s.p10_us > 0) p.p90 = *value * *r.time_us / *s.p10_us;
    }
    series.points.push_back(p);
  }));
  for (Series& s : h.series) {
    std::stable_sort(s.points.begin(), s.points.end(), [&](const SeriesPoint& a, const SeriesPoint& b) {
      return h.run_index[a.run_id] < h.run_index[b.run_id];
    });
  }
  return h;
}

void detectChangePoints(History& history, const EDivisiveOptions& options, int threads) {
  if (threads <= 0) threads = std::max(1u, std::thread::hardware_concurrency());
  std::atomic<size_t> next{0};
  auto work = [&]() {
    std::vector<double> values;
    for (size_t i; (i = next.fetch_add(1)) < history.series.size();) {
      Series& s = history.series[i];
      values.clear();
      for (const SeriesPoint& p : s.points)
        values.push_back(p.value);
      s.change_points = history::detectChangePoints(values, options);
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t)
    pool.emplace_back(work);
  work();
  for (auto& t : pool)
    t.join();
}

double worseningPct(const report::SeriesMetric& metric, double before, double after) {
  if (before == 0) return 0;
  const double change = (after - before) / before * 100.0;
  return metric.higher_is_better ? -change : change;
}

std::vector<std::string> fingerprintChanges(const RunInfo& before, const RunInfo& after) {
  std::vector<std::string> out;
  auto diff = [&](const char* what, const std::string& a, const std::string& b) {
    if (a != b) out.push_back(std::string(what) + " " + (a.empty() ? "?" : a) + " -> " + (b.empty() ? "?" : b));
  };
  diff("host", before.host, after.host);
  diff("node", before.node, after.node);
  diff("driver", before.driver, after.driver);
  diff("CUDA", before.cuda, after.cuda);
  diff("NCCL", before.nccl, after.nccl);
  auto gpus = [](const RunInfo& r) {
    std::map<std::string, int> n;
    for (const auto& g : r.gpus)
      ++n[g];
    std::string s;
    for (auto& [name, count] : n)
      s += (s.empty() ? "" : ", ") + std::to_string(count) + "x " + name;
    return s.empty() ? std::string("none") : s;
  };
  diff("GPUs", gpus(before), gpus(after));
  return out;
}

std::vector<Regression> findRegressions(const History& history, double threshold_pct) {
  std::vector<Regression> out;
  for (const Series& s : history.series) {
    if (s.change_points.empty()) continue;
    const ChangePoint& cp = s.change_points.back();
    // The segments either side of the latest change point, judged by the one noise rule with E-Divisive's test.
    const int start = s.change_points.size() > 1 ? s.change_points[s.change_points.size() - 2].index : 0;
    report::Side before, after;
    before.value = cp.before;
    before.runs = cp.index - start;
    after.value = cp.after;
    after.runs = static_cast<int>(s.points.size()) - cp.index;
    report::NoiseRule rule;
    rule.threshold_pct = threshold_pct;
    rule.jitter_us = 0;
    report::RunsTest test;
    test.name = "e-divisive";
    test.significant = true;  // detectChangePoints kept only change points that passed it
    test.p_value = cp.p_value;
    test.p_floor = cp.p_floor;
    const report::ChangeDecision d = report::decideChange(s.metric.higher_is_better, before, after, rule, &test);
    if (d.verdict != report::Verdict::kRegressed) continue;
    Regression r;
    r.series = &s;
    r.change = cp;
    r.worsening_pct = d.worsening_pct;
    r.decision = d;
    r.run = &history.run(s.points[cp.index].run_id);
    r.previous = &history.run(s.points[cp.index - 1].run_id);
    r.fingerprint_changes = fingerprintChanges(*r.previous, *r.run);
    out.push_back(std::move(r));
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const Regression& a, const Regression& b) { return a.worsening_pct > b.worsening_pct; });
  return out;
}

report::SiteSeriesKey seriesKey(const Series& s) {
  return {s.suite, s.impl, s.name, s.src, s.dst, s.ranks, s.bytes, s.metric.field, s.metric.unit};
}

nlohmann::json seriesFields(const Series& s) {
  return report::toJson(seriesKey(s));
}

report::SiteRegression siteRegression(const Regression& r) {
  report::SiteRegression out;
  out.key = seriesKey(*r.series);
  out.series_id = r.series->id;
  out.machine = r.series->machine;
  out.host = r.run->host;
  out.node = r.run->node;
  out.kind = r.run->kind;
  out.run_id = r.run->id;
  out.git_sha = r.run->git_sha;
  out.timestamp = r.run->time;
  out.previous_git_sha = r.previous->git_sha;
  out.before = r.change.before;
  out.after = r.change.after;
  out.change_pct = r.change.change_pct;
  out.worsening_pct = r.worsening_pct;
  out.p_value = r.change.p_value;
  out.p_floor = r.change.p_floor;
  out.fingerprint_changes = r.fingerprint_changes;
  out.noise_rule = r.decision;
  return out;
}

nlohmann::json toJson(const Regression& r) {
  return report::toJson(siteRegression(r));
}

namespace {

// A member of a fleet: its node identity and its host name. Cloud VMs share a host name ("vm") and differ by identity;
// machines whose identity cannot tell them apart (stand-in GPUs) differ by host name.
std::string fleetMember(const std::string& node, const std::string& host) {
  return node + '\n' + host;
}

}  // namespace

std::string nodeLabel(const std::string& slurm_node, const std::string& identity, const std::string& host) {
  if (!slurm_node.empty()) return slurm_node;
  if (!identity.empty() && identity != host && identity != "host-" + host) {
    return host.empty() ? identity : identity + " (host " + host + ")";
  }
  return host.empty() ? identity : host;
}

std::optional<long long> ageSeconds(const std::string& time, const std::string& now) {
  const auto a = report::parseIsoTimestamp(time), b = report::parseIsoTimestamp(now);
  if (!a || !b) return std::nullopt;
  return *b - *a;
}

std::string ageText(long long s) {
  if (s < 0) s = 0;
  if (s < 120) return std::to_string(s) + " s";
  if (s < 2 * 3600) return std::to_string(s / 60) + " min";
  if (s < 2 * 86400) return std::to_string(s / 3600) + " h";
  return std::to_string(s / 86400) + " d";
}

namespace {

// Per fleet member (identity and host): its newest run of any kind, and the Slurm NodeName its newest run that names
// one ran under.
struct MemberFacts {
  std::string newest_time;
  std::string slurm_node;
};
std::map<std::string, MemberFacts> memberFacts(const History& history) {
  std::map<std::string, MemberFacts> out;
  for (const RunInfo& r : history.runs) {  // oldest first
    MemberFacts& f = out[fleetMember(r.nodeOrHost(), r.host)];
    f.newest_time = r.time;
    if (!r.slurm_node.empty()) f.slurm_node = r.slurm_node;
  }
  return out;
}

}  // namespace

std::vector<FleetOutlier> fleetOutliers(const History& history, const FleetOptions& options) {
  std::vector<FleetOutlier> out;
  const std::map<std::string, MemberFacts> facts = memberFacts(history);
  for (const Series& s : history.series) {
    // The latest figure of each host (points are oldest first).
    std::map<std::string, const SeriesPoint*> latest;
    for (const SeriesPoint& p : s.points)
      latest[fleetMember(history.run(p.run_id).nodeOrHost(), history.run(p.run_id).host)] = &p;
    if (static_cast<int>(latest.size()) < options.min_hosts) continue;
    std::vector<double> values;
    for (auto& [host, p] : latest)
      values.push_back(p->value);
    const double med = median(values, 0, static_cast<int>(values.size()));
    std::vector<double> dev;
    for (double v : values)
      dev.push_back(std::fabs(v - med));
    // A fleet of identical figures has MAD 0: a floor of 0.1% of the median keeps z finite.
    const double mad = std::max(median(dev, 0, static_cast<int>(dev.size())), 1e-3 * std::fabs(med));
    if (mad <= 0) continue;
    for (auto& [host, p] : latest) {
      // The host's figure against the fleet's median, by the one noise rule with the modified z-score as its test.
      const double z = 0.6745 * (p->value - med) / mad;
      report::Side fleet, own;
      fleet.value = med;
      fleet.runs = static_cast<int>(latest.size());
      own.value = p->value;
      report::NoiseRule rule;
      rule.threshold_pct = options.min_change_pct;
      rule.jitter_us = 0;
      report::RunsTest test;
      test.name = "mad-z";
      test.significant = std::fabs(z) > options.z_threshold;
      test.z = z;
      const report::ChangeDecision d = report::decideChange(s.metric.higher_is_better, fleet, own, rule, &test);
      if (d.verdict == report::Verdict::kRegressed) {
        const RunInfo& run = history.run(p->run_id);
        const MemberFacts& f = facts.at(fleetMember(run.nodeOrHost(), run.host));
        FleetOutlier o;
        o.machine = s.machine;
        o.host = run.host;
        o.node = run.nodeOrHost();
        o.slurm_node = f.slurm_node;
        o.label = nodeLabel(f.slurm_node, run.node, run.host);
        o.newest_time = f.newest_time;
        o.series = &s;
        o.run_id = p->run_id;
        o.value = p->value;
        o.median = med;
        o.mad = mad;
        o.z = z;
        o.decision = d;
        out.push_back(std::move(o));
      }
    }
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const FleetOutlier& a, const FleetOutlier& b) { return std::fabs(a.z) > std::fabs(b.z); });
  return out;
}

std::vector<FleetNode> fleetNodes(const History& history, const std::vector<NodeState>& states,
                                  const std::vector<FleetOutlier>& outliers) {
  // Nodes by identity and host name (cloud VMs all call themselves "vm").
  const std::map<std::string, MemberFacts> facts = memberFacts(history);
  std::map<std::pair<std::string, std::string>, FleetNode> nodes;
  for (const RunInfo& r : history.runs) {  // oldest first: the last one seen is the latest
    FleetNode& n = nodes[{r.machine(), fleetMember(r.nodeOrHost(), r.host)}];
    n.machine = r.machine();
    n.node = r.nodeOrHost();
    n.host = r.host;
    n.latest = &r;
  }
  for (auto& [key, n] : nodes) {
    n.slurm_node = facts.at(fleetMember(n.node, n.host)).slurm_node;
    n.name = nodeLabel(n.slurm_node, n.latest ? n.latest->node : n.node, n.host);
  }
  // States are keyed by Slurm NodeName (or a machine's identity), never by host name. Where several records name one
  // node, the one recorded last is its state.
  std::set<std::string> joined;
  for (const NodeState& s : states) {
    for (auto& [key, n] : nodes) {
      if ((!n.slurm_node.empty() && n.slurm_node == s.node) || n.node == s.node) {
        if (!n.state || s.after(*n.state)) n.state = s;
        joined.insert(s.node);
      }
    }
  }
  for (const NodeState& s : states) {
    if (joined.count(s.node)) continue;
    FleetNode& n = nodes[{"", s.node}];
    n.slurm_node = s.node;
    n.name = s.node;
    n.state = s;
  }
  for (const FleetOutlier& f : outliers) {
    auto it = nodes.find({f.machine, fleetMember(f.node, f.host)});
    if (it != nodes.end()) ++it->second.outliers;
  }
  std::vector<FleetNode> out;
  for (auto& [key, n] : nodes)
    out.push_back(std::move(n));
  auto rank = [](const FleetNode& n) { return n.outOfService() ? 0 : n.failed() ? 1 : n.unchecked() ? 2 : 3; };
  std::stable_sort(out.begin(), out.end(), [&](const FleetNode& a, const FleetNode& b) {
    return std::make_tuple(a.machine.empty(), a.machine, rank(a), a.name) <
           std::make_tuple(b.machine.empty(), b.machine, rank(b), b.name);
  });
  return out;
}

report::SiteNode siteNode(const FleetNode& n) {
  report::SiteNode out;
  out.kind = n.machine;
  out.node = n.node;
  out.host = n.host;
  out.slurm_node = n.slurm_node;
  out.name = n.name;
  out.outliers = n.outliers;
  if (n.state) {
    out.state = n.state->state;
    out.reason = n.state->reason;
    out.state_recorded_at = n.state->recorded_at;
  }
  if (n.latest) {
    out.run_id = n.latest->id;
    out.time = n.latest->time;
    out.verdict = n.latest->verdict;
    out.tool = n.latest->tool;
    out.git_sha = n.latest->git_sha;
    out.checks = n.latest->checks;
    out.check_details = report::checkDetailsFromJson(n.latest->check_details);
  }
  return out;
}

nlohmann::json toJson(const FleetNode& n) {
  return report::toJson(siteNode(n));
}

report::SiteInjectedRun siteInjectedRun(const RunInfo& r) {
  report::SiteInjectedRun out;
  out.run_id = r.id;
  out.kind = r.machine();
  out.host = r.host;
  out.node = r.nodeOrHost();
  out.slurm_node = r.slurm_node;
  out.name = nodeLabel(r.slurm_node, r.node, r.host);
  out.time = r.time;
  out.verdict = r.verdict;
  out.checks = r.checks;
  out.injected = r.injected;
  return out;
}

nlohmann::json injectedRunJson(const RunInfo& r) {
  return report::toJson(siteInjectedRun(r));
}

nlohmann::json toJson(const FleetOutlier& f) {
  nlohmann::json j = seriesFields(*f.series);
  j["kind"] = f.machine;
  j["host"] = f.host;
  j["node"] = f.node;
  j["slurm_node"] = f.slurm_node;
  j["label"] = f.label;
  j["newest_time"] = f.newest_time;
  j["series_id"] = f.series->id;
  j["run_id"] = f.run_id;
  j["value"] = f.value;
  j["median"] = f.median;
  j["mad"] = f.mad;
  j["z"] = f.z;
  j["noise_rule"] = report::toJson(f.decision);
  return j;
}

}  // namespace peerlab::history
