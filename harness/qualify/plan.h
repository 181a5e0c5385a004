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
#include "harness/report/report.h"
#include "harness/topology/topology.h"
#include "reference/core/status.h"

namespace peerlab::qualify {

/// One ordered pair as the plan sees it.
struct PlanPair {
  int src = -1;
  int dst = -1;
  std::string pci;                    ///< "PIX", "SYS", ... as nvidia-smi names the PCIe path
  std::optional<int> nvlinks;         ///< NVLinks between them; 0: none; nullopt: the topology cannot tell
  std::optional<double> nvlink_gbps;  ///< NVLink bandwidth per direction when the topology gives it
  bool nvswitch = false;
};

struct PlanGpu {
  int index = -1;
  std::string bus_id;
  std::string model;
  std::string uuid;
  std::optional<int> nvlinks;              ///< active NVLinks of the GPU to other GPUs
  std::optional<double> nvlink_link_gbps;  ///< rate of one link
  /// The GPU's PCIe link: from the topology, or fed in from a live reading (NVML's maximum generation and width
  /// through topology::pcieLinkFromGenWidth) before makePlan; nullopt when unknown.
  std::optional<topology::PcieLink> pcie = std::nullopt;
};

/// The topology reduced to what planning needs (built from harness/topology, or by hand in tests).
struct PlanTopology {
  std::string source;  ///< "live" or the XML path
  std::string format;  ///< live, hwloc, nccl
  std::vector<PlanGpu> gpus;
  std::vector<PlanPair> pairs;  ///< every ordered pair (src != dst)
  int nvswitches = 0;
  std::string nvlink_source;  ///< nvml, hwloc, nccl or ""
  std::string no_gpu_message;
  std::vector<std::string> warnings;
  std::map<int, double> memory_peak_gbps;  ///< by GPU index: DRAM peak, bus width x clock x 2 (live GPUs only)
  int numa_nodes = 0;                      ///< NUMA nodes of the machine; 0 when unknown
  const PlanPair* pair(int src, int dst) const;
};

PlanTopology fromTopology(const topology::Topology& topo);
/// Feeds in a live reading of GPU `gpu`'s PCIe link (e.g. NVML's maximum generation and width), replacing what the
/// topology said. `invalid_argument` names a GPU outside the topology or a generation or width outside PCIe's.
Status setPcieLink(PlanTopology& topo, int gpu, int generation, int width, const std::string& source);
nlohmann::json toJson(const PlanTopology& topo);
/// Reads what toJson wrote (a run's "plan"."topology"), so that a stored run can be checked again elsewhere.
StatusOr<PlanTopology> planTopologyFromJson(const nlohmann::json& doc);

/// An expected figure for one rule and one ordered pair (scope pair), one GPU (scope host) or the whole machine
/// (scopes gpu and gpu_pcie). A figure the topology cannot give is `unknown`: gbps is nullopt and basis says why.
struct Expectation {
  std::string rule;  ///< BandwidthRule::id
  std::string suite;
  std::string impl;  ///< glob
  std::string name;  ///< glob
  std::string metric;
  std::optional<int> src;
  std::optional<int> dst;
  double min_bytes = 0;
  std::optional<double> gbps;  ///< the floor; nullopt: unknown
  std::string basis;           ///< "NV18 x 26.5625 GB/s x 0.80", or why the figure is unknown
  std::string scope = "pair";  ///< the rule's scope
  std::string link;            ///< "nvlink", "pcie", or "" when unknown
};

/// The pair-scope figure of `rule` for src -> dst: NVLink links x rate x efficiency x directions, or, without
/// NVLink, the slower GPU link x pcie_efficiency x path factor (config.sys_factor across sockets) x directions.
Expectation pairExpectation(const PlanTopology& topo, const QualifyConfig& config, const BandwidthRule& rule, int src,
                            int dst);
/// The host-scope figure of `rule` for one GPU: its own PCIe link x pcie_efficiency x directions (host <-> device
/// copies cross only that link).
Expectation hostExpectation(const PlanTopology& topo, const BandwidthRule& rule, int gpu);

struct PlanOptions {
  std::string mode = "quick";              ///< quick or full
  std::vector<std::string> suites;         ///< empty: every suite
  std::vector<std::pair<int, int>> pairs;  ///< empty: every ordered pair of the topology
  bool probe = true;                       ///< qualify runs the verified probe first
  std::vector<std::string> probe_methods;  ///< empty: every method
};

struct Plan {
  PlanTopology topology;
  PlanOptions options;
  std::vector<BenchJob> jobs;
  std::vector<Expectation> expectations;
  std::vector<LatencyRule> latency;
  std::vector<std::string> notes;  ///< what cannot be expected and why
  /// Estimated wall time (estimate.h): processes_s + overhead_s. Deadlines are separate and several times longer.
  double budget_s = 0;
  double processes_s = 0;      ///< the benchmark processes' estimates, added
  double overhead_s = 0;       ///< the probe, topology, health readings and the bundle
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
nlohmann::json toJson(const Expectation& e);

/// Expectations that apply to a result (same suite, matching impl/name globs and metric, pair or machine scope).
std::vector<const Expectation*> expectationsFor(const Plan& plan, const report::Result& result);

/// Parses "0-1,1-0,2-3" (ordered pairs, "src-dst" or "src:dst"); `invalid_argument` names the bad entry.
StatusOr<std::vector<std::pair<int, int>>> parsePairs(const std::string& text);

}  // namespace peerlab::qualify
