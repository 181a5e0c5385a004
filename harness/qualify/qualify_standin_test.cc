// `peerlab qualify` on a stand-in machine (what the Slurm wrappers' tests run on nodes without a GPU): the topology
// of a fixture (PEERLAB_QUALIFY_STANDIN_TOPOLOGY), the stand-in NVML, the probe's stand-in worker. The bundle is
// written, says in every output that it is a stand-in, and carries each failed check's action.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "harness/report/report.h"
#include "harness/testing/cli.h"
#include "reference/testing/testing.h"

namespace peerlab::testing {
namespace {

std::vector<std::string> standinEnv(const std::string& dir, const std::string& nvml_scenario) {
  std::ofstream(dir + "/nvml.json") << nvml_scenario;
  return {"PEERLAB_QUALIFY_STANDIN_TOPOLOGY=" + sourcePath("fixtures/topologies/hwloc/power8gpudistances.xml"),
          std::string("PEERLAB_NVML_LIBRARY=") + PEERLAB_FAKE_NVML_PATH,
          "PEERLAB_FAKE_NVML=" + dir + "/nvml.json",
          std::string("PEERLAB_PROBE_WORKER=") + PEERLAB_STANDIN_PATH,
          "PEERLAB_STANDIN_GPUS=4",
          "HOME=" + dir};
}

TEST(QualifyStandIn, NvlinkDownFailsWithItsActionInEveryOutput) {
  const std::string dir = scratchDir("qualify-standin-fail");
  CliRun r = runPeerlab({"qualify", "--skip-bench", "--out", dir + "/b"},
                        standinEnv(dir, R"({"gpus": 4, "nvlink_down": [3]})"));
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("FAIL health: nvlink_state GPU 0: measured fail"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\n  action: reset GPU, reseat NVLink: "), std::string::npos) << r.out;
  auto run = report::readRun(dir + "/b/results.json");
  ASSERT_TRUE(run.isOk()) << run.status().message();
  // Every stand-in it ran with is in its fingerprint, and the console says so.
  const report::Injection& injected = run->fingerprint.injected;
  EXPECT_EQ(injected.topology, sourcePath("fixtures/topologies/hwloc/power8gpudistances.xml"));
  EXPECT_EQ(injected.nvml, PEERLAB_FAKE_NVML_PATH);
  EXPECT_EQ(injected.probe_worker, PEERLAB_STANDIN_PATH);
  EXPECT_TRUE(injected.fault.empty() && injected.interposer.empty());
  EXPECT_NE(r.out.find("peerlab qualify: INJECTED: stand-in probe worker "), std::string::npos) << r.out;
  EXPECT_EQ(run->kind.name, "p100-x4-nvlink");  // the stand-in topology's hardware kind, typed
  int failed = 0;
  for (const auto& c : run->extra["qualify"]["checks"]) {
    if (c["status"] != "fail") continue;
    ++failed;
    EXPECT_EQ(c["name"], "nvlink_state GPU 0");
    EXPECT_EQ(c["action"]["id"], "reseat_nvlink");
  }
  EXPECT_EQ(failed, 1);
  // The probe ran through the stand-in worker on the fixture's 12 ordered pairs.
  EXPECT_TRUE(std::filesystem::exists(dir + "/b/probe.json"));
  const std::string summary = readFile(dir + "/b/summary.md");
  EXPECT_NE(summary.find("stand-in machine (topology "), std::string::npos) << summary;
  EXPECT_NE(summary.find("| reset GPU, reseat NVLink: "), std::string::npos) << summary;
  EXPECT_NE(readFile(dir + "/b/junit.xml").find("(action: reset GPU, reseat NVLink: "), std::string::npos);
  EXPECT_TRUE(std::filesystem::exists(dir + "/b/report.html"));
  CliRun reason = runPeerlab({"report", dir + "/b/results.json", "--drain-reason"});
  EXPECT_EQ(reason.out, "nvlink_state GPU0: reset GPU, reseat NVLink\n") << reason.err;
}

TEST(QualifyStandIn, HealthyStandInPasses) {
  const std::string dir = scratchDir("qualify-standin-pass");
  CliRun r = runPeerlab({"qualify", "--skip-bench", "--out", dir + "/b"}, standinEnv(dir, R"({"gpus": 4})"));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("peerlab qualify: PASS: "), std::string::npos) << r.out;
  // A stand-in applies to a live run only: a stored run is checked as it is.
  CliRun stored = runPeerlab({"qualify", "--results", dir + "/b/results.json", "--out", dir + "/again"},
                             standinEnv(dir, R"({"gpus": 4})"));
  EXPECT_EQ(stored.exit_code, 0) << stored.err;
}

}  // namespace
}  // namespace peerlab::testing
