#pragma once
/// The qualify pipeline: one measuring run, in the order every command that measures takes it: inputs (what was
/// asked, read and checked once) -> plan (the topology, the processes, the kind, the estimate) -> run (health, the
/// verified probe, the benchmark processes) -> evaluate (the checks engine on the run and its stored plan) -> bundle.
/// `qualify` takes every step, `bench` the first three (its run file is the bundle), `probe` and `repro` read the
/// verified probe's options through it (readProbeOptions). And the pieces they share: topology loading, GPU presence,
/// default output names, comma lists.

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "harness/health/health.h"
#include "harness/qualify/config.h"
#include "harness/qualify/estimate.h"
#include "harness/qualify/plan.h"
#include "harness/qualify/runner.h"
#include "harness/report/evaluate.h"
#include "harness/report/machine.h"
#include "harness/report/report.h"
#include "reference/core/status.h"
#include "reference/probe/probe.h"

namespace peerlab::qualify {

/// What a measuring command was asked for, as its options give it (read by Pipeline::readInputs).
struct PipelineInputs {
  std::string command = "qualify";  ///< qualify or bench
  std::string fixture;              ///< plan for this topology file instead of this machine
  std::string config;               ///< thresholds file ("" the built-in reports/qualify.toml)
  std::string baseline;             ///< a run file to hold the run against
  std::string threshold;            ///< the baseline noise threshold in percent ("" the config's)
  std::string results;              ///< check this run file instead of measuring
  std::string history;              ///< past runs for the estimate: a run file or a directory of them
  std::string kind;
  std::string node;  ///< the Slurm NodeName the run is for ("" $SLURMD_NODENAME)
  bool kind_override = false;
  bool allow_other_hardware = false;
  report::LevelFlags level;
  std::vector<std::string> suites;  ///< as given (comma lists); bench takes "all"
  std::string pairs;
  std::string probe_methods;
  bool serial = false;
  bool probe = true;
  bool skip_bench = false;
  bool health = true;
  double health_watch_s = 0;
  double timeout_s = 0;  ///< a fixed deadline per process (0: each process's own)
  bool dry_run = false;
  std::string bench_dir;
  std::vector<std::string> bench_args;  ///< more arguments for every benchmark process
  std::string gbench_dir;               ///< where each process's JSON, log and plan file go ("" a temporary directory)
};

/// One measuring run. Each step's failure is a Status: invalid_argument for bad input (exit 2), anything else a setup
/// or runtime error (exit 4); a plan without a GPU is not a failure (plan()->topology.gpus is empty).
class Pipeline {
 public:
  explicit Pipeline(PipelineInputs inputs) : in_(std::move(inputs)) {}

  /// 1. The config and health thresholds, the baseline, a stored run, the level, suites, pairs and probe methods;
  /// each bad one is named ("--config ...", "--suite nonsense: unknown suite ...").
  Status readInputs();
  /// 2. The plan: the stored run's (re-planned with --config), or this machine's (the fixture's, the stand-in's);
  /// the kind it is filed under, its estimate (--history), its executables. stops() says what would stop a run.
  Status makePlan();
  /// 3. The run: health before and after, the verified probe (its run file and log `<probe_base>.json` and `.log`,
  /// default `<dir>/probe`), the benchmark processes (qualify keeps their files in `<dir>/gbench`); a stored run is
  /// itself, re-planned where --config asked.
  report::Run run(const std::string& dir, const std::string& probe_base = "");
  /// 4. The checks of a run against the plan it stores (the same path `peerlab report` takes).
  StatusOr<std::vector<report::Check>> evaluate(report::Run& run) const;

  const PipelineInputs& inputs() const { return in_; }
  const std::optional<Plan>& plan() const { return plan_; }
  const std::optional<report::RunKind>& kind() const { return kind_; }
  const std::optional<report::Run>& stored() const { return stored_; }
  const std::optional<report::Run>& baseline() const { return baseline_; }
  const QualifyConfig& config() const { return config_; }
  const report::NoiseRule& noiseRule() const { return noise_rule_; }
  const RunnerOptions& runner() const { return runner_; }
  /// What would stop a run before it measures anything (exit 4): a missing executable, no code for a GPU present.
  const std::vector<std::string>& stops() const { return stops_; }
  const Status& executables() const { return executables_; }
  /// The fixture a stand-in machine plans for (PEERLAB_QUALIFY_STANDIN_TOPOLOGY), "" on a real one.
  const std::string& standin() const { return standin_; }
  /// The outcome of the benchmark processes run() started (none for a stored run).
  const std::optional<BenchOutcome>& outcome() const { return outcome_; }
  /// The plan as `--dry-run --json` prints it: the run file's "plan" object with the config, kind and stops.
  nlohmann::json planJson() const;

 private:
  Status planStored();
  Status estimate();
  std::vector<report::Result> runProbe(const std::string& base);

  PipelineInputs in_;
  QualifyConfig config_;
  health::Thresholds health_;
  report::NoiseRule noise_rule_;
  std::optional<report::Run> baseline_;
  std::optional<report::Run> stored_;
  PlanOptions options_;
  std::string standin_;
  std::optional<Plan> plan_;
  std::optional<report::RunKind> kind_;
  RunnerOptions runner_;
  Status executables_ = Status::ok();
  std::vector<std::string> stops_;
  std::optional<BenchOutcome> outcome_;
};

/// Past runs for the estimate (--history): a run file, a directory of run files, or a directory of bundles (each
/// holding results.json, as reports/qualify/), searched one level down. `invalid_argument` names a path that is none
/// of these or holds no run file, or a file that does not read.
StatusOr<std::vector<report::Run>> loadHistory(const std::string& path);

/// The verified probe's options as `probe`, `repro` and qualify take them, read once: the methods, pairs, sizes (or
/// the large size beside 4 KiB) and deadlines. `invalid_argument` names the option.
struct ProbeOptionsText {
  std::string methods = "all";
  std::string pairs;
  std::string bytes = "64M";
  std::string sizes;
  std::string timeout = "5s";
  std::string setup_timeout = "60s";
};
struct ProbeOptions {
  std::vector<probe::Method> methods;
  std::vector<probe::Pair> pairs;
  std::vector<uint64_t> sizes;
  std::chrono::milliseconds timeout{5000};
  std::chrono::milliseconds setup_timeout{60000};
};
StatusOr<ProbeOptions> readProbeOptions(const ProbeOptionsText& text);

/// Most GPUs of one machine peerlab plans for (the probe's workers take at most as many); a topology with more is
/// refused before anything is planned.
inline constexpr int kMaxPlanGpus = 64;

/// The plan's view of the live machine (`fixture` empty) or of a topology XML file. `invalid_argument` names a bad
/// file or one of more than kMaxPlanGpus GPUs; the live machine without GPUs loads (with none).
StatusOr<PlanTopology> loadPlanTopology(const std::string& fixture);

/// Ok when CUDA sees at least one GPU; otherwise the reason (no driver, no device).
Status cudaGpusVisible();

/// "<prefix>-<host>-<YYYYmmdd-HHMMSS>" in local time, e.g. peerlab-qualify-h200-20261121-090000.
std::string defaultOutputName(const std::string& prefix);

/// Splits "a,b" entries of a repeatable option into a flat list (empty entries dropped).
std::vector<std::string> splitList(const std::vector<std::string>& items);

/// The verified probe as a child process: `<peerlab> probe --json <json_path> --no-cache <extra_args>` (`peerlab` is
/// this binary when empty), output in `log_path`, under a deadline. Returns its run file's rows; a probe that could not
/// run, crashed or wrote nothing adds one failed row (suite probe, name "process") saying why. Exit 1 (a claimed cell
/// failed) is a result, not a failure of the run.
std::vector<report::Result> runProbeChild(const std::vector<std::string>& extra_args, const std::string& json_path,
                                          const std::string& log_path, double timeout_s,
                                          const std::string& peerlab = "");

/// Quotes an argument for a shell command line when it needs it.
std::string shellQuote(const std::string& arg);

}  // namespace peerlab::qualify
