#pragma once
/// Runs benchmark processes one after another, each under a deadline, shows progress, and turns their Google
/// Benchmark JSON into run-file results (a process that fails or is killed becomes a failed result, never a crash).

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "harness/qualify/suites.h"
#include "harness/report/report.h"
#include "reference/core/process.h"

namespace peerlab::qualify {

/// Progress display: a bar with what runs and the time left on a terminal, plain lines otherwise.
class Progress {
 public:
  Progress(std::FILE* out, bool tty) : out_(out), tty_(tty) {}
  void start(const std::string& what, int jobs, double budget_s);
  void begin(int index, const std::string& label, double budget_s);
  void tick();
  void end(int index, const std::string& label, const std::string& outcome);
  void finish(const std::string& summary);
  /// Estimated seconds left: the unfinished budget, scaled by how finished jobs compared with their budgets.
  double secondsLeft() const;

 private:
  void draw();
  std::FILE* out_;
  bool tty_;
  int jobs_ = 0;
  int index_ = 0;
  std::string label_;
  double total_budget_ = 0;
  double done_budget_ = 0;
  double done_actual_ = 0;
  double current_budget_ = 0;
  double started_ = 0;  ///< steady-clock seconds when the current job began
  double run_started_ = 0;
};

struct RunnerOptions {
  std::string bench_dir;      ///< where the bench binaries are; "" means the layout's (harness/layout/layout.h)
  std::string gbench_dir;     ///< keep each process's Google Benchmark JSON and log here; "" keeps them in a temp dir
  double timeout_factor = 4;  ///< deadline = max(min_timeout_s, the job's deadline base x factor)
  double min_timeout_s = 180;
  std::optional<double> timeout_s;      ///< fixed deadline per process instead
  std::vector<std::string> extra_args;  ///< passed to every bench process
  std::vector<std::string> env;         ///< KEY=VALUE for every bench process
};

/// What happened to one process.
struct JobOutcome {
  BenchJob job;
  std::string path;  ///< resolved binary, "" when not found
  std::string json_path;
  std::string log_path;
  process::ProcessResult process;
  int results = 0;
  std::string error;  ///< "" when the process ran to completion and its JSON was read
};

/// A concurrent process checked against its serial sample: each row both measured.
struct ConcurrencyCheck {
  std::string process;  ///< the concurrent process's label
  std::string row;      ///< "peerlab.put uni 0->1 256 MiB"
  double serial_gbps = 0;
  double concurrent_gbps = 0;
  double tolerance = 0;  ///< the fraction the concurrent figure may fall short: the noise of both
  bool agree = false;
};

/// Rows of `concurrent` against the same rows (suite, impl, name, pair, size) of `serial`: a concurrent figure more
/// than the noise below the serial one disagrees. The noise is the two rows' p10..p90 spreads added, at least
/// `min_tolerance`.
std::vector<ConcurrencyCheck> compareConcurrency(const std::string& process, const std::vector<report::Result>& serial,
                                                 const std::vector<report::Result>& concurrent,
                                                 double min_tolerance = 0.05);

struct BenchOutcome {
  std::vector<report::Result> results;
  std::vector<JobOutcome> jobs;
  int failed_jobs = 0;
  bool interrupted = false;
  std::vector<ConcurrencyCheck> concurrency;  ///< every guard's rows
  /// Processes whose concurrent rounds disagreed with their serial sample (or had none to compare) and ran again one
  /// pair at a time: "<label>: <why>".
  std::vector<std::string> fallbacks;
};

/// The directories bench binaries are looked up in, in order: --bench-dir when given, else libexec/peerlab of an
/// installed tree and the directory of peerlab itself (a build tree), found from the running executable.
std::vector<std::string> benchDirectories(const RunnerOptions& options);
/// Those directories as one line ("a, b") for messages.
std::string benchDirectoriesText(const RunnerOptions& options);
/// Path of a bench binary in those directories, "" when absent or not executable.
std::string findBench(const std::string& binary, const RunnerOptions& options);

/// Resolves every job's executable (BenchJob::path, resolved) before anything runs. `unavailable` names each missing
/// binary, its suite, where it was looked for and the command that builds it (`cmake --build <dir> --target
/// peerlab_qualify`): a setup error (exit 4), never a measurement.
Status resolveExecutables(std::vector<BenchJob>& jobs, const RunnerOptions& options);

/// Runs the jobs in order. A crash, a nonzero exit or a deadline becomes a failed result for that job (suite, name
/// "process", impl = the binary) and the run goes on; an interrupt (Ctrl-C) stops it. A process over many pairs that
/// stops early runs again once for the pairs it left without rows, one at a time, leaving out the pair its log names
/// as stuck. A serial sample (guard_for) keeps its rows apart: the concurrent process it names is checked against it
/// (compareConcurrency) and runs again one pair at a time when they disagree; only that run's rows are kept. Callers
/// resolve the executables first (resolveExecutables) and stop when one is missing; a job whose binary still cannot be
/// found becomes a failed result like a crash.
BenchOutcome runJobs(const std::vector<BenchJob>& jobs, const RunnerOptions& options, Progress& progress);

/// {"interrupted", "jobs": [{label, binary, args, results, wall_s, exit ("ok" or why), gbench_json, rounds,
/// guard_for}], "concurrency": [{process, row, serial_gbps, concurrent_gbps, tolerance, agree}], "serial_fallbacks"}:
/// what a run file records of its benchmark processes (run.extra "bench"; the level is the plan's).
nlohmann::json toJson(const BenchOutcome& outcome);

/// Reads Google Benchmark JSON, salvaging the completed entries of a file cut short by a kill.
StatusOr<std::vector<report::Result>> readGbenchFile(const std::string& path);

}  // namespace peerlab::qualify
