// `peerlab qualify` through the built binary: plans from fixtures, no-GPU behaviour, the bundle from a stored run,
// baseline checks, bad inputs.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "harness/qualify/gpu_models.h"
#include "harness/qualify/plan.h"
#include "harness/report/report.h"
#include "harness/testing/cli.h"
#include "reference/core/devices.h"
#include "reference/host/host_copy.h"
#include "reference/testing/testing.h"

namespace peerlab::testing {
namespace {

using report::Result;

// What a dry run of a fixture whose oldest GPU is sm_`capability` exits with: 4 where this build holds no code for
// it (no CUDA 13 build has code before sm_75), else 0.
int noCodeExit(int capability) {
  return qualify::buildRunsOn(host::builtArchitectures(), capability) == std::optional<bool>(false) ? 4 : 0;
}

// Two H200s, NV18 through NVSwitch, as a stored qualify run carries them.
qualify::PlanTopology twoGpus() {
  qualify::PlanTopology t;
  t.source = "live";
  t.format = "live";
  t.nvswitches = 4;
  t.nvlink_source = "nvml";
  for (int g = 0; g < 2; ++g)
    t.gpus.push_back({g, "0000:00:0" + std::to_string(6 + g) + ".0", "NVIDIA H200", "", 18, 26.5625});
  t.pairs.push_back({0, 1, "SYS", 18, 478.125, true});
  t.pairs.push_back({1, 0, "SYS", 18, 478.125, true});
  return t;
}

// A healthy run of the two GPUs; `ce10` is the copy-engine figure of 1->0 at 256 MiB.
std::string storedRun(const std::string& path, double ce10) {
  report::Run run = report::newRun();
  run.fingerprint.hostname = "h200-test";
  run.fingerprint.driver = "580.159.04";
  run.fingerprint.cuda_runtime = "13.0";
  run.fingerprint.nccl = "2.28.3";
  run.fingerprint.gpus = {{0, "GPU-a", "0000:00:06.0", "NVIDIA H200"}, {1, "GPU-b", "0000:00:07.0", "NVIDIA H200"}};
  for (int s = 0; s < 2; ++s) {
    const int d = 1 - s;
    Result p;
    p.suite = "probe";
    p.name = "ce_write/4096";
    p.impl = "peerlab.probe";
    p.src = s;
    p.dst = d;
    p.bytes = 4096;
    p.time_us = 10;
    p.wrong = 0;
    p.extra["claimed"] = true;
    run.results.push_back(p);
    for (double bytes : {1048576.0, 268435456.0}) {
      Result c;
      c.suite = "peer_copy";
      c.name = "uni";
      c.impl = "peerlab.ce";
      c.src = s;
      c.dst = d;
      c.bytes = bytes;
      c.algbw_gbps = bytes > 1e6 * 100 ? (s == 1 ? ce10 : 394.0) : 150.0;
      c.busbw_gbps = c.algbw_gbps;
      c.time_us = bytes / *c.algbw_gbps / 1e3;
      c.wrong = 0;
      run.results.push_back(c);
    }
    Result z;
    z.suite = "zcopy";
    z.name = "kernel/uni";
    z.impl = "peerlab.sm_signal";
    z.src = s;
    z.dst = d;
    z.ranks = 2;
    z.bytes = 8;
    z.time_us = 0.9;
    z.algbw_gbps = 8 / 0.9 / 1e3;
    z.wrong = 0;
    run.results.push_back(z);
  }
  // The plan qualify would store for this machine: peer copies and zero-copy, no probe of its own.
  auto config = qualify::defaultConfig();
  EXPECT_TRUE(config.isOk());
  qualify::PlanOptions o;
  o.suites = {"peer_copy", "zcopy"};
  o.probe = false;
  auto plan = qualify::makePlan(twoGpus(), *config, o);
  EXPECT_TRUE(plan.isOk());
  plan->jobs.clear();
  run.extra["plan"] = qualify::toJson(*plan);
  EXPECT_TRUE(report::writeRun(run, path).isOk());
  return path;
}

std::string parseJunit(const std::string& path) {
  const std::string script =
      "import sys, xml.etree.ElementTree as ET\n"
      "r = ET.parse(sys.argv[1]).getroot()\n"
      "cases = r.findall('./testsuite/testcase')\n"
      "fails = [c.find('failure').get('message') for c in cases if c.find('failure') is not None]\n"
      "print(len(cases), len(fails), r.get('failures'))\n"
      "for f in fails: print(f)";
  CliRun r = runCommand({"python3", "-c", script, path});
  return r.out + r.err;
}

TEST(QualifyCli, DryRunFromFixtures) {
  CliRun dgx =
      runPeerlab({"qualify", "--fixture", sourcePath("fixtures/topologies/hwloc/nvidiaDGX2.xml"), "--dry-run"});
  // V100 (sm_70): CUDA 13 builds hold no code for it, so the dry run says where a real run would stop and exits 4,
  // with the plan printed all the same.
  ASSERT_EQ(dgx.exit_code, noCodeExit(70)) << dgx.err;
  EXPECT_NE(dgx.out.find("GPUs: 16"), std::string::npos) << dgx.out;
  EXPECT_NE(dgx.out.find("Pairs (240 ordered)"), std::string::npos);
  EXPECT_NE(dgx.out.find("algbw >= 120.0 GB/s (NV6 x 25 GB/s x 0.80) at >= 64 MiB, all 240 pairs"), std::string::npos)
      << dgx.out;
  // NVSwitch: the 240 ordered pairs of 16 GPUs in 30 rounds of 8 pairs, one process of 16 ranks.
  EXPECT_NE(dgx.out.find("zcopy (240 pairs, 30 rounds): PEERLAB_PAIR_ROUNDS="), std::string::npos) << dgx.out;
  EXPECT_NE(dgx.out.find("zcopy_bench --ranks=16"), std::string::npos) << dgx.out;
  EXPECT_NE(dgx.out.find("Latency bounds:"), std::string::npos);

  CliRun amd = runPeerlab({"qualify", "--fixture", sourcePath("fixtures/topologies/hwloc/eas-tioga.xml"), "--dry-run"});
  EXPECT_EQ(amd.exit_code, 3);
  EXPECT_EQ(lineCount(amd.err), 1) << amd.err;
  EXPECT_NE(amd.err.find("no NVIDIA GPU"), std::string::npos) << amd.err;

  CliRun bench = runPeerlab({"bench", "--fixture", sourcePath("fixtures/topologies/hwloc/power8gpudistances.xml"),
                             "--dry-run", "--quick", "--suite", "peer_copy", "--pairs", "0-1,2-3"});
  ASSERT_EQ(bench.exit_code, noCodeExit(60)) << bench.err;
  EXPECT_NE(bench.out.find("--benchmark_filter="), std::string::npos) << bench.out;
  EXPECT_NE(bench.out.find("(0->1|0<->1|2->3|2<->3)"), std::string::npos) << bench.out;
  EXPECT_EQ(bench.out.find("zcopy_bench"), std::string::npos);
}

// --dry-run --json: the plan as the run file carries it, every expected figure with its rule, scope and basis.
TEST(QualifyCli, DryRunJsonFromFixtures) {
  CliRun p8 = runPeerlab(
      {"qualify", "--fixture", sourcePath("fixtures/topologies/hwloc/power8gpudistances.xml"), "--dry-run", "--json"});
  ASSERT_EQ(p8.exit_code, noCodeExit(60)) << p8.err;
  const nlohmann::json doc = nlohmann::json::parse(p8.out, nullptr, false);
  ASSERT_FALSE(doc.is_discarded()) << p8.out;
  EXPECT_EQ(doc["pairs"].size(), 12u);
  EXPECT_FALSE(doc["jobs"].empty());
  EXPECT_EQ(doc["config"], "built-in reports/qualify.toml");
  EXPECT_GT(doc["budget"]["estimate_s"].get<double>(), doc["budget"]["processes_s"].get<double>());
  EXPECT_DOUBLE_EQ(doc["budget_s"].get<double>(), doc["budget"]["estimate_s"].get<double>());
  bool nvlink = false, cross = false;
  for (const auto& e : doc["expectations"]) {
    for (const char* key : {"rule", "suite", "impl", "name", "metric", "scope", "link", "gbps", "basis", "src", "dst"})
      EXPECT_TRUE(e.contains(key)) << key << " in " << e.dump();
    if (e["rule"] != "peer_copy_ce_uni") continue;
    if (e["src"] == 0 && e["dst"] == 1) {
      nvlink = true;
      EXPECT_EQ(e["link"], "nvlink");
      EXPECT_NEAR(e["gbps"].get<double>(), 32.0, 1e-9);  // NV2 x 20 GB/s x 0.80
    }
    if (e["src"] == 0 && e["dst"] == 2) {
      cross = true;
      EXPECT_EQ(e["link"], "pcie");
      EXPECT_NEAR(e["gbps"].get<double>(), 15.753846 * 0.80 * 0.5, 1e-5);
      EXPECT_NE(e["basis"].get<std::string>().find("across sockets"), std::string::npos) << e.dump();
    }
  }
  EXPECT_TRUE(nvlink && cross);
  EXPECT_EQ(doc["topology"]["gpus"][0]["nvlinks"], 2);  // the 2 links to the CPU do not count

  // A file that does not say how GPUs are linked: figures are null with the reason, never 0.
  CliRun old =
      runPeerlab({"qualify", "--fixture", sourcePath("fixtures/topologies/hwloc/32em64t-2n8c2t-pci-wholeio.xml"),
                  "--dry-run", "--json"});
  ASSERT_EQ(old.exit_code, noCodeExit(35)) << old.err;
  const nlohmann::json unknown = nlohmann::json::parse(old.out, nullptr, false);
  ASSERT_FALSE(unknown.is_discarded()) << old.out;
  ASSERT_FALSE(unknown["expectations"].empty());
  for (const auto& e : unknown["expectations"]) {
    EXPECT_TRUE(e["gbps"].is_null()) << e.dump();
    EXPECT_EQ(e["basis"].get<std::string>().rfind("unknown: ", 0), 0u) << e.dump();
  }
  EXPECT_FALSE(unknown["notes"].empty());

  CliRun noDry = runPeerlab({"qualify", "--json"});
  EXPECT_EQ(noDry.exit_code, 2);
  EXPECT_EQ(lineCount(noDry.err), 1) << noDry.err;
  EXPECT_NE(noDry.err.find("--json prints the plan: use it with --dry-run"), std::string::npos) << noDry.err;
}

TEST(QualifyCli, NoGpuOnThisMachineExitsThree) {
  if (deviceCount().isOk()) GTEST_SKIP() << "this machine has a GPU: plain qualify would measure it";
  const std::string dir = scratchDir("qualify-nogpu");
  CliRun r = runPeerlab({"qualify", "--out", dir + "/bundle"});
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_EQ(lineCount(r.err), 1) << r.err;
  EXPECT_TRUE(r.err.find("no NVIDIA GPU") != std::string::npos || r.err.find("no GPU visible") != std::string::npos)
      << r.err;
  EXPECT_NE(r.out.find("peerlab qualify plan (level standard) for live"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(dir + "/bundle/results.json"));
  CliRun b = runPeerlab({"bench", "--out", dir + "/run.json"});
  EXPECT_EQ(b.exit_code, 3) << b.err;
  EXPECT_FALSE(std::filesystem::exists(dir + "/run.json"));
}

TEST(QualifyCli, BundleFromStoredRun) {
  const std::string dir = scratchDir("qualify-bundle");
  const std::string good = storedRun(dir + "/good.json", 393.0);
  CliRun r = runPeerlab({"qualify", "--results", good, "--out", dir + "/pass", "--skip-bench"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (const char* f : {"results.json", "report.html", "summary.md", "junit.xml", "plan.txt"}) {
    EXPECT_TRUE(std::filesystem::exists(dir + "/pass/" + f)) << f;
  }
  EXPECT_NE(r.out.find("peerlab qualify: PASS"), std::string::npos) << r.out;
  // The machine by kind and node (the stored plan's topology gives the kind), the host name beside them.
  EXPECT_EQ(readFile(dir + "/pass/summary.md").rfind("# peerlab qualify: PASS on h200-x2-nvswitch, node gpus-", 0), 0u)
      << readFile(dir + "/pass/summary.md").substr(0, 200);
  EXPECT_NE(readFile(dir + "/pass/summary.md").find("(host h200-test)"), std::string::npos);
  const std::string junit = parseJunit(dir + "/pass/junit.xml");
  EXPECT_NE(junit.find(" 0 0\n"), std::string::npos) << junit;
  auto stored = report::readRun(dir + "/pass/results.json");
  ASSERT_TRUE(stored.isOk()) << stored.status().message();
  EXPECT_EQ(stored->extra["qualify"]["verdict"], "PASS");
  EXPECT_GE(stored->extra["qualify"]["checks"].size(), 6u);
  EXPECT_NE(readFile(dir + "/pass/report.html").find("<span class=\"badge pass\">PASS</span>"), std::string::npos);

  // 1->0 at 300 GB/s is below NV18 x 26.5625 x 0.80 = 382.5 GB/s.
  const std::string slow = storedRun(dir + "/slow.json", 300.0);
  CliRun f = runPeerlab({"qualify", "--results", slow, "--out", dir + "/fail", "--skip-bench"});
  EXPECT_EQ(f.exit_code, 1) << f.out << f.err;
  EXPECT_NE(f.out.find("FAIL bandwidth: peer_copy peerlab.ce uni 1->0: measured 300.0 GB/s algbw at 256 MiB, expected "
                       ">= 382.5 GB/s (NV18 x 26.5625 GB/s x 0.80 [rule peer_copy_ce_uni, scope pair]): 78.4% of the "
                       "expected figure"),
            std::string::npos)
      << f.out;
  const std::string junitFail = parseJunit(dir + "/fail/junit.xml");
  EXPECT_NE(junitFail.find(" 1 1\n"), std::string::npos) << junitFail;
  EXPECT_NE(junitFail.find("measured 300.0 GB/s"), std::string::npos) << junitFail;
  EXPECT_NE(readFile(dir + "/fail/summary.md").find("## Checks that did not pass"), std::string::npos);
  EXPECT_NE(f.err.find("peerlab qualify: FAIL: bandwidth peer_copy peerlab.ce uni 1->0"), std::string::npos) << f.err;
  EXPECT_NE(readFile(dir + "/fail/report.html").find("<span class=\"badge fail\">FAIL</span>"), std::string::npos);
}

TEST(QualifyCli, BaselineThreshold) {
  const std::string dir = scratchDir("qualify-baseline");
  const std::string base = storedRun(dir + "/base.json", 420.0);
  const std::string fresh = storedRun(dir + "/new.json", 390.0);  // meets the topology, 7% below the baseline
  // The default minimum effect (10%) holds it; 5% fails it, and the noise rule is in the bundle's notes.
  EXPECT_EQ(
      runPeerlab({"qualify", "--results", fresh, "--baseline", base, "--out", dir + "/b10", "--skip-bench"}).exit_code,
      0);
  CliRun r = runPeerlab(
      {"qualify", "--results", fresh, "--baseline", base, "--threshold", "5", "--out", dir + "/b5", "--skip-bench"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("FAIL baseline: peer_copy uni peerlab.ce 1->0 256 MiB: measured 390 GB/s"), std::string::npos)
      << r.out;
  EXPECT_NE(readFile(dir + "/b5/summary.md").find("noise rule: a change counts when"), std::string::npos);
}

TEST(QualifyCli, BadInputs) {
  const std::string dir = scratchDir("qualify-bad");
  const std::string good = storedRun(dir + "/good.json", 393.0);
  std::ofstream(dir + "/bad.toml") << "[qualify]\nbaseline_threshold_pct = 5\nnonsense = 1\n";
  std::ofstream(dir + "/trunc.json") << readFile(good).substr(0, 200);
  struct Case {
    std::vector<std::string> args;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {{"qualify", "--results", good, "--config", dir + "/bad.toml"}, dir + "/bad.toml:3: unknown key nonsense"},
      {{"qualify", "--results", good, "--config", dir + "/none.toml"}, dir + "/none.toml"},
      {{"qualify", "--results", good, "--baseline", dir + "/none.json"}, dir + "/none.json: no such file"},
      {{"qualify", "--results", dir + "/trunc.json"}, dir + "/trunc.json: malformed JSON"},
      {{"qualify", "--fixture", sourcePath("fixtures/topologies/hwloc/g4dnmetal.xml")}, "--dry-run"},
      {{"qualify", "--fixture", dir + "/none.xml", "--dry-run"}, dir + "/none.xml"},
      {{"qualify", "--fixture", sourcePath("fixtures/topologies/hwloc/g4dnmetal.xml"), "--dry-run", "--pairs", "0-9"},
       "pair 0-9 is not in the topology"},
      {{"qualify", "--fixture", sourcePath("fixtures/fuzz/topology/range-numaid.xml"), "--dry-run"},
       "<cpu> attribute numaid = \"4294967296\" is outside -1 .. 65535"},
      {{"qualify", "--fixture", sourcePath("fixtures/fuzz/topology/range-nvlink-count.xml"), "--dry-run", "--json"},
       "<nvlink> attribute count = \"100000000000000000000\" is outside 0 .. 64"},
      {{"bench", "--suite", "nonsense", "--dry-run"}, "unknown suite"},
      {{"bench", "--quick", "--full", "--dry-run"}, "exclude each other"},
  };
  for (const Case& c : cases) {
    CliRun r = runPeerlab(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.needle << ": " << r.err;
    EXPECT_EQ(lineCount(r.err), 1) << r.err;
    EXPECT_NE(r.err.find(c.needle), std::string::npos) << r.err;
  }
}

// A rule the config switches off is named in every output: the console line, summary.md, report.html, junit.xml and
// `peerlab report` on the bundle's results.json.
TEST(QualifyCli, DisabledRulesAreNamedInEveryOutput) {
  const std::string dir = scratchDir("qualify-disabled");
  const std::string good = storedRun(dir + "/good.json", 393.0);
  std::ofstream(dir + "/off.toml") << "[expect.peer_copy_ce_uni]\nenabled = false\n";
  CliRun r =
      runPeerlab({"qualify", "--results", good, "--config", dir + "/off.toml", "--out", dir + "/b", "--skip-bench"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const std::string note = "1 rule disabled by the config: expect.peer_copy_ce_uni";
  EXPECT_NE(r.out.find("peerlab qualify: PASS: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("skipped; " + note + "; bundle"), std::string::npos) << r.out;
  EXPECT_NE(readFile(dir + "/b/summary.md").find("- " + note), std::string::npos);
  EXPECT_NE(readFile(dir + "/b/report.html").find(note), std::string::npos);
  const std::string junit = readFile(dir + "/b/junit.xml");
  EXPECT_NE(junit.find("skipped; " + note + " -->"), std::string::npos) << junit.substr(0, 300);
  EXPECT_NE(junit.find("<property name=\"disabled_rules\" value=\"" + note + "\"/>"), std::string::npos);
  CliRun report = runPeerlab({"report", dir + "/b/results.json", "--html", dir + "/r.html"});
  EXPECT_EQ(report.exit_code, 0) << report.err;
  EXPECT_NE(report.out.find(note), std::string::npos) << report.out;
  // Without the config nothing is said.
  CliRun plain = runPeerlab({"qualify", "--results", good, "--out", dir + "/p", "--skip-bench"});
  EXPECT_EQ(plain.out.find("disabled by the config"), std::string::npos) << plain.out;
  EXPECT_EQ(readFile(dir + "/p/junit.xml").find("disabled"), std::string::npos);
}

// A bundle that cannot be written completely (a file size limit stands in for a full disk) holds nothing that looks
// valid: INCOMPLETE says why and no output is left; written again, it is whole and INCOMPLETE is gone.
TEST(QualifyCli, ABundleThatCannotBeWrittenIsMarkedIncomplete) {
  const std::string dir = scratchDir("qualify-incomplete");
  const std::string good = storedRun(dir + "/good.json", 393.0);
  const std::string out = dir + "/bundle";
  // 48 KiB: INCOMPLETE, plan.txt and results.json fit, report.html (or summary.md) does not. SIGXFSZ ignored, so the
  // write fails with EFBIG as it would with ENOSPC; messages go out through a pipe, which the limit does not hold.
  CliRun r = runCommand({"bash", "-c",
                         "set -o pipefail; trap '' XFSZ; (ulimit -f 48; exec \"$0\" qualify --results \"$1\" --out "
                         "\"$2\") 2>&1 | cat >&2",
                         PEERLAB_BINARY, good, out});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("left marked INCOMPLETE"), std::string::npos) << r.err;
  ASSERT_TRUE(std::filesystem::is_regular_file(out + "/INCOMPLETE")) << r.err;
  EXPECT_NE(readFile(out + "/INCOMPLETE").find("this bundle is not complete: cannot write"), std::string::npos)
      << readFile(out + "/INCOMPLETE");
  for (const char* f : {"results.json", "report.html", "summary.md", "junit.xml"})
    EXPECT_FALSE(std::filesystem::exists(out + "/" + f)) << f;
  CliRun again = runPeerlab({"qualify", "--results", good, "--out", out});
  EXPECT_EQ(again.exit_code, 0) << again.err;
  EXPECT_FALSE(std::filesystem::exists(out + "/INCOMPLETE"));
  for (const char* f : {"results.json", "report.html", "summary.md", "junit.xml", "plan.txt"})
    EXPECT_TRUE(std::filesystem::is_regular_file(out + "/" + f)) << f;
}

// A topology of more GPUs than one machine holds is refused at once with the numbers, not planned for minutes.
TEST(QualifyCli, TopologiesOfTooManyGpusAreRefused) {
  const std::string dir = scratchDir("qualify-many-gpus");
  auto fixture = [&](int gpus) {
    const std::string path = dir + "/gpus" + std::to_string(gpus) + ".xml";
    std::ofstream f(path);
    f << "<system version=\"1\">\n  <cpu numaid=\"0\" affinity=\"ffffffff\" arch=\"x86_64\" vendor=\"GenuineIntel\" "
         "familyid=\"6\" modelid=\"85\">\n";
    for (int i = 0; i < gpus; ++i) {
      char bus[32];
      std::snprintf(bus, sizeof(bus), "0000:%02x:%02x.0", 1 + i / 32, i % 32);
      f << "    <pci busid=\"" << bus
        << "\" class=\"0x030200\" vendor=\"0x10de\" device=\"0x20b0\" subsystem_vendor=\"0x10de\" "
           "subsystem_device=\"0x134f\" link_speed=\"16 GT/s\" link_width=\"16\"/>\n";
    }
    f << "  </cpu>\n</system>\n";
    return path;
  };
  for (int gpus : {65, 300}) {
    const auto t0 = std::chrono::steady_clock::now();
    CliRun r = runPeerlab({"qualify", "--fixture", fixture(gpus), "--dry-run"});
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_EQ(lineCount(r.err), 1) << r.err;
    EXPECT_NE(r.err.find(std::to_string(gpus) + " GPUs; peerlab plans for at most 64 GPUs in one machine"),
              std::string::npos)
        << r.err;
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30));
  }
  // 64 plan (4,032 ordered pairs); the dry run exits 4 where this build holds no code for the A100s (sm_80).
  CliRun most = runPeerlab({"qualify", "--fixture", fixture(64), "--dry-run"});
  EXPECT_EQ(most.exit_code, noCodeExit(80)) << most.err;
  EXPECT_NE(most.out.find("Pairs (4032 ordered)"), std::string::npos);
}

}  // namespace
}  // namespace peerlab::testing
