#include "harness/report/compare.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "harness/report/metric.h"
#include "harness/report/stats.h"

namespace peerlab::report {

namespace {

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

std::string formatValue(std::optional<double> v) {
  if (!v) return "-";
  char buf[64];
  const double a = std::fabs(*v);
  if (a >= 100) {
    std::snprintf(buf, sizeof(buf), "%.1f", *v);
  } else if (a >= 1) {
    std::snprintf(buf, sizeof(buf), "%.2f", *v);
  } else {
    std::snprintf(buf, sizeof(buf), "%.4g", *v);
  }
  return buf;
}

std::string metricLabel(const std::string& metric) {
  if (metric == "algbw_gbps") return "algbw GB/s";
  if (metric == "busbw_gbps") return "busbw GB/s";
  if (metric == "time_us") return "time us";
  return metric;
}

bool positive(const std::optional<double>& v) {
  return v && *v > 0;
}

std::optional<double> extraNumber(const Result& r, const char* key) {
  if (!r.extra.is_object() || !r.extra.contains(key) || !r.extra[key].is_number()) return std::nullopt;
  const double v = r.extra[key].get<double>();
  if (!std::isfinite(v)) return std::nullopt;
  return v;
}

std::string gpuSummary(const Fingerprint& fp) {
  std::map<std::string, int> byName;
  for (const GpuFingerprint& g : fp.gpus)
    ++byName[g.name];
  std::string s;
  for (const auto& [name, n] : byName)
    s += (s.empty() ? "" : " + ") + std::to_string(n) + "x " + name;
  return s.empty() ? "none" : s;
}

}  // namespace

const char* verdictName(Verdict v) {
  switch (v) {
    case Verdict::kSame:
      return "same";
    case Verdict::kImproved:
      return "improved";
    case Verdict::kRegressed:
      return "REGRESSED";
    case Verdict::kStatusRegressed:
      return "STATUS REGRESSED";
    case Verdict::kFixed:
      return "fixed";
    case Verdict::kUnchangedStatus:
      return "not measured";
    case Verdict::kOnlyBase:
      return "only in base";
    case Verdict::kOnlyNew:
      return "only in new";
  }
  return "?";
}

bool isRegression(Verdict v) {
  return v == Verdict::kRegressed || v == Verdict::kStatusRegressed;
}

int statusRank(const std::string& status) {
  if (status == "ok") return 2;
  if (status.rfind("skipped", 0) == 0 || status == "unsupported" || status.rfind("unsupported", 0) == 0) return 1;
  if (status == "warn") return 1;  // a health check that passed with a warning
  return 0;
}

std::string resultKey(const Result& r) {
  std::string k = r.suite + "|" + r.name + "|" + r.impl + "|";
  k += (r.src ? std::to_string(*r.src) : std::string("-")) + "|";
  k += (r.dst ? std::to_string(*r.dst) : std::string("-")) + "|";
  k += (r.bytes ? num(*r.bytes) : std::string("-")) + "|";
  k += std::to_string(r.ranks);
  // Host memory on another NUMA node is another measurement of the same copy.
  if (r.numa) k += "|numa" + std::to_string(*r.numa);
  return k;
}

std::string formatBytes(double bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  double v = bytes;
  while (std::fabs(v) >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[48];
  if (v == std::floor(v)) {
    std::snprintf(buf, sizeof(buf), "%.0f %s", v, kUnits[u]);
  } else {
    std::snprintf(buf, sizeof(buf), "%.3g %s", v, kUnits[u]);
  }
  return buf;
}

std::string describeResult(const Result& r) {
  std::string d = r.suite + " " + r.name + " " + r.impl;
  d += describeWhere(r);
  if (r.bytes) d += " " + formatBytes(*r.bytes);
  if (r.ranks > 1) d += " x" + std::to_string(r.ranks);
  return d;
}

std::string describeWhere(const Result& r) {
  std::string d;
  if (r.src && r.dst && *r.src != *r.dst) {
    d = " " + std::to_string(*r.src) + "->" + std::to_string(*r.dst);
  } else if (r.src || r.dst) {
    // One GPU's own figure (host copies, device-local copies, health).
    d = " gpu " + std::to_string(r.src ? *r.src : *r.dst);
  }
  if (r.numa) d += " host numa " + std::to_string(*r.numa);
  return d;
}

int CompareReport::count(Verdict v) const {
  return static_cast<int>(std::count_if(rows.begin(), rows.end(), [&](const CompareRow& r) { return r.verdict == v; }));
}

int CompareReport::regressions() const {
  return static_cast<int>(
      std::count_if(rows.begin(), rows.end(), [](const CompareRow& r) { return isRegression(r.verdict); }));
}

CompareRow compareResults(const Result& base, const Result& fresh, const CompareOptions& options) {
  CompareRow row;
  row.key = resultKey(fresh);
  row.base = base;
  row.fresh = fresh;
  const int rb = statusRank(base.status);
  const int rn = statusRank(fresh.status);
  if (rb != 2 || rn != 2) {
    row.metric = "status";
    row.note = base.status + " -> " + fresh.status;
    if (rn < rb) {
      row.verdict = Verdict::kStatusRegressed;
    } else if (rn > rb) {
      row.verdict = Verdict::kFixed;
    } else {
      row.verdict = Verdict::kUnchangedStatus;
    }
    return row;
  }
  // Both ok: wrong elements appearing is a regression whatever the speed.
  if (positive(fresh.wrong) && !positive(base.wrong)) {
    row.metric = "status";
    row.verdict = Verdict::kStatusRegressed;
    row.note = "wrong elements: " + formatValue(base.wrong) + " -> " + formatValue(fresh.wrong);
    return row;
  }
  // A probe cell is a verdict, not a performance figure: its time is the time the check took.
  if (base.suite == "probe") {
    row.metric = "status";
    row.verdict = Verdict::kSame;
    row.note = "ok -> ok";
    return row;
  }
  const std::optional<SeriesMetric> metric = seriesMetric(base);
  if (!metric) {
    // ctest wall times, probe and health cells are verdicts, not performance figures.
    row.metric = "status";
    row.verdict = Verdict::kSame;
    row.note = "ok -> ok";
    return row;
  }
  row.metric = metric->field;
  row.base_value = metricValue(base, *metric);
  row.new_value = metricValue(fresh, *metric);
  if (!row.base_value || !row.new_value) {
    row.metric = "status";
    row.verdict = Verdict::kSame;
    row.note = "no " + metric->field + " on both sides";
    return row;
  }
  const double change = (*row.new_value - *row.base_value) / *row.base_value * 100.0;
  row.change_pct = change;
  const std::vector<double> sb = samplesOf(base);
  const std::vector<double> sn = samplesOf(fresh);
  const auto b10 = extraNumber(base, "p10_us"), b90 = extraNumber(base, "p90_us");
  const auto n10 = extraNumber(fresh, "p10_us"), n90 = extraNumber(fresh, "p90_us");
  if (sb.size() >= options.min_samples && sn.size() >= options.min_samples) {
    row.test = "u-test";
    row.p_value = mannWhitneyPValue(sb, sn);
    row.significant = *row.p_value < options.alpha;
  } else if (b10 && b90 && n10 && n90) {
    // Without samples: the change counts when the p10..p90 ranges of the two runs do not overlap.
    row.test = "p10/p90";
    row.significant = *n10 > *b90 || *n90 < *b10;
  } else {
    row.test = "threshold";
    row.significant = true;
  }
  // The change must also exceed the spread either run shows on its own (p90 - p10 over the median, in time): two
  // processes of one build differ by about that much, and one process per side cannot tell such a step from noise.
  double noise_pct = 0;
  const auto spread = [](const std::optional<double>& lo, const std::optional<double>& hi,
                         const std::optional<double>& mid) -> double {
    if (!lo || !hi || !mid || *mid <= 0 || *hi < *lo) return 0;
    return (*hi - *lo) / *mid * 100.0;
  };
  noise_pct = std::max(spread(b10, b90, base.time_us), spread(n10, n90, fresh.time_us));
  row.noise_pct = noise_pct;
  const bool beyond = std::fabs(change) > std::max(options.threshold_pct, noise_pct);
  if (!beyond || !row.significant) {
    row.verdict = Verdict::kSame;
  } else if ((change > 0) == metric->higher_is_better) {
    row.verdict = Verdict::kImproved;
  } else {
    row.verdict = Verdict::kRegressed;
  }
  return row;
}

std::vector<double> samplesOf(const Result& r) {
  std::vector<double> out;
  if (!r.extra.is_object() || !r.extra.contains("samples_us") || !r.extra["samples_us"].is_array()) return out;
  for (const auto& v : r.extra["samples_us"]) {
    if (v.is_number() && std::isfinite(v.get<double>())) out.push_back(v.get<double>());
  }
  return out;
}

std::vector<std::string> fingerprintChanges(const Fingerprint& base, const Fingerprint& fresh) {
  std::vector<std::string> out;
  auto diff = [&](const char* what, const std::string& a, const std::string& b) {
    if (a != b) out.push_back(std::string(what) + " " + (a.empty() ? "?" : a) + " -> " + (b.empty() ? "?" : b));
  };
  diff("driver", base.driver, fresh.driver);
  diff("CUDA", base.cuda_runtime, fresh.cuda_runtime);
  diff("NCCL", base.nccl, fresh.nccl);
  const std::string gb = gpuSummary(base), gn = gpuSummary(fresh);
  if (gb != gn) {
    out.push_back("GPUs: " + gb + " -> " + gn);
  } else {
    std::vector<std::string> ub, un;
    for (const GpuFingerprint& g : base.gpus)
      ub.push_back(g.uuid);
    for (const GpuFingerprint& g : fresh.gpus)
      un.push_back(g.uuid);
    std::sort(ub.begin(), ub.end());
    std::sort(un.begin(), un.end());
    if (ub != un) out.push_back("GPUs: same models, different boards (UUIDs changed)");
  }
  diff("host", base.hostname, fresh.hostname);
  return out;
}

CompareReport compareRuns(const Run& base, const Run& fresh, const CompareOptions& options) {
  CompareReport report;
  report.threshold_pct = options.threshold_pct;
  report.alpha = options.alpha;
  report.fingerprint_changes = fingerprintChanges(base.fingerprint, fresh.fingerprint);
  // key -> indices of the new run's results with that key, in order; matched by occurrence.
  std::map<std::string, std::vector<size_t>> freshByKey;
  for (size_t i = 0; i < fresh.results.size(); ++i)
    freshByKey[resultKey(fresh.results[i])].push_back(i);
  std::map<std::string, size_t> used;
  std::vector<bool> matched(fresh.results.size(), false);
  for (const Result& b : base.results) {
    const std::string key = resultKey(b);
    auto it = freshByKey.find(key);
    size_t& n = used[key];
    if (it != freshByKey.end() && n < it->second.size()) {
      const size_t idx = it->second[n++];
      matched[idx] = true;
      report.rows.push_back(compareResults(b, fresh.results[idx], options));
    } else {
      CompareRow row;
      row.key = key;
      row.base = b;
      row.metric = "status";
      row.verdict = Verdict::kOnlyBase;
      row.note = "base: " + b.status;
      report.rows.push_back(std::move(row));
    }
  }
  for (size_t i = 0; i < fresh.results.size(); ++i) {
    if (matched[i]) continue;
    CompareRow row;
    row.key = resultKey(fresh.results[i]);
    row.fresh = fresh.results[i];
    row.metric = "status";
    row.verdict = Verdict::kOnlyNew;
    row.note = "new: " + fresh.results[i].status;
    report.rows.push_back(std::move(row));
  }
  return report;
}

std::string formatCompare(const CompareReport& report, bool only_changes) {
  struct Line {
    std::string result, metric, base, fresh, change, test, verdict;
  };
  std::ostringstream out;
  if (report.fingerprint_changes.empty()) {
    out << "fingerprint: unchanged (driver, CUDA, NCCL, GPUs)\n\n";
  } else {
    out << "FINGERPRINT CHANGED:\n";
    for (const std::string& c : report.fingerprint_changes)
      out << "  " << c << "\n";
    out << "\n";
  }
  std::vector<Line> lines;
  lines.push_back({"result", "metric", "base", "new", "change", "noise test", "verdict"});
  for (const CompareRow& r : report.rows) {
    if (only_changes && (r.verdict == Verdict::kSame || r.verdict == Verdict::kUnchangedStatus)) continue;
    Line l;
    l.result = describeResult(r.fresh ? *r.fresh : *r.base);
    l.metric = metricLabel(r.metric);
    if (r.metric == "status") {
      l.base = r.base ? r.base->status : "-";
      l.fresh = r.fresh ? r.fresh->status : "-";
    } else {
      l.base = formatValue(r.base_value);
      l.fresh = formatValue(r.new_value);
    }
    if (r.change_pct) {
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%+.2f%%", *r.change_pct);
      l.change = buf;
    } else {
      l.change = "";
    }
    if (r.test == "u-test" && r.p_value) {
      char buf[40];
      std::snprintf(buf, sizeof(buf), "U p=%.3g", *r.p_value);
      l.test = buf;
    } else if (r.test == "p10/p90") {
      l.test = r.significant ? "p10-p90 apart" : "p10-p90 overlap";
    } else {
      l.test = r.test;
    }
    l.verdict = verdictName(r.verdict);
    if (r.verdict == Verdict::kStatusRegressed && r.note.rfind("wrong", 0) == 0) l.verdict += " (" + r.note + ")";
    // Long statuses would wreck the table: keep their head, the full text stays in the run file.
    for (std::string* s : {&l.base, &l.fresh}) {
      if (s->size() > 28) *s = s->substr(0, 25) + "...";
    }
    lines.push_back(std::move(l));
  }
  size_t w[6] = {0, 0, 0, 0, 0, 0};
  for (const Line& l : lines) {
    w[0] = std::max(w[0], std::min<size_t>(l.result.size(), 72));
    w[1] = std::max(w[1], l.metric.size());
    w[2] = std::max(w[2], l.base.size());
    w[3] = std::max(w[3], l.fresh.size());
    w[4] = std::max(w[4], l.change.size());
    w[5] = std::max(w[5], l.test.size());
  }
  auto pad = [](const std::string& s, size_t n, bool right) {
    if (s.size() >= n) return s;
    return right ? std::string(n - s.size(), ' ') + s : s + std::string(n - s.size(), ' ');
  };
  for (size_t i = 0; i < lines.size(); ++i) {
    const Line& l = lines[i];
    out << pad(l.result, w[0], false) << "  " << pad(l.metric, w[1], false) << "  " << pad(l.base, w[2], true) << "  "
        << pad(l.fresh, w[3], true) << "  " << pad(l.change, w[4], true) << "  " << pad(l.test, w[5], false) << "  "
        << l.verdict << "\n";
    if (i == 0) out << std::string(w[0] + w[1] + w[2] + w[3] + w[4] + w[5] + 12 + 8, '-') << "\n";
  }
  if (report.missing() > 0) {
    out << "\nMISSING in the new run (" << report.missing() << "):\n";
    for (const CompareRow& r : report.rows) {
      if (r.verdict == Verdict::kOnlyBase) out << "  " << describeResult(*r.base) << "\n";
    }
  }
  char thr[64];
  std::snprintf(thr, sizeof(thr), "%g%% or not significant", report.threshold_pct);
  out << report.rows.size() << " results: " << report.count(Verdict::kRegressed) << " regressed, "
      << report.count(Verdict::kStatusRegressed) << " status regressions, " << report.count(Verdict::kImproved)
      << " improved, " << report.count(Verdict::kFixed) << " fixed, " << report.count(Verdict::kSame) << " within +-"
      << thr << ", " << report.count(Verdict::kUnchangedStatus) << " not measured on either side, "
      << report.count(Verdict::kOnlyBase) << " only in base, " << report.count(Verdict::kOnlyNew) << " only in new\n";
  return out.str();
}

std::string formatThreshold(double pct) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g%%", pct);
  return buf;
}

StatusOr<double> parseThresholdPct(const std::string& text) {
  std::string t = text;
  while (!t.empty() && (t.back() == ' ' || t.back() == '%'))
    t.pop_back();
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(t, &used);
  } catch (...) {
    used = 0;
  }
  if (t.empty() || used != t.size() || !std::isfinite(v) || v < 0 || v >= 1000) {
    return PEERLAB_INVALID_ARGUMENT("threshold \"" + text + "\": expected a percentage such as 5 or 2.5%");
  }
  return v;
}

}  // namespace peerlab::report
