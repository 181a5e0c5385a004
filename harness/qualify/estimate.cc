#include "harness/qualify/estimate.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

#include "harness/qualify/cost_model.h"
#include "harness/qualify/gpu_models.h"
#include "harness/qualify/suites.h"

namespace peerlab::qualify {

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

JobEstimate estimateJob(const BenchJob& job, const Plan& plan) {
  const Suite* suite = findSuite(job.suite);
  if (suite == nullptr) {
    // A suite this version does not have (a run of another version): a process start per rank and an eighth of its
    // deadline base.
    JobEstimate e;
    e.start_s = cost::kProcessStartS + cost::kContextS * std::max(1, job.ranks);
    e.fixed_s = job.deadline_s / 8;
    e.seconds = e.start_s + e.fixed_s;
    e.basis = "no cost model for suite " + job.suite + ": process start + 1/8 of its deadline base";
    return e;
  }
  if (job.legacy_args.empty() && job.legacy_env.empty()) return suite->estimate(job, plan.topology);
  // Recorded before plans were typed: estimated for the rows its filter selected.
  BenchJob typed = job;
  typed.work = suite->legacyPlan(job, plan.topology);
  typed.legacy_args.clear();
  typed.legacy_env.clear();
  return suite->estimate(typed, plan.topology);
}

double estimateProbe(const Plan& plan) {
  const double g = static_cast<double>(plan.topology.gpus.size());
  const double pairs = static_cast<double>(plan.options.pairs.size());
  return ProbeCost::kWorkers * ProbeCost::kContextS * g + ProbeCost::kPairS * pairs;
}

double qualifyOverhead(const Plan& plan) {
  const double gpus = static_cast<double>(std::max<size_t>(plan.topology.gpus.size(), 1));
  return QualifyOverhead::kBaseS + QualifyOverhead::kPerGpuS * gpus;
}

std::string jobIdentity(const std::string& suite, const std::string& label, const nlohmann::json& what) {
  return suite + "|" + label + "|" + what.dump();
}

std::string jobIdentity(const BenchJob& job) {
  if (!job.legacy_args.empty() || !job.legacy_env.empty()) {
    // Its arguments and its environment (which chose what it ran: the GPU sets, the pair rounds).
    nlohmann::json what = job.legacy_args;
    for (const std::string& e : job.legacy_env)
      what.push_back(e);
    return jobIdentity(job.suite, job.label, what);
  }
  nlohmann::json work = report::toJson(job.work);
  work.erase("deadline_s");
  return jobIdentity(job.suite, job.label, work);
}

namespace {

// A process record's identity from the record alone: its plan, or its arguments; the suite is the label's first word
// ("zcopy 0->1", "peer_copy (12 pairs)").
std::string recordedIdentity(const nlohmann::json& j) {
  const std::string label = j.value("label", "");
  nlohmann::json what = nlohmann::json::array();
  if (j.contains("plan") && j["plan"].is_object()) {
    what = j["plan"];
    what.erase("deadline_s");
  } else if (j.contains("args") && j["args"].is_array()) {
    for (const auto& a : j["args"])
      if (a.is_string()) what.push_back(a.get<std::string>());
  }
  return jobIdentity(label.substr(0, label.find(' ')), label, what);
}

}  // namespace

MeasuredWalls measuredWalls(const std::vector<report::Run>& runs, const std::string& kind,
                            const std::string& derived_kind) {
  MeasuredWalls out;
  for (const report::Run& run : runs) {
    const nlohmann::json& x = run.extra;
    // The same hardware: the kind it was filed under, or the kind its own hardware gives.
    bool same = !run.kind.empty() && (run.kind.name == kind || report::sameHardware(run.kind.name, kind));
    if (!same) {
      const std::string hardware = report::hardwareOf(run).kind;
      same = !hardware.empty() && report::sameHardware(hardware, derived_kind);
    }
    // Runs of a peerlab whose plans did not record their level ran other processes under the same arguments (host
    // patterns a byte at a time, a process per pair): their walls would mislead.
    const bool levelled = x.contains("plan") && x["plan"].is_object() && x["plan"].contains("level");
    if (!same || !levelled || !x.contains("bench") || !x["bench"].is_object() || !x["bench"].contains("jobs") ||
        !x["bench"]["jobs"].is_array()) {
      continue;
    }
    // A process is known by what its run's stored plan says it ran (the same identity a plan's own job has); a
    // process the plan does not list (a rerun the runner added) by what its record says.
    std::map<std::string, std::string> planned;
    if (auto stored = report::runPlanFromJson(x["plan"]); stored.isOk()) {
      for (const BenchJob& job : stored->jobs)
        planned.emplace(job.label, jobIdentity(job));
    }
    bool any = false;
    for (const nlohmann::json& j : x["bench"]["jobs"]) {
      if (!j.is_object() || !j.contains("wall_s") || !j["wall_s"].is_number() || j.value("exit", "") != "ok") continue;
      const auto p = planned.find(j.value("label", ""));
      const std::string identity = p != planned.end() ? p->second : recordedIdentity(j);
      const double wall = j["wall_s"].get<double>();
      if (wall <= 0 || wall > 1e6) continue;
      out.walls[identity].push_back(wall);
      any = true;
    }
    out.runs += any;
  }
  return out;
}

void estimatePlan(Plan& plan, const MeasuredWalls& measured) {
  plan.processes_s = 0;
  int from_runs = 0;
  for (BenchJob& job : plan.jobs) {
    auto it = measured.walls.find(jobIdentity(job));
    if (it != measured.walls.end() && !it->second.empty()) {
      job.budget_s = median(it->second);
      job.estimate_basis = "measured: median of " + std::to_string(it->second.size()) + " past run" +
                           (it->second.size() == 1 ? "" : "s") + " of this kind";
      ++from_runs;
    } else {
      const JobEstimate e = estimateJob(job, plan);
      job.budget_s = e.seconds;
      job.estimate_basis = e.basis;
    }
    plan.processes_s += job.budget_s;
  }
  const double fixed = qualifyOverhead(plan);
  plan.history_s = measured.read_s;
  plan.overhead_s = fixed + (plan.options.probe ? estimateProbe(plan) : 0) + plan.history_s;
  plan.budget_s = plan.processes_s + plan.overhead_s;
  plan.estimate_basis =
      "each process from the sizes and repetitions it runs (start, fixed cost per case, bytes at the link rates)" +
      std::string(from_runs ? ", " + std::to_string(from_runs) + " of " + std::to_string(plan.jobs.size()) +
                                  " processes from the measured wall times of " + std::to_string(measured.runs) +
                                  " past run(s) of this kind"
                            : "") +
      ", plus " + cost::fmt(fixed) + " s of topology, health and bundle" +
      (plan.options.probe ? " and " + cost::fmt(estimateProbe(plan)) + " s of probe" : "") +
      (plan.history_s > 0 ? " and " + cost::fmt(plan.history_s) + " s reading the past runs" : "") +
      "; deadlines are separate and longer";
}

}  // namespace peerlab::qualify
