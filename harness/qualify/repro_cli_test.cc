// `peerlab repro` through the built binary: the system-state bundle and the reproduction command.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>

#include "harness/report/report.h"
#include "harness/testing/cli.h"
#include "reference/testing/testing.h"

namespace peerlab::testing {
namespace {

std::string hostName() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return host;
}

TEST(ReproCli, SystemStateBundle) {
  const std::string dir = scratchDir("repro-state") + "/bundle";
  CliRun r = runPeerlab({"repro", "--skip-probe", "--out", dir});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (const char* f : {"fingerprint.json", "iommu.txt", "acs.txt", "cmdline.txt", "README.md", "topology.txt",
                        "kernel-log.txt", "nvidia-smi-q.txt", "health.txt"}) {
    EXPECT_TRUE(std::filesystem::exists(dir + "/" + f)) << f;
  }
  auto fp = nlohmann::json::parse(readFile(dir + "/fingerprint.json"));
  for (const char* k : {"hostname", "driver", "cuda_runtime", "nccl", "gpus", "kernel", "os", "node", "source"}) {
    EXPECT_TRUE(fp.contains(k)) << k;
  }
  EXPECT_EQ(fp["source"], "this process (CUDA)");
  // The kernel log's NVIDIA lines, nvidia-smi -q and the NVML readings: what was read, or plainly why not.
  const std::string klog = readFile(dir + "/kernel-log.txt");
  EXPECT_TRUE(klog.rfind("# the NVRM and XID lines of ", 0) == 0 || klog.rfind("unreadable: dmesg: ", 0) == 0) << klog;
  const std::string smi = readFile(dir + "/nvidia-smi-q.txt");
  EXPECT_TRUE(smi.rfind("unreadable: ", 0) == 0 || smi.find("Driver Version") != std::string::npos) << smi;
  const std::string health = readFile(dir + "/health.txt");
  EXPECT_TRUE(std::filesystem::exists(dir + "/health.json") || health.rfind("unreadable: ", 0) == 0) << health;
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

  // The sample comes from another machine (host sample-host, 2x H200): a bundle written here would describe this one.
  CliRun refused = runPeerlab({"repro", "--probe-json", dir + "/probe.json", "--out", dir + "/refused"});
  EXPECT_EQ(refused.exit_code, 2) << refused.out << refused.err;
  EXPECT_EQ(lineCount(refused.err), 1) << refused.err;
  EXPECT_NE(refused.err.find("the probe ran on host sample-host, node gpus-"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("2x NVIDIA H200, driver 580.159.04; this machine is host "), std::string::npos)
      << refused.err;
  EXPECT_NE(refused.err.find("--other-machine"), std::string::npos) << refused.err;
  EXPECT_FALSE(std::filesystem::exists(dir + "/refused/README.md"));

  CliRun r = runPeerlab({"repro", "--probe-json", dir + "/probe.json", "--out", dir + "/bundle", "--other-machine"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  const std::string cmd =
      "peerlab probe --methods ce_write,sm_store --pairs 0-1,1-0 --sizes 4096,67108864 --refresh --verbose --json "
      "probe-repro.json";
  EXPECT_NE(r.out.find(cmd), std::string::npos) << r.out;
  // The fingerprint, driver and GPU list are the probe file's; none of this machine's state is bundled as its.
  auto fp = nlohmann::json::parse(readFile(dir + "/bundle/fingerprint.json"));
  EXPECT_EQ(fp["hostname"], "sample-host");
  EXPECT_EQ(fp["driver"], "580.159.04");
  EXPECT_EQ(fp["gpus"].size(), 2u);
  EXPECT_EQ(fp["source"], "the probe run file (its workers' inventory)");
  EXPECT_EQ(fp["kind"], "h200-x2");
  EXPECT_FALSE(fp.contains("kernel"));
  EXPECT_NE(fp["written_on"].get<std::string>().find("the probe ran on host sample-host"), std::string::npos);
  for (const char* f : {"topology.xml", "topology.txt", "iommu.txt", "acs.txt", "cmdline.txt", "kernel-log.txt",
                        "nvidia-smi-q.txt", "health.txt"})
    EXPECT_FALSE(std::filesystem::exists(dir + "/bundle/" + f)) << f;
  const std::string readme = readFile(dir + "/bundle/README.md");
  EXPECT_NE(readme.find("**Written on another machine than the probe's**"), std::string::npos) << readme;
  EXPECT_NE(readme.find("| 0 | NVIDIA H200 | GPU-52a9f1d6-eb48-d3af-68b0-09f060076b98 | 0000:00:06.0 |"),
            std::string::npos)
      << readme;
  EXPECT_NE(readme.find("```sh\n" + cmd + "\n```"), std::string::npos) << readme;
  EXPECT_NE(readme.find("| ce_write | 0 -> 1 | 4 KiB | corrupt | yes | 12 wrong 8-byte words, first bad byte at 4088"),
            std::string::npos)
      << readme;
  EXPECT_NE(readme.find("| sm_store | 1 -> 0 | 64 MiB | hang | no |"), std::string::npos) << readme;
  EXPECT_TRUE(std::filesystem::exists(dir + "/bundle/probe.json"));

  // A probe file of this host: the bundle is this machine's, and the command carries the probe's own seed and
  // timeouts (the same data moves again).
  run->fingerprint.hostname = hostName();
  run->extra["probe"] = {{"seed", 12345678901234567890ull}, {"timeout_ms", 7000},
                         {"setup_timeout_ms", 90000},       {"methods", {"ce_write", "sm_store"}},
                         {"sizes", {4096, 67108864}},       {"pairs", "0-1,1-0"}};
  ASSERT_TRUE(report::writeRun(*run, dir + "/here.json").isOk());
  CliRun here = runPeerlab({"repro", "--probe-json", dir + "/here.json", "--out", dir + "/here"});
  EXPECT_EQ(here.exit_code, 1) << here.out << here.err;
  EXPECT_NE(here.out.find("peerlab probe --methods ce_write,sm_store --pairs 0-1,1-0 --sizes 4096,67108864 --seed "
                          "12345678901234567890 --timeout 7000ms --setup-timeout 90000ms --refresh --verbose"),
            std::string::npos)
      << here.out;
  EXPECT_TRUE(std::filesystem::exists(dir + "/here/kernel-log.txt"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/here/cmdline.txt"));
  // A recorded argument that is no probe argument is refused: the README never names a typo.
  run->extra["probe"]["methods"] = {"ce_write", "rm -rf"};
  ASSERT_TRUE(report::writeRun(*run, dir + "/typo.json").isOk());
  CliRun typo = runPeerlab({"repro", "--probe-json", dir + "/typo.json", "--out", dir + "/typo"});
  EXPECT_EQ(typo.exit_code, 2) << typo.err;
  EXPECT_NE(typo.err.find("$.probe.methods"), std::string::npos) << typo.err;

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
  auto probe = report::readRun(dir + "/bundle/probe.json");
  ASSERT_TRUE(probe.isOk()) << probe.status().message();
  // Every argument the probe ran with, its seed included.
  ASSERT_TRUE(probe->extra["probe"].contains("seed"));
  const std::string cmd = "peerlab probe --methods ce_write --pairs 0-1 --sizes 4096 --seed " +
                          std::to_string(probe->extra["probe"]["seed"].get<uint64_t>()) +
                          " --timeout 5000ms --setup-timeout 60000ms --refresh --verbose --json probe-repro.json";
  EXPECT_NE(r.out.find(cmd), std::string::npos) << r.out << r.err;
  EXPECT_EQ(probe->extra["probe"]["methods"], nlohmann::json({"ce_write", "sm_store"}));
  EXPECT_EQ(probe->extra["probe"]["pairs"], "0-1,1-0,1-2");
  // The fingerprint is the probe's: its workers saw 3 GPUs where this process sees none.
  auto fp = nlohmann::json::parse(readFile(dir + "/bundle/fingerprint.json"));
  EXPECT_EQ(fp["gpus"].size(), 3u);
  EXPECT_EQ(fp["source"], "the probe run file (its workers' inventory)");
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
