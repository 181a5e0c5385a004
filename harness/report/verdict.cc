#include "harness/report/verdict.h"

#include <fnmatch.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <tuple>

#include "harness/report/aggregate.h"
#include "harness/report/compare.h"
#include "harness/report/html.h"

namespace peerlab::report {

namespace {

using nlohmann::json;

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

bool glob(const std::string& pattern, const std::string& text) {
  return ::fnmatch(pattern.c_str(), text.c_str(), 0) == 0;
}

bool isOk(const Result& r) {
  return r.status == "ok";
}

std::string pairName(const Result& r) {
  if (!r.src && !r.dst) return "";
  return " " + (r.src ? std::to_string(*r.src) : std::string("?")) + "->" +
         (r.dst ? std::to_string(*r.dst) : std::string("?"));
}

std::string joinSome(const std::vector<std::string>& items, size_t most = 5) {
  std::string s;
  for (size_t i = 0; i < items.size() && i < most; ++i)
    s += (i ? ", " : "") + items[i];
  if (items.size() > most) s += ", ... (" + std::to_string(items.size()) + " in all)";
  return s;
}

const json& planOf(const Run& run) {
  static const json kEmpty = json::object();
  if (run.extra.is_object() && run.extra.contains("plan") && run.extra["plan"].is_object()) return run.extra["plan"];
  return kEmpty;
}

std::optional<double> field(const Result& r, const std::string& metric) {
  std::optional<double> v;
  if (metric == "busbw_gbps") v = r.busbw_gbps;
  if (metric == "algbw_gbps") v = r.algbw_gbps;
  if (metric == "time_us") v = r.time_us;
  if (!v || !std::isfinite(*v)) return std::nullopt;
  return v;
}

std::string jstr(const json& j, const char* k) {
  return j.contains(k) && j[k].is_string() ? j[k].get<std::string>() : "";
}

std::optional<double> jnum(const json& j, const char* k) {
  if (j.contains(k) && j[k].is_number()) return j[k].get<double>();
  return std::nullopt;
}

void probeChecks(const Run& run, bool expected, std::vector<Check>& out) {
  std::map<std::string, std::vector<const Result*>> byMethod;
  std::vector<std::string> order;
  for (const Result& r : run.results) {
    if (r.suite != "probe" || !r.src || !r.dst) continue;
    const std::string method = r.name.substr(0, r.name.find('/'));
    if (!byMethod.count(method)) order.push_back(method);
    byMethod[method].push_back(&r);
  }
  if (order.empty()) {
    if (expected) {
      out.push_back({"probe",
                     "verified probe ran",
                     false,
                     "no cells",
                     "a verdict per method and pair",
                     "the plan ran the probe but the run holds no probe cell",
                     0.0,
                     {}});
    }
    return;
  }
  for (const std::string& method : order) {
    int claimed = 0, verified = 0;
    std::vector<std::string> lies;
    for (const Result* r : byMethod[method]) {
      const bool isClaimed = r->extra.is_object() && r->extra.contains("claimed") && r->extra["claimed"].is_boolean() &&
                             r->extra["claimed"].get<bool>();
      if (!isClaimed) continue;
      ++claimed;
      if (r->status == "ok") {
        ++verified;
      } else {
        lies.push_back(r->name + pairName(*r) + " " + r->status);
      }
    }
    const bool pass = lies.empty();
    out.push_back({"probe", "probe " + method + ": claimed cells verify", pass,
                   std::to_string(verified) + " of " + std::to_string(claimed) + " claimed cells verified",
                   std::to_string(claimed) + " of " + std::to_string(claimed),
                   pass ? "every claimed cell verified (recomputed from the cells)"
                        : "claimed by the driver but not verified: " + joinSome(lies),
                   static_cast<double>(verified), static_cast<double>(claimed)});
  }
}

void dataChecks(const Run& run, std::vector<Check>& out) {
  for (const std::string& suite : suitesIn(run)) {
    if (suite == "probe") continue;
    int ok = 0, skipped = 0;
    bool ownSkipped = false;  // a peerlab implementation (not a baseline) did not run
    std::vector<std::string> failed;
    for (const Result& r : run.results) {
      if (r.suite != suite) continue;
      const bool wrong = r.wrong && *r.wrong > 0;
      if (suite == "health" && (r.status == "warn" || r.status == "ok")) {
        // Machine health: a warning is shown in amber but does not fail the run.
        ++ok;
      } else if (wrong) {
        failed.push_back(describeResult(r) + ": " + fmt("%.0f wrong elements", *r.wrong));
      } else if (statusRank(r.status) == 0) {
        const std::string why = r.status.size() > 120 ? r.status.substr(0, 117) + "..." : r.status;
        failed.push_back(describeResult(r) + ": " + why);
      } else if (isOk(r)) {
        ++ok;
      } else {
        ++skipped;
        ownSkipped |= !isBaselineImpl(r.impl);
      }
    }
    // A suite where only baselines were skipped measured nothing of peerlab's to fail; one where peerlab's own
    // implementations were all skipped verified nothing.
    const bool pass = failed.empty() && (ok > 0 || !ownSkipped);
    out.push_back({"data", suite + ": results ran and verified", pass,
                   std::to_string(ok) + " ok, " + std::to_string(skipped) + " skipped, " +
                       std::to_string(failed.size()) + " failed",
                   "0 failed, 0 wrong elements",
                   pass             ? "no failed result and no wrong element"
                   : failed.empty() ? "nothing of peerlab's ran: every own implementation was skipped"
                                    : "failed: " + joinSome(failed, 3),
                   static_cast<double>(failed.size()), 0.0});
  }
}

using GroupKey = std::tuple<std::string, std::string, int, int, int>;

GroupKey groupOf(const Result& r) {
  return {r.impl, r.name, r.ranks, r.src.value_or(-1), r.dst.value_or(-1)};
}

void expectationChecks(const Run& run, const json& plan, std::vector<Check>& out) {
  if (!plan.contains("expectations") || !plan["expectations"].is_array()) return;
  for (const json& e : plan["expectations"]) {
    const std::string suite = jstr(e, "suite"), impl = jstr(e, "impl"), name = jstr(e, "name");
    const std::string metric = jstr(e, "metric").empty() ? "algbw_gbps" : jstr(e, "metric");
    const std::string rule = jstr(e, "rule");
    const double floor = jnum(e, "gbps").value_or(0);
    const double minBytes = jnum(e, "min_bytes").value_or(0);
    const auto src = jnum(e, "src"), dst = jnum(e, "dst");
    std::map<GroupKey, const Result*> best;
    std::vector<GroupKey> order;
    int candidates = 0;
    for (const Result& r : run.results) {
      if (r.suite != suite || !isOk(r) || !glob(impl, r.impl) || !glob(name, r.name)) continue;
      if (src && (!r.src || *r.src != *src || !r.dst || !dst || *r.dst != *dst)) continue;
      ++candidates;
      if (!r.bytes || *r.bytes < minBytes) continue;
      const auto v = field(r, metric);
      if (!v) continue;
      const GroupKey key = groupOf(r);
      if (!best.count(key)) order.push_back(key);
      const Result*& b = best[key];
      if (!b || *field(*b, metric) < *v) b = &r;
    }
    if (order.empty() && candidates > 0) {
      out.push_back({"coverage", "expect." + rule + " has results to check", false,
                     std::to_string(candidates) + " results of " + suite + " " + impl + " " + name,
                     metric + " at >= " + formatBytes(minBytes), "no result reached the size the expectation needs",
                     static_cast<double>(candidates), minBytes});
    }
    for (const GroupKey& key : order) {
      const Result& r = *best[key];
      const double v = *field(r, metric);
      out.push_back({"bandwidth", r.suite + " " + r.impl + " " + r.name + pairName(r), v >= floor,
                     fmt("%.1f GB/s", v) + " at " + formatBytes(*r.bytes),
                     fmt(">= %.1f GB/s", floor) + " (" + jstr(e, "basis") + ")",
                     fmt("%.1f%% of the expected figure", floor > 0 ? v / floor * 100 : 0) +
                         (v >= floor ? "" : ": below the floor") + " [rule " + rule + ", recomputed]",
                     v, floor});
    }
  }
}

void latencyChecks(const Run& run, const json& plan, std::vector<Check>& out) {
  if (!plan.contains("latency") || !plan["latency"].is_array()) return;
  for (const json& l : plan["latency"]) {
    const std::string suite = jstr(l, "suite"), impl = jstr(l, "impl"), name = jstr(l, "name");
    const double maxBytes = jnum(l, "max_bytes").value_or(1e15);
    const double maxUs = jnum(l, "max_us").value_or(0);
    std::map<GroupKey, const Result*> worst;
    std::vector<GroupKey> order;
    for (const Result& r : run.results) {
      if (r.suite != suite || !isOk(r) || !glob(impl, r.impl) || !glob(name, r.name)) continue;
      if (!r.time_us || (r.bytes && *r.bytes > maxBytes)) continue;
      const GroupKey key = groupOf(r);
      if (!worst.count(key)) order.push_back(key);
      const Result*& w = worst[key];
      if (!w || *w->time_us < *r.time_us) w = &r;
    }
    for (const GroupKey& key : order) {
      const Result& r = *worst[key];
      const bool pass = *r.time_us <= maxUs;
      out.push_back({"latency", r.suite + " " + r.impl + " " + r.name + pairName(r), pass, fmt("%.2f us", *r.time_us),
                     fmt("<= %g us", maxUs),
                     std::string(pass ? "within the bound" : "slower than the bound") + " [rule " + jstr(l, "rule") +
                         ", recomputed]",
                     *r.time_us, maxUs});
    }
  }
}

void suiteCoverage(const Run& run, const json& plan, std::vector<Check>& out) {
  // The suites the plan ran are its jobs; its expectation and latency rules also name suites a machine cannot run
  // (pair suites on one GPU), which the plan lists as notes, not as jobs.
  std::set<std::string> expected;
  if (plan.contains("jobs") && plan["jobs"].is_array()) {
    for (const json& j : plan["jobs"]) {
      if (!jstr(j, "suite").empty()) expected.insert(jstr(j, "suite"));
    }
  }
  std::map<std::string, int> present;
  for (const Result& r : run.results)
    ++present[r.suite];
  for (const std::string& suite : expected) {
    const int n = present.count(suite) ? present[suite] : 0;
    out.push_back({"coverage", "suite " + suite + " has results", n > 0, std::to_string(n) + " results",
                   "at least 1 (the plan ran it)",
                   n > 0 ? "present" : "the plan ran suite " + suite + " but the run holds none of its results",
                   static_cast<double>(n), 1.0});
  }
}

}  // namespace

std::optional<ExpectedFigure> expectedFigure(const Run& run, const Result& r) {
  const json& plan = planOf(run);
  if (!plan.contains("expectations") || !plan["expectations"].is_array()) return std::nullopt;
  for (const json& e : plan["expectations"]) {
    if (jstr(e, "suite") != r.suite || !glob(jstr(e, "impl"), r.impl) || !glob(jstr(e, "name"), r.name)) continue;
    const auto src = jnum(e, "src"), dst = jnum(e, "dst");
    if (src && (!r.src || *r.src != *src || !r.dst || !dst || *r.dst != *dst)) continue;
    if (!r.bytes || *r.bytes < jnum(e, "min_bytes").value_or(0)) continue;
    const auto gbps = jnum(e, "gbps");
    if (!gbps) continue;
    return ExpectedFigure{jstr(e, "metric").empty() ? "algbw_gbps" : jstr(e, "metric"), *gbps, jstr(e, "basis")};
  }
  return std::nullopt;
}

RunVerdict recomputeVerdict(const Run& run) {
  RunVerdict v;
  if (run.extra.is_object() && run.extra.contains("qualify") && run.extra["qualify"].is_object()) {
    const std::string stored = jstr(run.extra["qualify"], "verdict");
    if (stored == "PASS") v.stored_pass = true;
    if (stored == "FAIL") v.stored_pass = false;
  }
  const json& plan = planOf(run);
  const bool probeExpected = plan.contains("probe") && plan["probe"].is_boolean() && plan["probe"].get<bool>();
  suiteCoverage(run, plan, v.checks);
  probeChecks(run, probeExpected, v.checks);
  dataChecks(run, v.checks);
  expectationChecks(run, plan, v.checks);
  latencyChecks(run, plan, v.checks);
  v.pass = failedChecks(v.checks) == 0;
  // Checks that need more than the results (the live topology, a baseline run) are kept as stored.
  for (const Check& c : checksInRun(run)) {
    if (c.category == "topology" || c.category == "baseline") {
      v.checks.push_back(c);
      v.pass = v.pass && c.pass;
    }
  }
  return v;
}

}  // namespace peerlab::report
