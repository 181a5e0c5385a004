#pragma once
/// What runs on a node: the health check (Slurm's HealthCheckProgram), the gate (Prolog and Epilog) and a sweep's
/// job (`peerlab slurm job`). Each reads the settings, runs `peerlab health` or `peerlab qualify` as a child under a
/// deadline, judges it by the one exit-code table (outcome.h) and acts on the node by the one drain rule.

#include <map>
#include <string>

namespace peerlab::slurm {

struct NodeSideOptions {
  std::string settings_path;  ///< --settings ("" : $PEERLAB_SLURM_SETTINGS, else /etc/peerlab/slurm.toml)
  std::string node;           ///< --node ("" : $SLURMD_NODENAME, else the short host name)
  std::string peerlab;        ///< the binary to run ("" : this one)
  std::string context;        ///< the gate: "prolog" or "epilog" ("" : $SLURM_SCRIPT_CONTEXT)
  /// The job step: the sweep it belongs to, its node directory, its level and budget.
  std::string sweep, dir, level;
  double timeout_s = 0;
};

/// Slurm's HealthCheckProgram. Exit 0: healthy (or the check is off); 1: the node was drained, or left as it is
/// NOT CHECKED (on_setup_error = "log").
int runHealthcheck(const NodeSideOptions& o);
/// Slurm's Prolog and Epilog. Exit 0: the job may run (passed, not gated, or a setup error logged); 1 (prolog only):
/// the node failed and was drained: Slurm requeues the job elsewhere.
int runGate(const NodeSideOptions& o);
/// A sweep's job on its node: qualify into <dir>/bundle, then <dir>/job.json (how it ended). Exit: qualify's.
int runJob(const NodeSideOptions& o);

/// The node this runs on: `option`, else $SLURMD_NODENAME, else the short host name.
std::string thisNode(const std::string& option);
/// Whether a Slurm job step runs on this node (a slurmstepd process in this UTS namespace).
bool jobStepsHere();
/// Whether a job asks for the gate: `feature` among the job's constraints (features joined by &, |, commas and
/// brackets, with counts), or `word` among the words of its comment. Job data is compared, never expanded.
bool gateWanted(const std::string& constraints, const std::string& comment, const std::string& feature,
                const std::string& word);

}  // namespace peerlab::slurm
