#include "harness/report/compare.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "harness/qualify/suites.h"
#include "harness/report/machine.h"
#include "harness/report/metric.h"
#include "harness/report/stats.h"

namespace peerlab::report {

namespace {

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

// What set the minimum effect when it is above the threshold.
std::string minEffectSource(const ChangeDecision& d, const NoiseRule& rule, const Side& base) {
  if (d.min_effect_pct <= rule.threshold_pct) return "threshold";
  if (d.min_effect_pct == d.jitter_pct) return formatted("jitter %g us / %.4g us", rule.jitter_us, *base.time_us);
  if (d.min_effect_pct == d.between_pct) return formatted("range of %zu runs' times", base.runs_us.size());
  if (d.min_effect_pct == d.fleet_pct) return formatted("the farthest of the kind's %d boards", d.fleet_boards);
  return formatted("%g x p10-p90 spread %.1f%%", rule.spread_factor, d.noise_pct);
}

// The rule in one line: the change against the minimum effect, what set it, every term (the noise test follows).
std::string ruleLine(const ChangeDecision& d, const NoiseRule& rule, const Side& base, bool runs_test, bool beyond) {
  if (runs_test) {
    return formatted("|%+.1f%%| %s min %.1f%% (threshold %g%%; the noise test is across runs); ", d.change_pct,
                     beyond ? ">" : "<=", d.min_effect_pct, rule.threshold_pct);
  }
  const std::string fleetTerm = d.fleet_boards > 0 ? formatted(", between boards %.1f%%", d.fleet_pct) : "";
  return formatted("|%+.1f%%| %s min %.1f%% (%s; threshold %g%%, %g x spread %.1f%%, %s %.1f%%%s); ", d.change_pct,
                   beyond ? ">" : "<=", d.min_effect_pct, minEffectSource(d, rule, base).c_str(), rule.threshold_pct,
                   rule.spread_factor, d.spread_factor * d.noise_pct, d.between_pct > 0 ? "between runs" : "jitter",
                   d.between_pct > 0 ? d.between_pct : d.jitter_pct, fleetTerm.c_str());
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
  k += (r.bytes ? exactNumber(*r.bytes) : std::string("-")) + "|";
  k += std::to_string(r.ranks);
  // Host memory on another NUMA node is another measurement of the same copy.
  if (r.numa) k += "|numa" + std::to_string(*r.numa);
  return k;
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
    row.note = "wrong elements: " + tableFigure(base.wrong) + " -> " + tableFigure(fresh.wrong);
    return row;
  }
  // A probe cell is a verdict, not a performance figure: its time is the time the check took.
  if (qualify::resultFacts(base.suite).kind == qualify::RowKind::kVerdicts) {
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
  const ChangeDecision d =
      decideChange(metric->higher_is_better, sideOf(base, *row.base_value), sideOf(fresh, *row.new_value), options);
  row.change_pct = d.change_pct;
  row.noise_pct = d.noise_pct;
  row.test = d.test;
  row.p_value = d.p_value;
  row.significant = d.significant;
  row.verdict = d.verdict;
  row.decision = d;
  return row;
}

Side sideOf(const Result& r, double value) {
  Side s;
  s.value = value;
  if (r.time_us && std::isfinite(*r.time_us) && *r.time_us > 0) s.time_us = r.time_us;
  s.p10_us = extraNumber(r, "p10_us");
  s.p90_us = extraNumber(r, "p90_us");
  s.samples_us = samplesOf(r);
  s.samples = !s.samples_us.empty() ? static_cast<double>(s.samples_us.size()) : extraNumber(r, "samples").value_or(0);
  if (auto runs = extraNumber(r, "baseline_runs"); runs && *runs >= 1 && *runs <= 1e6) s.runs = static_cast<int>(*runs);
  for (auto [key, out] : {std::pair{"runs_time_us", &s.runs_us}, std::pair{"fleet_time_us", &s.fleet_us}}) {
    if (auto it = r.extra.find(key); it != r.extra.end() && it->is_array() && it->size() <= 10000) {
      for (const auto& t : *it) {
        if (t.is_number() && std::isfinite(t.get<double>())) out->push_back(t.get<double>());
      }
    }
  }
  return s;
}

ChangeDecision decideChange(bool higher_is_better, const Side& base, const Side& fresh, const NoiseRule& rule,
                            const RunsTest* runs_test) {
  ChangeDecision d;
  d.threshold_pct = rule.threshold_pct;
  d.base_samples = base.samples;
  d.new_samples = fresh.samples;
  d.base_runs = base.runs;
  d.new_runs = fresh.runs;
  d.change_pct = base.value != 0 ? (fresh.value - base.value) / base.value * 100.0 : 0;
  d.worsening_pct = higher_is_better ? -d.change_pct : d.change_pct;
  // The noise test.
  if (runs_test) {
    d.test = runs_test->name;
    d.significant = runs_test->significant;
    d.p_value = runs_test->p_value;
    d.p_floor = runs_test->p_floor;
    d.z = runs_test->z;
  } else if (base.samples_us.size() >= rule.min_samples && fresh.samples_us.size() >= rule.min_samples) {
    d.test = "u-test";
    d.p_value = mannWhitneyPValue(base.samples_us, fresh.samples_us);
    d.significant = *d.p_value < rule.alpha;
  } else if (base.p10_us && base.p90_us && fresh.p10_us && fresh.p90_us) {
    // Without samples: the change counts when the p10..p90 ranges of the two runs do not overlap.
    d.test = "p10/p90";
    d.significant = *fresh.p10_us > *base.p90_us || *fresh.p90_us < *base.p10_us;
  } else {
    d.test = "threshold";
    d.significant = true;
  }
  // The minimum effect: the threshold, a multiple of the spread either run shows on its own, and what a time does from
  // process to process: the range of a multi-run base's times, else the timing jitter between two processes.
  const auto spread = [](const Side& s) -> double {
    if (!s.p10_us || !s.p90_us || !s.time_us || *s.time_us <= 0 || *s.p90_us < *s.p10_us) return 0;
    return (*s.p90_us - *s.p10_us) / *s.time_us * 100.0;
  };
  if (!runs_test) {
    d.spread_factor = rule.spread_factor;
    d.noise_pct = std::max(spread(base), spread(fresh));
    // The range of positive times over their median, percent; nullopt for fewer than two.
    const auto rangePct = [](const std::vector<double>& v) -> std::optional<double> {
      std::vector<double> times;
      for (double t : v) {
        if (std::isfinite(t) && t > 0) times.push_back(t);
      }
      if (times.size() < 2) return std::nullopt;
      std::sort(times.begin(), times.end());
      const size_t n = times.size();
      const double mid = n % 2 ? times[n / 2] : (times[n / 2 - 1] + times[n / 2]) / 2;
      return (times.back() - times.front()) / mid * 100.0;
    };
    const std::optional<double> between = rangePct(base.runs_us);
    // How far the kind's boards stand from the base, in the metric's terms: a board whose time is 2.2x the base's
    // is +120% in time, -55% in bandwidth; without the base's time, the boards' range over their median.
    std::optional<double> fleet;
    if (base.fleet_us.size() >= 2 && base.time_us && *base.time_us > 0) {
      for (double t : base.fleet_us) {
        if (!std::isfinite(t) || t <= 0) continue;
        const double pct = std::fabs(higher_is_better ? *base.time_us / t - 1 : t / *base.time_us - 1) * 100.0;
        fleet = std::max(fleet.value_or(0), pct);
      }
    } else {
      fleet = rangePct(base.fleet_us);
    }
    if (between) d.between_pct = *between;
    if (fleet) {
      d.fleet_pct = *fleet;
      d.fleet_boards = static_cast<int>(base.fleet_us.size());
    }
    if (!between && !fleet && rule.jitter_us > 0 && base.time_us && *base.time_us > 0) {
      // In the metric's terms: a time jitter_us longer, or for a bandwidth what that longer time gives (at 1 MiB and
      // 10.5 us, 7.5 us of jitter is +71% in time, -42% in bandwidth).
      const double t = *base.time_us;
      d.jitter_pct = higher_is_better ? rule.jitter_us / (t + rule.jitter_us) * 100.0 : rule.jitter_us / t * 100.0;
    }
  }
  const double spreadPct = d.spread_factor * d.noise_pct;
  d.min_effect_pct = std::max({rule.threshold_pct, spreadPct, d.between_pct, d.fleet_pct, d.jitter_pct});
  const bool beyond = std::fabs(d.change_pct) > d.min_effect_pct;
  if (!beyond || !d.significant) {
    d.verdict = Verdict::kSame;
  } else if (d.worsening_pct > 0) {
    d.verdict = Verdict::kRegressed;
  } else {
    d.verdict = Verdict::kImproved;
  }
  d.rule = ruleLine(d, rule, base, runs_test != nullptr, beyond) + d.testCell();
  return d;
}

std::string ChangeDecision::minEffectCell() const {
  const char* why = "";
  if (min_effect_pct > threshold_pct) {
    why = min_effect_pct == jitter_pct    ? " jitter"
          : min_effect_pct == between_pct ? " runs"
          : min_effect_pct == fleet_pct   ? " fleet"
                                          : " spread";
  }
  return formatted("%.1f%%%s", min_effect_pct, why);
}

std::string formatPValue(double p, std::optional<double> floor) {
  return floor && p < *floor ? formatted("p < %.2g", *floor) : formatted("p=%.3g", p);
}

std::string ChangeDecision::testCell() const {
  auto count = [](double n, int runs) { return runs > 1 ? formatted("%d runs", runs) : formatted("%.0f", n); };
  const std::string n = " n=" + count(base_samples, base_runs) + "/" + count(new_samples, new_runs);
  if (test == "u-test" && p_value) return formatted("U p=%.3g", *p_value) + n;
  if (test == "p10/p90") return std::string("p10-p90 ") + (significant ? "apart" : "overlap") + n;
  if (test == "e-divisive" && p_value) return "e-divisive " + formatPValue(*p_value, p_floor) + n;
  if (test == "mad-z" && z) return formatted("mad-z %+.1f", *z) + n;
  return test + n;
}

nlohmann::json toJson(const NoiseRule& rule) {
  return {{"threshold_pct", rule.threshold_pct}, {"jitter_us", rule.jitter_us},
          {"spread_factor", rule.spread_factor}, {"alpha", rule.alpha},
          {"min_samples", rule.min_samples},     {"text", describeNoiseRule(rule)}};
}

std::string describeNoiseRule(const NoiseRule& rule) {
  return formatted(
      "a change counts when it is larger than the minimum effect (the largest of the threshold %g%%, %g x "
      "either run's p10-p90 spread over its median, and, for a time, the range of a multi-run baseline's "
      "times and of the kind's boards' times where the baseline records them, else %g us of jitter "
      "between two processes, over the base time) and the noise test finds it: "
      "Mann-Whitney U p < %g with >= %zu samples a side, else the p10-p90 ranges apart, else the minimum "
      "effect alone",
      rule.threshold_pct, rule.spread_factor, rule.jitter_us, rule.alpha, rule.min_samples);
}

nlohmann::json toJson(const ChangeDecision& d) {
  auto opt = [](const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
  return {{"test", d.test},
          {"p_value", opt(d.p_value)},
          {"p_floor", opt(d.p_floor)},
          {"z", opt(d.z)},
          {"significant", d.significant},
          {"noise_pct", d.noise_pct},
          {"spread_factor", d.spread_factor},
          {"between_pct", d.between_pct},
          {"fleet_pct", d.fleet_pct},
          {"fleet_boards", d.fleet_boards},
          {"jitter_pct", d.jitter_pct},
          {"min_effect_pct", d.min_effect_pct},
          {"threshold_pct", d.threshold_pct},
          {"base_samples", d.base_samples},
          {"new_samples", d.new_samples},
          {"base_runs", d.base_runs},
          {"new_runs", d.new_runs},
          {"rule", d.rule}};
}

Status checkSameHardware(const Run& base, const Run& fresh, const std::string& what, const std::string& flag) {
  const std::string mismatch = hardwareMismatch(base.fingerprint, base.kind.name, fresh.fingerprint, fresh.kind.name);
  if (mismatch.empty()) return Status::ok();
  return PEERLAB_INVALID_ARGUMENT(what + ": different hardware: " + mismatch +
                                  "; runs of different GPU models or "
                                  "counts differ by design, not by a regression (pass " +
                                  flag + " to compare them anyway)");
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
  report.rule = options;
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
    std::string result, metric, base, fresh, change, min_effect, test, verdict;
  };
  std::ostringstream out;
  out << "noise rule: " << describeNoiseRule(report.rule) << "\n";
  if (report.fingerprint_changes.empty()) {
    out << "fingerprint: unchanged (driver, CUDA, NCCL, GPUs)\n\n";
  } else {
    out << "FINGERPRINT CHANGED:\n";
    for (const std::string& c : report.fingerprint_changes)
      out << "  " << c << "\n";
    out << "\n";
  }
  std::vector<Line> lines;
  lines.push_back({"result", "metric", "base", "new", "change", "min effect", "noise test (samples)", "verdict"});
  for (const CompareRow& r : report.rows) {
    if (only_changes && (r.verdict == Verdict::kSame || r.verdict == Verdict::kUnchangedStatus)) continue;
    Line l;
    l.result = describeResult(r.fresh ? *r.fresh : *r.base);
    l.metric = metricLabel(r.metric);
    if (r.metric == "status") {
      l.base = r.base ? r.base->status : "-";
      l.fresh = r.fresh ? r.fresh->status : "-";
    } else {
      l.base = tableFigure(r.base_value);
      l.fresh = tableFigure(r.new_value);
    }
    l.change = r.change_pct ? formatted("%+.2f%%", *r.change_pct) : "";
    if (r.decision) {
      l.min_effect = r.decision->minEffectCell();
      l.test = r.decision->testCell();
    }
    l.verdict = verdictName(r.verdict);
    if (r.verdict == Verdict::kStatusRegressed && r.note.rfind("wrong", 0) == 0) l.verdict += " (" + r.note + ")";
    // Long statuses would wreck the table: keep their head, the full text stays in the run file.
    for (std::string* s : {&l.base, &l.fresh}) {
      if (s->size() > 28) *s = s->substr(0, 25) + "...";
    }
    lines.push_back(std::move(l));
  }
  size_t w[7] = {0, 0, 0, 0, 0, 0, 0};
  for (const Line& l : lines) {
    w[0] = std::max(w[0], std::min<size_t>(l.result.size(), 72));
    w[1] = std::max(w[1], l.metric.size());
    w[2] = std::max(w[2], l.base.size());
    w[3] = std::max(w[3], l.fresh.size());
    w[4] = std::max(w[4], l.change.size());
    w[5] = std::max(w[5], l.min_effect.size());
    w[6] = std::max(w[6], l.test.size());
  }
  auto pad = [](const std::string& s, size_t n, bool right) {
    if (s.size() >= n) return s;
    return right ? std::string(n - s.size(), ' ') + s : s + std::string(n - s.size(), ' ');
  };
  for (size_t i = 0; i < lines.size(); ++i) {
    const Line& l = lines[i];
    out << pad(l.result, w[0], false) << "  " << pad(l.metric, w[1], false) << "  " << pad(l.base, w[2], true) << "  "
        << pad(l.fresh, w[3], true) << "  " << pad(l.change, w[4], true) << "  " << pad(l.min_effect, w[5], true)
        << "  " << pad(l.test, w[6], false) << "  " << l.verdict << "\n";
    if (i == 0) out << std::string(w[0] + w[1] + w[2] + w[3] + w[4] + w[5] + w[6] + 14 + 8, '-') << "\n";
  }
  if (report.missing() > 0) {
    out << "\nMISSING in the new run (" << report.missing() << "):\n";
    for (const CompareRow& r : report.rows) {
      if (r.verdict == Verdict::kOnlyBase) out << "  " << describeResult(*r.base) << "\n";
    }
  }
  out << report.rows.size() << " results: " << report.count(Verdict::kRegressed) << " regressed, "
      << report.count(Verdict::kStatusRegressed) << " status regressions, " << report.count(Verdict::kImproved)
      << " improved, " << report.count(Verdict::kFixed) << " fixed, " << report.count(Verdict::kSame)
      << " same (within the minimum effect or not significant), " << report.count(Verdict::kUnchangedStatus)
      << " not measured on either side, " << report.count(Verdict::kOnlyBase) << " only in base, "
      << report.count(Verdict::kOnlyNew) << " only in new\n";
  return out.str();
}

std::string formatThreshold(double pct) {
  return formatted("%g%%", pct);
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
