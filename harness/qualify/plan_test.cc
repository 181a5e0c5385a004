#include "harness/qualify/plan.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>

#include "harness/qualify/estimate.h"
#include "harness/qualify/runner.h"
#include "reference/testing/guards.h"
#include "reference/testing/temp_dir.h"
#include "reference/testing/testing.h"

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
  EXPECT_NEAR(*ce->gbps, 18 * 26.5625 * 0.80, 1e-9);  // 382.5 GB/s
  EXPECT_EQ(ce->basis, "NV18 x 26.5625 GB/s x 0.80");
  const Expectation* bidir = find(plan, "peer_copy_ce_bidir", 2, 3);
  ASSERT_NE(bidir, nullptr);
  EXPECT_NEAR(*bidir->gbps, 18 * 26.5625 * 0.75 * 2, 1e-9);
  EXPECT_NE(bidir->basis.find("x 2 directions"), std::string::npos);
  // Collective: every NVLink of one GPU (18, not 3 x 18 through the switch).
  const Expectation* a2a = find(plan, "alltoallv_busbw");
  ASSERT_NE(a2a, nullptr);
  EXPECT_NEAR(*a2a->gbps, 18 * 26.5625 * 0.45, 1e-9);
  // Jobs: peer_copy once; zcopy in one process of 4 ranks over the 12 ordered pairs in 6 rounds of 2 (NVSwitch), after
  // a serial sample of one pair; alltoallv over 2 and 4 ranks.
  std::map<std::string, int> jobs;
  for (const BenchJob& j : plan.jobs)
    ++jobs[j.suite];
  EXPECT_EQ(jobs["peer_copy"], 2);  // its serial sample and the process over every pair
  EXPECT_EQ(jobs["zcopy"], 2);
  EXPECT_EQ(jobs["alltoallv"], 2);
  std::vector<int> a2aRanks;
  for (const BenchJob& j : plan.jobs) {
    if (j.suite == "alltoallv") a2aRanks.push_back(j.ranks);
    if (j.suite == "zcopy" && j.guard_for.empty()) {
      EXPECT_EQ(j.ranks, 4);
      EXPECT_EQ(j.pairs().size(), 12u);
      EXPECT_EQ(j.work.rounds.size(), 6u);
      EXPECT_EQ(j.label, "zcopy (12 pairs, 6 rounds)");
    } else if (j.suite == "zcopy") {
      // The serial sample: one pair, 2 ranks (the process's own first round is the concurrent side).
      EXPECT_EQ(j.ranks, 2);
      EXPECT_EQ(j.work.rounds.size(), 1u);
      EXPECT_EQ(j.guard_for, "zcopy (12 pairs, 6 rounds)");
    }
  }
  EXPECT_EQ(a2aRanks, (std::vector<int>{2, 4}));
  EXPECT_GT(plan.budget_s, 0);
  const std::string text = formatPlan(plan);
  EXPECT_NE(text.find("0->1  NV18 via NVSwitch (478.1 GB/s per direction)"), std::string::npos) << text;
  EXPECT_NE(text.find("algbw >= 382.5 GB/s (NV18 x 26.5625 GB/s x 0.80) at >= 64 MiB, all 12 pairs"), std::string::npos)
      << text;
}

topology::PcieLink link(int generation, int width) {
  auto l = topology::pcieLinkFromGenWidth(generation, width, "test");
  EXPECT_TRUE(l.isOk());
  return *l;
}

TEST(Plan, PcieFiguresComeFromEachGpusLink) {
  PlanTopology t = nvswitchBox(2, 0);
  t.gpus[0].pcie = link(5, 16);  // 63.0 GB/s
  t.gpus[1].pcie = link(4, 16);  // 31.5 GB/s: the slower one bounds the pair
  for (PlanPair& p : t.pairs)
    p.pci = "PIX";
  PEERLAB_ASSERT_OK_AND_ASSIGN(Plan pix, makePlan(t, config(), {}));
  const Expectation* ce = find(pix, "peer_copy_ce_uni", 1, 0);
  ASSERT_NE(ce, nullptr);
  ASSERT_TRUE(ce->gbps.has_value());
  EXPECT_NEAR(*ce->gbps, 16 * 16 * (128.0 / 130.0) / 8 * 0.80, 1e-9);  // 25.2 GB/s
  EXPECT_EQ(ce->link, "pcie");
  EXPECT_EQ(ce->basis, "PCIe Gen4 x16 31.51 GB/s (GPU1, the slower link) x 0.80") << ce->basis;
  const Expectation* bidir = find(pix, "peer_copy_ce_bidir", 0, 1);
  ASSERT_NE(bidir, nullptr);
  EXPECT_NEAR(*bidir->gbps, 31.5077 * 0.70 * 2, 1e-3);

  // Across sockets the same links expect sys_factor of that.
  for (PlanPair& p : t.pairs)
    p.pci = "SYS";
  PEERLAB_ASSERT_OK_AND_ASSIGN(Plan sys, makePlan(t, config(), {}));
  const Expectation* far = find(sys, "peer_copy_ce_uni", 1, 0);
  ASSERT_NE(far, nullptr);
  EXPECT_NEAR(*far->gbps, *ce->gbps * config().sys_factor, 1e-9);
  EXPECT_LT(*far->gbps, *ce->gbps);
  EXPECT_NE(far->basis.find("x 0.50 across sockets (SYS)"), std::string::npos) << far->basis;

  // A Gen3 x16 link: 8 GT/s x 16 x 128/130 / 8 = 15.75 GB/s; Gen1 uses 8b/10b, Gen6 FLIT.
  EXPECT_NEAR(link(3, 16).gbps, 15.753846, 1e-6);
  EXPECT_NEAR(link(1, 16).gbps, 4.0, 1e-9);
  EXPECT_NEAR(link(6, 16).gbps, 64 * 16 * (242.0 / 256.0) / 8, 1e-9);
  EXPECT_FALSE(topology::pcieLinkFromGenWidth(7, 16, "x").isOk());
  EXPECT_FALSE(topology::pcieLinkFromGenWidth(4, 3, "x").isOk());
}

TEST(Plan, UnknownLinksAreUnknownNeverZero) {
  // NVLink unknown: every figure of the pair is unknown (null in JSON), with why.
  PEERLAB_ASSERT_OK_AND_ASSIGN(Plan unknown, makePlan(nvswitchBox(2, std::nullopt), config(), {}));
  const Expectation* ce = find(unknown, "peer_copy_ce_uni", 0, 1);
  ASSERT_NE(ce, nullptr);
  EXPECT_FALSE(ce->gbps.has_value());
  EXPECT_EQ(ce->basis.rfind("unknown: ", 0), 0u) << ce->basis;
  ASSERT_FALSE(unknown.notes.empty());
  bool said = false;
  for (const std::string& n : unknown.notes)
    said |= n.find("does not say how 2 pair(s) are linked") != std::string::npos;
  EXPECT_TRUE(said) << formatPlan(unknown);
  const nlohmann::json j = toJson(unknown);
  bool sawNull = false;
  for (const auto& e : j["expectations"]) {
    EXPECT_TRUE(e["gbps"].is_null() || e["gbps"].get<double>() > 0) << e.dump();
    sawNull |= e["gbps"].is_null();
  }
  EXPECT_TRUE(sawNull);
  EXPECT_NE(formatPlan(unknown).find("algbw unknown: "), std::string::npos) << formatPlan(unknown);

  // No NVLink and no PCIe rate from the topology: unknown too, not a figure from a fixed rate.
  PEERLAB_ASSERT_OK_AND_ASSIGN(Plan noRate, makePlan(nvswitchBox(2, 0), config(), {}));
  const Expectation* pcie = find(noRate, "peer_copy_ce_uni", 0, 1);
  ASSERT_NE(pcie, nullptr);
  EXPECT_FALSE(pcie->gbps.has_value());
  EXPECT_NE(pcie->basis.find("PCIe rate of GPU0"), std::string::npos) << pcie->basis;
}

// transport runs where NIXL or a UCX with its CUDA module is found, and is listed as not available otherwise.
TEST(Plan, TransportRunsOnlyWhereALibraryIsFound) {
  testing::TempDir tmp("peerlab-plan-transport");
  testing::ScopedEnv no_nixl("PEERLAB_NIXL_DIR", (tmp.path() + "/none").c_str());
  testing::ScopedEnv no_nixl_file("PEERLAB_NIXL_LIBRARY", nullptr);
  testing::ScopedEnv no_ucx_file("PEERLAB_UCX_LIBRARY", nullptr);
  {
    testing::ScopedEnv ucx("PEERLAB_UCX_DIR", (tmp.path() + "/none").c_str());
    PlanOptions o;
    o.suites = {"transport"};
    PEERLAB_ASSERT_OK_AND_ASSIGN(Plan plan, makePlan(nvswitchBox(2), config(), o));
    EXPECT_TRUE(plan.jobs.empty());
    bool listed = false;
    for (const std::string& n : plan.notes)
      listed |= n.rfind("transport: not available: neither NIXL nor UCX with CUDA found", 0) == 0;
    EXPECT_TRUE(listed) << formatPlan(plan);
  }
  // A UCX tree with the CUDA module: one transport_bench process (UCX) and one zcopy baseline over both pairs (two
  // GPUs: one pair per round, no serial sample).
  std::filesystem::create_directories(tmp.path() + "/ucx/lib/ucx");
  ASSERT_TRUE(testing::writeFile(tmp.path() + "/ucx/lib/libucp.so.0", ""));
  ASSERT_TRUE(testing::writeFile(tmp.path() + "/ucx/lib/ucx/libuct_cuda.so.0", ""));
  testing::ScopedEnv ucx("PEERLAB_UCX_DIR", (tmp.path() + "/ucx").c_str());
  PlanOptions o;
  o.suites = {"transport"};
  o.level = Level::kFull;  // the baseline rows run at full only
  PEERLAB_ASSERT_OK_AND_ASSIGN(Plan plan, makePlan(nvswitchBox(2), config(), o));
  ASSERT_EQ(plan.jobs.size(), 2u) << formatPlan(plan);
  int transport = 0, baseline = 0;
  for (const BenchJob& j : plan.jobs) {
    EXPECT_EQ(j.suite, "transport");
    EXPECT_EQ(j.ranks, 2);
    if (j.binary == "transport_bench") {
      ++transport;
      EXPECT_EQ(j.work.knob("library"), "ucx");
    } else {
      ++baseline;
      EXPECT_EQ(j.binary, "zcopy_bench");
      ASSERT_EQ(j.work.rows.size(), 1u);
      EXPECT_EQ(j.work.rows[0].cases,
                (std::vector<std::string>{"peerlab.get/uni", "peerlab.put/uni", "nccl.sendrecv/uni"}));
    }
  }
  EXPECT_EQ(transport, 1);
  EXPECT_EQ(baseline, 1);
  // Its figures come from the links like every pair suite's.
  const Expectation* e = find(plan, "transport_ucx_put", 0, 1);
  ASSERT_NE(e, nullptr);
  ASSERT_TRUE(e->gbps.has_value());
  EXPECT_NEAR(*e->gbps, 18 * 26.5625 * 0.63, 0.01);
  // Without the CUDA module, UCX alone does not make the suite available.
  std::filesystem::remove(tmp.path() + "/ucx/lib/ucx/libuct_cuda.so.0");
  PEERLAB_ASSERT_OK_AND_ASSIGN(Plan none, makePlan(nvswitchBox(2), config(), o));
  EXPECT_TRUE(none.jobs.empty());
}

TEST(Plan, HostScopesUseEachGpusOwnLink) {
  QualifyConfig c = config();
  BandwidthRule h2d;
  h2d.id = "host_copy_h2d";
  h2d.suite = "host_copy";
  h2d.impl = "peerlab.ce";
  h2d.name = "h2d";
  h2d.scope = "host";
  h2d.pcie_efficiency = 0.80;
  BandwidthRule all = h2d;
  all.id = "host_copy_all_h2d";
  all.name = "all_h2d";
  all.scope = "gpu_pcie";
  c.bandwidth = {h2d, all};
  PlanTopology t = nvswitchBox(2, 18);
  t.gpus[0].pcie = link(5, 16);
  t.gpus[1].pcie = link(5, 8);
  PEERLAB_ASSERT_OK_AND_ASSIGN(Plan plan, makePlan(t, c, {}));
  const Expectation* g0 = find(plan, "host_copy_h2d", 0);
  const Expectation* g1 = find(plan, "host_copy_h2d", 1);
  ASSERT_NE(g0, nullptr);
  ASSERT_NE(g1, nullptr);
  EXPECT_NEAR(*g0->gbps, 63.015385 * 0.80, 1e-5);  // NVLink to the peer does not matter to the host
  EXPECT_NEAR(*g1->gbps, 31.507692 * 0.80, 1e-5);
  EXPECT_EQ(g0->scope, "host");
  EXPECT_EQ(g0->basis, "PCIe Gen5 x16 63.02 GB/s x 0.80");
  EXPECT_EQ(*hostExpectation(t, h2d, 1).gbps, *g1->gbps);
  const Expectation* machine = find(plan, "host_copy_all_h2d");
  ASSERT_NE(machine, nullptr);
  EXPECT_NEAR(*machine->gbps, *g1->gbps, 1e-9);  // the weakest GPU
  // A result of GPU1 is checked against GPU1's figure only.
  report::Result r;
  r.suite = "host_copy";
  r.impl = "peerlab.ce";
  r.name = "h2d";
  r.src = 1;
  std::vector<const Expectation*> applies = expectationsFor(plan, r);
  ASSERT_EQ(applies.size(), 1u);
  EXPECT_EQ(applies[0], g1);
  t.gpus[1].pcie.reset();
  EXPECT_FALSE(hostExpectation(t, h2d, 1).gbps.has_value());
}

// A live reading (NVML's generation and width) replaces the topology's figure before planning.
TEST(Plan, LivePcieLinkCanBeFedIn) {
  PlanTopology t = nvswitchBox(2, 0);
  PEERLAB_ASSERT_OK(setPcieLink(t, 0, 5, 16, "nvml max"));
  PEERLAB_ASSERT_OK(setPcieLink(t, 1, 3, 8, "nvml max"));
  EXPECT_FALSE(setPcieLink(t, 2, 5, 16, "nvml").isOk());
  auto bad = setPcieLink(t, 0, 9, 16, "nvml");
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.message().find("PCIe generation 9"), std::string::npos) << bad.message();
  PEERLAB_ASSERT_OK_AND_ASSIGN(Plan plan, makePlan(t, config(), {}));
  const Expectation* ce = find(plan, "peer_copy_ce_uni", 0, 1);
  ASSERT_NE(ce, nullptr);
  EXPECT_NEAR(*ce->gbps, 8 * 8 * (128.0 / 130.0) / 8 * 0.80 * config().sys_factor, 1e-9);  // Gen3 x8, across sockets
  EXPECT_EQ(plan.topology.gpus[0].pcie->source, "nvml max");
}

// POWER8 fixture: GPU pairs 0-1 and 2-3 share NV2, the other pairs cross the sockets (SYS). A 4-rank alltoallv sends
// two thirds of each GPU's traffic over SYS: its figure is that slowest path's, not the NVLinks'.
TEST(Plan, PartlyNvlinkedCollectivesExpectTheSlowestPath) {
  PEERLAB_ASSERT_OK_AND_ASSIGN(
      topology::Topology topo,
      topology::loadFile(testing::sourcePath("fixtures/topologies/hwloc/power8gpudistances.xml")));
  PEERLAB_ASSERT_OK_AND_ASSIGN(Plan plan, makePlan(fromTopology(topo), config(), {}));
  const Expectation* a2a = find(plan, "alltoallv_busbw");
  ASSERT_NE(a2a, nullptr);
  ASSERT_TRUE(a2a->gbps.has_value()) << a2a->basis;
  const Expectation* sys = find(plan, "peer_copy_ce_uni", 0, 2);
  ASSERT_NE(sys, nullptr);
  ASSERT_TRUE(sys->gbps.has_value());
  EXPECT_NEAR(*sys->gbps, 6.3, 0.05);  // PCIe Gen3 x16 x 0.80 x 0.50 across sockets
  const QualifyConfig c = config();
  const BandwidthRule* rule = nullptr;
  for (const BandwidthRule& r : c.bandwidth)
    if (r.id == "alltoallv_busbw") rule = &r;
  ASSERT_NE(rule, nullptr);
  // The SYS path at the rule's PCIe efficiency, far below the 2 NVLinks' 40 GB/s x efficiency.
  EXPECT_NEAR(*a2a->gbps, 15.753846 * rule->pcie_efficiency * c.sys_factor, 0.01) << a2a->basis;
  EXPECT_LT(*a2a->gbps, 40 * rule->efficiency);
  EXPECT_EQ(a2a->link, "pcie");
  EXPECT_NE(a2a->basis.find("slowest path 0->2"), std::string::npos) << a2a->basis;
  EXPECT_NE(a2a->basis.find("across sockets (SYS)"), std::string::npos) << a2a->basis;
  EXPECT_NE(a2a->basis.find("2 of 3 peers of GPU0 without NVLink"), std::string::npos) << a2a->basis;
  // Fully NVLinked machines keep the per-GPU NVLink figure.
  PEERLAB_ASSERT_OK_AND_ASSIGN(Plan full, makePlan(nvswitchBox(4), config(), {}));
  EXPECT_EQ(find(full, "alltoallv_busbw")->link, "nvlink");
}

TEST(Plan, BudgetIsAWallTimeEstimate) {
  PEERLAB_ASSERT_OK_AND_ASSIGN(Plan plan, makePlan(nvswitchBox(4), config(), {}));
  double processes = 0;
  for (const BenchJob& j : plan.jobs)
    processes += j.budget_s;
  EXPECT_DOUBLE_EQ(plan.processes_s, processes);
  EXPECT_DOUBLE_EQ(plan.overhead_s, qualifyOverhead(plan) + estimateProbe(plan));
  EXPECT_GT(qualifyOverhead(plan), qualifyOverhead(Plan{}));  // 4 GPUs and 12 pairs cost more than none
  EXPECT_DOUBLE_EQ(plan.budget_s, plan.processes_s + plan.overhead_s);
  const nlohmann::json j = toJson(plan);
  EXPECT_DOUBLE_EQ(j["budget"]["estimate_s"].get<double>(), plan.budget_s);
  EXPECT_NE(j["budget"]["basis"].get<std::string>().find("deadlines are separate"), std::string::npos);
  for (const nlohmann::json& job : j["jobs"]) {
    EXPECT_EQ(job["estimate_basis"].get<std::string>().rfind("model: ", 0), 0u) << job.dump();
    // The deadline (runner.h: 4 x its base, at least 180 s) is kept apart and leaves room beyond the estimate.
    const RunnerOptions ro;
    EXPECT_GT(std::max(ro.min_timeout_s, ro.timeout_factor * job["deadline_base_s"].get<double>()),
              2 * job["budget_s"].get<double>())
        << job.dump();
  }
  PlanOptions noProbe;
  noProbe.probe = false;
  PEERLAB_ASSERT_OK_AND_ASSIGN(Plan without, makePlan(nvswitchBox(4), config(), noProbe));
  EXPECT_DOUBLE_EQ(plan.budget_s - without.budget_s, estimateProbe(plan));
  // Full sweeps run more sizes: a longer estimate.
  PlanOptions full;
  full.level = Level::kFull;
  PEERLAB_ASSERT_OK_AND_ASSIGN(Plan longer, makePlan(nvswitchBox(4), config(), full));
  auto peerCopy = [](const Plan& p) {
    for (const BenchJob& j : p.jobs)
      if (j.suite == "peer_copy" && j.guard_for.empty()) return j.budget_s;
    return 0.0;
  };
  EXPECT_GT(peerCopy(plan), 0);
  EXPECT_GT(peerCopy(longer), 2 * peerCopy(plan));
  EXPECT_GT(longer.processes_s, plan.processes_s);
}

TEST(Plan, TopologyJsonKeepsThePcieLinks) {
  PlanTopology t = nvswitchBox(2, 0);
  t.gpus[0].pcie = link(4, 16);
  PEERLAB_ASSERT_OK_AND_ASSIGN(PlanTopology back, planTopologyFromJson(toJson(t)));
  ASSERT_TRUE(back.gpus[0].pcie.has_value());
  EXPECT_DOUBLE_EQ(back.gpus[0].pcie->gbps, t.gpus[0].pcie->gbps);
  EXPECT_EQ(back.gpus[0].pcie->generation, 4);
  EXPECT_EQ(back.gpus[0].pcie->width, 16);
  EXPECT_FALSE(back.gpus[1].pcie.has_value());
}

// Figures read from real fixtures: NVLink to a CPU does not count, PCIe pairs use the GPUs' links and the socket rule.
TEST(Plan, FixtureFigures) {
  auto planOf = [&](const std::string& name) {
    auto topo = topology::loadFile(testing::sourcePath("fixtures/topologies/" + name));
    EXPECT_TRUE(topo.isOk()) << topo.status().message();
    auto plan = makePlan(fromTopology(*topo), config(), {});
    EXPECT_TRUE(plan.isOk());
    return *plan;
  };
  // POWER8: NV2 between 0-1 (NVLink 1.0, 20 GB/s), none across sockets, 2 GPU links per GPU (2 more go to the CPU).
  Plan p8 = planOf("hwloc/power8gpudistances.xml");
  EXPECT_NEAR(*find(p8, "peer_copy_ce_uni", 0, 1)->gbps, 2 * 20 * 0.80, 1e-9);
  const Expectation* cross = find(p8, "peer_copy_ce_uni", 0, 2);
  ASSERT_NE(cross, nullptr);
  EXPECT_NEAR(*cross->gbps, 15.753846 * 0.80 * 0.5, 1e-5);
  // Two thirds of each GPU's alltoallv traffic cross SYS: the slowest path's figure, not NV2's 2 x 20 x 0.45.
  EXPECT_NEAR(*find(p8, "alltoallv_busbw")->gbps, 15.753846 * 0.40 * 0.5, 1e-5);
  // g4dn.metal: T4s on Gen3 x16, PCIe only; a pair across sockets expects less than one under a host bridge.
  Plan g4 = planOf("hwloc/g4dnmetal.xml");
  std::optional<double> near, far;
  for (const Expectation& e : g4.expectations) {
    if (e.rule != "peer_copy_ce_uni") continue;
    const std::string path = g4.topology.pair(*e.src, *e.dst)->pci;
    ASSERT_TRUE(e.gbps.has_value()) << e.basis;
    if (path == "SYS") far = e.gbps;
    if (path != "SYS") near = e.gbps;
  }
  ASSERT_TRUE(near && far);
  EXPECT_NEAR(*near, 15.753846 * 0.80, 1e-5);
  EXPECT_LT(*far, *near);
  // GPUs whose link rate the file does not give: unknown, not a made-up rate.
  Plan old = planOf("hwloc/32em64t-2n8c2t-pci-wholeio.xml");
  for (const Expectation& e : old.expectations)
    EXPECT_FALSE(e.gbps.has_value()) << e.rule << " " << e.basis;
}

TEST(Plan, SelectedSuitesPairsAndModes) {
  PlanOptions o;
  o.suites = {"zcopy"};
  o.pairs = {{0, 1}, {3, 2}};
  o.level = Level::kFull;
  PEERLAB_ASSERT_OK_AND_ASSIGN(Plan plan, makePlan(nvswitchBox(4), config(), o));
  // One process over both pairs (disjoint: one round at once), after its serial sample.
  ASSERT_EQ(plan.jobs.size(), 2u);
  EXPECT_EQ(plan.jobs[0].guard_for, plan.jobs[1].label);
  EXPECT_EQ(plan.jobs[0].label, "zcopy serial sample 0->1");
  EXPECT_EQ(plan.jobs[1].label, "zcopy (2 pairs, 1 round)");
  EXPECT_EQ(plan.jobs[1].ranks, 4);
  ASSERT_EQ(plan.jobs[1].work.rounds.size(), 1u);
  EXPECT_EQ(plan.jobs[1].work.rounds[0].size(), 2u);
  // Full: every row of the binary (the plan selects none away).
  EXPECT_TRUE(plan.jobs[1].work.rows.empty());
  EXPECT_EQ(find(plan, "peer_copy_ce_uni", 1, 0), nullptr);  // only the selected pairs are expected
  EXPECT_NE(find(plan, "peer_copy_ce_uni", 3, 2), nullptr);
  o.suites = {"nonsense"};
  auto bad = makePlan(nvswitchBox(4), config(), o);
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("unknown suite \"nonsense\""), std::string::npos);
  o.suites = {};
  o.pairs = {{0, 7}};
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
  ASSERT_EQ(moe.jobs[1].work.rows.size(), 1u);
  EXPECT_EQ(moe.jobs[1].work.rows[0].cases, (std::vector<std::string>{"*/T=1", "*/T=128", "*/T=4096"}));
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
      // zcopy: one process over every ordered pair (and a serial sample first where pairs run at once).
      size_t zcopy = 0, covered = 0;
      for (const BenchJob& j : plan.jobs) {
        if (j.suite != "zcopy" || !j.guard_for.empty()) continue;
        ++zcopy;
        covered += j.pairs().size();
      }
      EXPECT_EQ(zcopy, 1u);
      EXPECT_EQ(covered, n * (n - 1));
      for (const Expectation& e : plan.expectations) {
        if (e.gbps) {
          EXPECT_GT(*e.gbps, 0) << e.rule;
        } else {
          EXPECT_EQ(e.basis.rfind("unknown: ", 0), 0u) << e.rule << ": " << e.basis;
        }
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
  ASSERT_EQ(plan.jobs[0].work.rows.size(), 1u);
  EXPECT_EQ(plan.jobs[0].work.rows[0].sizes, (std::vector<int64_t>{268435456}));
  const Expectation* h2d = find(plan, "host_copy_ce_h2d", 0);
  ASSERT_NE(h2d, nullptr);
  EXPECT_EQ(h2d->scope, "host");
  const Expectation* bidir = find(plan, "host_copy_ce_bidir", 0);
  ASSERT_NE(bidir, nullptr);
  EXPECT_EQ(bidir->metric, "busbw_gbps");
  const Expectation* local = find(plan, "host_copy_device_local", 0, 0);
  ASSERT_NE(local, nullptr);
  ASSERT_TRUE(local->gbps.has_value());
  EXPECT_NEAR(*local->gbps, 3352.32 / 2 * 0.60, 1e-6);
  EXPECT_NE(local->basis.find("/ 2 (read + write)"), std::string::npos) << local->basis;
  bool peer_note = false;
  for (const std::string& n : plan.notes)
    peer_note |= n.find("peer_copy: needs 2 GPUs") != std::string::npos;
  EXPECT_TRUE(peer_note);

  // Without the memory peak (a fixture), the device-local figure is unknown, and the plan says so.
  t.memory_peak_gbps.clear();
  PEERLAB_ASSERT_OK_AND_ASSIGN(Plan fixture, makePlan(t, config(), {}));
  const Expectation* unknown = find(fixture, "host_copy_device_local", 0, 0);
  ASSERT_NE(unknown, nullptr);
  EXPECT_FALSE(unknown->gbps.has_value());
  EXPECT_EQ(unknown->basis.rfind("unknown: ", 0), 0u) << unknown->basis;
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
  EXPECT_TRUE(
      parseConfig("[expect.a]\nsuite = \"host_copy\"\nscope = \"host\"\npcie_efficiency = 0.8\n", "my.toml").isOk());
  EXPECT_TRUE(parseConfig("[expect.a]\nsuite = \"host_copy\"\nscope = \"device\"\n", "my.toml").isOk());
  auto bad = parseConfig("[expect.a]\nsuite = \"host_copy\"\nscope = \"numa\"\n", "my.toml");
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("my.toml:3"), std::string::npos) << bad.status().toString();
}

}  // namespace
}  // namespace peerlab::qualify

namespace peerlab::qualify {
namespace {

// The copy sizes the peer_copy process runs.
std::set<int64_t> peerCopySizes(const Plan& plan) {
  std::set<int64_t> out;
  for (const BenchJob& j : plan.jobs)
    if (j.suite == "peer_copy" && j.guard_for.empty())
      for (const report::RowSelection& r : j.work.rows)
        out.insert(r.sizes.begin(), r.sizes.end());
  return out;
}

// Below full, a pair with NVLinks of its own is copied at 1 GiB (256 MiB is ~2% short of the link's rate) and a pair
// the plan knows no NVLink for at 256 MiB (the rate at a quarter of the time); full sweeps every size.
TEST(Plan, SpotCopiesAreSizedByTheLinkThePlanKnows) {
  for (Level level : {Level::kQuick, Level::kStandard}) {
    PlanOptions o;
    o.level = level;
    PEERLAB_ASSERT_OK_AND_ASSIGN(Plan nvlink, makePlan(nvswitchBox(4), config(), o));
    EXPECT_EQ(peerCopySizes(nvlink), (std::set<int64_t>{1073741824}));
    PlanTopology pcie = nvswitchBox(4, 0);
    for (PlanPair& p : pcie.pairs)
      p.pci = "PIX";
    PEERLAB_ASSERT_OK_AND_ASSIGN(Plan slow, makePlan(pcie, config(), o));
    EXPECT_EQ(peerCopySizes(slow), (std::set<int64_t>{268435456}));
  }
}

}  // namespace
}  // namespace peerlab::qualify
