#pragma once
/// The wall-time estimate of a qualify or bench plan, from what it will run: per process, its start (CUDA contexts,
/// NCCL communicators) and, per benchmark case, a fixed cost (allocation, data pattern, verification) plus the bytes
/// its warm-up and samples move over the link that paces them, at the rate the topology gives that link. The fixed
/// costs are calibrated on the committed runs (reports/runs/, reports/qualify/); past runs of the same kind, when
/// given, replace a process's modelled time by the median of its measured ones. Deadlines are separate (runner.h).

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "harness/qualify/plan.h"
#include "harness/report/report.h"

namespace peerlab::qualify {

/// The estimate of one benchmark process of `plan` (its mode, topology and pairs).
JobEstimate estimateJob(const BenchJob& job, const Plan& plan);
/// The verified probe on the plan's pairs: two worker processes, each with a context on every GPU, then every method on
/// every ordered pair. The committed bundles' probe rows show the pairs cost little (their cells took 0.3-0.4 ms each,
/// 14 cells a pair) and the matrix as a whole growing with the GPUs; what qualify spends on the probe (its watch less
/// its processes and the 0.27 s that watch holds without one) was 1.0-1.2 s on 2 GPUs and 2.5 s on 4: two contexts
/// per GPU at the 0.3 s health's readings measure for one.
struct ProbeCost {
  static constexpr double kWorkers = 2;
  static constexpr double kContextS = 0.3;
  static constexpr double kPairS = 0.006;
};
double estimateProbe(const Plan& plan);
/// Fixed costs of a qualify run besides the processes and the probe: topology, the checks, the bundle, and health's
/// readings before and after, which wake each GPU's link with copies of its own (a context per GPU: 0.27-0.30 s per
/// GPU in the committed bundles' health timings, 1, 2 and 4 GPUs). Calibrated on those bundles (wall time less the
/// processes and the probe's estimate): 1 GPU 0.64-0.77 s, 2 GPUs 0.9-1.6 s, 4 GPUs 2.6-3.5 s, of which about 0.9 s
/// on the 4-GPU NVLink machines is not accounted for here (it is within the plan's 20%).
struct QualifyOverhead {
  static constexpr double kBaseS = 0.4;
  static constexpr double kPerGpuS = 0.3;
};
double qualifyOverhead(const Plan& plan);

/// Wall times measured for processes in past runs, by process identity (suite, label, what it ran).
struct MeasuredWalls {
  std::map<std::string, std::vector<double>> walls;
  int runs = 0;       ///< runs that contributed
  double read_s = 0;  ///< seconds spent reading the past runs: part of the run's wall time, so of its estimate
};
/// The identity a process is matched by across runs: its suite, label and what it ran (its plan without the deadline;
/// for processes recorded before plans were typed, their arguments and environment).
std::string jobIdentity(const std::string& suite, const std::string& label, const nlohmann::json& what);
std::string jobIdentity(const BenchJob& job);
/// Collects bench.jobs[].wall_s of the runs of `kind`: a run counts when its recorded kind is `kind` or when the kind
/// derived from its stored plan topology is `derived_kind`. Jobs that did not end "ok" are left out, and so are runs
/// whose plan records no level (earlier versions, whose processes measured other things under the same arguments).
MeasuredWalls measuredWalls(const std::vector<report::Run>& runs, const std::string& kind,
                            const std::string& derived_kind);

/// Sets every job's budget_s from the model, or from `measured` where a past run had the same process, and the plan's
/// totals (budget_s, processes_s, overhead_s, estimate_basis).
void estimatePlan(Plan& plan, const MeasuredWalls& measured = {});

}  // namespace peerlab::qualify
