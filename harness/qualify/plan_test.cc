#include "harness/qualify/plan.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "reference/core/testing.h"

namespace peerlab::qualify {
namespace {

// 4 GPUs, every pair NV18 through NVSwitch, as on the H200 machine.
PlanTopology nvswitchBox(int n, std::optional<int> links = 18) {
  PlanTopology t;
  t.source = "hand-made";
  t.format = "live";
  t.nvswitches = 4;
  t.nvlink_source = "nvml";
  for (int g = 0; g < n; ++g)
    t.gpus.push_back({g, "0000:0" + std::to_string(g) + ":00.0", "NVIDIA H200", "", links, {}});
  for (int s = 0; s < n; ++s) {
    for (int d = 0; d < n; ++d) {
      if (s == d) continue;
      PlanPair p{s, d, "SYS", links, {}, true};
      if (links) p.nvlink_gbps = *links * 26.5625;
      t.pairs.push_back(p);
    }
  }
  return t;
}

QualifyConfig config() {
  auto c = defaultConfig();
  EXPECT_TRUE(c.isOk());
  return *c;
}

const Expectation* find(const Plan& p, const std::string& rule, std::optional<int> src = {},
                        std::optional<int> dst = {}) {
  for (const Expectation& e : p.expectations) {
    if (e.rule == rule && e.src == src && e.dst == dst) return &e;
  }
  return nullptr;
}

TEST(Plan, ExpectedFiguresFromLinks) {
  PEERLAB_ASSERT_OK_AND_ASSIGN(Plan plan, makePlan(nvswitchBox(4), config(), {}));
  EXPECT_EQ(plan.options.pairs.size(), 12u);
  const Expectation* ce = find(plan, "peer_copy_ce_uni", 0, 1);
  ASSERT_NE(ce, nullptr);
  EXPECT_NEAR(ce->gbps, 18 * 26.5625 * 0.80, 1e-9);  // 382.5 GB/s
  EXPECT_EQ(ce->basis, "NV18 x 26.5625 GB/s x 0.80");
  const Expectation* bidir = find(plan, "peer_copy_ce_bidir", 2, 3);
  ASSERT_NE(bidir, nullptr);
  EXPECT_NEAR(bidir->gbps, 18 * 26.5625 * 0.75 * 2, 1e-9);
  EXPECT_NE(bidir->basis.find("x 2 directions"), std::string::npos);
  // Collective: every NVLink of one GPU (18, not 3 x 18 through the switch).
  const Expectation* a2a = find(plan, "alltoallv_busbw");
  ASSERT_NE(a2a, nullptr);
  EXPECT_NEAR(a2a->gbps, 18 * 26.5625 * 0.45, 1e-9);
  // Jobs: peer_copy once, zcopy per ordered pair with 2 ranks, alltoallv over 2 and 4 ranks, probe bench once.
  std::map<std::string, int> jobs;
  for (const BenchJob& j : plan.jobs)
    ++jobs[j.suite];
  EXPECT_EQ(jobs["peer_copy"], 1);
  EXPECT_EQ(jobs["zcopy"], 12);
  EXPECT_EQ(jobs["alltoallv"], 2);
  std::vector<int> a2aRanks;
  for (const BenchJob& j : plan.jobs) {
    if (j.suite == "alltoallv") a2aRanks.push_back(j.ranks);
    if (j.suite == "zcopy") {
      EXPECT_EQ(j.ranks, 2);
    }
  }
  EXPECT_EQ(a2aRanks, (std::vector<int>{2, 4}));
  EXPECT_GT(plan.budget_s, 0);
  const std::string text = formatPlan(plan);
  EXPECT_NE(text.find("0->1  NV18 via NVSwitch (478.1 GB/s per direction)"), std::string::npos) << text;
  EXPECT_NE(text.find("algbw >= 382.5 GB/s (NV18 x 26.5625 GB/s x 0.80) at >= 64 MiB, all 12 pairs"), std::string::npos)
      << text;
}

TEST(Plan, PciePairsAndUnknownLinks) {
  PlanTopology t = nvswitchBox(2, 0);
  PEERLAB_ASSERT_OK_AND_ASSIGN(Plan plan, makePlan(t, config(), {}));
  const Expectation* ce = find(plan, "peer_copy_ce_uni", 1, 0);
  ASSERT_NE(ce, nullptr);
  EXPECT_NEAR(ce->gbps, 25.0 * 0.80, 1e-9);
  EXPECT_EQ(ce->basis.rfind("PCIe (SYS) 25 GB/s", 0), 0u) << ce->basis;

  PEERLAB_ASSERT_OK_AND_ASSIGN(Plan unknown, makePlan(nvswitchBox(2, std::nullopt), config(), {}));
  // Only the host links (PCIe to the host, not a question of NVLink) are still expected.
  for (const Expectation& e : unknown.expectations)
    EXPECT_EQ(e.suite, "host_copy") << e.rule;
  ASSERT_FALSE(unknown.notes.empty());
  EXPECT_NE(unknown.notes[0].find("does not say how 2 pair(s) are linked"), std::string::npos) << unknown.notes[0];
}

TEST(Plan, SelectedSuitesPairsAndModes) {
  PlanOptions o;
  o.suites = {"zcopy"};
  o.pairs = {{0, 1}, {3, 2}};
  o.mode = "full";
  PEERLAB_ASSERT_OK_AND_ASSIGN(Plan plan, makePlan(nvswitchBox(4), config(), o));
  ASSERT_EQ(plan.jobs.size(), 2u);
  EXPECT_EQ(plan.jobs[1].label, "zcopy 3->2");
  EXPECT_EQ(plan.jobs[1].src, 3);
  EXPECT_EQ(find(plan, "peer_copy_ce_uni", 1, 0), nullptr);  // only the selected pairs are expected
  EXPECT_NE(find(plan, "peer_copy_ce_uni", 3, 2), nullptr);
  o.suites = {"nonsense"};
  auto bad = makePlan(nvswitchBox(4), config(), o);
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("unknown suite \"nonsense\""), std::string::npos);
  o.suites = {};
  o.pairs = {{0, 7}};
  EXPECT_FALSE(makePlan(nvswitchBox(4), config(), o).isOk());
  o.pairs = {};
  o.mode = "slow";
  EXPECT_FALSE(makePlan(nvswitchBox(4), config(), o).isOk());
}

TEST(Plan, MoeRunsInsideTheAlltoallvProcess) {
  PlanOptions o;
  o.suites = {"moe"};
  PEERLAB_ASSERT_OK_AND_ASSIGN(Plan moe, makePlan(nvswitchBox(4), config(), o));
  ASSERT_EQ(moe.jobs.size(), 2u);  // 2 ranks and 4 ranks
  EXPECT_EQ(moe.jobs[0].binary, "alltoallv_bench");
  EXPECT_EQ(moe.jobs[0].ranks, 2);
  EXPECT_EQ(moe.jobs[1].ranks, 4);
  EXPECT_NE(moe.jobs[1].args.back().find("^moe/"), std::string::npos);
  o.suites = {"alltoallv", "moe"};
  PEERLAB_ASSERT_OK_AND_ASSIGN(Plan both, makePlan(nvswitchBox(4), config(), o));
  EXPECT_EQ(both.jobs.size(), 2u);
  PEERLAB_ASSERT_OK_AND_ASSIGN(Plan all, makePlan(nvswitchBox(4), config(), {}));
  int a2a = 0;
  for (const BenchJob& j : all.jobs)
    a2a += j.binary == "alltoallv_bench";
  EXPECT_EQ(a2a, 2);
}

TEST(Plan, ParsePairs) {
  PEERLAB_ASSERT_OK_AND_ASSIGN(auto p, parsePairs("0-1,1:0,2->3"));
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[1], std::make_pair(1, 0));
  EXPECT_EQ(p[2], std::make_pair(2, 3));
  EXPECT_FALSE(parsePairs("0-0").isOk());
  EXPECT_FALSE(parsePairs("a-b").isOk());
  EXPECT_FALSE(parsePairs("").isOk());
  EXPECT_FALSE(parsePairs("01").isOk());
}

// Every fixture: the plan covers every ordered pair, expected figures are positive and explained, and a topology
// without NVIDIA GPU says so.
TEST(Plan, EveryTopologyFixture) {
  int fixtures = 0;
  for (const char* dir : {"fixtures/topologies/hwloc", "fixtures/topologies/nccl"}) {
    for (const auto& entry : std::filesystem::directory_iterator(testing::sourcePath(dir))) {
      if (entry.path().extension() != ".xml") continue;
      ++fixtures;
      SCOPED_TRACE(entry.path().string());
      PEERLAB_ASSERT_OK_AND_ASSIGN(topology::Topology topo, topology::loadFile(entry.path().string()));
      PlanTopology t = fromTopology(topo);
      PEERLAB_ASSERT_OK_AND_ASSIGN(Plan plan, makePlan(t, config(), {}));
      const std::string text = formatPlan(plan);
      const size_t n = t.gpus.size();
      if (entry.path().filename() == "eas-tioga.xml") {
        EXPECT_EQ(n, 0u);
        EXPECT_TRUE(plan.jobs.empty());
        EXPECT_NE(text.find("no NVIDIA GPU"), std::string::npos) << text;
        continue;
      }
      ASSERT_GE(n, 2u);
      EXPECT_EQ(plan.options.pairs.size(), n * (n - 1));
      size_t zcopy = 0;
      for (const BenchJob& j : plan.jobs)
        zcopy += j.suite == "zcopy";
      EXPECT_EQ(zcopy, n * (n - 1));
      for (const Expectation& e : plan.expectations) {
        EXPECT_GT(e.gbps, 0) << e.rule;
        EXPECT_FALSE(e.basis.empty()) << e.rule;
      }
      bool allKnown = true;
      for (const PlanPair& p : t.pairs)
        allKnown &= p.nvlinks.has_value();
      if (allKnown) {
        EXPECT_NE(find(plan, "peer_copy_ce_uni", 0, 1), nullptr) << text;
      } else {
        EXPECT_FALSE(plan.notes.empty()) << text;
      }
      EXPECT_NE(text.find("Pairs (" + std::to_string(n * (n - 1)) + " ordered)"), std::string::npos) << text;
    }
  }
  EXPECT_GE(fixtures, 9);
}

// One GPU: the host paths and the device-local copy are qualified; the pair suites say why they do not run.
TEST(Plan, OneGpuGetsHostPathsAndDeviceLocalExpectations) {
  PlanTopology t = nvswitchBox(1, 0);
  t.memory_peak_gbps[0] = 3352.32;  // H100 SXM: 5120 bits x 2619 MHz x 2
  PEERLAB_ASSERT_OK_AND_ASSIGN(Plan plan, makePlan(t, config(), {}));
  ASSERT_EQ(plan.jobs.size(), 1u);
  EXPECT_EQ(plan.jobs[0].suite, "host_copy");
  EXPECT_EQ(plan.jobs[0].label, "host_copy (1 GPU)");
  EXPECT_NE(plan.jobs[0].args[0].find("bytes:268435456"), std::string::npos) << plan.jobs[0].args[0];
  const Expectation* h2d = find(plan, "host_copy_ce_h2d", 0);
  ASSERT_NE(h2d, nullptr);
  EXPECT_NEAR(h2d->gbps, 25.0 * 0.80, 1e-9);
  const Expectation* bidir = find(plan, "host_copy_ce_bidir", 0);
  ASSERT_NE(bidir, nullptr);
  EXPECT_EQ(bidir->metric, "busbw_gbps");
  EXPECT_NEAR(bidir->gbps, 25.0 * 0.65 * 2, 1e-9);
  const Expectation* local = find(plan, "host_copy_device_local", 0, 0);
  ASSERT_NE(local, nullptr);
  EXPECT_NEAR(local->gbps, 3352.32 / 2 * 0.60, 1e-6);
  EXPECT_NE(local->basis.find("/ 2 (read + write)"), std::string::npos) << local->basis;
  bool peer_note = false;
  for (const std::string& n : plan.notes)
    peer_note |= n.find("peer_copy: needs 2 GPUs") != std::string::npos;
  EXPECT_TRUE(peer_note);

  // Without the memory peak (a fixture), no device-local figure, and the plan says so.
  t.memory_peak_gbps.clear();
  PEERLAB_ASSERT_OK_AND_ASSIGN(Plan fixture, makePlan(t, config(), {}));
  EXPECT_EQ(find(fixture, "host_copy_device_local", 0, 0), nullptr);
  bool memory_note = false;
  for (const std::string& n : fixture.notes)
    memory_note |= n.find("memory bandwidth of 1 GPU(s) is unknown") != std::string::npos;
  EXPECT_TRUE(memory_note);
  // The memory peak survives the run file's stored plan.
  t.memory_peak_gbps[0] = 4916.7;
  PEERLAB_ASSERT_OK_AND_ASSIGN(PlanTopology back, planTopologyFromJson(toJson(t)));
  EXPECT_NEAR(back.memory_peak_gbps.at(0), 4916.7, 1e-9);
}

TEST(Plan, HostAndDeviceScopesParse) {
  EXPECT_TRUE(parseConfig("[expect.a]\nsuite = \"host_copy\"\nscope = \"host\"\n", "my.toml").isOk());
  EXPECT_TRUE(parseConfig("[expect.a]\nsuite = \"host_copy\"\nscope = \"device\"\n", "my.toml").isOk());
  auto bad = parseConfig("[expect.a]\nsuite = \"host_copy\"\nscope = \"numa\"\n", "my.toml");
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("my.toml:3"), std::string::npos) << bad.status().toString();
}

}  // namespace
}  // namespace peerlab::qualify
