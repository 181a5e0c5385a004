// `peerlab repro` through the built binary: the system-state bundle and the reproduction command.
#include <gtest/gtest.h>

#include <filesystem>

#include "harness/report/report.h"
#include "harness/testing/cli.h"
#include "reference/testing/testing.h"

namespace peerlab::testing {
namespace {

TEST(ReproCli, SystemStateBundle) {
  const std::string dir = scratchDir("repro-state") + "/bundle";
  CliRun r = runPeerlab({"repro", "--skip-probe", "--out", dir});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (const char* f : {"fingerprint.json", "iommu.txt", "acs.txt", "cmdline.txt", "README.md", "topology.txt"}) {
    EXPECT_TRUE(std::filesystem::exists(dir + "/" + f)) << f;
  }
  auto fp = nlohmann::json::parse(readFile(dir + "/fingerprint.json"));
  for (const char* k : {"hostname", "driver", "cuda_runtime", "nccl", "gpus", "kernel", "os"}) {
    EXPECT_TRUE(fp.contains(k)) << k;
  }
  // The hwloc export of this machine (hwloc works without a GPU).
  ASSERT_TRUE(std::filesystem::exists(dir + "/topology.xml"));
  EXPECT_NE(readFile(dir + "/topology.xml").find("<topology"), std::string::npos);
  EXPECT_EQ(readFile(dir + "/cmdline.txt"),
            readFile("/proc/cmdline").substr(0, readFile("/proc/cmdline").find('\n')) + "\n");
  const std::string readme = readFile(dir + "/README.md");
  EXPECT_NE(readme.find("## Reproduce"), std::string::npos);
  EXPECT_NE(readme.find("peerlab probe --refresh --verbose --json probe-repro.json"), std::string::npos) << readme;
}

TEST(ReproCli, FailingCellsGiveTheCommand) {
  const std::string dir = scratchDir("repro-cells");
  auto run = report::readRun(sourcePath("reports/schema/sample-run.json"));
  ASSERT_TRUE(run.isOk());
  report::Result lie = run->results[0];  // ce_write/4096 0->1, claimed
  lie.status = "corrupt";
  lie.wrong = 12;
  lie.extra["first_bad"] = 4088;
  lie.extra["method"] = "ce_write";
  run->results.push_back(lie);
  report::Result hang = lie;
  hang.name = "sm_store/67108864";
  hang.extra["method"] = "sm_store";
  hang.bytes = 67108864;
  hang.src = 1;
  hang.dst = 0;
  hang.status = "hang";
  hang.extra["claimed"] = false;
  run->results.push_back(hang);
  ASSERT_TRUE(report::writeRun(*run, dir + "/probe.json").isOk());

  CliRun r = runPeerlab({"repro", "--probe-json", dir + "/probe.json", "--out", dir + "/bundle"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  const std::string cmd =
      "peerlab probe --methods ce_write,sm_store --pairs 0-1,1-0 --sizes 4096,67108864 --refresh --verbose --json "
      "probe-repro.json";
  EXPECT_NE(r.out.find(cmd), std::string::npos) << r.out;
  const std::string readme = readFile(dir + "/bundle/README.md");
  EXPECT_NE(readme.find("```sh\n" + cmd + "\n```"), std::string::npos) << readme;
  EXPECT_NE(readme.find("| ce_write | 0 -> 1 | 4 KiB | corrupt | yes | 12 wrong 8-byte words, first bad byte at 4088"),
            std::string::npos)
      << readme;
  EXPECT_NE(readme.find("| sm_store | 1 -> 0 | 64 MiB | hang | no |"), std::string::npos) << readme;
  EXPECT_TRUE(std::filesystem::exists(dir + "/bundle/probe.json"));

  CliRun bad = runPeerlab({"repro", "--probe-json", dir + "/nothing.json", "--out", dir + "/b2"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_EQ(lineCount(bad.err), 1) << bad.err;
  EXPECT_NE(bad.err.find(dir + "/nothing.json: no such file"), std::string::npos) << bad.err;
}

// The whole path: repro runs `peerlab probe` as a child (here with the probe's stand-in worker, 3 fake GPUs, and one
// injected corruption), reads its run file and names the failing cell in the reproduction command.
TEST(ReproCli, ProbesThroughPeerlabProbe) {
#ifndef PEERLAB_STANDIN_PATH
  GTEST_SKIP() << "the probe's stand-in worker (watchdog_standin) is not built";
#else
  const std::string dir = scratchDir("repro-probe");
  const std::vector<std::string> env = {std::string("PEERLAB_PROBE_WORKER=") + PEERLAB_STANDIN_PATH,
                                        "PEERLAB_PROBE_INJECT=corrupt:ce_write:0:1", "HOME=" + dir};
  CliRun r = runPeerlab(
      {"repro", "--out", dir + "/bundle", "--methods", "ce_write,sm_store", "--pairs", "0-1,1-0,1-2", "--sizes", "4K"},
      env);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  const std::string cmd =
      "peerlab probe --methods ce_write --pairs 0-1 --sizes 4096 --refresh --verbose --json "
      "probe-repro.json";
  EXPECT_NE(r.out.find(cmd), std::string::npos) << r.out << r.err;
  auto probe = report::readRun(dir + "/bundle/probe.json");
  ASSERT_TRUE(probe.isOk()) << probe.status().message();
  int cells = 0;
  for (const report::Result& x : probe->results)
    cells += x.suite == "probe" && x.src.has_value();
  EXPECT_EQ(cells, 6);  // 2 methods x 3 pairs x 1 size
  const std::string readme = readFile(dir + "/bundle/README.md");
  EXPECT_NE(readme.find("| ce_write | 0 -> 1 | 4 KiB | corrupt | yes |"), std::string::npos) << readme;
  EXPECT_NE(readme.find("This bundle's probe ran as: `peerlab probe --json"), std::string::npos) << readme;
  EXPECT_TRUE(std::filesystem::exists(dir + "/bundle/probe.log"));
#endif
}

}  // namespace
}  // namespace peerlab::testing
