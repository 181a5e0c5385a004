#include "harness/report/baseline.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "harness/report/compare.h"
#include "harness/report/evaluate.h"

namespace peerlab::report {

namespace {

double medianOf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::optional<double> extraNumber(const Result& r, const char* key) {
  auto it = r.extra.find(key);
  if (it == r.extra.end() || !it->is_number() || !std::isfinite(it->get<double>())) return std::nullopt;
  return it->get<double>();
}

// The median of a field over the rows that carry it; nullopt when none does.
template <typename Get>
std::optional<double> medianField(const std::vector<const Result*>& rows, Get get) {
  std::vector<double> v;
  for (const Result* r : rows) {
    if (std::optional<double> x = get(*r)) v.push_back(*x);
  }
  if (v.empty()) return std::nullopt;
  return medianOf(std::move(v));
}

// key -> that key's rows of one run, by occurrence (the first with the first, as compareRuns matches).
std::map<std::string, std::vector<const Result*>> rowsByKey(const Run& run) {
  std::map<std::string, std::vector<const Result*>> out;
  for (const Result& r : run.results)
    out[resultKey(r)].push_back(&r);
  return out;
}

}  // namespace

bool isBaseline(const Run& run) {
  return run.extra.is_object() && run.extra.contains("baseline") && run.extra["baseline"].is_object();
}

int baselineRunCount(const Run& run) {
  if (!isBaseline(run)) return 0;
  const auto& b = run.extra["baseline"];
  return b.contains("runs") && b["runs"].is_number_integer() ? b["runs"].get<int>() : 0;
}

std::string runLevel(const Run& run) {
  const std::optional<RunPlan> plan = planOfRun(run);
  return plan ? plan->level : "";
}

StatusOr<Run> makeBaseline(const std::vector<NamedRun>& runs, BaselineSummary* summary,
                           const std::vector<NamedRun>& fleet) {
  if (runs.empty()) return PEERLAB_INVALID_ARGUMENT("no run to make a baseline from");
  // The newest run gives the fingerprint, the kind and the plan.
  size_t newest = 0;
  for (size_t i = 0; i < runs.size(); ++i) {
    if (parseIsoTimestamp(runs[i].run.timestamp).value_or(0) >
        parseIsoTimestamp(runs[newest].run.timestamp).value_or(0))
      newest = i;
  }
  const Run& last = runs[newest].run;
  for (const NamedRun& n : runs) {
    if (const std::string injected = injectionNote(n.run); !injected.empty()) {
      return PEERLAB_INVALID_ARGUMENT(n.file + " ran with stand-ins or injected faults (" + injected +
                                      "): a baseline is made from runs of real machines");
    }
    const std::string other = hardwareMismatch(last.fingerprint, last.kind.name, n.run.fingerprint, n.run.kind.name);
    if (!other.empty()) {
      return PEERLAB_INVALID_ARGUMENT(n.file + ": different hardware from " + runs[newest].file + " (" + other +
                                      "): a baseline is made from runs of one kind");
    }
    const RunVerdict v = verdictOf(n.run);
    if (!v.pass()) {
      return PEERLAB_INVALID_ARGUMENT(n.file + " fails its own checks (" + formatCounts(v.counts) + "; first: " +
                                      firstFailure(v.checks) + "): a baseline is made from runs that pass");
    }
    // One level: a baseline holds what its level measures, and is compared at that level.
    if (runLevel(n.run) != runLevel(last)) {
      return PEERLAB_INVALID_ARGUMENT(n.file + " was made at level " + runLevel(n.run) + ", " + runs[newest].file +
                                      " at " + runLevel(last) + ": a baseline is made from runs of one level");
    }
  }
  std::vector<std::map<std::string, std::vector<const Result*>>> byKey(runs.size());
  for (size_t i = 0; i < runs.size(); ++i)
    byKey[i] = rowsByKey(runs[i].run);
  BaselineSummary sum;
  sum.level = runLevel(last);
  // The fleet: every usable run of the kind (the baseline's own runs too), grouped by board.
  std::map<std::string, std::vector<std::map<std::string, std::vector<const Result*>>>> boards;  // node -> runs
  std::set<std::pair<std::string, std::string>> seen;  // (node, timestamp): one measurement stored twice counts once
  nlohmann::json fleetFiles = nlohmann::json::array();
  auto addFleet = [&](const NamedRun& n, bool checked) {
    if (!checked) {
      const std::string other = hardwareMismatch(last.fingerprint, last.kind.name, n.run.fingerprint, n.run.kind.name);
      if (!other.empty() || n.run.kind.name != last.kind.name) {
        sum.fleet_skipped.push_back(n.file + ": another kind (" + n.run.kind.name + ")");
        return;
      }
      if (const RunVerdict v = verdictOf(n.run); !v.pass()) {
        sum.fleet_skipped.push_back(n.file + ": fails its own checks (" + formatCounts(v.counts) + ")");
        return;
      }
      if (!injectionNote(n.run).empty()) {
        sum.fleet_skipped.push_back(n.file + ": made with stand-ins or injected faults");
        return;
      }
    }
    if (!seen.insert({n.run.node.id, n.run.timestamp}).second) return;
    boards[n.run.node.id].push_back(rowsByKey(n.run));
    fleetFiles.push_back({{"file", n.file}, {"node", n.run.node.id}, {"level", runLevel(n.run)}});
    ++sum.fleet_runs;
  };
  for (const NamedRun& n : runs)
    addFleet(n, true);
  for (const NamedRun& n : fleet)
    addFleet(n, false);
  sum.fleet_boards = static_cast<int>(boards.size());
  // Each board's time for a key's occurrence: the median over that board's runs that measured it ok.
  auto fleetTimes = [&](const std::string& key, size_t occurrence) {
    nlohmann::json times = nlohmann::json::array();
    for (const auto& [node, boardRuns] : boards) {
      std::vector<double> v;
      for (const auto& rows : boardRuns) {
        auto it = rows.find(key);
        if (it == rows.end() || occurrence >= it->second.size()) continue;
        const Result* x = it->second[occurrence];
        if (x->status == "ok" && x->time_us && std::isfinite(*x->time_us) && *x->time_us > 0) v.push_back(*x->time_us);
      }
      if (!v.empty()) times.push_back(medianOf(std::move(v)));
    }
    return times;
  };
  Run out;
  out.schema_version = last.schema_version;
  out.tool = last.tool;
  out.git_sha = last.git_sha;
  out.timestamp = last.timestamp;
  out.fingerprint = last.fingerprint;
  out.kind = last.kind;
  out.node = last.node;
  if (last.extra.contains("plan")) out.extra["plan"] = last.extra["plan"];
  out.plan = last.plan;
  sum.runs = static_cast<int>(runs.size());
  std::map<std::string, size_t> used;
  for (const Result& r : last.results) {
    if (r.suite == "test") continue;
    const std::string key = resultKey(r);
    const size_t occurrence = used[key]++;
    std::vector<const Result*> rows;
    for (size_t i = 0; i < runs.size(); ++i) {
      auto it = byKey[i].find(key);
      if (it != byKey[i].end() && occurrence < it->second.size()) rows.push_back(it->second[occurrence]);
    }
    if (rows.size() != runs.size()) {
      ++sum.left_out;
      continue;
    }
    Result b = r;
    const bool allOk = std::all_of(rows.begin(), rows.end(), [](const Result* x) { return x->status == "ok"; });
    if (!allOk) {
      ++sum.not_ok;
    } else if (rows.size() > 1) {
      b.time_us = medianField(rows, [](const Result& x) { return x.time_us; });
      b.algbw_gbps = medianField(rows, [](const Result& x) { return x.algbw_gbps; });
      b.busbw_gbps = medianField(rows, [](const Result& x) { return x.busbw_gbps; });
      std::optional<double> wrong;
      for (const Result* x : rows) {
        if (x->wrong) wrong = std::max(wrong.value_or(0), *x->wrong);
      }
      b.wrong = wrong;
      for (const char* key : {"p10_us", "p90_us"}) {
        if (auto m = medianField(rows, [&](const Result& x) { return extraNumber(x, key); })) {
          b.extra[key] = *m;
        } else {
          b.extra.erase(key);
        }
      }
      // Per-sample times belong to one process; the baseline keeps each run's median instead.
      b.extra.erase("samples_us");
      nlohmann::json times = nlohmann::json::array();
      for (const Result* x : rows)
        times.push_back(x->time_us ? nlohmann::json(*x->time_us) : nlohmann::json(nullptr));
      b.extra["runs_time_us"] = std::move(times);
    }
    b.extra["baseline_runs"] = static_cast<int>(rows.size());
    b.extra.erase("fleet_time_us");
    if (nlohmann::json times = fleetTimes(key, occurrence); times.size() >= 2) {
      b.extra["fleet_time_us"] = std::move(times);
      ++sum.fleet_rows;
    }
    out.results.push_back(std::move(b));
  }
  sum.results = static_cast<int>(out.results.size());
  nlohmann::json from = nlohmann::json::array();
  for (const NamedRun& n : runs) {
    from.push_back({{"file", n.file},
                    {"git_sha", n.run.git_sha},
                    {"timestamp", n.run.timestamp},
                    {"kind", n.run.kind.name},
                    {"node", n.run.node.id}});
  }
  nlohmann::json pairs = nlohmann::json::array();
  if (const std::optional<RunPlan> plan = planOfRun(last)) {
    for (const auto& [a, b] : plan->pairs)
      pairs.push_back(std::to_string(a) + "-" + std::to_string(b));
  }
  nlohmann::json boardIds = nlohmann::json::array();
  for (const auto& [node, boardRuns] : boards)
    boardIds.push_back(node);
  out.extra["baseline"] = {{"made", utcTimestamp()},
                           {"tool", std::string("peerlab ") + PEERLAB_VERSION},
                           {"level", sum.level},
                           {"pairs", pairs},
                           {"runs", sum.runs},
                           {"from", from},
                           {"results", sum.results},
                           {"left_out", sum.left_out},
                           {"not_ok", sum.not_ok},
                           {"fleet", {{"boards", boardIds}, {"runs", fleetFiles}, {"rows", sum.fleet_rows}}},
                           {"rule",
                            "every result all runs measured (ctest rows excepted), each the median of the runs' "
                            "medians with the median of their p10_us and p90_us; fleet_time_us: each board's median "
                            "time from the kind's runs"}};
  if (summary) *summary = sum;
  return out;
}

}  // namespace peerlab::report
