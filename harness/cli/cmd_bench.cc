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
  std::vector<std::string> suites;
  bool quick = false;
  bool full = false;
  std::string level;
  bool serial = false;
  std::string out;
  std::string gbench_dir;
  std::string bench_dir;
  std::string pairs;
  std::string fixture;
  bool dry_run = false;
  std::string timeout;  ///< seconds, checked in runBench
  double timeout_s = 0;
  std::string kind;
  bool kind_override = false;
  std::vector<std::string> bench_args;
  bool probe = false;
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
  auto kind = report::chooseKind({a.kind, "", a.kind_override}, {});
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

int runBench(BenchArgs a) {
  if (!a.import.empty()) return importGbench(a);
  if (a.quick && a.full) return fail(kCmd, kExitUsage, "--quick and --full exclude each other");
  if (!a.level.empty() && (a.quick || a.full))
    return fail(kCmd, kExitUsage, "--level and --quick/--full exclude each other");
  std::optional<qualify::Level> level = a.full ? qualify::Level::kFull : qualify::Level::kStandard;
  if (!a.level.empty()) {
    level = qualify::parseLevel(a.level);
    if (!level) {
      return fail(kCmd, kExitUsage, "--level " + a.level + ": unknown level (known: " + qualify::levelNames() + ")");
    }
  }
  if (!a.timeout.empty()) {
    auto t = parseNumberOption("--timeout", a.timeout, 1, 7 * 86400);
    if (!t.isOk()) return fail(kCmd, kExitUsage, t.status().message() + " seconds");
    a.timeout_s = *t;
  }
  if (!a.fixture.empty() && !a.dry_run) {
    return fail(kCmd, kExitUsage, "--fixture plans for another machine: use it with --dry-run");
  }
  qualify::PlanOptions po;
  po.level = *level;
  po.concurrent = !a.serial;
  po.probe = false;
  for (const std::string& s : qualify::splitList(a.suites)) {
    if (s == "all") {
      po.suites.clear();
      break;
    }
    if (!qualify::findSuite(s)) {
      return fail(kCmd, kExitUsage, "--suite " + s + ": unknown suite (known: " + qualify::suiteNames() + ", all)");
    }
    po.suites.push_back(s);
  }
  if (!a.pairs.empty()) {
    auto pairs = qualify::parsePairs(a.pairs);
    if (!pairs.isOk()) return fail(kCmd, kExitUsage, "--pairs: " + pairs.status().message());
    po.pairs = *pairs;
  }
  auto topo = qualify::loadPlanTopology(a.fixture);
  if (!topo.isOk()) {
    return fail(kCmd, topo.status().code() == StatusCode::kInvalidArgument ? kExitUsage : kExitRuntime,
                topo.status().message());
  }
  auto config = qualify::defaultConfig();
  if (!config.isOk()) return fail(kCmd, kExitRuntime, config.status().message());
  auto plan = qualify::makePlan(*topo, *config, po);
  if (!plan.isOk()) return fail(kCmd, kExitUsage, plan.status().message());
  if (topo->gpus.empty()) {
    return fail(kCmd, kExitNoGpu, topo->no_gpu_message.empty() ? "no NVIDIA GPU" : topo->no_gpu_message);
  }

  qualify::RunnerOptions ro;
  ro.bench_dir = a.bench_dir;
  ro.gbench_dir = a.gbench_dir;
  if (a.timeout_s > 0) ro.timeout_s = a.timeout_s;
  ro.extra_args = a.bench_args;
  // probe_bench re-executes peerlab as its workers: this one.
  ro.env = {"PEERLAB_BIN=" + selfExecutable()};
  auto chosen = report::chooseKind(report::kindRequest(a.kind, a.kind_override), report::deriveKind(*topo));
  if (!chosen.isOk()) return fail(kCmd, kExitUsage, chosen.status().message());
  const report::RunKind kind = *chosen;
  // Every executable the plan runs, resolved before anything is measured: a missing one is a setup error (exit 4).
  const Status executables = qualify::resolveExecutables(plan->jobs, ro);

  if (a.dry_run) {
    std::fputs(qualify::formatPlan(*plan, "peerlab bench").c_str(), stdout);
    std::printf("kind: %s\n", report::describeKind(kind).c_str());
    std::vector<std::string> stops;  // what would stop a real run before it measures anything
    if (executables.isOk()) {
      std::printf("executables: all %zu found (%s)\n", plan->jobs.size(), qualify::benchDirectoriesText(ro).c_str());
    } else {
      stops.push_back(executables.message());
    }
    if (const std::string no_code = qualify::missingKernelCode(*topo, host::builtArchitectures()); !no_code.empty())
      stops.push_back(no_code);
    for (const std::string& why : stops)
      std::printf("bench would stop here (exit 4): %s\n", why.c_str());
    std::fflush(stdout);
    // A dry run exits as the real run would: 4 where it would stop, the plan printed all the same.
    if (!stops.empty()) return fail(kCmd, kExitRuntime, "a real run would stop before measuring: " + stops.front());
    return kExitOk;
  }
  if (!executables.isOk()) return fail(kCmd, kExitRuntime, executables.message());
  if (Status st = qualify::cudaGpusVisible(); !st.isOk()) {
    std::fputs(qualify::formatPlan(*plan).c_str(), stdout);
    return fail(kCmd, kExitNoGpu, "no GPU visible to CUDA on this machine: " + st.message());
  }
  std::vector<int> ordinals;
  for (const qualify::PlanGpu& g : topo->gpus)
    ordinals.push_back(g.index);
  if (Status st = host::checkKernelImagesAndRelease(ordinals); !st.isOk())
    return fail(kCmd, kExitRuntime, st.message());

  const std::vector<qualify::BenchJob>& jobs = plan->jobs;

  report::Run run = report::newRun();
  run.fingerprint = report::collectFingerprint({.probe = a.probe, .nvml = false});
  const std::string out = a.out.empty() ? qualify::defaultOutputName("peerlab-bench") + ".json" : a.out;
  qualify::Progress progress(stdout, ::isatty(STDOUT_FILENO) != 0);
  // The verified probe first (--probe), so that the run file carries the probe matrix beside the benchmarks.
  std::vector<report::Result> probeRows;
  if (a.probe) {
    std::vector<std::string> args;
    if (!a.pairs.empty()) args.insert(args.end(), {"--pairs", a.pairs});
    const std::string base = std::filesystem::path(out).replace_extension("").string();
    std::printf("probe: peerlab probe (log %s.probe.log)\n", base.c_str());
    std::fflush(stdout);
    probeRows =
        qualify::runProbeChild(args, base + ".probe.json", base + ".probe.log", a.timeout_s > 0 ? a.timeout_s : 900);
    std::printf("probe: %s\n", !probeRows.empty() && probeRows.back().name == "process"
                                   ? probeRows.back().status.c_str()
                                   : (std::to_string(probeRows.size()) + " results").c_str());
  }
  qualify::BenchOutcome outcome = qualify::runJobs(jobs, ro, progress);
  run.results = probeRows;
  run.results.insert(run.results.end(), outcome.results.begin(), outcome.results.end());

  run.kind = kind;
  // A malformed $SLURMD_NODENAME is left out, never a reason to lose the run.
  auto local = report::localNodeIdentity(run.fingerprint);
  run.node = local.isOk() ? *local : report::nodeIdentity(run.fingerprint, report::readBoardSerial());
  run.extra["bench"] = qualify::toJson(outcome, std::string(qualify::levelName(po.level)));
  run.extra["plan"] = qualify::toJson(*plan);

  Status st = report::writeRun(run, out);
  if (!st.isOk()) return fail(kCmd, kExitUsage, st.message());
  int failedResults = 0;
  for (const report::Result& r : run.results) {
    // A failed benchmark, or a probe cell the driver claims works that did not verify.
    const bool claimed =
        r.extra.contains("claimed") && r.extra["claimed"].is_boolean() && r.extra["claimed"].get<bool>();
    failedResults += r.status.rfind("failed", 0) == 0 || (r.suite == "probe" && claimed && r.status != "ok");
  }
  progress.finish("wrote " + out + ": " + std::to_string(run.results.size()) + " results, " +
                  std::to_string(failedResults) + " failed, " + std::to_string(outcome.failed_jobs) + " of " +
                  std::to_string(jobs.size()) + " processes failed");
  if (run.fingerprint.injected.any()) {
    std::printf("peerlab bench: INJECTED: %s: these figures are not this machine's own\n",
                printable(run.fingerprint.injected.describe(), 600).c_str());
  }
  if (outcome.interrupted) return fail(kCmd, kExitRuntime, "interrupted; partial results written to " + out);
  return failedResults || outcome.failed_jobs ? kExitCheckFailed : kExitOk;
}

std::function<int()> setup(CLI::App& sub) {
  auto a = std::make_shared<BenchArgs>();
  sub.add_option("--suite", a->suites,
                 "Suites to run, repeatable or comma separated: " + qualify::suiteNames() + ", all (default all)");
  sub.add_flag("--quick", a->quick,
               "Short sweep: the sizes that matter for each suite (the default; what qualify runs)");
  sub.add_flag("--full", a->full, "Every size and case the benchmarks have (--level full)");
  sub.add_option("--level", a->level,
                 "quick (a spot check per pair and GPU), standard (the default sweeps) or full (every size)");
  sub.add_flag("--serial", a->serial, "Run pairs one at a time, even where their links would let them run at once");
  sub.add_option("--out", a->out, "Run file to write (default ./peerlab-bench-<host>-<date>.json)");
  sub.add_option("--import", a->import,
                 "Turn Google Benchmark JSON written by peerlab's benches (run by hand) into a run file (--out); "
                 "nothing is measured");
  sub.add_option("--gbench-dir", a->gbench_dir, "Keep each process's Google Benchmark JSON and log in this directory");
  sub.add_option("--bench-dir", a->bench_dir,
                 "Where the bench binaries are (default: libexec/peerlab of the installed tree, or beside peerlab in "
                 "a build tree)");
  sub.add_option("--pairs", a->pairs, "Ordered GPU pairs to cover, e.g. 0-1,1-0 (default: every pair)");
  sub.add_option("--fixture", a->fixture, "Plan for a topology XML file instead of this machine (with --dry-run)");
  sub.add_flag("--dry-run", a->dry_run, "Print the processes that would run, and exit");
  sub.add_option("--timeout", a->timeout,
                 "Deadline per bench process, 1 to 604800 seconds (default: 4x its budget, >= 180)");
  sub.add_option("--kind", a->kind,
                 "Machine kind recorded in the run file (default $PEERLAB_KIND, else derived from the hardware: GPU "
                 "model x count x interconnect, e.g. h200-x2-nvswitch); an alias of the hardware's kind is filed "
                 "under the canonical one, one that contradicts the hardware is refused");
  sub.add_flag("--kind-override", a->kind_override,
               "File the run under --kind (or $PEERLAB_KIND) even where it contradicts the hardware; the run file "
               "records that it was overridden");
  sub.add_flag("--probe", a->probe, "Run the verified probe first (peerlab probe) and add its cells to the run file");
  sub.add_option("--benchmark-arg", a->bench_args,
                 "Extra argument for every bench process, e.g. "
                 "--benchmark-arg=--benchmark_repetitions=5");
  return [a] { return runBench(*a); };
}

}  // namespace

PEERLAB_REGISTER_COMMAND(bench, "bench", "Run the benchmark suites across GPU pairs and write one run file", setup);

}  // namespace peerlab::cli
