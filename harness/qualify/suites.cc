#include "harness/qualify/suites.h"

#include <algorithm>
#include <set>

#include "harness/qualify/schedule.h"

namespace peerlab::qualify {

// The registry the build writes from bench/*_suite.cc (suite_registry.cc).
std::vector<SuiteSpec> registeredSuites();

std::string_view levelName(Level level) {
  switch (level) {
    case Level::kQuick:
      return "quick";
    case Level::kStandard:
      return "standard";
    case Level::kFull:
      return "full";
  }
  return "standard";
}

std::optional<Level> parseLevel(std::string_view name) {
  for (Level l : {Level::kQuick, Level::kStandard, Level::kFull}) {
    if (levelName(l) == name) return l;
  }
  return std::nullopt;
}

std::string levelNames() {
  return "quick, standard, full";
}

bool SuiteSpec::runsAt(Level level) const {
  return std::find(levels.begin(), levels.end(), level) != levels.end();
}

const std::vector<SuiteSpec>& suiteSpecs() {
  static const std::vector<SuiteSpec> specs = [] {
    std::vector<SuiteSpec> s = registeredSuites();
    std::stable_sort(s.begin(), s.end(), [](const SuiteSpec& a, const SuiteSpec& b) { return a.order < b.order; });
    return s;
  }();
  return specs;
}

const SuiteSpec* findSuite(const std::string& name) {
  for (const SuiteSpec& s : suiteSpecs()) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

const SuiteSpec* suiteOfResults(const std::string& result_suite) {
  for (const SuiteSpec& s : suiteSpecs()) {
    if (std::find(s.result_suites.begin(), s.result_suites.end(), result_suite) != s.result_suites.end()) return &s;
  }
  return nullptr;
}

std::vector<std::string> qualifyDefaultSuites(Level level) {
  std::vector<std::string> out;
  for (const SuiteSpec& s : suiteSpecs()) {
    if (s.in_all && s.runsAt(level)) out.push_back(s.name);
  }
  return out;
}

std::string qualifyDefaultSuitesText(Level level) {
  std::string out;
  for (const std::string& s : qualifyDefaultSuites(level))
    out += (out.empty() ? "" : ",") + s;
  return out;
}

std::vector<std::string> plannedExecutables() {
  std::vector<std::string> out = {"peerlab"};
  for (const SuiteSpec& s : suiteSpecs()) {
    if (std::find(out.begin(), out.end(), s.binary) == out.end()) out.push_back(s.binary);
  }
  return out;
}

std::string suiteNames() {
  std::string out;
  for (const SuiteSpec& s : suiteSpecs())
    out += (out.empty() ? "" : ", ") + s.name;
  return out;
}

std::string pairRegex(const std::vector<std::pair<int, int>>& pairs, bool all_pairs) {
  if (all_pairs) return "[0-9]+<?->[0-9]+";
  std::set<std::string> alts;
  for (const auto& [a, b] : pairs) {
    alts.insert(std::to_string(a) + "->" + std::to_string(b));
    alts.insert(std::to_string(std::min(a, b)) + "<->" + std::to_string(std::max(a, b)));
  }
  std::string re = "(";
  for (const std::string& x : alts)
    re += (re.size() > 1 ? "|" : "") + x;
  return re + ")";
}

std::string pairRoundsEnv(const std::vector<std::vector<std::pair<int, int>>>& rounds) {
  std::string out = "PEERLAB_PAIR_ROUNDS=";
  for (size_t r = 0; r < rounds.size(); ++r) {
    if (r > 0) out += ';';
    for (size_t p = 0; p < rounds[r].size(); ++p)
      out += (p > 0 ? "," : "") + std::to_string(rounds[r][p].first) + "-" + std::to_string(rounds[r][p].second);
  }
  return out;
}

BenchJob pairRoundsJob(const SuiteSpec& spec, const std::string& binary, const std::string& what,
                       const std::vector<std::vector<std::pair<int, int>>>& rounds, const std::string& filter,
                       double deadline_base_s) {
  BenchJob j;
  j.suite = spec.name;
  j.binary = binary;
  std::set<int> gpus;
  size_t pairs = 0;
  for (const auto& round : rounds) {
    for (const auto& p : round) {
      gpus.insert(p.first);
      gpus.insert(p.second);
      j.pairs.push_back(p);
      ++pairs;
    }
  }
  j.ranks = static_cast<int>(gpus.size());
  j.rounds = rounds;
  j.args = {"--ranks=" + std::to_string(j.ranks)};
  if (!filter.empty()) j.args.push_back("--benchmark_filter=" + filter);
  j.env = {pairRoundsEnv(rounds)};
  if (pairs == 1) {
    j.src = rounds[0][0].first;
    j.dst = rounds[0][0].second;
  }
  // Every round takes about what one pair took alone.
  j.deadline_s = deadline_base_s * static_cast<double>(std::max<size_t>(1, rounds.size()));
  j.budget_s = j.deadline_s;
  j.label = what + (pairs == 1 ? " " + std::to_string(rounds[0][0].first) + "->" + std::to_string(rounds[0][0].second)
                               : " (" + std::to_string(pairs) + " pairs, " + std::to_string(rounds.size()) +
                                     (rounds.size() == 1 ? " round)" : " rounds)"));
  return j;
}

std::vector<BenchJob> guardedPairRounds(const SuiteSpec& spec, const std::string& binary, const std::string& what,
                                        const std::vector<std::vector<std::pair<int, int>>>& rounds, bool concurrent,
                                        const std::string& schedule_basis, const std::string& filter,
                                        const std::string& guard_filter, double deadline_base_s,
                                        const std::vector<std::string>& env) {
  std::vector<BenchJob> jobs;
  BenchJob main = pairRoundsJob(spec, binary, what, rounds, filter, deadline_base_s);
  main.schedule_basis = schedule_basis;
  main.env.insert(main.env.end(), env.begin(), env.end());
  const auto round = std::find_if(rounds.begin(), rounds.end(), [](const auto& r) { return r.size() > 1; });
  if (concurrent && !guard_filter.empty() && round != rounds.end()) {
    // The first pair of the first concurrent round alone, on the rows the process's own concurrent round is checked
    // against when it ends.
    BenchJob alone =
        pairRoundsJob(spec, binary, what + " serial sample", {{round->front()}}, guard_filter, deadline_base_s);
    alone.guard_for = main.label;
    alone.env.insert(alone.env.end(), env.begin(), env.end());
    jobs.push_back(alone);
  }
  jobs.push_back(main);
  return jobs;
}

std::vector<BenchJob> jobsFor(const SuiteSpec& spec, const SuiteRequest& req) {
  if (spec.jobs) return spec.jobs(spec, req);
  std::vector<std::string> common;
  const std::string filter = spec.filter ? spec.filter(req.level, req.pairs, req.all_pairs) : "";
  if (!filter.empty()) common.push_back("--benchmark_filter=" + filter);
  const double budget = spec.deadline_s[static_cast<int>(req.level)];
  std::vector<BenchJob> jobs;
  switch (spec.shape) {
    case JobShape::kWholeMachine: {
      BenchJob j;
      j.suite = spec.name;
      j.binary = spec.binary;
      j.args = common;
      // Deadline bases are for every pair of a 4-GPU machine; scale with the pairs covered. A suite that runs on one
      // GPU scales per GPU.
      if (spec.min_gpus == 1) {
        j.deadline_s = budget * std::max(1, req.gpus);
        j.label = spec.name + " (" + std::to_string(req.gpus) + (req.gpus == 1 ? " GPU)" : " GPUs)");
      } else {
        j.deadline_s =
            spec.name == "probe" ? budget : budget * std::max(1.0, static_cast<double>(req.pairs.size()) / 12.0);
        j.label = spec.name + " (" + std::to_string(req.pairs.size()) + " pairs)";
      }
      j.budget_s = j.deadline_s;
      jobs.push_back(j);
      break;
    }
    case JobShape::kPairRounds: {
      if (req.pairs.empty()) break;
      const PairSchedule schedule = req.topology ? schedulePairs(*req.topology, req.pairs, req.concurrent)
                                                 : PairSchedule{serialRounds(req.pairs), false, ""};
      jobs = guardedPairRounds(spec, spec.binary, spec.name, schedule.rounds, schedule.concurrent, schedule.basis,
                               filter, spec.guard_filter, budget);
      break;
    }
    case JobShape::kCollective: {
      // Scaling: 2 ranks and every GPU (4 on a 4-GPU machine; 2, 4 and 8 on an 8-GPU one), ranks on GPUs 0..n-1.
      std::vector<int> counts;
      for (int n = 2; n < req.gpus; n *= 2)
        counts.push_back(n);
      counts.push_back(req.gpus);
      for (int n : counts) {
        BenchJob j;
        j.suite = spec.name;
        j.binary = spec.binary;
        j.args = {"--ranks=" + std::to_string(n)};
        j.args.insert(j.args.end(), common.begin(), common.end());
        j.ranks = n;
        j.deadline_s = n == req.gpus ? budget : budget / 2;
        j.budget_s = j.deadline_s;
        j.label = spec.name + " x" + std::to_string(n);
        jobs.push_back(j);
      }
      break;
    }
  }
  return jobs;
}

}  // namespace peerlab::qualify
