#include "harness/report/evaluate.h"

#include <fnmatch.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "harness/report/actions.h"
#include "harness/report/compare.h"
#include "harness/report/format.h"
#include "harness/report/run_rows.h"

namespace peerlab::report {

namespace {

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

// A record that a process failed (a benchmark or the probe that could not run), not a measurement.
bool isProcessRecord(const Result& r) {
  return r.name == "process" && statusRank(r.status) == 0;
}

std::string ranksText(const Result& r) {
  return r.ranks > 1 && !r.src ? " x" + std::to_string(r.ranks) : "";
}

std::optional<double> metricOf(const Result& r, const std::string& metric) {
  std::optional<double> v = metric == "busbw_gbps" ? r.busbw_gbps : r.algbw_gbps;
  if (!v || !std::isfinite(*v)) return std::nullopt;
  return v;
}

Check make(std::string category, std::string name, CheckStatus status, std::string measured, std::string expected,
           std::string basis, std::string reason, std::optional<double> measured_value = std::nullopt,
           std::optional<double> expected_value = std::nullopt) {
  Check c;
  c.category = std::move(category);
  c.name = std::move(name);
  c.status = status;
  c.measured = std::move(measured);
  c.expected = std::move(expected);
  c.basis = std::move(basis);
  c.reason = std::move(reason);
  c.measured_value = measured_value;
  c.expected_value = expected_value;
  return c;
}

// A failed check carries the action its kind of failure calls for (harness/report/actions.h).
Check act(Check c, const std::string& key) {
  if (c.failed()) c.action = actionFor(key);
  return c;
}

CheckStatus passOrFail(bool pass) {
  return pass ? CheckStatus::kPass : CheckStatus::kFail;
}

void topologyChecks(const Run& run, const RunPlan& plan, std::vector<Check>& out) {
  if (!plan.topology) return;
  const PlanTopology& t = *plan.topology;
  std::map<std::string, int> models;
  for (const PlanGpu& g : t.gpus)
    ++models[g.model];
  std::string desc;
  for (const auto& [m, n] : models)
    desc += (desc.empty() ? "" : ", ") + std::to_string(n) + "x " + m;
  out.push_back(act(
      make("topology", "NVIDIA GPUs present", passOrFail(!t.gpus.empty()),
           std::to_string(t.gpus.size()) + " GPUs" + (desc.empty() ? "" : " (" + desc + ")"), ">= 1",
           "the plan's topology (" + t.source + ")",
           t.gpus.empty() ? (t.no_gpu_message.empty() ? "no NVIDIA GPU" : t.no_gpu_message) : "found in " + t.source,
           static_cast<double>(t.gpus.size()), 1.0),
      "topology.gpus_present"));
  // CUDA must see every GPU the PCI topology has: a GPU that fell off the bus or failed to initialise shows here.
  if (!run.fingerprint.gpus.empty() && t.format == "live") {
    const size_t cuda = run.fingerprint.gpus.size();
    out.push_back(act(
        make("topology", "CUDA sees every GPU", passOrFail(cuda == t.gpus.size()),
             std::to_string(cuda) + " visible to CUDA", std::to_string(t.gpus.size()), "GPUs in the PCI topology",
             cuda == t.gpus.size() ? "all GPUs usable"
                                   : "CUDA and the PCI topology disagree (CUDA_VISIBLE_DEVICES set, or a GPU failed)",
             static_cast<double>(cuda), static_cast<double>(t.gpus.size())),
        "topology.cuda_sees"));
  }
  if (plan.require_link_info && t.gpus.size() > 1) {
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
      reason += " (require_link_info = true; set it false to qualify without bandwidth expectations)";
    }
    out.push_back(act(make("topology", "link information for every pair", passOrFail(missing == 0),
                           missing == 0 ? "known for " + std::to_string(t.pairs.size()) + " pairs"
                                        : "unknown for " + std::to_string(missing) + " pairs",
                           "known for " + std::to_string(t.pairs.size()) + " pairs", "[qualify] require_link_info",
                           reason, static_cast<double>(t.pairs.size() - missing), static_cast<double>(t.pairs.size())),
                      "topology.link_info"));
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
    out.push_back(
        act(make("topology", "active NVLinks equal on every " + model, passOrFail(most == least),
                 most == least ? std::to_string(most) + " links per GPU" : detail,
                 std::to_string(most) + " on every GPU", "GPUs of one model in one machine",
                 most == least ? "no link down" : "a GPU has fewer active NVLinks than its peers: a link is down",
                 static_cast<double>(least), static_cast<double>(most)),
            "topology.nvlinks_equal"));
  }
}

// The action for the XIDs the watch saw on `gpu` (run.extra.health.xids): the most drastic of their actions.
std::string xidAction(const Run& run, std::optional<int> gpu) {
  std::string action;
  if (!gpu || !run.extra.is_object() || !run.extra.contains("health")) return actionFor("health.xid");
  const auto& h = run.extra["health"];
  if (!h.is_object() || !h.contains("xids") || !h["xids"].is_array()) return actionFor("health.xid");
  for (const auto& x : h["xids"]) {
    if (!x.is_object() || !x.contains("gpu") || !x.contains("xid")) continue;
    if (!x["gpu"].is_number_integer() || x["gpu"].get<long long>() != *gpu) continue;
    if (!x["xid"].is_number_unsigned() && !x["xid"].is_number_integer()) continue;
    action = moreDrastic(action, actionFor("health.xid." + std::to_string(x["xid"].get<long long>())));
  }
  return action.empty() ? actionFor("health.xid") : action;
}

// Machine health: one check per GPU and health result; the verdict's numbers are the reason.
void healthChecks(const Run& run, std::vector<Check>& out) {
  for (const Result& r : run.results) {
    if (r.suite != "health") continue;
    CheckStatus s = CheckStatus::kFail;
    if (r.status == "ok") {
      s = CheckStatus::kPass;
    } else if (r.status == "warn") {
      s = CheckStatus::kWarn;
    } else if (r.status == "unsupported" || r.status.rfind("unsupported", 0) == 0) {
      s = CheckStatus::kUnsupported;
    } else if (r.status.rfind("skipped", 0) == 0) {
      s = CheckStatus::kSkipped;
    }
    const std::string gpu = r.src ? "GPU " + std::to_string(*r.src) : std::string("host");
    Check c = act(make("health", r.name + " " + gpu, s, r.status, "ok", "[health] thresholds (DCGM's defaults)",
                       r.detail.empty() ? r.status : r.detail),
                  "health." + r.name);
    if (c.failed() && r.name == "xid") c.action = xidAction(run, r.src);
    out.push_back(std::move(c));
  }
}

// Benchmark results taken on a GPU whose clocks a failing reason held down (marked "throttled" by the health watch):
// one failed check per suite and GPU.
void throttleChecks(const Run& run, std::vector<Check>& out) {
  std::map<std::pair<std::string, int>, std::pair<int, std::string>> hits;  // (suite, gpu) -> (results, reasons)
  std::vector<std::pair<std::string, int>> order;
  for (const Result& r : run.results) {
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
    out.push_back(act(make("health", key.first + " on GPU " + std::to_string(key.second) + " measured at full clocks",
                           CheckStatus::kFail, "throttled: " + reasons,
                           "no HW slowdown, thermal or power-brake slowdown", "[health] clock_fail_reasons",
                           std::to_string(count) +
                               " results involve a GPU whose clocks were held down during the "
                               "benchmarks (" +
                               reasons + "): their figures are not trusted",
                           static_cast<double>(count), 0.0),
                      "health.throttled"));
  }
}

void probeChecks(const Run& run, const RunPlan* plan, std::vector<Check>& out) {
  const std::vector<ProbeCell> cells = probeCells(run);
  std::string processError;
  for (const Result& r : run.results) {
    if (isVerdictSuite(r.suite) && isProcessRecord(r)) processError = r.status;
  }
  if (cells.empty()) {
    if (plan && !plan->probe) {
      out.push_back(make(kProbeCategory, "verified probe", CheckStatus::kSkipped, "not run",
                         "a verdict per method and pair", "the plan's \"probe\": false",
                         plan->pairs.empty() ? "not run: the topology has no GPU pair"
                                             : "not run: the plan did not run the probe (--skip-probe)"));
    } else if ((plan && plan->probe) || !processError.empty()) {
      out.push_back(
          act(make(kProbeCategory, "verified probe", CheckStatus::kFail, "no cells", "a verdict per method and pair",
                   "the plan's \"probe\": true",
                   processError.empty() ? "the plan ran the probe but the run holds no probe cell" : processError, 0.0,
                   std::nullopt),
              "probe.process"));
    }
    return;
  }
  if (!processError.empty()) {
    out.push_back(act(make(kProbeCategory, "probe process completed", CheckStatus::kFail, processError, "exit 0 or 1",
                           "peerlab probe", processError),
                      "probe.process"));
  }
  const bool failUnclaimed = plan && plan->fail_unclaimed;
  std::vector<std::string> methods;
  for (const ProbeCell& c : cells) {
    if (std::find(methods.begin(), methods.end(), c.method) == methods.end()) methods.push_back(c.method);
  }
  for (const std::string& method : methods) {
    int n = 0, claimed = 0, verified = 0;
    std::vector<std::string> lies, unclaimedOk, unclaimedBad;
    std::string action;  // the most drastic of the failing cells' actions
    for (const ProbeCell& c : cells) {
      if (c.method != method) continue;
      ++n;
      const std::string cell = std::to_string(c.src) + "->" + std::to_string(c.dst);
      if (c.claimed.value_or(false)) {
        ++claimed;
        if (c.verdict == "ok") {
          ++verified;
        } else {
          lies.push_back(cell + " " + c.verdict);
          action = moreDrastic(action, actionFor("probe." + c.verdict));
        }
      } else if (c.verdict == "ok") {
        if (c.claimed.has_value()) unclaimedOk.push_back(cell);
      } else if (statusRank(c.verdict) == 0) {
        unclaimedBad.push_back(cell + " " + c.verdict);
      }
    }
    const bool pass = lies.empty() && (!failUnclaimed || unclaimedBad.empty());
    if (failUnclaimed && !unclaimedBad.empty()) action = moreDrastic(action, actionFor("probe.unclaimed"));
    std::string reason;
    if (!lies.empty()) reason = "claimed by the driver but not verified: " + joinSome(lies);
    if (failUnclaimed && !unclaimedBad.empty()) {
      reason += std::string(reason.empty() ? "" : "; ") + "unclaimed cells failing: " + joinSome(unclaimedBad);
    }
    if (reason.empty()) {
      reason = claimed ? "every claimed cell verified on the destination's GPU" : "the driver claims no cell";
      if (!unclaimedOk.empty()) reason += "; verified although not claimed: " + joinSome(unclaimedOk);
      if (!unclaimedBad.empty()) reason += "; unclaimed and not working: " + joinSome(unclaimedBad);
    }
    const std::string injected = injectionNote(run);
    if (!injected.empty()) reason += " (fault injection in this run: " + injected + "; not the driver's verdict)";
    Check check = make(kProbeCategory, "probe " + method + ": claimed cells verify", passOrFail(pass),
                       std::to_string(verified) + " of " + std::to_string(claimed) + " claimed cells verified (" +
                           std::to_string(n) + (n == 1 ? " cell" : " cells") + ")",
                       std::to_string(claimed) + " of " + std::to_string(claimed),
                       failUnclaimed ? "cudaDeviceCanAccessPeer; fail_unclaimed = true" : "cudaDeviceCanAccessPeer",
                       reason, static_cast<double>(verified), static_cast<double>(claimed));
    if (check.failed()) check.action = action;
    out.push_back(std::move(check));
  }
}

void dataChecks(const Run& run, const std::set<std::string>& planned, std::vector<Check>& out) {
  for (const std::string& suite : suitesIn(run)) {
    if (suite == "health" || isVerdictSuite(suite)) continue;
    int ok = 0, skipped = 0;
    bool ownSkipped = false;  // a peerlab implementation (not a baseline) did not run
    bool wrongData = false;   // a result ran and its data did not verify
    std::vector<std::string> failed, skips;
    for (const Result& r : run.results) {
      if (r.suite != suite) continue;
      const int rank = statusRank(r.status);
      if (rank == 2 && !(r.wrong && *r.wrong > 0)) {
        ++ok;
      } else if (rank == 1) {
        ++skipped;
        ownSkipped |= !isBaselineImpl(r.impl);
        if (std::find(skips.begin(), skips.end(), r.status) == skips.end()) skips.push_back(r.status);
      } else {
        const std::string why = rank == 2 ? formatted("%.0f wrong elements", *r.wrong) : r.status;
        wrongData |= rank == 2;
        failed.push_back(describeResult(r) + ": " + why);
      }
    }
    // A suite where only baselines were skipped (torch not installed, say) measured nothing of peerlab's to fail;
    // one the plan ran where peerlab's own implementations were all skipped verified nothing.
    CheckStatus status = CheckStatus::kPass;
    std::string reason;
    if (!failed.empty()) {
      status = CheckStatus::kFail;
      reason = joinSome(failed, 4);
    } else if (ok == 0 && ownSkipped) {
      status = planned.count(suite) ? CheckStatus::kFail : CheckStatus::kSkipped;
      reason = "nothing of peerlab's was measured: " + joinSome(skips, 3);
    } else if (ok == 0) {
      reason = "only baselines, all skipped: " + joinSome(skips, 3);
    } else {
      reason = "every result ran and its data verified";
      if (skipped) reason += "; skipped: " + joinSome(skips, 3);
    }
    out.push_back(act(make("data", suite + ": results ran and verified", status,
                           std::to_string(ok) + " ok, " + std::to_string(skipped) + " skipped, " +
                               std::to_string(failed.size()) + " failed",
                           "0 failed, 0 wrong elements", "seeded data checked on the GPU that owns it", reason,
                           static_cast<double>(failed.size()), 0.0),
                      failed.empty() ? "data.not_measured"
                      : wrongData    ? "data.wrong"
                                     : "data.failed"));
  }
}

// Results matching a rule, grouped by what is checked separately (impl, name, ranks and the pair or GPU).
using GroupKey = std::tuple<std::string, std::string, int, int, int>;

GroupKey groupOf(const Result& r) {
  return {r.impl, r.name, r.ranks, r.src.value_or(-1), r.dst.value_or(-1)};
}

bool matches(const Expectation& e, const Result& r) {
  return isOk(r) && expectationApplies(e, r);
}

void bandwidthChecks(const Run& run, const RunPlan& plan, std::vector<Check>& out, std::set<std::string>& matched) {
  for (const Expectation& e : plan.expectations) {
    std::map<GroupKey, const Result*> best;
    std::vector<GroupKey> order;
    for (const Result& r : run.results) {
      if (!matches(e, r) || !r.bytes || *r.bytes < e.min_bytes) continue;
      const std::optional<double> v = metricOf(r, e.metric);
      if (!v) continue;
      const GroupKey key = groupOf(r);
      if (!best.count(key)) order.push_back(key);
      const Result*& b = best[key];
      if (!b || *metricOf(*b, e.metric) < *v) b = &r;
    }
    if (!order.empty()) matched.insert("expect." + e.rule);
    const std::string metric = e.metric == "busbw_gbps" ? "busbw" : "algbw";
    for (const GroupKey& key : order) {
      const Result& r = *best[key];
      const double v = *metricOf(r, e.metric);
      const std::string measured = formatted("%.1f GB/s", v) + " " + metric + " at " + formatBytes(*r.bytes);
      const std::string name = r.suite + " " + r.impl + " " + r.name + ranksText(r) + describeWhere(r);
      const std::string basis = e.basis + " [rule " + e.rule + ", scope " + e.scope + "]";
      if (!e.gbps) {
        // Nothing to compare with: a failure where the config requires link information, else not checked.
        out.push_back(
            act(make("bandwidth", name, plan.require_link_info ? CheckStatus::kFail : CheckStatus::kSkipped, measured,
                     "unknown", basis,
                     plan.require_link_info ? "the expected figure is unknown and require_link_info = true: " + e.basis
                                            : "not checked: the expected figure is unknown (" + e.basis + ")",
                     v, std::nullopt),
                "bandwidth.unknown"));
        continue;
      }
      const double floor = *e.gbps;
      const double ratio = floor > 0 ? v / floor : 0;
      out.push_back(
          act(make("bandwidth", name, passOrFail(v >= floor), measured, formatted(">= %.1f GB/s", floor), basis,
                   formatted("%.1f%% of the expected figure", ratio * 100) +
                       (v >= floor ? "" : ": below the floor by " + formatted("%.1f GB/s", floor - v)),
                   v, floor),
              "bandwidth.below"));
    }
  }
}

void latencyChecks(const Run& run, const RunPlan& plan, std::vector<Check>& out, std::set<std::string>& matched) {
  for (const LatencyRule& l : plan.latency) {
    std::map<GroupKey, const Result*> worst;
    std::vector<GroupKey> order;
    for (const Result& r : run.results) {
      if (r.suite != l.suite || !isOk(r) || !globMatch(l.impl, r.impl) || !globMatch(l.name, r.name)) continue;
      if (!r.time_us || (r.bytes && *r.bytes > l.max_bytes)) continue;
      const GroupKey key = groupOf(r);
      if (!worst.count(key)) order.push_back(key);
      const Result*& w = worst[key];
      if (!w || *w->time_us < *r.time_us) w = &r;
    }
    if (!order.empty()) matched.insert("latency." + l.id);
    for (const GroupKey& key : order) {
      const Result& r = *worst[key];
      const bool pass = *r.time_us <= l.max_us;
      out.push_back(
          act(make("latency", r.suite + " " + r.impl + " " + r.name + ranksText(r) + describeWhere(r), passOrFail(pass),
                   formatted("%.2f us", *r.time_us) + (r.bytes ? " at " + formatBytes(*r.bytes) : ""),
                   formatted("<= %g us", l.max_us),
                   (l.note.empty() ? "" : l.note + " ") + "[rule " + l.id + ", sizes up to " +
                       (l.max_bytes >= 1e14 ? std::string("any") : formatBytes(l.max_bytes)) + "]",
                   pass ? "within the bound (the slowest size checked)"
                        : formatted("slower than the bound by %.2f us", *r.time_us - l.max_us),
                   *r.time_us, l.max_us),
              "latency.above"));
    }
  }
}

// A rule whose suite has results in the run but whose impl and name select none of them (whatever their status): a
// typo in a config, or a rule for implementations this run did not measure (a quick level runs a spot check). Nothing
// of it is checked, and every output says so: a skipped check, never a pass.
void unmatchedRule(const Run& run, const std::string& id, const std::string& suite, const std::string& impl,
                   const std::string& name, std::vector<Check>& out) {
  int ofSuite = 0;
  std::set<std::string> impls, names;
  for (const Result& r : run.results) {
    if (r.suite != suite || isProcessRecord(r)) continue;
    if (globMatch(impl, r.impl) && globMatch(name, r.name)) return;
    ++ofSuite;
    impls.insert(r.impl);
    names.insert(r.name.substr(0, r.name.find('/')));
  }
  if (ofSuite == 0) return;  // the suite did not run: nothing to say of the rule
  out.push_back(make("coverage", id + " selects a result", CheckStatus::kSkipped,
                     "0 of " + std::to_string(ofSuite) + " " + suite + " results", ">= 1",
                     "[rule " + id + ": impl " + impl + ", name " + name + "]",
                     "not checked: the rule selects none of the " + std::to_string(ofSuite) + " " + suite +
                         " results (impls: " + joinSome({impls.begin(), impls.end()}, 6) +
                         "; names: " + joinSome({names.begin(), names.end()}, 6) +
                         "): a typo in the config's impl or name, or implementations this run does not measure",
                     0.0, 1.0));
}

// Every suite the plan ran has results (a process failure record is not one); every rule whose implementations ran
// reached the sizes it needs.
void coverageChecks(const Run& run, const RunPlan& plan, const std::set<std::string>& planned,
                    const std::set<std::string>& matched, std::vector<Check>& out) {
  for (const std::string& suite : planned) {
    int n = 0;
    std::vector<std::string> failures;
    for (const Result& r : run.results) {
      if (r.suite != suite) continue;
      if (isProcessRecord(r)) {
        failures.push_back(r.status);
      } else {
        ++n;
      }
    }
    std::string reason = n > 0 ? "present" : "the plan ran suite " + suite + " but the run holds none of its results";
    if (n == 0 && !failures.empty()) reason += ": " + joinSome(failures, 2);
    out.push_back(act(make("coverage", "suite " + suite + " has results", passOrFail(n > 0),
                           std::to_string(n) + (n == 1 ? " result" : " results") +
                               (failures.empty() ? "" : " (+" + std::to_string(failures.size()) + " process failures)"),
                           ">= 1", "the plan's jobs", reason, static_cast<double>(n), 1.0),
                      "coverage.suite"));
  }
  std::set<std::string> seen;
  for (const Expectation& e : plan.expectations) {
    const std::string id = "expect." + e.rule;
    if (!seen.insert(id).second || matched.count(id)) continue;
    int candidates = 0;
    double largest = 0;
    for (const Result& r : run.results) {
      if (r.suite != e.suite || !isOk(r) || !globMatch(e.impl, r.impl) || !globMatch(e.name, r.name)) continue;
      ++candidates;
      if (r.bytes) largest = std::max(largest, *r.bytes);
    }
    if (candidates == 0) {
      unmatchedRule(run, id, e.suite, e.impl, e.name, out);
      continue;
    }
    out.push_back(
        act(make("coverage", id + " has results to check", CheckStatus::kFail,
                 std::to_string(candidates) + " results of " + e.suite + " " + e.impl + " " + e.name + ", largest " +
                     formatBytes(largest),
                 (e.metric == "busbw_gbps" ? "busbw" : "algbw") + std::string(" at >= ") + formatBytes(e.min_bytes),
                 "[rule " + e.rule + "]",
                 "no result reached the size the expectation needs (or none reported " + e.metric +
                     "): run a sweep that includes it, or lower min_bytes",
                 largest, e.min_bytes),
            "coverage.rule"));
  }
  for (const LatencyRule& l : plan.latency) {
    if (matched.count("latency." + l.id)) continue;
    int candidates = 0;
    double smallest = 0;
    for (const Result& r : run.results) {
      if (r.suite != l.suite || !isOk(r) || !globMatch(l.impl, r.impl) || !globMatch(l.name, r.name)) continue;
      if (r.bytes && (candidates == 0 || *r.bytes < smallest)) smallest = *r.bytes;
      ++candidates;
    }
    if (candidates == 0) {
      unmatchedRule(run, "latency." + l.id, l.suite, l.impl, l.name, out);
      continue;
    }
    out.push_back(act(make("coverage", "latency." + l.id + " has results to check", CheckStatus::kFail,
                           std::to_string(candidates) + " results of " + l.suite + " " + l.impl + " " + l.name +
                               ", smallest " + formatBytes(smallest),
                           "time_us at <= " + formatBytes(l.max_bytes), "[latency " + l.id + "]",
                           "no result with a time at the sizes the bound is for: run a sweep that includes them, or "
                           "raise max_bytes",
                           smallest, l.max_bytes),
                      "coverage.rule"));
  }
}

void baselineChecks(const Run& run, const RunPlan* plan, const EvaluateOptions& o, std::vector<Check>& out) {
  if (!o.baseline) {
    // Without the baseline run the checks made against it are kept as the run stored them.
    if (!run.extra.is_object() || !run.extra.contains("qualify") || !run.extra["qualify"].is_object()) return;
    const auto& q = run.extra["qualify"];
    if (!q.contains("checks")) return;
    auto stored = checksFromJson(q["checks"]);
    if (!stored.isOk()) return;
    for (Check& c : *stored) {
      if (c.category != "baseline") continue;
      if (c.reason.find("(as stored") == std::string::npos) c.reason += " (as stored: the baseline run was not read)";
      out.push_back(std::move(c));
    }
    return;
  }
  const NoiseRule& rule = o.baseline_rule;
  CompareReport rep = compareRuns(*o.baseline, run, rule);
  std::set<std::string> suitesRun;
  for (const Result& r : run.results)
    suitesRun.insert(r.suite);
  // The rows both hold are judged. A baseline row this run should have measured (same level, its suite ran, its pair
  // in this run's plan) and did not is missing; the others, and this run's rows the baseline lacks, are not compared
  // at this level: information, not a failure. A side without a plan has no level to tell: it counts as the same.
  const std::optional<RunPlan> basePlan = planOfRun(*o.baseline);
  const std::optional<RunPlan> runPlan = plan ? std::optional<RunPlan>(*plan) : planOfRun(run);
  const std::string baseLevel = basePlan ? std::string(levelName(basePlan->level)) : "unknown";
  const std::string runLevel = runPlan ? std::string(levelName(runPlan->level)) : "unknown";
  const bool sameLevel = !basePlan || !runPlan || baseLevel == runLevel;
  std::set<std::pair<int, int>> runPairs;
  if (runPlan) runPairs.insert(runPlan->pairs.begin(), runPlan->pairs.end());
  const auto expectedHere = [&](const Result& b) {
    if (!suitesRun.count(b.suite) || !sameLevel) return false;
    return !(runPlan && b.src && b.dst && *b.src != *b.dst && !runPairs.count({*b.src, *b.dst}));
  };
  std::vector<std::string> missing, notCompared, newOnly;
  for (const CompareRow& row : rep.rows) {
    if (row.verdict == Verdict::kOnlyBase) {
      (expectedHere(*row.base) ? missing : notCompared).push_back(describeResult(*row.base));
      continue;
    }
    if (row.verdict == Verdict::kOnlyNew) {
      if (row.fresh->suite != "test") newOnly.push_back(describeResult(*row.fresh));
      continue;
    }
    if (row.verdict == Verdict::kUnchangedStatus) continue;
    const Result& r = *row.fresh;
    std::string measured, expected;
    if (row.metric == "status") {
      measured = r.status;
      expected = "status " + row.base->status;
    } else {
      const std::string unit = row.metric == "time_us" ? " us" : " GB/s";
      const bool time = row.metric == "time_us";
      const double pct = row.decision ? row.decision->min_effect_pct : rule.threshold_pct;
      measured = formatted("%.4g", *row.new_value) + unit;
      expected = (time ? "<= " : ">= ") +
                 formatted("%.4g", time ? *row.base_value * (1 + pct / 100) : *row.base_value * (1 - pct / 100)) +
                 unit + " or within the noise";
    }
    std::string reason = verdictName(row.verdict);
    if (row.change_pct) reason += formatted(" (%+.1f%%)", *row.change_pct);
    if (!row.note.empty()) reason += ": " + row.note;
    const std::string basis = row.metric == "status" || !row.decision
                                  ? "the baseline's status"
                                  : "baseline " + formatted("%.4g", *row.base_value) + ": " + row.decision->rule;
    out.push_back(act(make("baseline", describeResult(r), passOrFail(!isRegression(row.verdict)), measured, expected,
                           basis, reason, row.new_value, row.base_value),
                      "baseline.regressed"));
  }
  out.push_back(act(make("baseline", "baseline results present in this run", passOrFail(missing.empty()),
                         std::to_string(missing.size()) + " missing", "0 missing",
                         "the baseline's results of this level (" + baseLevel + "), its suites that ran and its pairs",
                         missing.empty() ? "every baseline result this run's plan covers was measured again"
                                         : "missing: " + joinSome(missing, 4),
                         static_cast<double>(missing.size()), 0.0),
                    "baseline.missing"));
  if (!notCompared.empty() || !newOnly.empty()) {
    std::string why;
    if (!sameLevel) why = "the baseline is of level " + baseLevel + ", this run of level " + runLevel;
    if (why.empty()) why = "suites or pairs one of them did not run";
    std::string list;
    if (!notCompared.empty()) list += "only in the baseline: " + joinSome(notCompared, 3);
    if (!newOnly.empty()) list += std::string(list.empty() ? "" : "; ") + "only in this run: " + joinSome(newOnly, 3);
    out.push_back(make(
        "baseline", "rows not compared at this level", CheckStatus::kSkipped,
        std::to_string(notCompared.size()) + " baseline rows, " + std::to_string(newOnly.size()) + " rows of this run",
        "-", "rows one side holds and the other's level, suites or pairs did not measure",
        "not compared: " + why + " (" + list + ")", static_cast<double>(notCompared.size() + newOnly.size()),
        std::nullopt));
  }
}

}  // namespace

std::string injectionNote(const Run& run) {
  std::string what = run.fingerprint.injected.describe();
  std::map<std::string, int> cells;
  for (const Result& r : run.results) {
    if (r.extra.contains("injected") && r.extra["injected"].is_string())
      ++cells[r.extra["injected"].get<std::string>()];
  }
  for (const auto& [fault, n] : cells)
    what += (what.empty() ? "" : ", ") + fault + " injected into " + std::to_string(n) + (n == 1 ? " cell" : " cells");
  return what;
}

std::string disabledRulesNote(const Run& run) {
  const std::optional<RunPlan> plan = planOfRun(run);
  if (!plan || plan->disabled_rules.empty()) return "";
  const size_t n = plan->disabled_rules.size();
  std::string names;
  for (size_t i = 0; i < n && i < 20; ++i)
    names += (i ? ", " : "") + plan->disabled_rules[i];
  if (n > 20) names += ", and " + std::to_string(n - 20) + " more";
  return std::to_string(n) + (n == 1 ? " rule" : " rules") + " disabled by the config: " + names;
}

std::vector<Check> evaluateChecks(const Run& run, const RunPlan* plan, const EvaluateOptions& options) {
  std::vector<Check> out;
  std::set<std::string> planned;
  if (plan) {
    for (const PlanJob& j : plan->jobs) {
      if (!j.suite.empty()) planned.insert(j.suite);
    }
    topologyChecks(run, *plan, out);
  }
  healthChecks(run, out);
  throttleChecks(run, out);
  probeChecks(run, plan, out);
  dataChecks(run, planned, out);
  if (plan) {
    std::set<std::string> matched;
    bandwidthChecks(run, *plan, out, matched);
    latencyChecks(run, *plan, out, matched);
    coverageChecks(run, *plan, planned, matched, out);
  }
  baselineChecks(run, plan, options, out);
  return out;
}

std::optional<RunPlan> planOfRun(const Run& run) {
  if (run.plan) return run.plan;
  if (!run.extra.is_object() || !run.extra.contains("plan") || run.extra["plan"].is_null()) return std::nullopt;
  auto plan = runPlanFromJson(run.extra["plan"]);
  if (!plan.isOk()) return std::nullopt;
  return std::move(*plan);
}

RunVerdict verdictOf(const Run& run, const EvaluateOptions& options) {
  RunVerdict v;
  if (run.extra.is_object() && run.extra.contains("qualify") && run.extra["qualify"].is_object()) {
    const auto& q = run.extra["qualify"];
    if (q.contains("verdict") && q["verdict"].is_string()) {
      const std::string stored = q["verdict"].get<std::string>();
      if (stored == "PASS") v.stored_pass = true;
      if (stored == "FAIL") v.stored_pass = false;
    }
  }
  const std::optional<RunPlan> plan = planOfRun(run);
  v.checks = evaluateChecks(run, plan ? &*plan : nullptr, options);
  v.counts = countChecks(v.checks);
  return v;
}

bool expectationApplies(const Expectation& e, const Result& r) {
  if (r.suite != e.suite || !globMatch(e.impl, r.impl) || !globMatch(e.name, r.name)) return false;
  if (!e.src) return true;
  if (e.scope == "host") return r.src == e.src && (!r.dst || r.dst == e.src);
  return r.src == e.src && r.dst == e.dst;
}

std::optional<ExpectedFigure> expectedFigure(const std::vector<Expectation>& expectations, const Result& r) {
  for (const Expectation& e : expectations) {
    if (!e.gbps || !expectationApplies(e, r)) continue;
    if (!r.bytes || *r.bytes < e.min_bytes) continue;
    return ExpectedFigure{e.metric, *e.gbps, e.basis};
  }
  return std::nullopt;
}

}  // namespace peerlab::report
