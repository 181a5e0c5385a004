#include "harness/qualify/suites.h"

#include <algorithm>
#include <optional>
#include <regex>
#include <set>

namespace peerlab::qualify {

// The registry the build writes from bench/*_suite.cc (suite_registry.cc).
std::vector<std::unique_ptr<Suite>> registeredSuites();

bool Suite::runsAt(Level level) const {
  return std::find(info_.levels.begin(), info_.levels.end(), level) != info_.levels.end();
}

report::BenchPlan Suite::legacyPlan(const BenchJob& job, const report::PlanTopology& topology) const {
  report::BenchPlan work = job.work;
  work.suite = info_.name;
  work.rows = legacySelections(legacyFilter(job), rows(job, topology));
  return work;
}

const std::vector<std::unique_ptr<Suite>>& suites() {
  static const std::vector<std::unique_ptr<Suite>> all = [] {
    std::vector<std::unique_ptr<Suite>> s = registeredSuites();
    std::stable_sort(s.begin(), s.end(),
                     [](const auto& a, const auto& b) { return a->info().order < b->info().order; });
    return s;
  }();
  return all;
}

const Suite* findSuite(const std::string& name) {
  for (const auto& s : suites()) {
    if (s->name() == name) return s.get();
  }
  return nullptr;
}

const Suite* suiteOfResults(const std::string& result_suite) {
  for (const auto& s : suites()) {
    const auto& r = s->info().result_suites;
    if (std::find(r.begin(), r.end(), result_suite) != r.end()) return s.get();
  }
  return nullptr;
}

const ResultFacts& resultFacts(const std::string& result_suite) {
  static const std::map<std::string, ResultFacts> kFacts = [] {
    std::map<std::string, ResultFacts> out;
    for (const auto& s : suites()) {
      for (const ResultFacts& f : s->info().result_facts)
        out.emplace(f.suite, f);
    }
    return out;
  }();
  static const ResultFacts kMeasured;
  auto it = kFacts.find(result_suite);
  return it == kFacts.end() ? kMeasured : it->second;
}

std::vector<std::string> resultSuitesOf(RowKind kind) {
  std::vector<std::string> out;
  for (const auto& s : suites()) {
    for (const ResultFacts& f : s->info().result_facts) {
      if (f.kind == kind) out.push_back(f.suite);
    }
  }
  return out;
}

std::vector<std::string> qualifyDefaultSuites(Level level) {
  std::vector<std::string> out;
  for (const auto& s : suites()) {
    if (s->info().in_all && s->runsAt(level)) out.push_back(s->name());
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
  for (const auto& s : suites()) {
    if (std::find(out.begin(), out.end(), s->info().binary) == out.end()) out.push_back(s->info().binary);
  }
  return out;
}

std::string suiteNames() {
  std::string out;
  for (const auto& s : suites())
    out += (out.empty() ? "" : ", ") + s->name();
  return out;
}

BenchJob pairRoundsJob(const Suite& suite, const std::string& binary, const std::string& what,
                       const report::PairRoundList& rounds, std::vector<report::RowSelection> rows,
                       double deadline_base_s) {
  BenchJob j;
  j.suite = suite.name();
  j.binary = binary;
  j.work.suite = suite.name();
  j.work.rows = std::move(rows);
  j.work.rounds = rounds;
  j.work.rules = suite.info().rules;
  std::set<int> gpus;
  size_t pairs = 0;
  for (const auto& round : rounds) {
    for (const auto& p : round) {
      gpus.insert(p.first);
      gpus.insert(p.second);
      ++pairs;
    }
  }
  j.ranks = static_cast<int>(gpus.size());
  // Every round takes about what one pair took alone.
  j.deadline_s = deadline_base_s * static_cast<double>(std::max<size_t>(1, rounds.size()));
  j.work.deadline_s = j.deadline_s;
  j.budget_s = j.deadline_s;
  j.label = what + (pairs == 1 ? " " + std::to_string(rounds[0][0].first) + "->" + std::to_string(rounds[0][0].second)
                               : " (" + std::to_string(pairs) + " pairs, " + std::to_string(rounds.size()) +
                                     (rounds.size() == 1 ? " round)" : " rounds)"));
  return j;
}

std::vector<BenchJob> guardedPairRounds(const Suite& suite, const std::string& binary, const std::string& what,
                                        const PairSchedule& schedule, std::vector<report::RowSelection> rows,
                                        const std::vector<report::RowSelection>& guard, double deadline_base_s,
                                        const std::map<std::string, std::string>& knobs) {
  std::vector<BenchJob> jobs;
  BenchJob main = pairRoundsJob(suite, binary, what, schedule.rounds, std::move(rows), deadline_base_s);
  main.schedule_basis = schedule.basis;
  main.work.knobs = knobs;
  if (schedule.concurrent && !guard.empty() && !schedule.samples.empty()) {
    // The sample pairs alone, one after the other, on the rows the process's own concurrent rounds are checked against
    // when it ends.
    report::PairRoundList alone;
    for (const auto& p : schedule.samples)
      alone.push_back({p});
    BenchJob sample = pairRoundsJob(suite, binary, what + " serial sample", alone, guard, deadline_base_s);
    sample.guard_for = main.label;
    sample.work.knobs = knobs;
    jobs.push_back(sample);
  }
  jobs.push_back(main);
  return jobs;
}

std::vector<report::RowSelection> legacySelections(const std::string& filter, const std::vector<SuiteRow>& rows) {
  bool negative = !filter.empty() && filter[0] == '-';
  const std::string pattern = negative ? filter.substr(1) : filter;
  std::optional<std::regex> re;
  if (!pattern.empty() && pattern != "all") {
    try {
      re.emplace(pattern, std::regex::extended);
    } catch (const std::regex_error&) {
      return {report::RowSelection{{"-"}, {}, {}, {}}};  // a case no row has: nothing runs
    }
  }
  std::vector<report::RowSelection> out;
  for (const SuiteRow& r : rows) {
    // A filter sees the name Google Benchmark runs: the registered one with its iteration count and timing (every
    // suite row runs one iteration of manual time), so that a filter ending a size with '/' matches.
    const bool found = !re || std::regex_search(r.gbench_name + "/iterations:1/manual_time", *re);
    if (found == negative) continue;
    report::RowSelection s;
    s.cases = {r.key.impl + "/" + r.key.name};
    if (r.key.bytes >= 0) s.sizes = {r.key.bytes};
    if (r.key.src >= 0 && r.key.dst >= 0) s.pairs = {{r.key.src, r.key.dst}};
    if (r.key.gpu >= 0) s.gpus = {r.key.gpu};
    out.push_back(std::move(s));
  }
  // No row at all: a selection that holds nothing (an empty list would mean every row).
  if (out.empty()) out.push_back(report::RowSelection{{"-"}, {}, {}, {}});
  return out;
}

std::string legacyFilter(const BenchJob& job) {
  const std::string key = "--benchmark_filter=";
  for (const std::string& a : job.legacy_args)
    if (a.rfind(key, 0) == 0) return a.substr(key.size());
  return "";
}

std::string legacyEnv(const BenchJob& job, const std::string& name) {
  for (const std::string& e : job.legacy_env)
    if (e.rfind(name + "=", 0) == 0) return e.substr(name.size() + 1);
  return "";
}

}  // namespace peerlab::qualify
