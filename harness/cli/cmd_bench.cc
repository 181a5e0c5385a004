// peerlab bench: run the benchmark suites across the GPU pairs of the topology and write one run file.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "harness/cli/command.h"
#include "harness/qualify/gpu_models.h"
#include "harness/qualify/pipeline.h"
#include "harness/qualify/plan.h"
#include "harness/qualify/runner.h"
#include "harness/report/report.h"
#include "reference/core/files.h"
#include "reference/core/text.h"
#include "reference/host/host_copy.h"

namespace peerlab::cli {
namespace {

constexpr const char* kCmd = "bench";

struct BenchArgs {
  qualify::PipelineInputs in;
  std::string out;
  std::string timeout;              ///< seconds, checked in runBench
  std::vector<std::string> import;  ///< Google Benchmark JSON files of peerlab's benches, turned into a run file
};

// The Google Benchmark JSON of peerlab benches run by hand (a script, another launcher) as one run file: the same
// conversion `peerlab bench` applies to the processes it starts. The fingerprint is left empty (this is not the machine
// they ran on): ci/assemble_run.py takes it from a run file of that machine.
int importGbench(const BenchArgs& a) {
  if (a.out.empty()) return fail(kCmd, kExitUsage, "--import needs --out RUN.json");
  report::Run run = report::newRun();
  run.fingerprint.hostname = "imported";
  run.fingerprint.driver = run.fingerprint.cuda_runtime = run.fingerprint.nccl = "unknown";
  for (const std::string& file : a.import) {
    auto rows = qualify::readGbenchFile(file);
    if (!rows.isOk()) return fail(kCmd, kExitUsage, "--import " + rows.status().message());
    run.results.insert(run.results.end(), rows->begin(), rows->end());
    run.extra["sources"].push_back(file);
  }
  // The machine is not known here: the kind is kept as given (in the canonical spelling where it is one).
  auto kind = report::chooseKind({a.in.kind, "", a.in.kind_override}, {});
  if (!kind.isOk()) return fail(kCmd, kExitUsage, kind.status().message());
  run.kind = *kind;
  // What the import wrote must read back through the one reader.
  if (auto back = report::fromJson(report::toJson(run)); !back.isOk()) {
    return fail(kCmd, kExitUsage, "--import: " + back.status().message());
  }
  if (Status st = report::writeRun(run, a.out); !st.isOk()) return fail(kCmd, kExitUsage, "--out " + st.message());
  std::fprintf(stderr, "peerlab bench: wrote %s: %zu results from %zu files\n", a.out.c_str(), run.results.size(),
               a.import.size());
  return kExitOk;
}

// --dry-run: the processes that would run, and what would stop them.
int printPlan(const qualify::Pipeline& p) {
  std::fputs(qualify::formatPlan(*p.plan(), "peerlab bench").c_str(), stdout);
  std::printf("kind: %s\n", report::describeKind(*p.kind()).c_str());
  if (p.executables().isOk()) {
    std::printf("executables: all %zu found (%s)\n", p.plan()->jobs.size(),
                qualify::benchDirectoriesText(p.runner()).c_str());
  }
  for (const std::string& why : p.stops())
    std::printf("bench would stop here (exit 4): %s\n", why.c_str());
  std::fflush(stdout);
  // A dry run exits as the real run would: 4 where it would stop, the plan printed all the same.
  if (!p.stops().empty())
    return fail(kCmd, kExitRuntime, "a real run would stop before measuring: " + p.stops().front());
  return kExitOk;
}

// The run's rows that failed: a benchmark that failed, or a probe cell the driver claims works that did not verify.
int failedRows(const report::Run& run) {
  int failed = 0;
  for (const report::Result& r : run.results) {
    const bool claimed =
        r.extra.contains("claimed") && r.extra["claimed"].is_boolean() && r.extra["claimed"].get<bool>();
    failed += r.status.rfind("failed", 0) == 0 || (claimed && r.status != "ok");
  }
  return failed;
}

int runBench(BenchArgs a) {
  if (!a.import.empty()) return importGbench(a);
  if (!a.timeout.empty()) {
    auto t = parseNumberOption("--timeout", a.timeout, 1, 7 * 86400);
    if (!t.isOk()) return fail(kCmd, kExitUsage, t.status().message() + " seconds");
    a.in.timeout_s = *t;
  }
  // Inputs, then the plan; a bad input is a one-line error naming it.
  qualify::Pipeline p(a.in);
  if (Status st = p.readInputs(); !st.isOk()) return fail(kCmd, kExitUsage, st.message());
  if (Status st = p.makePlan(); !st.isOk()) {
    return fail(kCmd, st.code() == StatusCode::kInvalidArgument ? kExitUsage : kExitRuntime, st.message());
  }
  const qualify::Plan& plan = *p.plan();
  if (plan.topology.gpus.empty()) {
    return fail(kCmd, kExitNoGpu,
                plan.topology.no_gpu_message.empty() ? "no NVIDIA GPU" : plan.topology.no_gpu_message);
  }
  if (a.in.dry_run) return printPlan(p);
  // A missing executable is a setup error, not a measurement.
  if (!p.executables().isOk()) return fail(kCmd, kExitRuntime, p.executables().message());
  if (Status st = qualify::cudaGpusVisible(); !st.isOk()) {
    std::fputs(qualify::formatPlan(plan).c_str(), stdout);
    return fail(kCmd, kExitNoGpu, "no GPU visible to CUDA on this machine: " + st.message());
  }
  std::vector<int> ordinals;
  for (const qualify::PlanGpu& g : plan.topology.gpus)
    ordinals.push_back(g.index);
  if (Status st = host::checkKernelImagesAndRelease(ordinals); !st.isOk())
    return fail(kCmd, kExitRuntime, st.message());

  // The run: the verified probe first (--probe, its files beside the run file), then the benchmark processes.
  const std::string out = a.out.empty() ? qualify::defaultOutputName("peerlab-bench") + ".json" : a.out;
  const std::string base = std::filesystem::path(out).replace_extension("").string();
  report::Run run = p.run(std::filesystem::path(out).parent_path().string(), base + ".probe");
  if (Status st = report::writeRun(run, out); !st.isOk()) return fail(kCmd, kExitUsage, st.message());
  const int failed = failedRows(run);
  const qualify::BenchOutcome outcome = p.outcome().value_or(qualify::BenchOutcome{});
  std::printf("wrote %s: %zu results, %d failed, %d of %zu processes failed\n", out.c_str(), run.results.size(), failed,
              outcome.failed_jobs, plan.jobs.size());
  if (run.fingerprint.injected.any()) {
    std::printf("peerlab bench: INJECTED: %s: these figures are not this machine's own\n",
                printable(run.fingerprint.injected.describe(), 600).c_str());
  }
  if (outcome.interrupted) return fail(kCmd, kExitRuntime, "interrupted; partial results written to " + out);
  return failed || outcome.failed_jobs ? kExitCheckFailed : kExitOk;
}

std::function<int()> setup(CLI::App& sub) {
  auto a = std::make_shared<BenchArgs>();
  sub.add_option("--suite", a->in.suites,
                 "Suites to run, repeatable or comma separated: " + qualify::suiteNames() + ", all (default all)");
  addLevelOptions(sub, a->in.level,
                  "quick (a spot check per pair and GPU), standard (the sizes each suite's rules judge; the "
                  "default) or full (every size and case the benchmarks have): the rows qualify runs at that level");
  sub.add_flag("--serial", a->in.serial, "Run pairs one at a time, even where their links would let them run at once");
  sub.add_option("--out", a->out, "Run file to write (default ./peerlab-bench-<host>-<date>.json)");
  sub.add_option("--import", a->import,
                 "Turn Google Benchmark JSON written by peerlab's benches (run by hand) into a run file (--out); "
                 "nothing is measured");
  sub.add_option("--gbench-dir", a->in.gbench_dir,
                 "Keep each process's Google Benchmark JSON and log in this directory");
  sub.add_option("--bench-dir", a->in.bench_dir,
                 "Where the bench binaries are (default: libexec/peerlab of the installed tree, or beside peerlab in "
                 "a build tree)");
  sub.add_option("--pairs", a->in.pairs, "Ordered GPU pairs to cover, e.g. 0-1,1-0 (default: every pair)");
  sub.add_option("--fixture", a->in.fixture, "Plan for a topology XML file instead of this machine (with --dry-run)");
  sub.add_flag("--dry-run", a->in.dry_run, "Print the processes that would run, and exit");
  sub.add_option("--timeout", a->timeout,
                 "Deadline per bench process, 1 to 604800 seconds (default: 4x its budget, >= 180)");
  sub.add_option("--kind", a->in.kind,
                 "Machine kind recorded in the run file (default $PEERLAB_KIND, else derived from the hardware: GPU "
                 "model x count x interconnect, e.g. h200-x2-nvswitch); an alias of the hardware's kind is filed "
                 "under the canonical one, one that contradicts the hardware is refused");
  sub.add_flag("--kind-override", a->in.kind_override,
               "File the run under --kind (or $PEERLAB_KIND) even where it contradicts the hardware; the run file "
               "records that it was overridden");
  sub.add_flag("--probe", a->in.probe,
               "Run the verified probe first (peerlab probe) and add its cells to the run file");
  sub.add_option("--benchmark-arg", a->in.bench_args,
                 "Extra argument for every bench process, e.g. "
                 "--benchmark-arg=--benchmark_repetitions=5");
  a->in.command = "bench";
  a->in.probe = false;
  a->in.health = false;
  return [a] { return runBench(*a); };
}

}  // namespace

PEERLAB_REGISTER_COMMAND(bench, "bench", "Run the benchmark suites across GPU pairs and write one run file", setup);

}  // namespace peerlab::cli
