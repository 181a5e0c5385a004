#pragma once
/// The qualify plan as a run file carries it ("plan"): the topology it was made for, the benchmark processes, the
/// probe, the expected figures and latency bounds, and the switches the checks honour. qualify writes it (toJson);
/// every reader of a run (report, qualify --results, history) reads it back here, validated, so that all of them
/// check a run against the same plan.

#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "harness/report/bench_plan.h"
#include "harness/report/level.h"
#include "harness/topology/pcie_link.h"
#include "reference/core/status.h"

namespace peerlab::report {

/// More GPUs than one machine (one run file) can hold: indices at or above are refused by every reader.
inline constexpr int kMaxGpus = 256;

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
  /// The GPU's PCIe link: from the topology, or fed in from a live reading before planning; nullopt when unknown.
  std::optional<topology::PcieLink> pcie = std::nullopt;
};

/// The topology reduced to what planning and the checks need.
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

/// An expected figure for one rule and one ordered pair (scope pair), one GPU (scopes host and device) or the whole
/// machine (scopes gpu and gpu_pcie). A figure the topology cannot give is `unknown`: gbps is nullopt and basis says
/// why.
struct Expectation {
  std::string rule;  ///< the config's [expect.<rule>]
  std::string suite;
  std::string impl;  ///< glob
  std::string name;  ///< glob
  std::string metric = "algbw_gbps";
  std::optional<int> src;
  std::optional<int> dst;
  double min_bytes = 0;
  std::optional<double> gbps;  ///< the floor; nullopt: unknown
  std::string basis;           ///< "NV18 x 26.5625 GB/s x 0.80", or why the figure is unknown
  std::string scope = "pair";  ///< pair, gpu, host, gpu_pcie, device
  std::string link;            ///< "nvlink", "pcie", "dram", or "" when unknown
};

/// A latency bound: results matching suite/impl/name at sizes <= max_bytes must take at most max_us (each pair).
struct LatencyRule {
  std::string id;  ///< the config's [latency.<id>]
  std::string suite;
  std::string impl = "*";
  std::string name = "*";
  double max_bytes = 8;
  double max_us = 0;
  std::string note;
};

/// One benchmark process of a plan.
struct PlanJob {
  std::string suite;
  std::string binary;
  int ranks = 1;               ///< processes it starts (a rank per GPU of its pairs; --ranks)
  BenchPlan work;              ///< what it runs: its binary reads this (bench_plan.h)
  double budget_s = 60;        ///< estimated wall time of the process (harness/qualify/estimate.h)
  std::string estimate_basis;  ///< what the estimate rests on
  double deadline_s = 60;      ///< deadline base: the suite's, scaled to the pairs or GPUs covered
  std::string label;           ///< "zcopy (12 pairs, 6 rounds)", "peer_copy (12 pairs)", "alltoallv x4"
  bool resolved = false;       ///< the executable was looked up (qualify's resolveExecutables)
  std::string path;            ///< the executable found, "" when missing or not looked up
  std::string schedule_basis;  ///< why its pairs run in those rounds
  /// A serial sample: the label of the process whose concurrent rounds it is checked against ("" otherwise).
  std::string guard_for;
  /// A process recorded before plans were typed: the arguments (its --benchmark_filter) and environment it ran with,
  /// kept as stored; `work` then holds its rounds only. Empty for the processes this version plans.
  std::vector<std::string> legacy_args;
  std::vector<std::string> legacy_env;

  /// Every ordered pair it covers (its rounds').
  std::vector<OrderedPair> pairs() const { return work.pairs(); }
};

/// A plan as stored in a run and read back: what the checks need, validated.
struct RunPlan {
  /// The level the plan was made for (plans written before levels said "mode": levelOfRecord).
  Level level = Level::kStandard;
  std::optional<PlanTopology> topology;
  std::vector<std::pair<int, int>> pairs;
  bool probe = false;  ///< the plan ran the verified probe
  std::vector<std::string> probe_methods;
  std::vector<PlanJob> jobs;
  std::vector<Expectation> expectations;
  std::vector<LatencyRule> latency;
  std::vector<std::string> notes;
  /// Rules a config switched off (`enabled = false`), listed so a reader sees what was not checked.
  std::vector<std::string> disabled_rules;
  bool require_link_info = true;  ///< an unknown link fails its checks
  bool fail_unclaimed = false;    ///< unclaimed probe cells that hang or corrupt fail
  double budget_s = 0;
};

nlohmann::json toJson(const PlanTopology& topo);
nlohmann::json toJson(const Expectation& e);
nlohmann::json toJson(const LatencyRule& l);
nlohmann::json toJson(const PlanJob& j);

/// Reads a stored topology ("plan"."topology"); `where` is the JSON path used in errors ("$.plan.topology").
StatusOr<PlanTopology> planTopologyFromJson(const nlohmann::json& doc, const std::string& where = "$.topology");
/// Expectations as the history store keeps them (a JSON array of the plan's expectation objects): each read as a
/// plan's is, entries that do not read skipped.
std::vector<Expectation> expectationsFromJson(const nlohmann::json& doc);
/// Reads a stored plan. Plans written by earlier versions (no scope, no check switches) read with the rules those
/// versions applied. `invalid_argument` names the JSON path, what is wrong and the value.
StatusOr<RunPlan> runPlanFromJson(const nlohmann::json& doc, const std::string& where = "$.plan");

}  // namespace peerlab::report
