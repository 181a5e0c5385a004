// What qualify and bench need before they measure, through the built binary: every executable resolved (or named
// with the command that builds it), the kind derived from the hardware, an estimate from what will run, and help and
// headers that match what runs.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>

#include "harness/qualify/gpu_models.h"
#include "harness/qualify/suites.h"
#include "harness/testing/cli.h"
#include "reference/core/devices.h"
#include "reference/host/host_copy.h"
#include "reference/testing/testing.h"

namespace peerlab::testing {
namespace {

namespace fs = std::filesystem;

const std::string kH200x4 = "fixtures/topologies/hwloc/h200x4-vm.xml";

// The plan as JSON; `exit_code`: what the dry run must exit with (4: a real run would stop before measuring).
nlohmann::json dryRunJson(const std::string& peerlab, std::vector<std::string> args,
                          const std::vector<std::string>& env = {}, int exit_code = 0) {
  args.insert(args.begin(), {peerlab, "qualify", "--dry-run", "--json"});
  CliRun r = runCommand(args, env);
  EXPECT_EQ(r.exit_code, exit_code) << r.err;
  nlohmann::json doc = nlohmann::json::parse(r.out, nullptr, false);
  EXPECT_FALSE(doc.is_discarded()) << r.out;
  return doc.is_discarded() ? nlohmann::json::object() : doc;
}

// What a dry run of the DGX-2 (V100, sm_70) fixture exits with: 4 when this build holds no code for sm_70 (no CUDA 13
// build does), else 0.
int dgx2DryRunExit() {
  return qualify::buildRunsOn(host::builtArchitectures(), 70) == std::optional<bool>(false) ? 4 : 0;
}

// A copy of the built peerlab alone in <dir>/bin: none of the benchmarks beside it.
std::string lonePeerlab(const std::string& dir) {
  fs::create_directories(dir + "/bin");
  const std::string copy = dir + "/bin/peerlab";
  fs::copy_file(PEERLAB_BINARY, copy, fs::copy_options::overwrite_existing);
  return copy;
}

void fakeExecutable(const std::string& path) {
  fs::create_directories(fs::path(path).parent_path());
  ASSERT_TRUE(writeFile(path, "#!/bin/sh\nexit 0\n"));
  ::chmod(path.c_str(), 0755);
}

TEST(QualifySetup, DryRunJsonResolvesEveryExecutable) {
  const nlohmann::json doc = dryRunJson(PEERLAB_BINARY, {"--fixture", sourcePath(kH200x4)});
  ASSERT_GE(doc["jobs"].size(), 5u);
  const std::string bin = fs::path(PEERLAB_BINARY).parent_path().string();
  std::set<std::string> suites;
  for (const auto& j : doc["jobs"]) {
    EXPECT_EQ(j["found"], true) << j.dump();
    EXPECT_EQ(j["executable"], bin + "/" + j["binary"].get<std::string>()) << j.dump();
    suites.insert(j["suite"].get<std::string>());
  }
  // The default suites, host_copy included; a suite whose libraries this machine lacks (transport without NIXL or a
  // CUDA-enabled UCX) is listed as not available instead, never silently left out.
  std::string notes;
  for (const auto& n : doc["notes"])
    notes += n.get<std::string>() + "\n";
  for (const std::string& s : qualify::qualifyDefaultSuites()) {
    EXPECT_TRUE(suites.count(s) || notes.find(s + ": not available: ") != std::string::npos) << s << "\n" << notes;
  }
  EXPECT_TRUE(doc["stops"].empty()) << doc["stops"].dump();
}

TEST(QualifySetup, MissingExecutablesAreNamedWithTheCommandThatBuildsThem) {
  const std::string dir = scratchDir("qualify-missing");
  const std::string peerlab = lonePeerlab(dir);
  const nlohmann::json doc = dryRunJson(peerlab, {"--fixture", sourcePath(kH200x4)}, {}, 4);
  ASSERT_FALSE(doc["jobs"].empty());
  for (const auto& j : doc["jobs"]) {
    EXPECT_EQ(j["found"], false) << j.dump();
    EXPECT_TRUE(j["executable"].is_null()) << j.dump();
  }
  ASSERT_EQ(doc["stops"].size(), 1u) << doc["stops"].dump();
  const std::string stop = doc["stops"][0].get<std::string>();
  for (const char* needle :
       {"peer_copy_bench (suite peer_copy)", "host_copy_bench (suite host_copy)", "zcopy_bench (suite zcopy)",
        "are not found in ", "/libexec/peerlab, ", "build them: cmake --build <build dir> --target peerlab_qualify"}) {
    EXPECT_NE(stop.find(needle), std::string::npos) << needle << " in " << stop;
  }
  EXPECT_NE(stop.find(fs::canonical(dir).string() + "/bin"), std::string::npos) << stop;

  // The text plan says where a real run would stop, and so does bench's.
  CliRun text = runCommand({peerlab, "qualify", "--dry-run", "--fixture", sourcePath(kH200x4)});
  EXPECT_EQ(text.exit_code, 4) << text.err;
  EXPECT_NE(text.err.find("peerlab qualify: a real run would stop before measuring: peer_copy_bench"),
            std::string::npos)
      << text.err;
  EXPECT_NE(text.out.find("qualify would stop here (exit 4): peer_copy_bench (suite peer_copy)"), std::string::npos)
      << text.out;
  CliRun bench = runCommand({peerlab, "bench", "--dry-run", "--fixture", sourcePath(kH200x4), "--suite", "zcopy"});
  EXPECT_EQ(bench.exit_code, 4) << bench.err;
  EXPECT_NE(bench.out.find("bench would stop here (exit 4): zcopy_bench (suite zcopy) is not found in"),
            std::string::npos)
      << bench.out;
  EXPECT_NE(bench.out.find("build it: cmake --build"), std::string::npos) << bench.out;

  // Installed layout: the benchmarks in libexec/peerlab beside bin/.
  for (const std::string& b : qualify::plannedExecutables()) {
    if (b != "peerlab") fakeExecutable(dir + "/libexec/peerlab/" + b);
  }
  const nlohmann::json installed = dryRunJson(peerlab, {"--fixture", sourcePath(kH200x4)});
  for (const auto& j : installed["jobs"]) {
    EXPECT_EQ(j["found"], true) << j.dump();
    EXPECT_EQ(j["executable"], fs::canonical(dir).string() + "/libexec/peerlab/" + j["binary"].get<std::string>());
  }
  EXPECT_TRUE(installed["stops"].empty()) << installed["stops"].dump();

  // --bench-dir: that directory only.
  const nlohmann::json elsewhere =
      dryRunJson(peerlab, {"--fixture", sourcePath(kH200x4), "--bench-dir", dir + "/x"}, {}, 4);
  ASSERT_EQ(elsewhere["stops"].size(), 1u);
  EXPECT_NE(elsewhere["stops"][0].get<std::string>().find("not found in " + dir + "/x (--bench-dir)"),
            std::string::npos)
      << elsewhere["stops"][0];
}

// On a GPU machine a real run with a benchmark missing stops before it measures anything: exit 4, one line naming
// the binary and the command that builds it, no bundle.
TEST(QualifySetup, MissingExecutableStopsARealRunWithExitFour) {
  if (!deviceCount().isOk() || *deviceCount() < 1) GTEST_SKIP() << "needs a GPU: without one qualify exits 3 first";
  const std::string dir = scratchDir("qualify-missing-run");
  const std::string peerlab = lonePeerlab(dir);
  CliRun q = runCommand({peerlab, "qualify", "--skip-probe", "--skip-health", "--out", dir + "/bundle"});
  EXPECT_EQ(q.exit_code, 4) << q.out << q.err;
  EXPECT_EQ(lineCount(q.err), 1) << q.err;
  EXPECT_NE(q.err.find("host_copy_bench (suite host_copy)"), std::string::npos) << q.err;
  EXPECT_NE(q.err.find("--target peerlab_qualify"), std::string::npos) << q.err;
  EXPECT_FALSE(fs::exists(dir + "/bundle/results.json"));
  CliRun b = runCommand({peerlab, "bench", "--suite", "host_copy", "--out", dir + "/run.json"});
  EXPECT_EQ(b.exit_code, 4) << b.out << b.err;
  EXPECT_NE(b.err.find("host_copy_bench (suite host_copy) is not found"), std::string::npos) << b.err;
  EXPECT_FALSE(fs::exists(dir + "/run.json"));
}

TEST(QualifySetup, KindIsDerivedFromTheHardwareAndSaysHow) {
  const nlohmann::json derived = dryRunJson(PEERLAB_BINARY, {"--fixture", sourcePath(kH200x4)}, {"PEERLAB_KIND"});
  EXPECT_EQ(derived["kind"], "h200-x4");
  EXPECT_EQ(derived["kind_source"], "hardware");
  EXPECT_EQ(derived["kind_basis"].get<std::string>().rfind("4x NVIDIA H200, interconnect unknown", 0), 0u)
      << derived["kind_basis"];
  EXPECT_EQ(derived["kind_overridden"], false);
  const nlohmann::json dgx =
      dryRunJson(PEERLAB_BINARY, {"--fixture", sourcePath("fixtures/topologies/hwloc/nvidiaDGX2.xml")},
                 {"PEERLAB_KIND"}, dgx2DryRunExit());
  EXPECT_EQ(dgx["kind"], "v100-x16-nvswitch");
  // An alias of the hardware's kind (from the environment) is filed under the canonical spelling, and says so.
  const nlohmann::json env =
      dryRunJson(PEERLAB_BINARY, {"--fixture", sourcePath(kH200x4)}, {"PEERLAB_KIND=nvidia-h200-x4"});
  EXPECT_EQ(env["kind"], "h200-x4");
  EXPECT_EQ(env["kind_source"], "PEERLAB_KIND");
  // The hardware cannot tell the interconnect here: the given kind completes it.
  const nlohmann::json given =
      dryRunJson(PEERLAB_BINARY, {"--fixture", sourcePath(kH200x4), "--kind", "h200-x4-nvswitch"},
                 {"PEERLAB_KIND=nvidia-h200-x4"});
  EXPECT_EQ(given["kind"], "h200-x4-nvswitch");
  EXPECT_EQ(given["kind_source"], "--kind");
  // A kind that contradicts the hardware is refused naming both, from the option and from the environment.
  for (const auto& [args, env] :
       std::vector<std::pair<std::vector<std::string>, std::string>>{{{"--kind", "nvidia-h100-x4"}, "PEERLAB_KIND"},
                                                                     {{"--kind", "h200-x2"}, "PEERLAB_KIND"},
                                                                     {{}, "PEERLAB_KIND=lab-rack-3"}}) {
    std::vector<std::string> argv = {"qualify", "--dry-run", "--json", "--fixture", sourcePath(kH200x4)};
    argv.insert(argv.end(), args.begin(), args.end());
    CliRun r = runPeerlab(argv, {env});
    EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
    EXPECT_EQ(lineCount(r.err), 1) << r.err;
    EXPECT_NE(r.err.find("the hardware is h200-x4 (4x NVIDIA H200"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("--kind-override"), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
  // With the override the run is filed under the given kind and records that it was overridden.
  const nlohmann::json over = dryRunJson(
      PEERLAB_BINARY, {"--fixture", sourcePath(kH200x4), "--kind", "lab-rack-3", "--kind-override"}, {"PEERLAB_KIND"});
  EXPECT_EQ(over["kind"], "lab-rack-3");
  EXPECT_EQ(over["kind_overridden"], true);
  EXPECT_EQ(over["hardware_kind"], "h200-x4");
  CliRun text = runPeerlab({"qualify", "--dry-run", "--fixture", sourcePath(kH200x4)}, {"PEERLAB_KIND"});
  EXPECT_NE(text.out.find("kind: h200-x4 (hardware: 4x NVIDIA H200, interconnect unknown"), std::string::npos)
      << text.out;
  // bench holds the kind against the hardware the same way.
  CliRun bench =
      runPeerlab({"bench", "--dry-run", "--fixture", sourcePath(kH200x4), "--kind", "h100-x4"}, {"PEERLAB_KIND"});
  EXPECT_EQ(bench.exit_code, 2) << bench.out << bench.err;
  EXPECT_NE(bench.err.find("contradicts the hardware"), std::string::npos) << bench.err;
}

TEST(QualifySetup, HelpAndHeadersMatchWhatRuns) {
  CliRun help = runPeerlab({"qualify", "--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("default at --level standard: peer_copy,zcopy,alltoallv,host_copy,transport"),
            std::string::npos)
      << help.out;
  EXPECT_NE(help.out.find("moe rows"), std::string::npos) << help.out;
  CliRun bench = runPeerlab({"bench", "--dry-run", "--fixture", sourcePath(kH200x4), "--suite", "peer_copy"});
  EXPECT_EQ(bench.exit_code, 0) << bench.err;
  EXPECT_EQ(bench.out.rfind("peerlab bench plan (level standard) for ", 0), 0u) << bench.out;
  EXPECT_EQ(bench.out.find("peerlab qualify plan"), std::string::npos) << bench.out;
}

TEST(QualifySetup, DryRunSaysWhenTheBuildHoldsNoCodeForTheGpus) {
  if (!qualify::buildRunsOn(host::builtArchitectures(), 70).has_value() ||
      *qualify::buildRunsOn(host::builtArchitectures(), 70)) {
    GTEST_SKIP() << "this build's architectures (" << host::builtArchitectures() << ") cover sm_70 or cannot be read";
  }
  struct Case {
    const char* fixture;
    const char* sm;
  };
  for (const Case& c : {Case{"fixtures/topologies/hwloc/nvidiaDGX2.xml", "sm_70"},
                        Case{"fixtures/topologies/hwloc/power8gpudistances.xml", "sm_60"},
                        Case{"fixtures/topologies/hwloc/32em64t-2n8c2t-pci-wholeio.xml", "sm_35, sm_20"}}) {
    CliRun r = runPeerlab({"qualify", "--dry-run", "--fixture", sourcePath(c.fixture)});
    // The exit code a real run would stop with, and the plan all the same.
    EXPECT_EQ(r.exit_code, 4) << r.err;
    EXPECT_NE(r.out.find("peerlab qualify plan"), std::string::npos) << r.out;
    EXPECT_EQ(lineCount(r.err), 1) << r.err;
    EXPECT_NE(r.err.find(std::string("a real run would stop before measuring: this build holds no code for ") + c.sm),
              std::string::npos)
        << r.err;
    CliRun json = runPeerlab({"qualify", "--dry-run", "--json", "--fixture", sourcePath(c.fixture)});
    EXPECT_EQ(json.exit_code, 4) << json.err;
    EXPECT_FALSE(nlohmann::json::parse(json.out, nullptr, false).is_discarded()) << json.out;
    EXPECT_NE(r.out.find(std::string("qualify would stop here (exit 4): this build holds no code for ") + c.sm),
              std::string::npos)
        << c.fixture << ":\n"
        << r.out;
  }
  CliRun h200 = runPeerlab({"qualify", "--dry-run", "--fixture", sourcePath(kH200x4)});
  EXPECT_EQ(h200.exit_code, 0) << h200.err;
  EXPECT_EQ(h200.out.find("holds no code"), std::string::npos) << h200.out;
}

TEST(QualifySetup, EstimateComesFromWhatRunsNotFromDeadlines) {
  const nlohmann::json dgx = dryRunJson(
      PEERLAB_BINARY, {"--fixture", sourcePath("fixtures/topologies/hwloc/nvidiaDGX2.xml")}, {}, dgx2DryRunExit());
  const double estimate = dgx["budget"]["estimate_s"].get<double>();
  double deadlines = 0;
  for (const auto& j : dgx["jobs"]) {
    EXPECT_EQ(j["estimate_basis"].get<std::string>().rfind("model: ", 0), 0u) << j.dump();
    deadlines += j["deadline_base_s"].get<double>();
  }
  // 16 GPUs, 240 ordered pairs: far less than the deadlines' sum (the 287 min the sum of deadline bases gave).
  EXPECT_LT(estimate, deadlines / 4) << estimate << " vs " << deadlines;
  EXPECT_GT(estimate, 60);
  EXPECT_NE(dgx["budget"]["basis"].get<std::string>().find("deadlines are separate"), std::string::npos);

  // Past runs of the same kind: the measured wall times of the same processes (suite, label, arguments). Two run files
  // that ran this plan's processes, 3 s and 5 s each: the estimate is their median, 4 s. They name their kind by an
  // alias (nvidia-h200-x4) and the fixture cannot tell the interconnect: the same hardware, with or without --kind.
  const std::string runs = scratchDir("qualify-past-runs");
  const nlohmann::json plan = dryRunJson(PEERLAB_BINARY, {"--fixture", sourcePath(kH200x4), "--kind", "nvidia-h200-x4",
                                                          "--suite", "peer_copy,zcopy,alltoallv"});
  ASSERT_FALSE(plan["jobs"].empty());
  for (double wall : {3.0, 5.0}) {
    nlohmann::json run = nlohmann::json::parse(readFile(sourcePath("reports/schema/sample-run.json")));
    run["kind"] = "nvidia-h200-x4";
    run["plan"] = plan;
    nlohmann::json jobs = nlohmann::json::array();
    for (const auto& j : plan["jobs"])
      jobs.push_back({{"label", j["label"]}, {"plan", j["plan"]}, {"wall_s", wall}, {"exit", "ok"}});
    run["bench"] = {{"jobs", jobs}};
    ASSERT_TRUE(writeFile(runs + "/" + std::to_string(static_cast<int>(wall)) + ".json", run.dump()));
  }
  for (const std::vector<std::string>& kind : {std::vector<std::string>{}, {"--kind", "nvidia-h200-x4"}}) {
    std::vector<std::string> args = {
        "--fixture", sourcePath(kH200x4), "--suite", "peer_copy,zcopy,alltoallv", "--history", runs};
    args.insert(args.end(), kind.begin(), kind.end());
    const nlohmann::json past = dryRunJson(PEERLAB_BINARY, args, {"PEERLAB_KIND"});
    ASSERT_EQ(past["jobs"].size(), plan["jobs"].size());
    for (const auto& j : past["jobs"]) {
      EXPECT_EQ(j["estimate_basis"], "measured: median of 2 past runs of this kind") << j.dump();
      EXPECT_DOUBLE_EQ(j["budget_s"].get<double>(), 4.0) << j.dump();
    }
    // Reading them is part of the run's wall time, so of its estimate, and the plan says so.
    const nlohmann::json& budget = past["budget"];
    EXPECT_GT(budget["history_s"].get<double>(), 0.0) << budget.dump();
    EXPECT_GE(budget["overhead_s"].get<double>(), budget["history_s"].get<double>()) << budget.dump();
    EXPECT_NE(budget["basis"].get<std::string>().find("s reading the past runs"), std::string::npos) << budget.dump();
    // The plan says how many past runs it used.
    bool counted = false;
    for (const auto& n : past["notes"])
      counted |= n.get<std::string>() == "--history " + runs +
                                             ": 2 of its 2 runs are of kind h200-x4 with process "
                                             "wall times";
    EXPECT_TRUE(counted) << past["notes"].dump();
  }
  // The committed runs and bundles as they are: a directory of bundles, whose 4x H200 runs count, and a directory of
  // run files, whose 4x H200 runs were made before plans recorded their level and do not.
  for (const auto& [dir, counts] : {std::pair{"reports/qualify", true}, std::pair{"reports/runs", false}}) {
    const nlohmann::json committed =
        dryRunJson(PEERLAB_BINARY, {"--fixture", sourcePath(kH200x4), "--history", sourcePath(dir)}, {"PEERLAB_KIND"});
    bool used = false, unused = false;
    for (const auto& n : committed["notes"]) {
      const std::string text = n.get<std::string>();
      used |= text.find("runs are of kind h200-x4 with process wall times") != std::string::npos;
      unused |= text.find("is of kind h200-x4 with process wall times") != std::string::npos;
    }
    EXPECT_EQ(used, counts) << dir << ": " << committed["notes"].dump();
    EXPECT_EQ(unused, !counts) << dir << ": " << committed["notes"].dump();
  }
  // A directory with neither: refused, naming it.
  const std::string empty = scratchDir("qualify-history-empty");
  CliRun none = runPeerlab({"qualify", "--dry-run", "--fixture", sourcePath(kH200x4), "--history", empty});
  EXPECT_EQ(none.exit_code, 2) << none.err;
  EXPECT_NE(none.err.find("--history " + empty + ": holds no run file"), std::string::npos) << none.err;
  // History of other hardware only: said in the plan, not silently ignored.
  const nlohmann::json other = dryRunJson(
      PEERLAB_BINARY,
      {"--fixture", sourcePath(kH200x4), "--history", sourcePath("reports/runs/2026-11-25-h100-x1-a99f8ae.json.gz")},
      {"PEERLAB_KIND"});
  bool said = false;
  for (const auto& n : other["notes"])
    said |= n.get<std::string>().find("none of its 1 runs is of kind h200-x4") != std::string::npos;
  EXPECT_TRUE(said) << other["notes"].dump();
  // A history database keeps no per-process wall times: refused, naming it.
  const std::string dir = scratchDir("qualify-history");
  std::vector<std::string> ingest = {"history", "ingest", "--db", dir + "/h.sqlite",
                                     sourcePath("reports/runs/2026-11-21-h200-x4-nvswitch-db99ff9.json.gz")};
  CliRun stored = runPeerlab(ingest);
  ASSERT_EQ(stored.exit_code, 0) << stored.err;
  CliRun db = runPeerlab({"qualify", "--dry-run", "--fixture", sourcePath(kH200x4), "--history", dir + "/h.sqlite"});
  EXPECT_EQ(db.exit_code, 2) << db.err;
  EXPECT_EQ(lineCount(db.err), 1) << db.err;
  EXPECT_NE(db.err.find("keeps no per-process wall times"), std::string::npos) << db.err;
  CliRun bad = runPeerlab({"qualify", "--dry-run", "--fixture", sourcePath(kH200x4), "--history", "/nonexistent"});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_EQ(lineCount(bad.err), 1) << bad.err;
  EXPECT_NE(bad.err.find("--history /nonexistent"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace peerlab::testing
