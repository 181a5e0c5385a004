#include "harness/report/render/views.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "harness/qualify/suites.h"
#include "harness/report/metric.h"

namespace peerlab::report {

namespace {

bool isOk(const Result& r) {
  return r.status == "ok";
}

bool pairResult(const Result& r) {
  return r.src && r.dst;
}

}  // namespace

namespace {

using SeriesKey = std::tuple<std::string, std::string, int>;  // impl, name, ranks

std::vector<Series> seriesFor(const Run& run, const std::string& suite, bool time) {
  std::map<SeriesKey, std::map<double, std::vector<double>>> groups;
  std::vector<SeriesKey> order;
  // The metric rule's (metric.h); a run whose rows of the suite carry no busbw is drawn on algbw.
  bool busRecorded = false;
  for (const Result& r : run.results) {
    if (r.suite == suite && isOk(r) && r.busbw_gbps && *r.busbw_gbps > 0) busRecorded = true;
  }
  const SeriesMetric metric = time ? timeMetric() : bandwidthMetric(suite, busRecorded);
  for (const Result& r : run.results) {
    if (r.suite != suite || !isOk(r) || !r.bytes || *r.bytes <= 0) continue;
    const std::optional<double> v = metricValue(r, metric);
    if (!v) continue;
    SeriesKey key{r.impl, r.name, r.ranks};
    if (!groups.count(key)) order.push_back(key);
    groups[key][*r.bytes].push_back(*v);
  }
  std::vector<Series> out;
  for (const SeriesKey& key : order) {
    Series s;
    s.suite = suite;
    s.impl = std::get<0>(key);
    s.name = std::get<1>(key);
    s.ranks = std::get<2>(key);
    s.metric = metric.field;
    for (auto& [bytes, values] : groups[key]) {
      SeriesPoint p;
      p.bytes = bytes;
      p.n = static_cast<int>(values.size());
      p.min = *std::min_element(values.begin(), values.end());
      p.max = *std::max_element(values.begin(), values.end());
      p.median = medianOf(values);
      s.points.push_back(p);
    }
    out.push_back(std::move(s));
  }
  // peerlab's own implementations first, baselines after, each group in first-seen order.
  std::stable_sort(out.begin(), out.end(),
                   [](const Series& a, const Series& b) { return !isBaselineImpl(a.impl) && isBaselineImpl(b.impl); });
  return out;
}

}  // namespace

std::string Series::label() const {
  std::string l = impl + " " + name;
  if (ranks > 1) l += " x" + std::to_string(ranks);
  return l;
}

std::string PairGrid::label() const {
  std::string l = suite + " " + impl + " " + name;
  if (ranks > 1) l += " x" + std::to_string(ranks);
  return l;
}

std::vector<Series> bandwidthSeries(const Run& run, const std::string& suite) {
  return seriesFor(run, suite, false);
}

std::vector<Series> timeSeries(const Run& run, const std::string& suite) {
  return seriesFor(run, suite, true);
}

std::vector<LatencyRow> latencyRows(const Run& run, double max_bytes) {
  using Key = std::tuple<std::string, std::string, std::string, double, bool, int>;
  std::map<Key, std::vector<double>> groups;
  std::vector<Key> order;
  // Bandwidth sweeps (peer copies): only their smallest size says something about latency.
  std::map<std::tuple<std::string, std::string, std::string>, double> smallestCopy;
  for (const Result& r : run.results) {
    if (!qualify::resultFacts(r.suite).latency_at_smallest || !isOk(r) || !r.bytes) continue;
    auto key = std::make_tuple(r.suite, r.impl, r.name);
    if (!smallestCopy.count(key) || *r.bytes < smallestCopy[key]) smallestCopy[key] = *r.bytes;
  }
  for (const Result& r : run.results) {
    if (isVerdictSuite(r.suite) || !isOk(r) || !r.time_us || *r.time_us <= 0) continue;
    if (r.bytes && *r.bytes > max_bytes) continue;
    if (qualify::resultFacts(r.suite).latency_at_smallest && r.bytes &&
        *r.bytes != smallestCopy[std::make_tuple(r.suite, r.impl, r.name)]) {
      continue;
    }
    Key key{r.suite, r.impl, r.name, r.bytes.value_or(0), r.bytes.has_value(), r.ranks};
    if (!groups.count(key)) order.push_back(key);
    groups[key].push_back(*r.time_us);
  }
  std::vector<LatencyRow> out;
  for (const Key& key : order) {
    const auto& v = groups[key];
    LatencyRow row;
    row.suite = std::get<0>(key);
    row.impl = std::get<1>(key);
    row.name = std::get<2>(key);
    if (std::get<4>(key)) row.bytes = std::get<3>(key);
    row.ranks = std::get<5>(key);
    row.n = static_cast<int>(v.size());
    row.median_us = medianOf(v);
    row.min_us = *std::min_element(v.begin(), v.end());
    row.max_us = *std::max_element(v.begin(), v.end());
    out.push_back(row);
  }
  std::stable_sort(out.begin(), out.end(), [](const LatencyRow& a, const LatencyRow& b) {
    return std::tie(a.suite, a.name, a.bytes) < std::tie(b.suite, b.name, b.bytes);
  });
  return out;
}

std::vector<PairGrid> pairGrids(const Run& run, size_t max_cells, int* omitted) {
  const int n = gpuCount(run);
  using Key = std::tuple<std::string, std::string, std::string, int>;
  std::map<Key, std::vector<const Result*>> members;
  std::vector<Key> order;
  for (const Result& r : run.results) {
    if (isVerdictSuite(r.suite) || !pairResult(r) || *r.src < 0 || *r.dst < 0 || *r.src >= n || *r.dst >= n) continue;
    Key key{r.suite, r.impl, r.name, r.ranks};
    auto [it, inserted] = members.try_emplace(key);
    if (inserted) order.push_back(key);
    it->second.push_back(&r);
  }
  std::vector<PairGrid> out;
  size_t cells = 0;
  if (omitted) *omitted = 0;
  const size_t perGrid = static_cast<size_t>(n) * static_cast<size_t>(n);
  for (const Key& key : order) {
    const auto& rs = members[key];
    PairGrid g;
    std::tie(g.suite, g.impl, g.name, g.ranks) = key;
    // The grid shows the largest size that was measured successfully; failures at any size still show.
    for (const Result* r : rs) {
      if (isOk(*r) && r->algbw_gbps && r->bytes) g.bytes = std::max(g.bytes, *r->bytes);
    }
    bool any = false;
    for (const Result* r : rs) {
      if (isOk(*r) ? (r->bytes && *r->bytes == g.bytes && r->algbw_gbps) : probeSeverity(r->status) > 0) any = true;
    }
    if (!any) continue;
    if (cells + perGrid > max_cells) {
      if (omitted) ++*omitted;
      continue;
    }
    cells += perGrid;
    g.gpus = n;
    g.value.assign(perGrid, std::nullopt);
    g.status.assign(perGrid, "");
    for (const Result* r : rs) {
      const size_t idx = static_cast<size_t>(*r->src * n + *r->dst);
      if (isOk(*r)) {
        if (r->bytes && *r->bytes == g.bytes && r->algbw_gbps) {
          g.value[idx] = *r->algbw_gbps;
          if (g.status[idx].empty()) g.status[idx] = "ok";
        }
      } else if (probeSeverity(r->status) > probeSeverity(g.status[idx])) {
        g.status[idx] = r->status;
      }
    }
    out.push_back(std::move(g));
  }
  return out;
}

std::vector<ProbeGrid> probeGrids(const Run& run) {
  const int n = gpuCount(run);
  std::vector<ProbeGrid> out;
  std::map<std::string, size_t> index;
  for (const ProbeCell& c : probeCells(run)) {
    if (c.src >= n || c.dst >= n) continue;
    if (!index.count(c.method)) {
      index[c.method] = out.size();
      ProbeGrid g;
      g.method = c.method;
      g.gpus = n;
      g.verdict.assign(static_cast<size_t>(n * n), "");
      g.claimed.assign(static_cast<size_t>(n * n), std::nullopt);
      g.detail.assign(static_cast<size_t>(n * n), "");
      out.push_back(std::move(g));
    }
    ProbeGrid& g = out[index[c.method]];
    const size_t idx = static_cast<size_t>(c.src * n + c.dst);
    g.verdict[idx] = c.verdict;
    g.claimed[idx] = c.claimed;
    g.detail[idx] = c.detail;
  }
  return out;
}

ProbeSummary summarizeProbe(const Run& run) {
  ProbeSummary s;
  std::set<std::string> methods;
  std::set<std::pair<int, int>> pairs;
  for (const ProbeCell& c : probeCells(run)) {
    ++s.cells;
    methods.insert(c.method);
    pairs.insert({c.src, c.dst});
    const int sev = probeSeverity(c.verdict);
    const std::string cell = c.method + " " + std::to_string(c.src) + "->" + std::to_string(c.dst);
    const bool claimed = c.claimed.value_or(false);
    if (sev == 0) {
      ++s.ok;
      if (c.claimed.has_value() && !claimed) s.works_unclaimed.push_back(cell);
    } else if (sev == 1) {
      ++s.unsupported;
      if (claimed) s.claimed_but_failed.push_back(cell + ": " + c.verdict);
    } else {
      ++s.failed;
      if (claimed) s.claimed_but_failed.push_back(cell + ": " + c.verdict);
    }
  }
  s.methods = static_cast<int>(methods.size());
  s.pairs = static_cast<int>(pairs.size());
  return s;
}

}  // namespace peerlab::report
