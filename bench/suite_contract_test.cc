// The contract between a suite's spec and its benchmark: for plans of every level on real topologies, the rows the
// benchmark binary registers when handed the plan file (`--plan=FILE --benchmark_list_tests`, no GPU needed) are
// exactly the rows of its spec the plan runs, the rows the time estimate counts. A knob no benchmark declares, or a
// value of the wrong type, stops the binary before anything runs.

#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "harness/qualify/pipeline.h"
#include "harness/qualify/plan.h"
#include "harness/testing/cli.h"
#include "reference/testing/guards.h"
#include "reference/testing/temp_dir.h"
#include "reference/testing/testing.h"

namespace peerlab::qualify {
namespace {

std::string benchPath(const std::string& binary) {
  return std::string(PEERLAB_BENCH_DIR) + "/" + binary;
}

// The names a benchmark lists for a plan, without Google Benchmark's "/iterations:1/manual_time" tail.
std::set<std::string> listed(const std::string& binary, const std::string& plan_file,
                             const std::vector<std::string>& more = {}) {
  std::vector<std::string> argv = {benchPath(binary), "--plan=" + plan_file, "--benchmark_list_tests=true"};
  argv.insert(argv.end(), more.begin(), more.end());
  const testing::CliRun r = testing::runCommand(argv);
  EXPECT_EQ(r.exit_code, 0) << binary << ": " << r.err;
  std::set<std::string> out;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    for (const char* tail : {"/manual_time", "/real_time", "/iterations:1"}) {
      const size_t at = line.rfind(tail);
      if (at != std::string::npos && at + std::string(tail).size() == line.size()) line.erase(at);
    }
    if (!line.empty()) out.insert(line);
  }
  return out;
}

// Every process of `level`'s plan for the named suites: the benchmark lists exactly the spec's rows the plan runs.
void expectContract(const report::PlanTopology& topo, Level level, const std::vector<std::string>& suites,
                    const std::string& what) {
  auto config = defaultConfig();
  ASSERT_TRUE(config.isOk());
  PlanOptions o;
  o.level = level;
  o.suites = suites;
  o.probe = false;
  PEERLAB_ASSERT_OK_AND_ASSIGN(Plan plan, makePlan(topo, *config, o));
  ASSERT_FALSE(plan.jobs.empty()) << what;
  const std::string dir = testing::scratchDir("suite-contract");
  int n = 0;
  for (const BenchJob& job : plan.jobs) {
    SCOPED_TRACE(what + ": " + job.label + " (" + std::string(levelName(level)) + ")");
    const std::string file = dir + "/" + std::to_string(n++) + ".plan.json";
    PEERLAB_ASSERT_OK(report::writeBenchPlan(file, job.work));
    std::set<std::string> want;
    for (const SuiteRow& row : findSuite(job.suite)->rows(job, topo))
      if (job.work.runs(row.key)) want.insert(row.gbench_name);
    const std::set<std::string> got = listed(job.binary, file);
    EXPECT_FALSE(want.empty());
    EXPECT_EQ(got, want);
  }
}

report::PlanTopology fixture(const std::string& path) {
  auto t = loadPlanTopology(testing::sourcePath(path));
  EXPECT_TRUE(t.isOk()) << path;
  return t.isOk() ? *t : report::PlanTopology{};
}

// Two, four or one GPU through NVSwitch (what the committed runs were made on).
report::PlanTopology nvswitch(int n) {
  report::PlanTopology t;
  t.source = "hand-made";
  for (int g = 0; g < n; ++g)
    t.gpus.push_back({g, "", "NVIDIA H200", "", 18, 26.5625, {}});
  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < n; ++b) {
      if (a != b) t.pairs.push_back({a, b, "SYS", 18, 18 * 26.5625, true});
    }
  }
  return t;
}

TEST(SuiteContract, PairSuitesListThePlannedRows) {
  const report::PlanTopology g4dn = fixture("fixtures/topologies/hwloc/g4dnmetal.xml");
  const report::PlanTopology p4d = fixture("fixtures/topologies/nccl/aws_p4d-24xl-topo.xml");
  for (Level level : {Level::kStandard, Level::kFull}) {
    expectContract(g4dn, level, {"zcopy"}, "g4dn");
    expectContract(nvswitch(4), level, {"zcopy"}, "4x NVSwitch");
  }
  expectContract(p4d, Level::kStandard, {"zcopy"}, "p4d");
}

TEST(SuiteContract, PeerCopyListsThePlannedRows) {
  const report::PlanTopology g4dn = fixture("fixtures/topologies/hwloc/g4dnmetal.xml");
  for (Level level : {Level::kQuick, Level::kStandard, Level::kFull}) {
    // Without a GPU the benchmark registers the pairs of two GPUs where the plan gives no rounds.
    expectContract(nvswitch(2), level, {"peer_copy"}, "2x NVSwitch");
    expectContract(nvswitch(4), level, {"peer_copy"}, "4x NVSwitch");
    expectContract(g4dn, level, {"peer_copy"}, "g4dn");
  }
}

TEST(SuiteContract, CollectivesAndHostCopiesListThePlannedRows) {
  for (Level level : {Level::kStandard, Level::kFull}) {
    expectContract(nvswitch(4), level, {"alltoallv"}, "4x NVSwitch");
    expectContract(nvswitch(4), level, {"moe"}, "4x NVSwitch");
  }
  // Without a GPU the benchmark registers the rows of one GPU.
  for (Level level : {Level::kQuick, Level::kStandard, Level::kFull})
    expectContract(nvswitch(1), level, {"host_copy"}, "1 GPU");
}

// The transport rows name the library the plan's knob picks (a UCX tree with its CUDA module makes it available).
TEST(SuiteContract, TransportListsThePlannedRowsOfItsLibrary) {
  testing::TempDir tmp("peerlab-contract-transport");
  std::filesystem::create_directories(tmp.path() + "/ucx/lib/ucx");
  ASSERT_TRUE(testing::writeFile(tmp.path() + "/ucx/lib/libucp.so.0", ""));
  ASSERT_TRUE(testing::writeFile(tmp.path() + "/ucx/lib/ucx/libuct_cuda.so.0", ""));
  testing::ScopedEnv ucx("PEERLAB_UCX_DIR", (tmp.path() + "/ucx").c_str());
  testing::ScopedEnv nixl("PEERLAB_NIXL_DIR", (tmp.path() + "/none").c_str());
  testing::ScopedEnv nixl_file("PEERLAB_NIXL_LIBRARY", nullptr);
  testing::ScopedEnv ucx_file("PEERLAB_UCX_LIBRARY", nullptr);
  for (Level level : {Level::kStandard, Level::kFull})
    expectContract(nvswitch(4), level, {"transport"}, "4x NVSwitch, UCX");
}

// Settings reach a benchmark as knobs it declares: an unknown knob, or a value of the wrong type, is bad input (exit 2,
// one line naming it) before any row runs; --knobs lists what the binary declares.
TEST(SuiteContract, KnobsAreDeclaredAndTyped) {
  const std::string dir = testing::scratchDir("suite-contract-knobs");
  report::BenchPlan plan;
  plan.suite = "zcopy";
  plan.rounds = {{{0, 1}}};
  PEERLAB_ASSERT_OK(report::writeBenchPlan(dir + "/p.json", plan));
  const std::string zcopy = benchPath("zcopy_bench");
  testing::CliRun bad =
      testing::runCommand({zcopy, "--plan=" + dir + "/p.json", "--knob", "nonsense=1", "--benchmark_list_tests=true"});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find("knob nonsense: not a knob of this benchmark (knobs: handle, variants, programmatic, "
                         "kernel_threads)"),
            std::string::npos)
      << bad.err;
  EXPECT_EQ(testing::lineCount(bad.err), 1) << bad.err;
  testing::CliRun typed = testing::runCommand({zcopy, "--knob=kernel_threads=many", "--benchmark_list_tests=true"});
  EXPECT_EQ(typed.exit_code, 2) << typed.err;
  EXPECT_NE(typed.err.find("knob kernel_threads=\"many\": expected a whole number"), std::string::npos) << typed.err;
  testing::CliRun list = testing::runCommand({benchPath("peer_copy_bench"), "--knobs"});
  EXPECT_EQ(list.exit_code, 0) << list.err;
  EXPECT_NE(list.out.find("chase_sm_loads"), std::string::npos) << list.out;
  // A plan file that is not one is refused naming it.
  ASSERT_TRUE(testing::writeFile(dir + "/bad.json", "{\"suite\": 3}"));
  testing::CliRun unreadable = testing::runCommand({zcopy, "--plan=" + dir + "/bad.json"});
  EXPECT_EQ(unreadable.exit_code, 2);
  EXPECT_NE(unreadable.err.find(dir + "/bad.json: $.suite: must be a string"), std::string::npos) << unreadable.err;
  // --pairs gives the rounds by hand: the pair's rows, as the plan's would be.
  const std::set<std::string> rows = listed("zcopy_bench", dir + "/p.json", {"--pairs=2-3"});
  EXPECT_TRUE(rows.count("BM_Zcopy/peerlab.put/uni/2->3/bytes:268435456")) << rows.size();
  EXPECT_FALSE(rows.count("BM_Zcopy/peerlab.put/uni/0->1/bytes:268435456"));
}

}  // namespace
}  // namespace peerlab::qualify
