#pragma once
/// The qualify plan: from a topology and the thresholds config, which pairs are tested, which benchmark processes
/// run, and what every figure is expected to reach, from the links the topology reports (NVLink links x per-link
/// rate x efficiency; PCIe link rate x efficiency x path factor).

#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "harness/qualify/config.h"
#include "harness/qualify/suites.h"
#include "harness/report/plan_record.h"
#include "harness/report/report.h"
#include "harness/topology/topology.h"
#include "reference/core/status.h"
#include "reference/probe/probe.h"

namespace peerlab::qualify {

using report::Expectation;
using report::PlanGpu;
using report::PlanPair;
using report::PlanTopology;
using report::planTopologyFromJson;

PlanTopology fromTopology(const topology::Topology& topo);
/// Feeds in a live reading of GPU `gpu`'s PCIe link (e.g. NVML's maximum generation and width), replacing what the
/// topology said. `invalid_argument` names a GPU outside the topology or a generation or width outside PCIe's.
Status setPcieLink(PlanTopology& topo, int gpu, int generation, int width, const std::string& source);

/// The pair-scope figure of `rule` for src -> dst: NVLink links x rate x efficiency x directions, or, without
/// NVLink, the slower GPU link x pcie_efficiency x path factor (config.sys_factor across sockets) x directions.
Expectation pairExpectation(const PlanTopology& topo, const QualifyConfig& config, const BandwidthRule& rule, int src,
                            int dst);
/// The host-scope figure of `rule` for one GPU: its own PCIe link x pcie_efficiency x directions (host <-> device
/// copies cross only that link).
Expectation hostExpectation(const PlanTopology& topo, const BandwidthRule& rule, int gpu);

struct PlanOptions {
  Level level = Level::kStandard;
  std::vector<std::string> suites;         ///< empty: every suite
  std::vector<std::pair<int, int>> pairs;  ///< empty: every ordered pair of the topology
  bool probe = true;                       ///< qualify runs the verified probe first
  std::vector<std::string> probe_methods;  ///< empty: every method
  bool concurrent = true;                  ///< disjoint pairs run at once where their links allow (schedule.h)
};

struct Plan {
  PlanTopology topology;
  PlanOptions options;
  std::vector<BenchJob> jobs;
  std::vector<Expectation> expectations;
  std::vector<LatencyRule> latency;
  std::vector<std::string> notes;           ///< what cannot be expected and why
  std::vector<std::string> disabled_rules;  ///< rules the config switched off (enabled = false), by id
  bool require_link_info = true;            ///< from the config: the checks honour it as stored with the plan
  bool fail_unclaimed = false;
  /// Estimated wall time (estimate.h): processes_s + overhead_s. Deadlines are separate and several times longer.
  double budget_s = 0;
  double processes_s = 0;      ///< the benchmark processes' estimates, added
  double overhead_s = 0;       ///< the probe, topology, health readings and the bundle
  double history_s = 0;        ///< of overhead_s: reading the past runs the estimate is made from (--history)
  std::string estimate_basis;  ///< how the estimate was made
};

/// Builds the plan. `invalid_argument` for an unknown suite or a pair outside the topology; a topology without GPUs
/// gives a plan with no pairs (the caller reports kExitNoGpu).
StatusOr<Plan> makePlan(const PlanTopology& topo, const QualifyConfig& config, const PlanOptions& options);

/// Plain-text plan: topology summary, pairs with links, probe, benchmark processes, expected figures. `command`
/// names what plans ("peerlab qualify", "peerlab bench") in the header.
std::string formatPlan(const Plan& plan, const std::string& command = "peerlab qualify");
/// The plan as `qualify --dry-run --json` prints it and the run file carries it ("plan"): mode, topology, pairs,
/// probe, jobs, expectations (each with rule, scope, link, gbps or null, basis), latency, notes, budget.
nlohmann::json toJson(const Plan& plan);

/// Expectations that apply to a result (report::expectationApplies: suite, impl/name globs, scope).
std::vector<const Expectation*> expectationsFor(const Plan& plan, const report::Result& result);

/// Parses "0-1,1-0,2-3" (ordered pairs, "src-dst", "src:dst" or "src->dst"): probe::parsePairs, the one syntax of
/// every --pairs; `invalid_argument` names the bad entry.
StatusOr<std::vector<std::pair<int, int>>> parsePairs(const std::string& text);

}  // namespace peerlab::qualify
