#include "harness/qualify/checks.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "harness/report/aggregate.h"
#include "harness/report/compare.h"

namespace peerlab::qualify {

using report::Check;
using report::Result;

namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

std::string pairName(const Result& r) {
  // One GPU's own result (host paths, device-local copies).
  if (r.src && (!r.dst || *r.dst == *r.src)) return " gpu " + std::to_string(*r.src);
  if (!r.src || !r.dst) return "";
  return " " + std::to_string(*r.src) + "->" + std::to_string(*r.dst);
}

std::string joinSome(const std::vector<std::string>& items, size_t most = 6) {
  std::string s;
  for (size_t i = 0; i < items.size() && i < most; ++i)
    s += (i ? ", " : "") + items[i];
  if (items.size() > most) s += ", ... (" + std::to_string(items.size()) + " in all)";
  return s;
}

bool isOk(const Result& r) {
  return r.status == "ok";
}

std::optional<double> metricOf(const Result& r, const std::string& metric) {
  return metric == "busbw_gbps" ? r.busbw_gbps : r.algbw_gbps;
}

void topologyChecks(const CheckInputs& in, std::vector<Check>& out) {
  const PlanTopology& t = in.plan->topology;
  std::map<std::string, int> models;
  for (const PlanGpu& g : t.gpus)
    ++models[g.model];
  std::string desc;
  for (const auto& [m, n] : models)
    desc += (desc.empty() ? "" : ", ") + std::to_string(n) + "x " + m;
  out.push_back({"topology", "NVIDIA GPUs present", !t.gpus.empty(),
                 std::to_string(t.gpus.size()) + " GPUs (" + desc + ")", ">= 1",
                 t.gpus.empty() ? t.no_gpu_message : "found in " + t.source, static_cast<double>(t.gpus.size()), 1.0});
  // CUDA must see every GPU the PCI topology has: a GPU that fell off the bus or failed to initialise shows here.
  if (!in.run->fingerprint.gpus.empty() && t.format == "live") {
    const size_t cuda = in.run->fingerprint.gpus.size();
    out.push_back({"topology", "CUDA sees every GPU", cuda == t.gpus.size(), std::to_string(cuda) + " visible to CUDA",
                   std::to_string(t.gpus.size()) + " in the PCI topology",
                   cuda == t.gpus.size()
                       ? "all GPUs usable"
                       : "CUDA and the PCI topology disagree (CUDA_VISIBLE_DEVICES set, or a GPU failed)",
                   static_cast<double>(cuda), static_cast<double>(t.gpus.size())});
  }
  if (in.config->require_link_info && t.gpus.size() > 1) {
    // A pair is known when the topology says whether it has NVLink and, without NVLink, both GPUs' PCIe rates.
    std::vector<std::string> unknown, noRate;
    for (const PlanPair& p : t.pairs) {
      const std::string name = std::to_string(p.src) + "->" + std::to_string(p.dst);
      if (!p.nvlinks) {
        unknown.push_back(name);
        continue;
      }
      if (*p.nvlinks > 0) continue;
      for (const PlanGpu& g : t.gpus) {
        if ((g.index == p.src || g.index == p.dst) && !g.pcie) {
          noRate.push_back(name);
          break;
        }
      }
    }
    const size_t missing = unknown.size() + noRate.size();
    std::string reason = "NVLink information from " + (t.nvlink_source.empty() ? t.source : t.nvlink_source);
    if (missing) {
      reason.clear();
      if (!unknown.empty()) reason = "no NVLink information for " + joinSome(unknown);
      if (!noRate.empty()) {
        reason += std::string(reason.empty() ? "" : "; ") + "no NVLink and no PCIe rate for " + joinSome(noRate);
      }
      reason += " (set require_link_info = false to qualify without bandwidth expectations)";
    }
    out.push_back({"topology", "link information for every pair", missing == 0,
                   missing == 0 ? "known for " + std::to_string(t.pairs.size()) + " pairs"
                                : "unknown for " + std::to_string(missing) + " pairs",
                   "known for " + std::to_string(t.pairs.size()) + " pairs", reason,
                   static_cast<double>(t.pairs.size() - missing), static_cast<double>(t.pairs.size())});
  }

  // GPUs of one model in one machine have the same number of active NVLinks; one fewer is a link down.
  std::map<std::string, std::map<int, std::vector<int>>> linksByModel;
  for (const PlanGpu& g : t.gpus) {
    if (g.nvlinks) linksByModel[g.model][*g.nvlinks].push_back(g.index);
  }
  for (const auto& [model, counts] : linksByModel) {
    int most = 0, least = 1 << 30;
    std::string detail;
    for (const auto& [links, gpus] : counts) {
      most = std::max(most, links);
      least = std::min(least, links);
      std::string list;
      for (int g : gpus)
        list += (list.empty() ? "" : ",") + std::to_string(g);
      detail += (detail.empty() ? "" : "; ") + std::to_string(links) + " links on GPU " + list;
    }
    if (most == 0) continue;
    out.push_back({"topology", "active NVLinks equal on every " + model, most == least,
                   most == least ? std::to_string(most) + " links per GPU" : detail,
                   std::to_string(most) + " on every GPU",
                   most == least ? "no link down" : "a GPU has fewer active NVLinks than its peers: a link is down",
                   static_cast<double>(least), static_cast<double>(most)});
  }
}

void probeChecks(const CheckInputs& in, std::vector<Check>& out) {
  bool any = false;
  for (const Result& r : in.run->results)
    any |= r.suite == "probe" && r.src && r.dst;
  if (!any) {
    if (in.probe_expected) {
      std::string why = "the probe produced no cells";
      for (const Result& r : in.run->results) {
        if (r.suite == "probe" && r.status != "ok") why = r.status;
      }
      out.push_back({"probe", "verified probe ran", false, "no cells", "a verdict per method and pair", why, 0.0, {}});
    }
    return;
  }
  for (const report::ProbeGrid& g : report::probeGrids(*in.run)) {
    int claimed = 0, verified = 0, cells = 0;
    std::vector<std::string> lies, unclaimedBad, unclaimedOk;
    for (int i = 0; i < g.gpus; ++i) {
      for (int j = 0; j < g.gpus; ++j) {
        const size_t idx = static_cast<size_t>(i * g.gpus + j);
        const std::string& v = g.verdict[idx];
        if (v.empty()) continue;
        ++cells;
        const std::string cell = std::to_string(i) + "->" + std::to_string(j);
        if (g.claimed[idx].value_or(false)) {
          ++claimed;
          if (v == "ok") {
            ++verified;
          } else {
            lies.push_back(cell + " " + v);
          }
        } else if (v == "ok") {
          unclaimedOk.push_back(cell);
        } else if (report::statusRank(v) == 0) {
          unclaimedBad.push_back(cell + " " + v);
        }
      }
    }
    const bool pass = lies.empty() && (!in.config->fail_unclaimed || unclaimedBad.empty());
    std::string reason;
    if (!lies.empty()) reason = "claimed by the driver but not verified: " + joinSome(lies);
    if (in.config->fail_unclaimed && !unclaimedBad.empty()) {
      reason += std::string(reason.empty() ? "" : "; ") + "unclaimed cells failing: " + joinSome(unclaimedBad);
    }
    if (reason.empty()) {
      reason = claimed ? "every claimed cell verified on the destination's GPU" : "the driver claims no cell";
      if (!unclaimedOk.empty()) reason += "; verified although not claimed: " + joinSome(unclaimedOk);
      if (!unclaimedBad.empty()) reason += "; unclaimed and not working: " + joinSome(unclaimedBad);
    }
    out.push_back({"probe", "probe " + g.method + ": claimed cells verify", pass,
                   std::to_string(verified) + " of " + std::to_string(claimed) + " claimed cells verified (" +
                       std::to_string(cells) + " cells)",
                   std::to_string(claimed) + " of " + std::to_string(claimed), reason, static_cast<double>(verified),
                   static_cast<double>(claimed)});
  }
}

// Machine health: one check per GPU and health result, measured = the verdict. A fail fails qualify; a warn passes
// as a warning; unsupported passes as "could not be checked", never as ok (see healthLevel).
void healthChecks(const CheckInputs& in, std::vector<Check>& out) {
  for (const Result& r : in.run->results) {
    if (r.suite != "health") continue;
    Check c;
    c.category = "health";
    c.name = r.name + " GPU " + (r.src ? std::to_string(*r.src) : std::string("?"));
    c.pass = r.status != "fail";
    c.measured = r.status;
    c.expected = "ok";
    c.reason = r.detail.empty() ? r.status : r.detail;
    out.push_back(std::move(c));
  }
}

// Benchmark results taken on a GPU whose clocks a failing reason held down (marked "throttled" by the health watch):
// one failed check per suite and GPU, so that the affected benchmark fails, not only the GPU's clock_events check.
void throttleChecks(const CheckInputs& in, std::vector<Check>& out) {
  std::map<std::pair<std::string, int>, std::pair<int, std::string>> hits;  // (suite, gpu) -> (results, reasons)
  std::vector<std::pair<std::string, int>> order;
  for (const Result& r : in.run->results) {
    if (r.suite == "health" || !r.extra.contains("throttled") || !r.extra["throttled"].is_array()) continue;
    std::string reasons;
    for (const auto& x : r.extra["throttled"])
      if (x.is_string()) reasons += (reasons.empty() ? "" : ",") + x.get<std::string>();
    for (const std::optional<int>& g : {r.src, r.dst}) {
      if (!g) continue;
      const auto key = std::make_pair(r.suite, *g);
      if (!hits.count(key)) order.push_back(key);
      ++hits[key].first;
      hits[key].second = reasons;
    }
  }
  for (const auto& key : order) {
    const auto& [count, reasons] = hits[key];
    out.push_back({"health", key.first + " on GPU " + std::to_string(key.second) + " measured at full clocks", false,
                   "throttled: " + reasons, "no HW slowdown, thermal or power-brake slowdown",
                   std::to_string(count) + " results involve a GPU whose clocks were held down during the benchmarks: "
                                           "their figures are not trusted",
                   static_cast<double>(count), 0.0});
  }
}

void dataChecks(const CheckInputs& in, std::vector<Check>& out) {
  for (const std::string& suite : report::suitesIn(*in.run)) {
    if (suite == "probe" || suite == "health") continue;
    int ok = 0, skipped = 0;
    bool ownSkipped = false;  // a peerlab implementation (not a baseline) did not run
    std::vector<std::string> failed, skips;
    for (const Result& r : in.run->results) {
      if (r.suite != suite) continue;
      const int rank = report::statusRank(r.status);
      if (rank == 2 && !(r.wrong && *r.wrong > 0)) {
        ++ok;
      } else if (rank == 1) {
        ++skipped;
        ownSkipped |= !report::isBaselineImpl(r.impl);
        if (std::find(skips.begin(), skips.end(), r.status) == skips.end()) skips.push_back(r.status);
      } else {
        std::string why = r.status;
        if (rank == 2) why = fmt("%.0f wrong elements", *r.wrong);
        failed.push_back(report::describeResult(r) + ": " + why);
      }
    }
    // A suite where only baselines were skipped (torch not installed, say) measured nothing of peerlab's to fail.
    const bool pass = failed.empty() && (ok > 0 || !ownSkipped);
    std::string reason;
    if (!failed.empty()) {
      reason = joinSome(failed, 4);
    } else if (ok == 0) {
      reason = (pass ? "only baselines, all skipped: " : "nothing was measured: ") + joinSome(skips, 3);
    } else {
      reason = "every result ran and its data verified";
      if (skipped) reason += "; skipped: " + joinSome(skips, 3);
    }
    out.push_back({"data", suite + ": results ran and verified", pass,
                   std::to_string(ok) + " ok, " + std::to_string(skipped) + " skipped, " +
                       std::to_string(failed.size()) + " failed",
                   "0 failed, 0 wrong elements", reason, static_cast<double>(failed.size()), 0.0});
  }
}

// Results matching a rule, grouped by what is checked separately (impl, name, ranks and, for pair scope, the pair).
using GroupKey = std::tuple<std::string, std::string, int, int, int>;

void bandwidthChecks(const CheckInputs& in, std::vector<Check>& out, std::set<std::string>& matchedRules) {
  for (const Expectation& e : in.plan->expectations) {
    std::map<GroupKey, const Result*> best;
    std::vector<GroupKey> order;
    for (const Result& r : in.run->results) {
      if (r.suite != e.suite || !isOk(r) || !globMatch(e.impl, r.impl) || !globMatch(e.name, r.name)) continue;
      if (e.src && (r.src != e.src || r.dst != e.dst)) continue;
      if (!r.bytes || *r.bytes < e.min_bytes) continue;
      const std::optional<double> v = metricOf(r, e.metric);
      if (!v) continue;
      GroupKey key{r.impl, r.name, r.ranks, r.src.value_or(-1), r.dst.value_or(-1)};
      if (!best.count(key)) order.push_back(key);
      const Result*& b = best[key];
      if (!b || *metricOf(*b, e.metric) < *v) b = &r;
    }
    if (!order.empty()) matchedRules.insert(e.rule);
    for (const GroupKey& key : order) {
      const Result& r = *best[key];
      const double v = *metricOf(r, e.metric);
      const std::string metric = e.metric == "busbw_gbps" ? "busbw" : "algbw";
      const std::string ranks = r.ranks > 1 && !r.src ? " x" + std::to_string(r.ranks) : "";
      const std::string measured = fmt("%.1f GB/s", v) + " " + metric + " at " + report::formatBytes(*r.bytes);
      const std::string name = r.suite + " " + r.impl + " " + r.name + ranks + pairName(r);
      if (!e.gbps) {
        // Nothing to compare with: the check says so, and passes only where the config accepts unknown links.
        out.push_back(
            {"bandwidth", name, !in.config->require_link_info, measured, "unknown",
             e.basis + (in.config->require_link_info ? " (require_link_info = true)" : "") + " [rule " + e.rule + "]",
             v, std::nullopt});
        continue;
      }
      const double floor = *e.gbps;
      const double ratio = floor > 0 ? v / floor : 0;
      out.push_back({"bandwidth", name, v >= floor, measured, fmt(">= %.1f GB/s", floor) + " (" + e.basis + ")",
                     fmt("%.1f%% of the expected figure", ratio * 100) + (v >= floor ? "" : ": below the floor") +
                         " [rule " + e.rule + "]",
                     v, floor});
    }
  }
}

void latencyChecks(const CheckInputs& in, std::vector<Check>& out, std::set<std::string>& matchedRules) {
  for (const LatencyRule& l : in.plan->latency) {
    std::map<GroupKey, const Result*> worst;
    std::vector<GroupKey> order;
    for (const Result& r : in.run->results) {
      if (r.suite != l.suite || !isOk(r) || !globMatch(l.impl, r.impl) || !globMatch(l.name, r.name)) continue;
      if (!r.time_us || (r.bytes && *r.bytes > l.max_bytes)) continue;
      GroupKey key{r.impl, r.name, r.ranks, r.src.value_or(-1), r.dst.value_or(-1)};
      if (!worst.count(key)) order.push_back(key);
      const Result*& w = worst[key];
      if (!w || *w->time_us < *r.time_us) w = &r;
    }
    if (!order.empty()) matchedRules.insert(l.id);
    for (const GroupKey& key : order) {
      const Result& r = *worst[key];
      const std::string ranks = r.ranks > 1 && !r.src ? " x" + std::to_string(r.ranks) : "";
      const bool pass = *r.time_us <= l.max_us;
      out.push_back({"latency", r.suite + " " + r.impl + " " + r.name + ranks + pairName(r), pass,
                     fmt("%.2f us", *r.time_us) + (r.bytes ? " at " + report::formatBytes(*r.bytes) : ""),
                     fmt("<= %g us", l.max_us) + (l.note.empty() ? "" : " (" + l.note + ")"),
                     (pass ? std::string("within the bound") : std::string("slower than the bound")) +
                         " (slowest size up to " + (l.max_bytes >= 1e14 ? "any" : report::formatBytes(l.max_bytes)) +
                         ") [rule " + l.id + "]",
                     *r.time_us, l.max_us});
    }
  }
}

// A rule whose implementations ran, but never at the sizes the rule needs (or without its metric), checks nothing:
// the sweep and the config disagree, and that must not pass silently.
void coverageChecks(const CheckInputs& in, std::vector<Check>& out, const std::set<std::string>& matchedRules) {
  std::set<std::string> seen;
  for (const Expectation& e : in.plan->expectations) {
    if (!seen.insert("expect." + e.rule).second || matchedRules.count(e.rule)) continue;
    int candidates = 0;
    double largest = 0;
    for (const Result& r : in.run->results) {
      if (r.suite != e.suite || !isOk(r) || !globMatch(e.impl, r.impl) || !globMatch(e.name, r.name)) continue;
      ++candidates;
      if (r.bytes) largest = std::max(largest, *r.bytes);
    }
    if (candidates == 0) continue;
    out.push_back(
        {"coverage", "expect." + e.rule + " has results to check", false,
         std::to_string(candidates) + " results of " + e.suite + " " + e.impl + " " + e.name + ", largest " +
             report::formatBytes(largest),
         (e.metric == "busbw_gbps" ? "busbw" : "algbw") + std::string(" at >= ") + report::formatBytes(e.min_bytes),
         "no result reached the size the expectation needs (or none reported " + e.metric +
             "): run a sweep that includes it, or lower min_bytes",
         static_cast<double>(largest), e.min_bytes});
  }
  for (const LatencyRule& l : in.plan->latency) {
    if (matchedRules.count(l.id)) continue;
    int candidates = 0;
    double smallest = 0;
    for (const Result& r : in.run->results) {
      if (r.suite != l.suite || !isOk(r) || !globMatch(l.impl, r.impl) || !globMatch(l.name, r.name)) continue;
      if (r.bytes && (candidates == 0 || *r.bytes < smallest)) smallest = *r.bytes;
      ++candidates;
    }
    if (candidates == 0) continue;
    out.push_back({"coverage", "latency." + l.id + " has results to check", false,
                   std::to_string(candidates) + " results of " + l.suite + " " + l.impl + " " + l.name + ", smallest " +
                       report::formatBytes(smallest),
                   "time_us at <= " + report::formatBytes(l.max_bytes),
                   "no result with a time at the sizes the bound is for: run a sweep that includes them, or raise "
                   "max_bytes",
                   smallest, l.max_bytes});
  }
}

void baselineChecks(const CheckInputs& in, std::vector<Check>& out) {
  report::CompareReport rep = report::compareRuns(*in.baseline, *in.run, {in.baseline_threshold_pct});
  std::set<std::string> suitesRun;
  for (const Result& r : in.run->results)
    suitesRun.insert(r.suite);
  std::vector<std::string> missing;
  for (const report::CompareRow& row : rep.rows) {
    if (row.verdict == report::Verdict::kOnlyBase) {
      if (suitesRun.count(row.base->suite)) missing.push_back(report::describeResult(*row.base));
      continue;
    }
    if (row.verdict == report::Verdict::kOnlyNew || row.verdict == report::Verdict::kUnchangedStatus) continue;
    const Result& r = *row.fresh;
    const bool pass = !report::isRegression(row.verdict);
    std::string measured, expected;
    if (row.metric == "status") {
      measured = r.status;
      expected = "status " + row.base->status;
    } else {
      const std::string unit = row.metric == "time_us" ? " us" : " GB/s";
      measured = fmt("%.4g", *row.new_value) + unit;
      expected = (row.metric == "time_us" ? "<= " : ">= ") +
                 fmt("%.4g", row.metric == "time_us" ? *row.base_value * (1 + in.baseline_threshold_pct / 100)
                                                     : *row.base_value * (1 - in.baseline_threshold_pct / 100)) +
                 unit + " (baseline " + fmt("%.4g", *row.base_value) + unit + fmt(" -%g%%)", in.baseline_threshold_pct);
    }
    std::string reason = report::verdictName(row.verdict);
    if (row.change_pct) reason += fmt(" (%+.1f%%)", *row.change_pct);
    if (!row.note.empty() && row.metric == "status") reason += ": " + row.note;
    out.push_back(
        {"baseline", report::describeResult(r), pass, measured, expected, reason, row.new_value, row.base_value});
  }
  out.push_back({"baseline", "baseline results present in this run", missing.empty(),
                 std::to_string(missing.size()) + " missing", "0 missing",
                 missing.empty() ? "every baseline result of the suites that ran was measured again"
                                 : "missing: " + joinSome(missing, 4) +
                                       " (was the baseline made in another mode, --quick/--full, or with other pairs?)",
                 static_cast<double>(missing.size()), 0.0});
}

}  // namespace

std::string healthLevel(const Check& check) {
  const std::string v = report::checkVerdict(check);
  return v == "warn" || v == "unsupported" ? v : "";
}

std::vector<Check> evaluateChecks(const CheckInputs& in) {
  std::vector<Check> out;
  topologyChecks(in, out);
  healthChecks(in, out);
  throttleChecks(in, out);
  probeChecks(in, out);
  dataChecks(in, out);
  std::set<std::string> matched;
  bandwidthChecks(in, out, matched);
  latencyChecks(in, out, matched);
  coverageChecks(in, out, matched);
  if (in.baseline) baselineChecks(in, out);
  return out;
}

}  // namespace peerlab::qualify
