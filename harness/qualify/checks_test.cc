#include "harness/qualify/plan.h"
#include "harness/report/evaluate.h"
#include "harness/testing/runs.h"

#include <gtest/gtest.h>

#include "reference/testing/testing.h"

namespace peerlab::qualify {
namespace {

using report::Check;
using report::Result;

PlanTopology box(int n) {
  PlanTopology t;
  t.source = "live";
  t.format = "live";
  t.nvswitches = 4;
  t.nvlink_source = "nvml";
  for (int g = 0; g < n; ++g)
    t.gpus.push_back({g, "", "NVIDIA H200", "", 18, {}});
  for (int s = 0; s < n; ++s) {
    for (int d = 0; d < n; ++d) {
      if (s != d) t.pairs.push_back({s, d, "SYS", 18, 478.125, true});
    }
  }
  return t;
}

Result copy(int s, int d, double bytes, double gbps, const std::string& impl = "peerlab.ce") {
  return peerlab::testing::bandwidthRow("peer_copy", impl, s, d, bytes, gbps);
}

Result probeCell(int s, int d, const std::string& verdict, bool claimed) {
  return peerlab::testing::probeCellRow("probe", s, d, verdict, claimed);
}

using peerlab::testing::checkNamed;
using peerlab::testing::healthRow;

struct Fixture {
  QualifyConfig config;
  Plan plan;
  report::Run run;
  Fixture() {
    auto c = defaultConfig();
    EXPECT_TRUE(c.isOk());
    config = *c;
    PlanOptions o;
    o.suites = {"peer_copy"};
    auto p = makePlan(box(2), config, o);
    EXPECT_TRUE(p.isOk());
    plan = *p;
    run.fingerprint.gpus = {{0, "GPU-a", "0000:00:06.0", "NVIDIA H200"}, {1, "GPU-b", "0000:00:07.0", "NVIDIA H200"}};
  }
  // As qualify does it: the plan goes into the run file and the engine reads it back from there.
  std::vector<Check> evaluate(const report::Run* baseline = nullptr) {
    plan.require_link_info = config.require_link_info;
    plan.fail_unclaimed = config.fail_unclaimed;
    auto stored = report::runPlanFromJson(toJson(plan));
    EXPECT_TRUE(stored.isOk()) << stored.status().toString();
    report::EvaluateOptions o;
    o.baseline = baseline;
    o.baseline_rule.threshold_pct = 5;
    return report::evaluateChecks(run, stored.isOk() ? &*stored : nullptr, o);
  }
};

TEST(Checks, BandwidthAgainstTheTopology) {
  Fixture f;
  // 0->1 reaches 394 GB/s at its best size; 1->0 tops out at 300 GB/s. Small sizes are never held to the link rate.
  f.run.results = {copy(0, 1, 4096, 5),      copy(0, 1, 1 << 28, 394),    copy(0, 1, 1 << 26, 390),
                   copy(1, 0, 1 << 28, 300), probeCell(0, 1, "ok", true), probeCell(1, 0, "ok", true)};
  auto checks = f.evaluate();
  const Check* good = checkNamed(checks, "peer_copy peerlab.ce uni 0->1");
  ASSERT_NE(good, nullptr);
  EXPECT_FALSE(good->failed());
  EXPECT_EQ(good->measured, "394.0 GB/s algbw at 256 MiB");
  EXPECT_EQ(good->expected, ">= 382.5 GB/s");
  EXPECT_EQ(good->basis, "NV18 x 26.5625 GB/s x 0.80 [rule peer_copy_ce_uni, scope pair]");
  const Check* bad = checkNamed(checks, "peer_copy peerlab.ce uni 1->0");
  ASSERT_NE(bad, nullptr);
  EXPECT_TRUE(bad->failed());
  EXPECT_NE(bad->reason.find("78.4% of the expected figure: below the floor"), std::string::npos) << bad->reason;
  for (const Check& c : checks) {
    if (c.failed()) {
      EXPECT_EQ(c.name, "peer_copy peerlab.ce uni 1->0") << c.reason;
    }
  }
  EXPECT_EQ(report::countChecks(checks).failed, 1);
}

// A figure the topology cannot give is checked as "unknown": never a pass against 0. It fails while the config
// requires link information and passes, still saying "unknown", where the user accepts that.
TEST(Checks, UnknownLinksSayUnknown) {
  Fixture f;
  PlanTopology t = box(2);
  for (PlanPair& p : t.pairs) {
    p.nvlinks.reset();
    p.nvlink_gbps.reset();
  }
  PlanOptions o;
  o.suites = {"peer_copy"};
  auto p = makePlan(t, f.config, o);
  ASSERT_TRUE(p.isOk());
  f.plan = *p;
  f.run.results = {copy(0, 1, 1 << 28, 394), probeCell(0, 1, "ok", true), probeCell(1, 0, "ok", true)};
  auto checks = f.evaluate();
  const Check* c = checkNamed(checks, "peer_copy peerlab.ce uni 0->1");
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(c->failed());
  EXPECT_EQ(c->expected, "unknown");
  EXPECT_FALSE(c->expected_value.has_value());
  EXPECT_NE(c->reason.find("require_link_info = true: unknown: the topology does not say"), std::string::npos)
      << c->reason;
  const Check* topo = checkNamed(checks, "link information for every pair");
  ASSERT_NE(topo, nullptr);
  EXPECT_TRUE(topo->failed());
  f.config.require_link_info = false;
  checks = f.evaluate();
  c = checkNamed(checks, "peer_copy peerlab.ce uni 0->1");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->status, report::CheckStatus::kSkipped);
  EXPECT_EQ(c->expected, "unknown");
}

// PCIe-only pairs need both GPUs' PCIe rates for their figures; without them the topology check says so.
TEST(Checks, PciePairsWithoutARateAreUnknown) {
  Fixture f;
  PlanTopology t = box(2);
  for (PlanPair& p : t.pairs) {
    p.nvlinks = 0;
    p.nvlink_gbps.reset();
    p.nvswitch = false;
  }
  t.gpus[0].pcie = topology::PcieLink{4, 16, 31.5, "test"};
  PlanOptions o;
  o.suites = {"peer_copy"};
  auto p = makePlan(t, f.config, o);
  ASSERT_TRUE(p.isOk());
  f.plan = *p;
  auto checks = f.evaluate();
  const Check* topo = checkNamed(checks, "link information for every pair");
  ASSERT_NE(topo, nullptr);
  EXPECT_TRUE(topo->failed());
  EXPECT_NE(topo->reason.find("no NVLink and no PCIe rate for 0->1, 1->0"), std::string::npos) << topo->reason;
  f.plan.topology.gpus[1].pcie = topology::PcieLink{4, 16, 31.5, "test"};
  checks = f.evaluate();
  topo = checkNamed(checks, "link information for every pair");
  ASSERT_NE(topo, nullptr);
  EXPECT_FALSE(topo->failed()) << topo->reason;
}

TEST(Checks, ProbeClaimsMustVerify) {
  Fixture f;
  f.run.results = {copy(0, 1, 1 << 28, 394), copy(1, 0, 1 << 28, 394), probeCell(0, 1, "corrupt", true),
                   probeCell(1, 0, "ok", false)};
  auto checks = f.evaluate();
  const Check* p = checkNamed(checks, "probe ce_write: claimed cells verify");
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(p->failed());
  EXPECT_EQ(p->measured, "0 of 1 claimed cells verified (2 cells)");
  EXPECT_NE(p->reason.find("0->1 corrupt"), std::string::npos) << p->reason;
  // An unclaimed cell that fails only fails qualify when the config says so.
  f.run.results = {copy(0, 1, 1 << 28, 394), copy(1, 0, 1 << 28, 394), probeCell(0, 1, "ok", true),
                   probeCell(1, 0, "hang", false)};
  EXPECT_FALSE(checkNamed(f.evaluate(), "probe ce_write: claimed cells verify")->failed());
  f.config.fail_unclaimed = true;
  EXPECT_TRUE(checkNamed(f.evaluate(), "probe ce_write: claimed cells verify")->failed());
  // No probe at all is a failure when the probe was part of the run.
  f.run.results = {copy(0, 1, 1 << 28, 394)};
  const Check* ran = checkNamed(f.evaluate(), "verified probe");
  ASSERT_NE(ran, nullptr);
  EXPECT_TRUE(ran->failed());
}

TEST(Checks, DataFailuresAndCoverage) {
  Fixture f;
  Result failed = copy(1, 0, 1 << 28, 394);
  failed.status = "failed: cudaMemcpyPeerAsync: an illegal memory access";
  Result wrong = copy(0, 1, 1 << 20, 100);
  wrong.wrong = 12;
  f.run.results = {copy(0, 1, 1 << 28, 394), failed, wrong, probeCell(0, 1, "ok", true)};
  auto checks = f.evaluate();
  const Check* data = checkNamed(checks, "peer_copy: results ran and verified");
  ASSERT_NE(data, nullptr);
  EXPECT_TRUE(data->failed());
  EXPECT_EQ(data->measured, "1 ok, 0 skipped, 2 failed");
  EXPECT_NE(data->reason.find("illegal memory access"), std::string::npos);
  EXPECT_NE(data->reason.find("12 wrong elements"), std::string::npos);

  // A suite where only a baseline was skipped passes; one where peerlab itself measured nothing fails.
  Result torch;
  torch.suite = "moe";
  torch.name = "T=128";
  torch.impl = "torch.symm_mem";
  torch.ranks = 2;
  torch.status = "skipped: torch is not importable";
  Result own = torch;
  own.suite = "alltoallv";
  own.impl = "peerlab.alltoallv";
  own.status = "skipped: needs 2 ranks";
  f.run.results = {copy(0, 1, 1 << 28, 394), probeCell(0, 1, "ok", true), torch, own};
  checks = f.evaluate();
  ASSERT_NE(checkNamed(checks, "moe: results ran and verified"), nullptr);
  EXPECT_FALSE(checkNamed(checks, "moe: results ran and verified")->failed());
  // A suite the plan did not run, with peerlab's own rows all skipped: not run, never passed.
  ASSERT_NE(checkNamed(checks, "alltoallv: results ran and verified"), nullptr);
  EXPECT_EQ(checkNamed(checks, "alltoallv: results ran and verified")->status, report::CheckStatus::kSkipped);
  EXPECT_NE(checkNamed(checks, "alltoallv: results ran and verified")->reason.find("nothing of peerlab's was measured"),
            std::string::npos);
  // One the plan ran: a failure.
  BenchJob a2a;
  a2a.suite = "alltoallv";
  a2a.binary = "alltoallv_bench";
  a2a.ranks = 2;
  f.plan.jobs.push_back(a2a);
  EXPECT_TRUE(checkNamed(f.evaluate(), "alltoallv: results ran and verified")->failed());

  // Copy-engine results that never reach the size the expectation needs: the sweep checks nothing, which must not
  // pass silently. Implementations the run does not have (SM copies here) are not held to anything.
  f.run.results = {copy(0, 1, 1 << 20, 200), copy(1, 0, 1 << 22, 300), probeCell(0, 1, "ok", true)};
  checks = f.evaluate();
  const Check* cov = checkNamed(checks, "expect.peer_copy_ce_uni has results to check");
  ASSERT_NE(cov, nullptr);
  EXPECT_TRUE(cov->failed());
  EXPECT_EQ(cov->measured, "2 results of peer_copy peerlab.ce uni, largest 4 MiB");
  EXPECT_EQ(checkNamed(checks, "expect.peer_copy_sm_uni has results to check"), nullptr);
}

TEST(Checks, LatencyBound) {
  Fixture f;
  PlanOptions o;
  o.suites = {"zcopy"};
  f.plan = *makePlan(box(2), f.config, o);
  auto lat = [](int s, int d, double bytes, double us) {
    Result r;
    r.suite = "zcopy";
    r.name = "kernel/uni";
    r.impl = "peerlab.sm_signal";
    r.src = s;
    r.dst = d;
    r.ranks = 2;
    r.bytes = bytes;
    r.time_us = us;
    return r;
  };
  f.run.results = {lat(0, 1, 8, 1.1), lat(0, 1, 64, 1.3), lat(1, 0, 8, 5.0), lat(1, 0, 1 << 20, 30),
                   probeCell(0, 1, "ok", true)};
  auto checks = f.evaluate();
  const Check* fast = checkNamed(checks, "zcopy peerlab.sm_signal kernel/uni 0->1");
  ASSERT_NE(fast, nullptr);
  EXPECT_FALSE(fast->failed());
  EXPECT_EQ(fast->measured, "1.30 us at 64 B");  // the slowest small size
  const Check* slow = checkNamed(checks, "zcopy peerlab.sm_signal kernel/uni 1->0");
  ASSERT_NE(slow, nullptr);
  EXPECT_TRUE(slow->failed());
  EXPECT_EQ(slow->measured, "5.00 us at 8 B");  // 1 MiB is not a latency figure
}

TEST(Checks, BaselineRegressionsAndMissing) {
  Fixture f;
  report::Run base = f.run;
  base.results = {copy(0, 1, 1 << 28, 394), copy(1, 0, 1 << 28, 394), copy(0, 1, 1 << 20, 200),
                  probeCell(0, 1, "ok", true)};
  f.run.results = {copy(0, 1, 1 << 28, 393), copy(1, 0, 1 << 28, 350), probeCell(0, 1, "ok", true)};
  auto checks = f.evaluate(&base);
  int baselineChecks = 0;
  const Check* regressed = nullptr;
  const Check* missing = nullptr;
  for (const Check& c : checks) {
    if (c.category != "baseline") continue;
    ++baselineChecks;
    if (c.name == "peer_copy uni peerlab.ce 1->0 256 MiB") regressed = &c;
    if (c.name == "baseline results present in this run") missing = &c;
  }
  EXPECT_EQ(baselineChecks, 4);  // two copies, one probe cell, the presence check
  ASSERT_NE(regressed, nullptr);
  EXPECT_TRUE(regressed->failed());
  EXPECT_EQ(regressed->measured, "350 GB/s");
  EXPECT_NE(regressed->expected.find(">= 374.3 GB/s"), std::string::npos) << regressed->expected;
  ASSERT_NE(missing, nullptr);
  EXPECT_TRUE(missing->failed());
  EXPECT_NE(missing->reason.find("peer_copy uni peerlab.ce 0->1 1 MiB"), std::string::npos) << missing->reason;
}

TEST(Checks, TopologyLinkDownAndCudaVisibility) {
  Fixture f;
  f.plan.topology.gpus[1].nvlinks = 17;
  f.run.fingerprint.gpus.pop_back();
  f.run.results = {probeCell(0, 1, "ok", true)};
  auto checks = f.evaluate();
  const Check* links = checkNamed(checks, "active NVLinks equal on every NVIDIA H200");
  ASSERT_NE(links, nullptr);
  EXPECT_TRUE(links->failed());
  EXPECT_NE(links->measured.find("17 links on GPU 1"), std::string::npos) << links->measured;
  const Check* cuda = checkNamed(checks, "CUDA sees every GPU");
  ASSERT_NE(cuda, nullptr);
  EXPECT_TRUE(cuda->failed());
}

// One GPU: the host paths and the device-local copy are checked per GPU and named by it.
TEST(Checks, OneGpuHostPathsAreChecked) {
  auto c = defaultConfig();
  ASSERT_TRUE(c.isOk());
  PlanTopology t = box(1);
  t.gpus[0].pcie = topology::pcieLinkFromGenWidth(5, 16, "test").value();  // 63.0 GB/s per direction
  t.memory_peak_gbps[0] = 3352.32;
  PlanOptions o;
  o.suites = {"host_copy"};
  auto p = makePlan(t, *c, o);
  ASSERT_TRUE(p.isOk()) << p.status().toString();
  report::Run run;
  run.fingerprint.gpus = {{0, "GPU-a", "0000:00:06.0", "NVIDIA H100"}};
  auto host = [](const std::string& impl, const std::string& name, double gbps) {
    Result r = copy(0, 0, 1 << 28, gbps, impl);
    r.suite = "host_copy";
    r.name = name;
    r.dst = std::nullopt;
    r.busbw_gbps = name == "bidir" ? 2 * gbps : gbps;
    r.numa = 0;
    return r;
  };
  Result local = copy(0, 0, 1 << 28, 1400);
  local.suite = "host_copy";
  local.name = "device_local";
  // h2d healthy (Gen5: 54.2), d2h far below the floor (a link trained at x4), bidir healthy.
  run.results = {host("peerlab.ce", "h2d", 54.2), host("peerlab.ce", "d2h", 7.5), host("peerlab.ce", "bidir", 44.1),
                 host("peerlab.sm", "h2d", 40.0), local};
  auto stored = report::runPlanFromJson(toJson(*p));
  ASSERT_TRUE(stored.isOk()) << stored.status().toString();
  const std::vector<Check> checks = report::evaluateChecks(run, &*stored);
  const Check* h2d = checkNamed(checks, "host_copy peerlab.ce h2d gpu 0 host numa 0");
  ASSERT_NE(h2d, nullptr);
  EXPECT_FALSE(h2d->failed()) << h2d->reason;
  const Check* d2h = checkNamed(checks, "host_copy peerlab.ce d2h gpu 0 host numa 0");
  ASSERT_NE(d2h, nullptr);
  EXPECT_TRUE(d2h->failed());
  const Check* dl = checkNamed(checks, "host_copy peerlab.ce device_local gpu 0");
  ASSERT_NE(dl, nullptr);
  EXPECT_FALSE(dl->failed()) << dl->expected;
  EXPECT_NE(dl->basis.find("DRAM 3352.32 GB/s"), std::string::npos) << dl->basis;
}

TEST(Checks, HealthFailFailsWarnWarnsUnsupportedIsNotPassed) {
  Fixture f;
  f.run.results = {probeCell(0, 1, "ok", true),
                   probeCell(1, 0, "ok", true),
                   healthRow(0, "pcie_link", "fail", "Gen3 x8 of Gen5 x16"),
                   healthRow(0, "ecc", "warn", "past uncorrected errors: 1 (SRAM 1 parity in SM 1)"),
                   healthRow(1, "fabric", "unsupported", "fabric state: not supported"),
                   healthRow(1, "xid", "ok", "no XID in 60.0 s watched")};
  auto checks = f.evaluate();
  const Check* link = checkNamed(checks, "pcie_link GPU 0");
  ASSERT_NE(link, nullptr);
  EXPECT_TRUE(link->failed());
  EXPECT_EQ(link->category, "health");
  EXPECT_EQ(link->reason, "Gen3 x8 of Gen5 x16");
  const Check* ecc = checkNamed(checks, "ecc GPU 0");
  ASSERT_NE(ecc, nullptr);
  EXPECT_FALSE(ecc->failed());
  EXPECT_EQ(ecc->status, report::CheckStatus::kWarn);
  const Check* fabric = checkNamed(checks, "fabric GPU 1");
  ASSERT_NE(fabric, nullptr);
  EXPECT_EQ(fabric->status, report::CheckStatus::kUnsupported);
  EXPECT_EQ(fabric->measured, "unsupported");
  const Check* xid = checkNamed(checks, "xid GPU 1");
  ASSERT_NE(xid, nullptr);
  EXPECT_EQ(xid->status, report::CheckStatus::kPass);
  // Results measured on a throttled GPU fail their benchmark.
  Result hot = copy(1, 0, 1 << 28, 450);
  hot.extra["throttled"] = {"hw_thermal"};
  f.run.results.push_back(hot);
  auto throttled = f.evaluate();
  const Check* t0 = checkNamed(throttled, "peer_copy on GPU 1 measured at full clocks");
  ASSERT_NE(t0, nullptr);
  EXPECT_TRUE(t0->failed());
  EXPECT_EQ(t0->measured, "throttled: hw_thermal");
  EXPECT_NE(checkNamed(throttled, "peer_copy on GPU 0 measured at full clocks"), nullptr);
  EXPECT_EQ(checkNamed(checks, "peer_copy on GPU 1 measured at full clocks"), nullptr);
  // Health rows are verdicts, not measurements: no data check is made of them.
  for (const Check& c : checks) {
    EXPECT_EQ(c.name.find("health:"), std::string::npos) << c.name;
    if (c.failed() && c.category != "coverage") {
      EXPECT_EQ(c.name, "pcie_link GPU 0") << c.reason;
    }
  }
}

}  // namespace
}  // namespace peerlab::qualify
