#include "harness/report/aggregate.h"

#include <algorithm>
#include <cstdio>
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

int probeSeverity(const std::string& v) {
  if (v.empty()) return -1;
  if (v == "ok") return 0;
  if (v.rfind("unsupported", 0) == 0 || v.rfind("skipped", 0) == 0) return 1;
  if (v == "corrupt") return 4;
  if (v == "hang") return 3;
  return 2;
}

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

bool isCollectiveSuite(const std::string& suite) {
  return qualify::resultFacts(suite).collective;
}

bool isVerdictSuite(const std::string& suite) {
  return qualify::resultFacts(suite).kind == qualify::RowKind::kVerdicts;
}

bool isBaselineImpl(const std::string& impl) {
  for (const char* p : {"nccl.", "torch.", "nvshmem.", "cuda.", "nccl", "torch"}) {
    if (impl.rfind(p, 0) == 0) return true;
  }
  return false;
}

int gpuCount(const Run& run) {
  int n = static_cast<int>(run.fingerprint.gpus.size());
  for (const auto& g : run.fingerprint.gpus)
    n = std::max(n, g.ordinal + 1);
  for (const Result& r : run.results) {
    if (r.src) n = std::max(n, *r.src + 1);
    if (r.dst) n = std::max(n, *r.dst + 1);
  }
  return n;
}

std::vector<std::string> suitesIn(const Run& run) {
  // In the order the run met them (the probe, then each suite's process in the plan's order, which is the suites'
  // page order: harness/qualify/suite_spec.h); the machine's health and the GPU tests last.
  std::vector<std::string> out, last;
  std::set<std::string> present;
  for (const Result& r : run.results) {
    if (!present.insert(r.suite).second) continue;
    (r.suite == "health" || r.suite == "test" ? last : out).push_back(r.suite);
  }
  out.insert(out.end(), last.begin(), last.end());
  return out;
}

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

std::vector<ProbeCell> probeCells(const Run& run) {
  std::vector<ProbeCell> out;
  std::map<std::tuple<std::string, int, int>, size_t> index;
  for (const Result& r : run.results) {
    if (!isVerdictSuite(r.suite) || !pairResult(r)) continue;
    const std::string method = r.name.substr(0, r.name.find('/'));
    const auto key = std::make_tuple(method, *r.src, *r.dst);
    auto it = index.find(key);
    if (it == index.end()) {
      it = index.emplace(key, out.size()).first;
      ProbeCell c;
      c.method = method;
      c.src = *r.src;
      c.dst = *r.dst;
      out.push_back(std::move(c));
    }
    ProbeCell& c = out[it->second];
    if (probeSeverity(r.status) > probeSeverity(c.verdict)) c.verdict = r.status;
    if (r.extra.contains("claimed") && r.extra["claimed"].is_boolean()) {
      c.claimed = c.claimed.value_or(false) || r.extra["claimed"].get<bool>();
    }
    std::string d = r.name + ": " + r.status;
    if (r.time_us) {
      char buf[48];
      std::snprintf(buf, sizeof(buf), " (%.1f us)", *r.time_us);
      d += buf;
    }
    if (r.extra.contains("first_bad") && r.extra["first_bad"].is_number())
      d += ", first bad " + r.extra["first_bad"].dump();
    if (r.wrong && *r.wrong > 0) d += ", " + std::to_string(static_cast<long long>(*r.wrong)) + " wrong";
    c.detail += (c.detail.empty() ? "" : "; ") + d;
  }
  // Methods in first-seen order, pairs in order within a method.
  std::vector<std::string> methods;
  for (const ProbeCell& c : out) {
    if (std::find(methods.begin(), methods.end(), c.method) == methods.end()) methods.push_back(c.method);
  }
  std::stable_sort(out.begin(), out.end(), [&](const ProbeCell& a, const ProbeCell& b) {
    const auto ia = std::find(methods.begin(), methods.end(), a.method) - methods.begin();
    const auto ib = std::find(methods.begin(), methods.end(), b.method) - methods.begin();
    return std::tie(ia, a.src, a.dst) < std::tie(ib, b.src, b.dst);
  });
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

double medianOf(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t m = values.size() / 2;
  return values.size() % 2 ? values[m] : (values[m - 1] + values[m]) / 2;
}

}  // namespace peerlab::report
