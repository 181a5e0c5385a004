// One registration point per suite: every benchmark qualify can run has a spec beside it (bench/<suite>_suite.cc)
// that owns its binary, its rows, the plan of each level, its estimate, rules and page order; nothing in the harness
// names a suite's binary; every rule of reports/qualify.toml is fed by exactly one suite.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "harness/qualify/config.h"
#include "harness/qualify/suites.h"
#include "reference/testing/temp_dir.h"
#include "reference/testing/testing.h"

namespace peerlab::qualify {
namespace {

namespace fs = std::filesystem;

TEST(SuiteSpec, EveryQualifyBenchHasOneSpecFile) {
  // The benches bench/CMakeLists.txt builds for qualify (QUALIFY) and the spec files beside them.
  const std::string cmake = testing::readFile(testing::sourcePath("bench/CMakeLists.txt"));
  std::set<std::string> qualifyBenches;
  const std::regex add(R"(peerlab_add_bench\((\w+)\.(cu|cc)[^)]*QUALIFY)");
  for (auto it = std::sregex_iterator(cmake.begin(), cmake.end(), add); it != std::sregex_iterator(); ++it)
    qualifyBenches.insert((*it)[1]);
  ASSERT_GE(qualifyBenches.size(), 6u);
  std::set<std::string> binaries;
  for (const auto& suite : suites()) {
    const SuiteInfo& s = suite->info();
    binaries.insert(s.binary);
    EXPECT_TRUE(qualifyBenches.count(s.binary)) << s.name << ": " << s.binary << " is not a QUALIFY bench";
    EXPECT_FALSE(s.description.empty()) << s.name;
    EXPECT_TRUE(fs::exists(testing::sourcePath("bench/" + s.name + "_suite.cc"))) << s.name;
    for (int l = 0; l < kLevels; ++l)
      EXPECT_GT(s.deadline_s[l], 0) << s.name;
    if (!s.rides_with.empty()) {
      ASSERT_NE(findSuite(s.rides_with), nullptr) << s.name << " rides with an unknown suite";
      EXPECT_EQ(findSuite(s.rides_with)->info().binary, s.binary) << s.name;
    }
  }
  for (const std::string& b : qualifyBenches)
    EXPECT_TRUE(binaries.count(b)) << b << " is built for qualify but no bench/*_suite.cc runs it";
  // The page order is the specs' order; names are unique.
  std::set<std::string> names;
  for (size_t i = 0; i < suites().size(); ++i) {
    EXPECT_TRUE(names.insert(suites()[i]->name()).second);
    if (i > 0) {
      EXPECT_LE(suites()[i - 1]->info().order, suites()[i]->info().order);
    }
  }
}

// Planners, estimators and renderers read the specs: no harness source names a suite's binary.
TEST(SuiteSpec, NothingElseNamesASuiteBinary) {
  std::set<std::string> binaries;
  for (const auto& s : suites())
    binaries.insert(s->info().binary);
  int files = 0;
  for (const auto& e : fs::recursive_directory_iterator(testing::sourcePath("harness"))) {
    const std::string path = e.path().string();
    if (!e.is_regular_file() || path.find("_test.") != std::string::npos ||
        path.find("/testing/") != std::string::npos || path.find("/fuzz/") != std::string::npos) {
      continue;
    }
    if (e.path().extension() != ".cc" && e.path().extension() != ".h") continue;
    ++files;
    const std::string text = testing::readFile(path);
    for (const std::string& b : binaries) {
      // A quoted name is a use; a comment may point at the bench's source file.
      EXPECT_EQ(text.find("\"" + b + "\""), std::string::npos) << path << " names " << b;
    }
  }
  EXPECT_GT(files, 50);
}

// Each rule of the built-in thresholds is fed by exactly one suite, whose rows carry the rule's suite.
TEST(SuiteSpec, EveryRuleIsFedByOneSuite) {
  auto config = defaultConfig();
  ASSERT_TRUE(config.isOk()) << config.status().toString();
  std::map<std::string, std::string> ruleSuite;  // rule id -> the run-file suite it matches
  for (const BandwidthRule& r : config->bandwidth)
    ruleSuite[r.id] = r.suite;
  for (const LatencyRule& r : config->latency)
    ruleSuite[r.id] = r.suite;
  ASSERT_GE(ruleSuite.size(), 20u);
  std::map<std::string, int> fed;
  for (const auto& suite : suites()) {
    const SuiteInfo& s = suite->info();
    for (const std::string& rule : s.rules) {
      ++fed[rule];
      auto it = ruleSuite.find(rule);
      ASSERT_NE(it, ruleSuite.end()) << s.name << " names rule " << rule << ", which reports/qualify.toml lacks";
      EXPECT_NE(std::find(s.result_suites.begin(), s.result_suites.end(), it->second), s.result_suites.end())
          << rule << " matches suite " << it->second << ", which " << s.name << "'s rows do not carry";
    }
  }
  for (const auto& [rule, suite] : ruleSuite)
    EXPECT_EQ(fed[rule], 1) << rule << " (suite " << suite << ")";
}

// Levels: quick runs the spot checks only, standard every check family, full every sweep; each level's default
// suites are a subset of the next one's.
TEST(SuiteSpec, LevelsNestAndQuickNeedsNoLibrary) {
  const std::vector<std::string> quick = qualifyDefaultSuites(Level::kQuick);
  const std::vector<std::string> standard = qualifyDefaultSuites(Level::kStandard);
  const std::vector<std::string> full = qualifyDefaultSuites(Level::kFull);
  EXPECT_EQ(quick, (std::vector<std::string>{"peer_copy", "host_copy"}));
  EXPECT_EQ(standard, (std::vector<std::string>{"peer_copy", "zcopy", "alltoallv", "host_copy", "transport"}));
  EXPECT_EQ(full, standard);
  for (const std::string& s : quick) {
    EXPECT_NE(std::find(standard.begin(), standard.end(), s), standard.end()) << s;
    EXPECT_EQ(findSuite(s)->unavailable(), "") << s << " may need a library";
  }
  EXPECT_EQ(parseLevel("standard"), Level::kStandard);
  EXPECT_FALSE(parseLevel("Standard").has_value());
  EXPECT_FALSE(parseLevel("").has_value());
}

}  // namespace
}  // namespace peerlab::qualify

namespace peerlab::qualify {
namespace {

// A suite is named in its spec (bench/<suite>_suite.cc) and nowhere else: the harness, the checks engine and the pages
// included, read the specs (SuiteInfo, ResultFacts through suites.h). A quoted suite name (or a run-file suite its rows
// carry) in a harness source is a rule living twice. A line may carry one where the word means something else, and
// says so on it or the line above: a command's name, a run-file field, a check category or a primitive ("(not a
// suite)"). Test sources and test-only headers (*_test.*, */testing/*, *_testing.h, fuzz/) may name suites.
TEST(SuiteSpec, NoSuiteIsNamedOutsideTheRegistry) {
  std::set<std::string> names;
  for (const auto& s : suites()) {
    names.insert(s->name());
    names.insert(s->info().result_suites.begin(), s->info().result_suites.end());
  }
  ASSERT_GE(names.size(), 9u);
  int files = 0;
  std::set<std::string> dirs;
  for (const auto& e : fs::recursive_directory_iterator(testing::sourcePath("harness"))) {
    const std::string path = e.path().string();
    if (!e.is_regular_file() || (e.path().extension() != ".cc" && e.path().extension() != ".h")) continue;
    if (path.find("_test.") != std::string::npos || path.find("/testing/") != std::string::npos ||
        path.find("_testing.h") != std::string::npos || path.find("/fuzz/") != std::string::npos) {
      continue;
    }
    ++files;
    dirs.insert(fs::relative(e.path(), testing::sourcePath("harness")).begin()->string());
    std::istringstream lines(testing::readFile(path));
    int n = 0;
    std::string previous;
    for (std::string line; std::getline(lines, line); previous = line) {
      ++n;
      const std::string code = line.substr(0, line.find("//"));
      if (line.find("(not a suite)") != std::string::npos || previous.find("(not a suite)") != std::string::npos ||
          code.find("PEERLAB_REGISTER_COMMAND") != std::string::npos || code.find("kCommand =") != std::string::npos ||
          code.find("kCmd =") != std::string::npos) {
        continue;
      }
      for (const std::string& name : names)
        EXPECT_EQ(code.find("\"" + name + "\""), std::string::npos) << path << ":" << n << " names suite " << name;
    }
  }
  EXPECT_GT(files, 100);
  // Every part of the harness is read, the report and the faults drill among them.
  for (const char* dir : {"cli", "qualify", "report", "history", "faults", "health", "slurm", "watchdog"})
    EXPECT_TRUE(dirs.count(dir)) << dir;
}

// The facts the checks and the pages read: each belongs to a run-file suite some spec's rows carry, once; a suite with
// a section of its own titles it; the verified probe's verdicts and the host copies each have their suite.
TEST(SuiteSpec, ResultFactsBelongToCarriedSuites) {
  std::set<std::string> carried;
  for (const auto& s : suites())
    carried.insert(s->info().result_suites.begin(), s->info().result_suites.end());
  std::set<std::string> seen;
  for (const auto& s : suites()) {
    for (const ResultFacts& f : s->info().result_facts) {
      EXPECT_TRUE(carried.count(f.suite)) << s->name() << ": facts of " << f.suite << ", which no spec's rows carry";
      EXPECT_TRUE(seen.insert(f.suite).second) << f.suite << " has facts in two specs";
      EXPECT_EQ(f.kind != RowKind::kMeasured, !f.section.empty()) << f.suite;
      EXPECT_NE(&resultFacts(f.suite), &resultFacts("no such suite")) << f.suite;
      EXPECT_EQ(resultFacts(f.suite).suite, f.suite);
      if (f.compared_on_busbw) {
        EXPECT_TRUE(f.collective) << f.suite << ": busbw is a collective's figure";
      }
    }
  }
  EXPECT_EQ(resultSuitesOf(RowKind::kVerdicts).size(), 1u);
  EXPECT_EQ(resultSuitesOf(RowKind::kHostCopies).size(), 1u);
  // A suite of an older run file, or one the harness writes itself, is measured rows with no facts.
  EXPECT_EQ(resultFacts("health").kind, RowKind::kMeasured);
  EXPECT_TRUE(resultFacts("health").bytes_convention.empty());
}

}  // namespace
}  // namespace peerlab::qualify
