// `peerlab health` end to end over the stand-in NVML: verdicts, exit codes, the run file, bad input.

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "harness/report/report.h"
#include "harness/testing/cli.h"

namespace peerlab::testing {
namespace {

std::vector<std::string> fakeEnv(const std::string& scenario, const char* library = PEERLAB_FAKE_NVML_PATH) {
  return {std::string("PEERLAB_NVML_LIBRARY=") + library, "PEERLAB_FAKE_NVML=" + scenario};
}

TEST(HealthCli, HealthyMachinePassesAndWritesHealthRows) {
  const std::string dir = scratchDir("health-cli");
  const std::string json = dir + "/run.json";
  CliRun r = runPeerlab({"health", "--watch", "0.3", "--json", json}, fakeEnv("healthy"));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("peerlab health: PASS: 20 checks, 0 failed, 0 warnings, 2 unsupported"), std::string::npos)
      << r.out;
  auto run = report::readRun(json);
  ASSERT_TRUE(run.isOk()) << run.status().message();
  int rows = 0;
  for (const report::Result& res : run->results) {
    if (res.suite != "health") continue;
    ++rows;
    EXPECT_EQ(res.impl, "nvml");
    EXPECT_FALSE(res.detail.empty()) << res.name;
  }
  EXPECT_EQ(rows, 20);
  ASSERT_TRUE(run->extra.contains("health"));
  EXPECT_TRUE(run->extra["health"]["xids"].empty());
  // Where the time went, step by step; the links read at their maximum are not woken a second time.
  const nlohmann::json& timing = run->extra["health"]["timing"];
  for (const char* step : {"fingerprint_s", "open_s", "before_s", "watch_s", "after_s"}) {
    ASSERT_TRUE(timing.contains(step) && timing[step].is_number()) << step << " " << timing.dump();
    EXPECT_GE(timing[step].get<double>(), 0.0) << step;
  }
  EXPECT_GE(timing["watch_s"].get<double>(), 0.3);
  EXPECT_EQ(timing["after_under_traffic"], 0) << timing.dump();
}

TEST(HealthCli, ALinkBelowItsMaximumIsReadUnderTrafficAgain) {
  const std::string dir = scratchDir("health-cli-again");
  const std::string json = dir + "/run.json";
  CliRun r = runPeerlab({"health", "--watch", "0", "--json", json}, fakeEnv("pcie_downtrain"));
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  auto run = report::readRun(json);
  ASSERT_TRUE(run.isOk()) << run.status().message();
  EXPECT_EQ(run->extra["health"]["timing"]["after_under_traffic"], 1) << run->extra["health"].dump();
}

TEST(HealthCli, DowntrainedLinkFailsWithExitCode1) {
  CliRun r = runPeerlab({"health", "--watch", "0"}, fakeEnv("pcie_downtrain"));
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("fail        GPU 0 pcie_link      Gen3 x8 of Gen5 x16"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("FAIL: 20 checks, 1 failed"), std::string::npos) << r.out;
  // A failing command says so on stderr, in one line, as every command does.
  EXPECT_EQ(lineCount(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("peerlab health: FAIL: 1 of 20 checks failed (first: GPU 0 pcie_link"), std::string::npos)
      << r.err;
}

TEST(HealthCli, JsonDashIsTheOnlyThingOnStdout) {
  CliRun r = runPeerlab({"health", "--watch", "0", "--json", "-"}, fakeEnv("healthy"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json doc = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(doc.is_discarded()) << "stdout is not one JSON document:\n" << r.out.substr(0, 300);
  EXPECT_TRUE(doc["results"].is_array());
  EXPECT_NE(r.err.find("peerlab health: PASS: 20 checks"), std::string::npos) << r.err;
}

TEST(HealthCli, WatchOutOfRangeIsOneReadableLine) {
  for (const char* bad : {"-1", "1e400", "forever"}) {
    CliRun r = runPeerlab({"health", "--watch", bad}, fakeEnv("healthy"));
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.out << r.err;
    EXPECT_NE(r.err.find(std::string("--watch \"") + bad + "\": expected a number from 0 to 86400"), std::string::npos)
        << r.err;
    EXPECT_EQ(lineCount(r.err), 1) << r.err;
  }
}

TEST(HealthCli, XidDuringTheWatchFails) {
  CliRun r = runPeerlab({"health", "--watch", "0.6"}, fakeEnv("xid"));
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("XID 79 (GPU has fallen off the bus)"), std::string::npos) << r.out;
}

TEST(HealthCli, WarningsDoNotFail) {
  CliRun r = runPeerlab({"health", "--watch", "0"}, fakeEnv("sram_parity"));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("1 warnings"), std::string::npos) << r.out;
}

TEST(HealthCli, NoNvmlIsExit3AndBadConfigExit2) {
  CliRun none = runPeerlab({"health", "--watch", "0"}, {"PEERLAB_NVML_LIBRARY=/nonexistent/libnvidia-ml.so.1"});
  EXPECT_EQ(none.exit_code, 3) << none.out << none.err;
  EXPECT_NE(none.err.find("cannot load /nonexistent/libnvidia-ml.so.1"), std::string::npos) << none.err;
  const std::string dir = scratchDir("health-cli-config");
  std::ofstream(dir + "/bad.toml") << "[health]\npcie_max_replays = \"many\"\n";
  CliRun bad = runPeerlab({"health", "--config", dir + "/bad.toml"}, fakeEnv("healthy"));
  EXPECT_EQ(bad.exit_code, 2) << bad.out << bad.err;
  EXPECT_NE(bad.err.find(dir + "/bad.toml:2: [health] pcie_max_replays must be a number"), std::string::npos)
      << bad.err;
  EXPECT_EQ(lineCount(bad.err), 1);
}

}  // namespace
}  // namespace peerlab::testing
