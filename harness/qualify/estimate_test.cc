#include "harness/qualify/estimate.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "harness/qualify/gpu_models.h"
#include "harness/qualify/pipeline.h"
#include "harness/report/report.h"
#include "reference/testing/guards.h"
#include "reference/testing/temp_dir.h"
#include "reference/testing/testing.h"

namespace peerlab::qualify {
namespace {

namespace fs = std::filesystem;

// A committed run: the plan it stored (topology, mode, pairs, jobs) and what its processes took.
struct Committed {
  bool made_with_levels = false;
  std::string file;
  Plan plan;
  nlohmann::json run;
};

std::vector<Committed> committedRuns() {
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(testing::sourcePath("reports/runs"))) {
    if (report::isRunFileName(e.path().string())) files.push_back(e.path().string());
  }
  for (const auto& e : fs::directory_iterator(testing::sourcePath("reports/qualify"))) {
    if (const std::string r = report::bundleResults(e.path().string()); !r.empty()) files.push_back(r);
  }
  std::sort(files.begin(), files.end());
  std::vector<Committed> out;
  for (const std::string& f : files) {
    auto text = report::readRunText(f);
    EXPECT_TRUE(text.isOk()) << text.status().toString();
    if (!text.isOk()) continue;
    const nlohmann::json doc = nlohmann::json::parse(*text, nullptr, false);
    EXPECT_FALSE(doc.is_discarded()) << f;
    if (doc.is_discarded() || !doc.contains("plan") || !doc.contains("bench")) continue;
    Committed c;
    c.file = fs::relative(f, testing::sourcePath("")).string();
    c.run = doc;
    const nlohmann::json& p = doc["plan"];
    auto topo = planTopologyFromJson(p["topology"]);
    EXPECT_TRUE(topo.isOk()) << f;
    if (!topo.isOk()) continue;
    c.plan.topology = *topo;
    c.plan.options.probe = p.value("probe", false);
    for (const auto& pair : p["pairs"])
      c.plan.options.pairs.emplace_back(pair[0].get<int>(), pair[1].get<int>());
    auto stored = report::runPlanFromJson(p);
    EXPECT_TRUE(stored.isOk()) << f;
    if (!stored.isOk()) continue;
    c.plan.jobs = stored->jobs;
    c.plan.options.level = stored->level;
    c.made_with_levels = p.contains("level");
    out.push_back(std::move(c));
  }
  return out;
}

// The model describes the code as it is: every process of every committed run made by it (its plan records a level)
// is within 2x of the wall time it measured, the processes together within 2x, and the whole plan's estimate within 20%
// of the qualify wall time. On one GPU the model alone is allowed 1.2 s more: the host passes and process starts it
// counts are calibrated on hosts of 2 to 8 GPUs, and a 1x H200's host copies run 13-46% faster than it says (1.4-2.3 s
// qualifies); with the kind's measured runs, as ci/qualify.sh estimates, they are within 20% (the next test). Runs of
// earlier code (per-pair processes, host patterns a byte at a time) are left out.
constexpr double kOneGpuModelSlackS = 1.2;

TEST(Estimate, CommittedRunsOfThisCodeAreWithinTheirWallTimes) {
  const std::vector<Committed> runs = committedRuns();
  ASSERT_GE(runs.size(), 4u);
  int jobs = 0, qualifies = 0;
  for (const Committed& c : runs) {
    if (!c.made_with_levels) continue;
    SCOPED_TRACE(c.file);
    double estimated = 0, measured = 0;
    for (const auto& wall : c.run["bench"]["jobs"]) {
      const std::string label = wall["label"].get<std::string>();
      const BenchJob* job = nullptr;
      for (const BenchJob& j : c.plan.jobs) {
        if (j.label == label) job = &j;
      }
      if (job == nullptr) {
        // A rerun the runner added (the pairs left, or one pair at a time after a guard): not in the plan.
        EXPECT_NE(label.find("one at a time"), std::string::npos) << label;
        continue;
      }
      const JobEstimate e = estimateJob(*job, c.plan);
      const double w = wall["wall_s"].get<double>();
      EXPECT_GE(e.seconds, w / 2) << label << ": estimate " << e.seconds << " s (" << e.basis << "), measured " << w;
      EXPECT_LE(e.seconds, w * 2) << label << ": estimate " << e.seconds << " s (" << e.basis << "), measured " << w;
      estimated += e.seconds;
      measured += w;
      ++jobs;
    }
    EXPECT_GE(estimated, measured / 2) << estimated << " vs " << measured;
    EXPECT_LE(estimated, measured * 2) << estimated << " vs " << measured;
    if (c.run.contains("qualify") && c.run["qualify"].contains("wall_s")) {
      Plan plan = c.plan;
      estimatePlan(plan);
      const double wall = c.run["qualify"]["wall_s"].get<double>();
      const double slack = c.plan.topology.gpus.size() == 1 ? std::max(0.2 * wall, kOneGpuModelSlackS) : 0.2 * wall;
      EXPECT_GE(plan.budget_s, wall - slack) << plan.budget_s << " vs qualify " << wall;
      EXPECT_LE(plan.budget_s, wall + slack) << plan.budget_s << " vs qualify " << wall;
      ++qualifies;
    }
  }
  EXPECT_GE(jobs, 3);
  EXPECT_GE(qualifies, 1);
}

// Bundles whose wall time the estimate misses by more than 20% for a reason of the machine, not of the estimate.
const char* knownOutside(const std::string& file) {
  if (file.find("2026-12-02-h200-x1-9e0d510-standard") != std::string::npos) {
    return "this board's host copies took 1.92 s against 1.39-1.56 s on the others: 3 rows needed 7 samples instead "
           "of 3 to agree within their spread, and its host-side work took 0.88 s against 0.69-0.78 s "
           "(docs/qualify.md)";
  }
  return nullptr;
}

// What the README's ci/qualify.sh estimates (it passes --history reports/qualify): every committed bundle made by this
// code, estimated from the other committed bundles (its kind's measured process walls where they ran the same plan,
// the model for the rest), is within 20% of its qualify wall time.
TEST(Estimate, CommittedBundlesEstimatedFromTheOthersAreWithin20Percent) {
  std::vector<Committed> bundles;
  for (Committed& c : committedRuns()) {
    if (c.file.rfind("reports/qualify/", 0) == 0) bundles.push_back(std::move(c));
  }
  std::vector<report::Run> runs;
  for (const Committed& c : bundles) {
    auto r = report::readRun(testing::sourcePath(c.file));
    ASSERT_TRUE(r.isOk()) << r.status().toString();
    runs.push_back(*r);
  }
  int checked = 0, from_runs = 0, known = 0;
  for (size_t i = 0; i < bundles.size(); ++i) {
    const Committed& c = bundles[i];
    if (!c.made_with_levels || !c.run.contains("qualify") || !c.run["qualify"].contains("wall_s")) continue;
    SCOPED_TRACE(c.file);
    std::vector<report::Run> others = runs;
    others.erase(others.begin() + static_cast<std::ptrdiff_t>(i));
    MeasuredWalls m = measuredWalls(others, runs[i].kind.name, deriveKind(c.plan.topology).kind);
    // A run made with --history spent part of its wall time reading it, and its plan says how long.
    m.read_s = c.run["plan"].value("budget", nlohmann::json::object()).value("history_s", 0.0);
    Plan plan = c.plan;
    estimatePlan(plan, m);
    const double wall = c.run["qualify"]["wall_s"].get<double>();
    const bool within = plan.budget_s >= wall * 0.8 && plan.budget_s <= wall * 1.2;
    if (const char* why = knownOutside(c.file)) {
      // Counted apart, never as a pass: it must still be outside (else it leaves the list).
      std::printf("KNOWN %s: estimated %.2f s, measured %.2f s: %s\n", c.file.c_str(), plan.budget_s, wall, why);
      EXPECT_FALSE(within) << c.file << " is within 20% now: take it off the known list";
      ++known;
      continue;
    }
    EXPECT_TRUE(within) << plan.budget_s << " vs qualify " << wall << "; " << plan.estimate_basis;
    ++checked;
    from_runs += m.runs > 0;
  }
  EXPECT_GE(checked, 10);
  EXPECT_GE(from_runs, 6);  // the 1x H200's quick and standard bundles, each estimated from its siblings
  EXPECT_EQ(known, 1);
}

// With past runs of the same kind, a process's estimate is the median of what it measured there.
TEST(Estimate, PastRunsOfTheSameKindGiveMeasuredTimes) {
  const std::vector<Committed> committed = committedRuns();
  std::vector<report::Run> runs;
  const Committed* x4 = nullptr;
  for (const Committed& c : committed) {
    auto r = report::readRun(testing::sourcePath(c.file));
    ASSERT_TRUE(r.isOk()) << r.status().toString();
    runs.push_back(*r);
    if (c.file == "reports/runs/2026-11-28-h100-x4-nvswitch-15bd040.json.gz") x4 = &c;
  }
  ASSERT_NE(x4, nullptr);
  // Matched by the hardware: the kind each run is filed under, or the one its own topology gives.
  const std::string derived = deriveKind(x4->plan.topology).kind;
  EXPECT_EQ(derived, "h100-x4-nvswitch");
  const MeasuredWalls m = measuredWalls(runs, derived, derived);
  // Every 4x H100 run: 15bd040's and c6c3604's standard (each a bundle and a run file) and c6c3604's quick.
  EXPECT_EQ(m.runs, 5);
  Plan plan = x4->plan;
  estimatePlan(plan, m);
  const BenchJob& peer = plan.jobs[2];
  ASSERT_EQ(peer.label, "peer_copy (12 pairs)");
  // The median of 11.871 (twice), 11.830 and 11.748.
  EXPECT_NEAR(peer.budget_s, (11.871259575 + 11.830066024) / 2, 1e-6);
  EXPECT_EQ(peer.estimate_basis, "measured: median of 4 past runs of this kind");
  EXPECT_NE(plan.estimate_basis.find("15 of 15 processes from the measured wall times of 5 past run(s)"),
            std::string::npos)
      << plan.estimate_basis;
  // A different kind contributes nothing; an alias of this one, or a kind the hardware gives without the
  // interconnect (a fixture that cannot tell), matches the same runs.
  EXPECT_EQ(measuredWalls(runs, "l4-x2-pcie", "l4-x2-pcie").runs, 0);
  EXPECT_EQ(measuredWalls(runs, "h100-x4", "h100-x4").runs, 5);
  EXPECT_EQ(measuredWalls(runs, "nvidia-h100-x4", "h100-x4").runs, 5);
  EXPECT_EQ(measuredWalls(runs, "h100-x4-pcie", "h100-x4-pcie").runs, 0);
  // The 4x H200's runs of earlier versions (db99ff9, 3710ae0: no level in their plans) are not counted; its two
  // runs that record a level are.
  EXPECT_EQ(measuredWalls(runs, "h200-x4-nvswitch", "h200-x4-nvswitch").runs, 2);
}

// The estimate is not the deadlines: on the DGX-2 fixture (16 GPUs, 240 ordered pairs) it is far below their sum.
TEST(Estimate, ApartFromTheDeadlines) {
  PEERLAB_ASSERT_OK_AND_ASSIGN(topology::Topology topo,
                               topology::loadFile(testing::sourcePath("fixtures/topologies/hwloc/nvidiaDGX2.xml")));
  auto config = defaultConfig();
  ASSERT_TRUE(config.isOk());
  PlanOptions o;
  o.suites = qualifyDefaultSuites();
  PEERLAB_ASSERT_OK_AND_ASSIGN(Plan plan, makePlan(fromTopology(topo), *config, o));
  double deadlines = 0;
  for (const BenchJob& j : plan.jobs)
    deadlines += j.deadline_s;
  EXPECT_LT(plan.budget_s, deadlines / 4) << plan.budget_s << " vs " << deadlines;
  // Yet every process is paid for: a start and its cases.
  for (const BenchJob& j : plan.jobs)
    EXPECT_GT(j.budget_s, 1.0) << j.label;
}

// Data moved counts: the same plan over PCIe Gen3 takes longer than over NVLink.
TEST(Estimate, SlowerLinksTakeLonger) {
  auto config = defaultConfig();
  ASSERT_TRUE(config.isOk());
  PEERLAB_ASSERT_OK_AND_ASSIGN(topology::Topology pcie,
                               topology::loadFile(testing::sourcePath("fixtures/topologies/hwloc/g4dnmetal.xml")));
  PlanTopology slow = fromTopology(pcie);
  PlanTopology fast = slow;
  for (PlanPair& p : fast.pairs) {
    p.nvlinks = 18;
    p.nvlink_gbps = 18 * 26.5625;
    p.nvswitch = true;
  }
  PlanOptions o;
  o.suites = {"peer_copy"};
  PEERLAB_ASSERT_OK_AND_ASSIGN(Plan a, makePlan(slow, *config, o));
  PEERLAB_ASSERT_OK_AND_ASSIGN(Plan b, makePlan(fast, *config, o));
  EXPECT_GT(a.processes_s, 1.5 * b.processes_s) << a.processes_s << " vs " << b.processes_s;
}

}  // namespace
}  // namespace peerlab::qualify

namespace peerlab::qualify {
namespace {

// A plan as `qualify --dry-run --level L` makes it (the default suites and the probe), without the transport
// libraries (the fixtures' machines are estimated for what every machine runs).
Plan qualifyPlan(const PlanTopology& topo, Level level) {
  testing::TempDir tmp("peerlab-estimate-targets");
  testing::ScopedEnv nixl("PEERLAB_NIXL_DIR", (tmp.path() + "/none").c_str());
  testing::ScopedEnv ucx("PEERLAB_UCX_DIR", (tmp.path() + "/none").c_str());
  testing::ScopedEnv nixl_file("PEERLAB_NIXL_LIBRARY", nullptr);
  testing::ScopedEnv ucx_file("PEERLAB_UCX_LIBRARY", nullptr);
  auto config = defaultConfig();
  EXPECT_TRUE(config.isOk());
  PlanOptions o;
  o.level = level;
  o.suites = qualifyDefaultSuites(level);
  auto plan = makePlan(topo, *config, o);
  EXPECT_TRUE(plan.isOk()) << plan.status().toString();
  return plan.isOk() ? *plan : Plan{};
}

// 8 GPUs through NVSwitch, every pair NV<links> at `gbps` per link.
PlanTopology nvswitch8(int links, double gbps) {
  PlanTopology t;
  t.source = "hand-made";
  t.format = "live";
  t.nvswitches = 6;
  for (int g = 0; g < 8; ++g) {
    topology::PcieLink pcie;
    pcie.gbps = 63.0;
    t.gpus.push_back({g, "", "NVIDIA H100", "", links, gbps, pcie});
  }
  for (int a = 0; a < 8; ++a)
    for (int b = 0; b < 8; ++b)
      if (a != b) t.pairs.push_back({a, b, a / 4 == b / 4 ? "NODE" : "SYS", links, links * gbps, true});
  t.numa_nodes = 2;
  return t;
}

// The time a level takes on 8 GPUs, from the committed fixtures: two sockets of PCIe (g4dn.metal: 8 T4; p4d.24xlarge as
// its NCCL dump shows it, links unknown) within 300 s at standard and 25 s at quick, because pairs whose PCIe paths
// share no link run at once; 8 GPUs through NVSwitch within 120 s at standard.
TEST(Estimate, EightGpuMachinesWithinTheirTargets) {
  for (const char* f : {"fixtures/topologies/hwloc/g4dnmetal.xml", "fixtures/topologies/nccl/aws_p4d-24xl-topo.xml"}) {
    SCOPED_TRACE(f);
    PEERLAB_ASSERT_OK_AND_ASSIGN(PlanTopology topo, loadPlanTopology(testing::sourcePath(f)));
    ASSERT_EQ(topo.gpus.size(), 8u);
    const Plan standard = qualifyPlan(topo, Level::kStandard);
    EXPECT_LE(standard.budget_s, 300) << formatPlan(standard);
    EXPECT_GT(standard.budget_s, 100);  // eight GPUs over PCIe are not free
    const Plan quick = qualifyPlan(topo, Level::kQuick);
    EXPECT_LE(quick.budget_s, 25) << formatPlan(quick);
    // The zcopy process runs its 56 pairs in far fewer rounds than pairs.
    for (const BenchJob& j : standard.jobs) {
      if (j.suite == "zcopy" && j.guard_for.empty()) {
        EXPECT_LE(j.work.rounds.size(), 20u) << j.label;
      }
    }
  }
  for (const auto& [links, gbps] : {std::pair{12, 25.0}, std::pair{18, 26.5625}}) {
    const Plan standard = qualifyPlan(nvswitch8(links, gbps), Level::kStandard);
    EXPECT_LE(standard.budget_s, 120) << "NV" << links << "\n" << formatPlan(standard);
  }
}

}  // namespace
}  // namespace peerlab::qualify
