// peerlab qualify: topology, the verified probe, the benchmarks of a level (quick, standard, full), then every
// figure checked against what the topology (and optionally a baseline) says it should be; writes a bundle:
// results.json, report.html, summary.md, junit.xml.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "harness/cli/command.h"
#include "harness/health/health.h"
#include "harness/health/stage.h"
#include "harness/qualify/config.h"
#include "harness/qualify/estimate.h"
#include "harness/qualify/gpu_models.h"
#include "harness/qualify/pipeline.h"
#include "harness/qualify/plan.h"
#include "harness/qualify/runner.h"
#include "harness/report/compare.h"
#include "harness/report/evaluate.h"
#include "harness/report/render/console.h"
#include "harness/report/render/html.h"
#include "harness/report/render/junit.h"
#include "harness/report/render/summary.h"
#include "harness/report/report.h"
#include "reference/core/files.h"
#include "reference/core/process.h"
#include "reference/core/text.h"
#include "reference/host/host_copy.h"
#include "reference/probe/probe.h"

namespace peerlab::cli {
namespace {

constexpr const char* kCmd = "qualify";

struct QualifyArgs {
  qualify::PipelineInputs in;
  bool json = false;
  bool skip_health = false;
  bool skip_probe = false;
  std::string out;
  std::vector<std::string> argv;  // the command line, for the summary
};

// A bundle is written completely or marked as not: INCOMPLETE is made before anything else and removed after the last
// output; an output that cannot be written takes the outputs written before it away, and INCOMPLETE then says why.
// So a bundle without INCOMPLETE is whole, and one that failed part-way (a full disk) holds nothing that looks valid.
class BundleMarker {
 public:
  static constexpr const char* kName = "INCOMPLETE";
  static constexpr const char* kOutputs[] = {"results.json", "report.html", "summary.md", "junit.xml"};

  explicit BundleMarker(std::string dir) : path_(std::move(dir) + "/" + kName) {}
  Status begin() {
    return writeTextFile(path_, "peerlab qualify is writing this bundle (started " + report::utcTimestamp() +
                                    "); while this file is here, the bundle is not complete.\n");
  }
  // Takes the outputs away and says why (as far as the disk still lets it).
  void failed(const std::string& why) {
    const std::string dir = path_.substr(0, path_.size() - std::string(kName).size());
    for (const char* f : kOutputs)
      ::unlink((dir + f).c_str());
    writeTextFile(path_, "this bundle is not complete: " + why + "\n").ignore();
  }
  Status done() {
    if (::unlink(path_.c_str()) != 0 && errno != ENOENT) {
      return PEERLAB_INVALID_ARGUMENT("cannot remove " + path_ + ": " + std::strerror(errno));
    }
    return Status::ok();
  }

 private:
  std::string path_;
};

int writeBundle(const std::string& dir, report::Run& run, const std::vector<report::Check>& checks,
                const QualifyArgs& a, double wall_s, std::vector<std::string> notes, BundleMarker& marker) {
  const report::CheckCounts counts = report::countChecks(checks);
  std::string command;
  for (const std::string& s : a.argv)
    command += (command.empty() ? "" : " ") + qualify::shellQuote(s);
  run.extra["qualify"] = {{"verdict", report::verdictWord(counts)},
                          {"summary", report::toJson(counts)},
                          {"checks", report::toJson(checks)},
                          {"failed", counts.failed},
                          {"command", command},
                          {"baseline", a.in.baseline},
                          {"wall_s", wall_s}};
  std::vector<std::string> files = {"results.json", "report.html", "summary.md", "junit.xml", "plan.txt"};
  if (std::filesystem::exists(dir + "/probe.json")) files.push_back("probe.json, probe.log (peerlab probe)");
  if (std::filesystem::exists(dir + "/gbench")) files.push_back("gbench/ (each bench process's plan, JSON and log)");
  auto failed = [&](const Status& st) {
    marker.failed(st.message());
    return fail(kCmd, kExitUsage, st.message() + " (bundle " + dir + " left marked INCOMPLETE)");
  };
  Status st = report::writeRun(run, dir + "/results.json");
  if (!st.isOk()) return failed(st);
  report::HtmlOptions ho;
  ho.title = "peerlab qualify: " + report::machineTitle(run);
  st = writeTextFile(dir + "/report.html", report::renderHtml(run, checks, ho));
  if (!st.isOk()) return failed(st);
  report::SummaryOptions so;
  so.command = command;
  so.files = files;
  so.notes = std::move(notes);
  st = writeTextFile(dir + "/summary.md", report::renderSummary(run, checks, so));
  if (!st.isOk()) return failed(st);
  report::JunitOptions jo;
  jo.hostname = run.fingerprint.hostname;
  jo.timestamp = run.timestamp;
  jo.time_s = wall_s;
  jo.disabled_rules = report::disabledRulesNote(run);
  jo.injected = report::injectionNote(run);
  st = writeTextFile(dir + "/junit.xml", report::renderJunit(checks, jo));
  if (!st.isOk()) return failed(st);
  st = marker.done();
  if (!st.isOk()) return fail(kCmd, kExitRuntime, st.message());
  return kExitOk;
}

// Prints what the checks say, as `peerlab report` does: every check that did not pass with its reason, then the
// counts; a FAIL also gets one line on stderr.
int printVerdict(const report::Run& run, const std::vector<report::Check>& checks, const std::string& dir) {
  const report::CheckCounts counts = report::countChecks(checks);
  std::fputs(report::formatCheckLines(checks).c_str(), stdout);
  const std::string disabled = report::disabledRulesNote(run);
  // Before the verdict line, which stays the last (the Slurm wrappers log it).
  if (const std::string injected = report::injectionNote(run); !injected.empty()) {
    std::printf(
        "peerlab qualify: INJECTED: %s: these verdicts are not this machine's own (the history stores the run "
        "as injected and counts it nowhere)\n",
        printable(injected, 600).c_str());
  }
  std::printf("peerlab qualify: %s: %s%s; bundle %s (report.html, summary.md, junit.xml, results.json)\n",
              report::verdictWord(counts), report::formatCounts(counts).c_str(),
              disabled.empty() ? "" : ("; " + disabled).c_str(), dir.c_str());
  if (counts.empty()) {
    return fail(kCmd, kExitNothingChecked,
                "EMPTY: 0 checks: nothing in the run is checked (no result, no plan, no health reading): not a PASS "
                "(bundle " +
                    dir + ")");
  }
  if (!counts.pass()) {
    fail(kCmd, kExitCheckFailed,
         std::string("FAIL: ") + report::firstFailure(checks) + " (" + std::to_string(counts.failed) + " of " +
             std::to_string(counts.total) + " checks failed; bundle " + dir + ")");
    return kExitCheckFailed;
  }
  return kExitOk;
}

// The exit code of a pipeline step's failure: bad input 2, anything else a setup or runtime error.
int stepFailed(const Status& st) {
  return fail(kCmd, st.code() == StatusCode::kInvalidArgument ? kExitUsage : kExitRuntime, st.message());
}

// --dry-run and the live machine's preconditions: the plan printed (text or JSON) or the reason qualify cannot run.
// Returns the exit code to stop with, or -1 to go on and measure.
int planOrStop(const QualifyArgs& a, const qualify::Pipeline& p) {
  const auto& plan = p.plan();
  if (!plan) {
    if (a.in.dry_run) {
      return fail(kCmd, kExitUsage, "--dry-run: the run file has no plan and no --fixture was given to plan for");
    }
    return -1;
  }
  if (!a.in.dry_run && p.stored()) return -1;
  if (plan->topology.gpus.empty() || a.in.dry_run) {
    if (a.json) {
      std::puts(p.planJson().dump(2).c_str());
    } else {
      std::fputs(qualify::formatPlan(*plan).c_str(), stdout);
    }
  }
  if (plan->topology.gpus.empty()) {
    return fail(
        kCmd, kExitNoGpu,
        plan->topology.no_gpu_message.empty() ? "no NVIDIA GPU in the topology" : plan->topology.no_gpu_message);
  }
  // A dry run exits as the real run would: 4 where it would stop before measuring, the plan printed all the same.
  auto dryRunExit = [&]() -> int {
    std::fflush(stdout);
    if (p.stops().empty()) return kExitOk;
    return fail(kCmd, kExitRuntime, "a real run would stop before measuring: " + p.stops().front());
  };
  if (a.in.dry_run) {
    if (a.json) return dryRunExit();
    std::printf("config: %s\n", p.config().source.c_str());
    if (p.kind()) std::printf("kind: %s\n", report::describeKind(*p.kind()).c_str());
    if (p.baseline()) {
      std::printf("baseline: %s (%s, %zu results); noise rule: %s\n", a.in.baseline.c_str(),
                  report::machineTitle(*p.baseline()).c_str(), p.baseline()->results.size(),
                  report::describeNoiseRule(p.noiseRule()).c_str());
    }
    if (!plan->jobs.empty() && p.executables().isOk()) {
      std::printf("executables: all %zu found (%s)\n", plan->jobs.size(),
                  qualify::benchDirectoriesText(p.runner()).c_str());
    }
    for (const std::string& why : p.stops())
      std::printf("qualify would stop here (exit 4): %s\n", why.c_str());
    return dryRunExit();
  }
  // A missing executable is a setup error, not a verdict on the hardware.
  if (!p.executables().isOk()) return fail(kCmd, kExitRuntime, p.executables().message());
  if (p.standin().empty()) {
    if (Status st = qualify::cudaGpusVisible(); !st.isOk()) {
      std::fputs(qualify::formatPlan(*plan).c_str(), stdout);
      return fail(kCmd, kExitNoGpu,
                  "no GPU visible to CUDA on this machine (" + st.message() + "); the plan above is for its topology");
    }
    // Before anything runs: binaries without a kernel image for a GPU present would fail every GPU check.
    std::vector<int> ordinals;
    for (const qualify::PlanGpu& g : plan->topology.gpus)
      ordinals.push_back(g.index);
    if (Status st = host::checkKernelImagesAndRelease(ordinals); !st.isOk())
      return fail(kCmd, kExitRuntime, st.message());
  }
  return -1;
}

// What summary.md lists beside the checks: the config, the baseline, the plan's notes and the time against the
// estimate.
std::vector<std::string> bundleNotes(const qualify::Pipeline& p, double wall, std::string& timing) {
  std::vector<std::string> notes = {"config: " + p.config().source};
  if (p.baseline()) {
    notes.push_back("baseline: " + p.inputs().baseline + " (" + report::machineTitle(*p.baseline()) +
                    "); noise rule: " + report::describeNoiseRule(p.noiseRule()));
  }
  if (p.plan()) {
    for (const std::string& n : p.plan()->notes)
      notes.push_back("note: " + n);
  }
  if (!p.stored() && p.plan()) {
    char buf[200];
    std::snprintf(buf, sizeof(buf),
                  "time: %.0f s, estimated %.0f s (processes %.0f s + probe, topology, health and bundle %.0f s)", wall,
                  p.plan()->budget_s, p.plan()->processes_s, p.plan()->overhead_s);
    timing = buf;
    notes.push_back(timing);
  }
  return notes;
}

int runQualify(const QualifyArgs& a) {
  const auto started = std::chrono::steady_clock::now();
  if (a.json && !a.in.dry_run) return fail(kCmd, kExitUsage, "--json prints the plan: use it with --dry-run");
  if (a.json && !a.out.empty()) {
    return fail(kCmd, kExitUsage, "--out names a bundle directory; --dry-run --json prints the plan to stdout only");
  }
  // Inputs, then the plan; each bad input is a one-line error naming it.
  qualify::Pipeline p(a.in);
  if (Status st = p.readInputs(); !st.isOk()) return fail(kCmd, kExitUsage, st.message());
  if (Status st = p.makePlan(); !st.isOk()) return stepFailed(st);
  if (const int rc = planOrStop(a, p); rc >= 0) return rc;

  const std::string dir = a.out.empty() ? qualify::defaultOutputName("peerlab-qualify") : a.out;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir)) {
    return fail(kCmd, kExitUsage, dir + ": cannot create the bundle directory" + (ec ? ": " + ec.message() : ""));
  }
  BundleMarker marker(dir);
  if (Status st = marker.begin(); !st.isOk()) return fail(kCmd, kExitUsage, st.message());
  const std::string planText = p.plan()
                                   ? qualify::formatPlan(*p.plan())
                                   : "no plan: the run file carries none; its probe, health and data are checked\n";
  if (Status st = writeTextFile(dir + "/plan.txt", planText); !st.isOk()) {
    marker.failed(st.message());
    return fail(kCmd, kExitUsage, st.message() + " (bundle " + dir + " left marked INCOMPLETE)");
  }
  // The run: measured here, or the stored one.
  if (!p.stored()) {
    std::printf("peerlab qualify: %zu GPUs, %zu ordered pairs, bundle %s\n", p.plan()->topology.gpus.size(),
                p.plan()->options.pairs.size(), dir.c_str());
  }
  report::Run run = p.run(dir);
  auto checks = p.evaluate(run);
  if (!checks.isOk()) {
    marker.failed(checks.status().message());
    return fail(kCmd, kExitRuntime, checks.status().message());
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::string timing;
  const std::vector<std::string> notes = bundleNotes(p, wall, timing);
  if (int rc = writeBundle(dir, run, *checks, a, wall, notes, marker); rc != kExitOk) return rc;
  if (!timing.empty()) std::printf("peerlab qualify: %s\n", timing.c_str());
  const int rc = printVerdict(run, *checks, dir);
  if (process::interruptRequested()) return fail(kCmd, kExitRuntime, "interrupted; partial bundle written to " + dir);
  return rc;
}

std::function<int()> setup(CLI::App& sub) {
  auto a = std::make_shared<QualifyArgs>();
  sub.add_option("--out", a->out, "Bundle directory (default ./peerlab-qualify-<host>-<date>)");
  sub.add_option("--config", a->in.config, "Thresholds file (default: the built-in reports/qualify.toml)");
  sub.add_option("--baseline", a->in.baseline,
                 "Run file to compare against: no result may be worse by more than the "
                 "threshold");
  sub.add_option("--threshold", a->in.threshold,
                 "Baseline minimum effect in percent (default from the config: 10; README \"Comparing runs and "
                 "baselines\")");
  sub.add_flag("--allow-other-hardware", a->in.allow_other_hardware,
               "Check against a --baseline of another GPU model or count (refused otherwise)");
  sub.add_option("--fixture", a->in.fixture, "Plan for a topology XML file instead of this machine (with --dry-run)");
  sub.add_flag("--dry-run", a->in.dry_run, "Print the plan (pairs, tests, expected figures) and exit");
  sub.add_flag("--json", a->json, "With --dry-run: print the plan as JSON (the run file's \"plan\" object)");
  sub.add_option("--bench-dir", a->in.bench_dir,
                 "Where the bench binaries are (default: libexec/peerlab of the installed tree, or beside peerlab in "
                 "a build tree)");
  sub.add_option("--suite", a->in.suites,
                 "Benchmark suites (default at --level standard: " + qualify::qualifyDefaultSuitesText() +
                     "; the alltoallv process also runs the moe rows; known: " + qualify::suiteNames() + ")");
  sub.add_option("--pairs", a->in.pairs, "Ordered GPU pairs to qualify, e.g. 0-1,1-0 (default: every pair)");
  sub.add_option("--probe-methods", a->in.probe_methods, "Probe methods, e.g. ce_write,sm_store (default all)");
  addLevelOptions(sub, a->in.level,
                  "quick (seconds: topology, health, the probe at small sizes, a copy-engine spot check per pair and "
                  "GPU), standard (every check family; the default) or full (every size of every sweep)");
  sub.add_flag("--serial", a->in.serial,
               "Run pairs one at a time, even where their links would let disjoint pairs run at once");
  sub.add_flag("--skip-probe", a->skip_probe, "Do not run the verified probe");
  sub.add_flag("--skip-bench", a->in.skip_bench, "Do not run the benchmarks");
  sub.add_flag("--skip-health", a->skip_health, "Do not read machine health through NVML");
  sub.add_option("--health-watch", a->in.health_watch_s,
                 "Watch health (XID events, clock event reasons) for at least this many seconds")
      ->check(CLI::NonNegativeNumber);
  sub.add_option("--results", a->in.results,
                 "Check an existing run file instead of measuring (re-check with another "
                 "config or baseline)");
  sub.add_option("--timeout", a->in.timeout_s, "Deadline per process in seconds (default: 4x its budget, >= 180)")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            char* end = nullptr;
            const double s = std::strtod(v.c_str(), &end);
            if (end == v.c_str() || *end || !(s > 0) || s > 86400 * 7)
              return "must be seconds above 0 (at most a week)";
            return "";
          },
          "SECONDS"));
  sub.add_option("--kind", a->in.kind,
                 "Machine kind recorded in the run file (default $PEERLAB_KIND, else derived from the hardware: GPU "
                 "model x count x interconnect, e.g. h200-x2-nvswitch); an alias of the hardware's kind "
                 "(nvidia-h200-x2) is filed under the canonical one, one that contradicts the hardware is refused");
  sub.add_flag("--kind-override", a->in.kind_override,
               "File the run under --kind (or $PEERLAB_KIND) even where it contradicts the hardware; the run file "
               "records that it was overridden");
  sub.add_option("--node", a->in.node,
                 "The Slurm NodeName this run is for (default $SLURMD_NODENAME): the history keys node states by it");
  sub.add_option("--history", a->in.history,
                 "Past runs for the time estimate: a run file, or a directory of run files or bundles (reports/runs, "
                 "reports/qualify); processes that ran on this kind are estimated from their measured wall times, and "
                 "the plan says how many runs were used");
  return [a, &sub]() {
    a->argv = {"peerlab", "qualify"};
    for (const CLI::Option* o : sub.get_options()) {
      if (o->count() == 0 || o->get_name() == "--help") continue;
      const std::string name = o->get_name();
      if (o->get_expected_min() == 0) {
        a->argv.push_back(name);
      } else {
        for (const std::string& v : o->results()) {
          a->argv.push_back(name);
          a->argv.push_back(v);
        }
      }
    }
    a->in.probe = !a->skip_probe;
    a->in.health = !a->skip_health;
    return runQualify(*a);
  };
}

}  // namespace

PEERLAB_REGISTER_COMMAND(qualify, "qualify",
                         "Qualify this machine at a level (quick, standard, full): topology, health, verified probe, "
                         "benchmarks, checks; writes a bundle",
                         setup);

}  // namespace peerlab::cli
