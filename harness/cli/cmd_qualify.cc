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
  std::string fixture;
  bool dry_run = false;
  bool json = false;
  std::string out;
  std::string config;
  std::string baseline;
  std::string threshold;
  std::string bench_dir;
  std::vector<std::string> suites;
  std::string pairs;
  std::string probe_methods;
  bool full = false;
  std::string level;
  bool serial = false;
  bool skip_probe = false;
  bool skip_bench = false;
  bool skip_health = false;
  double health_watch_s = 0;
  std::string results;
  double timeout_s = 0;
  std::string kind;
  std::string node;
  bool kind_override = false;
  bool allow_other_hardware = false;
  std::string history;
  std::vector<std::string> argv;  // the command line, for the summary
};

// Past runs for the estimate (--history): a run file or a directory of run files. A bad path or file:
// invalid_argument naming it.
StatusOr<std::vector<report::Run>> loadHistory(const std::string& path) {
  std::vector<report::Run> runs;
  std::error_code ec;
  std::vector<std::string> files;
  if (std::filesystem::is_directory(path, ec)) {
    for (const auto& e : std::filesystem::directory_iterator(path, ec)) {
      if (report::isRunFileName(e.path().string())) files.push_back(e.path().string());
    }
    std::sort(files.begin(), files.end());
  } else if (std::filesystem::is_regular_file(path, ec) && report::isRunFileName(path)) {
    files.push_back(path);
  } else if (std::filesystem::is_regular_file(path, ec) || path.rfind("postgres", 0) == 0) {
    // The history store keeps results, not each process's wall time (bench.jobs[].wall_s of the run file).
    return PEERLAB_INVALID_ARGUMENT("--history " + path +
                                    ": not a run file or a directory of run files (a history database keeps no "
                                    "per-process wall times: pass the run files it was given)");
  } else {
    return PEERLAB_INVALID_ARGUMENT("--history " + path + ": no such run file or directory");
  }
  for (const std::string& f : files) {
    auto run = report::readRun(f);
    if (!run.isOk()) return PEERLAB_INVALID_ARGUMENT("--history: " + run.status().message());
    runs.push_back(std::move(*run));
  }
  return runs;
}

// The verified probe through `peerlab probe` as a child process: its run file's rows join the results.
std::vector<report::Result> runProbe(const QualifyArgs& a, const qualify::Plan& plan, const std::string& dir) {
  std::vector<std::string> args;
  if (!a.probe_methods.empty()) args.insert(args.end(), {"--methods", a.probe_methods});
  // Quick: every method on every pair, at small sizes (a pre-job gate answers in seconds).
  if (plan.options.level == qualify::Level::kQuick) args.insert(args.end(), {"--sizes", "4K,1M"});
  if (!a.pairs.empty()) args.insert(args.end(), {"--pairs", a.pairs});
  const std::string log = dir + "/probe.log";
  std::printf("probe: peerlab probe on %zu ordered pairs (log %s)\n", plan.options.pairs.size(), log.c_str());
  std::fflush(stdout);
  const auto start = std::chrono::steady_clock::now();
  std::vector<report::Result> rows =
      qualify::runProbeChild(args, dir + "/probe.json", log, a.timeout_s > 0 ? a.timeout_s : 900);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const bool failed = !rows.empty() && rows.back().name == "process";
  std::printf("probe: %s (%.1f s)\n",
              failed ? rows.back().status.c_str() : (std::to_string(rows.size()) + " results").c_str(), wall);
  std::fflush(stdout);
  return rows;
}

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
                          {"baseline", a.baseline},
                          {"wall_s", wall_s}};
  std::vector<std::string> files = {"results.json", "report.html", "summary.md", "junit.xml", "plan.txt"};
  if (std::filesystem::exists(dir + "/probe.json")) files.push_back("probe.json, probe.log (peerlab probe)");
  if (std::filesystem::exists(dir + "/gbench")) files.push_back("gbench/ (each bench process's JSON and log)");
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

// The plan of a stored run, as qualify::Plan (for plan.txt and re-planning with another config).
qualify::Plan planOf(const report::RunPlan& stored) {
  qualify::Plan plan;
  if (stored.topology) plan.topology = *stored.topology;
  plan.options.level = qualify::parseLevel(stored.level).value_or(qualify::Level::kStandard);
  plan.options.pairs = stored.pairs;
  plan.options.probe = stored.probe;
  plan.options.probe_methods = stored.probe_methods;
  for (const report::PlanJob& j : stored.jobs) {
    if (std::find(plan.options.suites.begin(), plan.options.suites.end(), j.suite) == plan.options.suites.end())
      plan.options.suites.push_back(j.suite);
  }
  plan.jobs = stored.jobs;
  plan.expectations = stored.expectations;
  plan.latency = stored.latency;
  plan.notes = stored.notes;
  plan.disabled_rules = stored.disabled_rules;
  plan.require_link_info = stored.require_link_info;
  plan.fail_unclaimed = stored.fail_unclaimed;
  plan.budget_s = stored.budget_s;
  return plan;
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

int runQualify(const QualifyArgs& a) {
  const auto started = std::chrono::steady_clock::now();
  // Inputs first: config, baseline, stored results; each bad one is a one-line error naming it.
  if (a.json && !a.dry_run) return fail(kCmd, kExitUsage, "--json prints the plan: use it with --dry-run");
  if (a.json && !a.out.empty()) {
    return fail(kCmd, kExitUsage, "--out names a bundle directory; --dry-run --json prints the plan to stdout only");
  }
  StatusOr<qualify::QualifyConfig> config = a.config.empty() ? qualify::defaultConfig() : qualify::loadConfig(a.config);
  if (!config.isOk()) return fail(kCmd, kExitUsage, "--config " + config.status().message());
  StatusOr<health::Thresholds> health_thresholds = qualify::loadHealthThresholds(a.config);
  if (!health_thresholds.isOk()) return fail(kCmd, kExitUsage, "--config " + health_thresholds.status().message());
  report::NoiseRule noise_rule = config->baseline_rule;
  if (!a.threshold.empty()) {
    auto t = report::parseThresholdPct(a.threshold);
    if (!t.isOk()) return fail(kCmd, kExitUsage, "--threshold: " + t.status().message());
    noise_rule.threshold_pct = *t;
  }
  std::optional<report::Run> baseline;
  if (!a.baseline.empty()) {
    auto b = report::readRun(a.baseline);
    if (!b.isOk()) return fail(kCmd, kExitUsage, "--baseline " + b.status().message());
    if (b->results.empty()) {
      return fail(kCmd, kExitUsage, "--baseline " + a.baseline + ": holds no results: nothing to hold the run against");
    }
    if (const std::string injected = report::injectionNote(*b); !injected.empty()) {
      return fail(kCmd, kExitUsage,
                  "--baseline " + a.baseline + ": ran with stand-ins or injected faults (" + printable(injected, 300) +
                      "): a baseline is a real machine's run");
    }
    baseline = std::move(*b);
  }
  std::optional<report::Run> stored;
  if (!a.results.empty()) {
    auto r = report::readRun(a.results);
    if (!r.isOk()) return fail(kCmd, kExitUsage, "--results " + r.status().message());
    stored = std::move(*r);
  }
  // A baseline of other hardware differs by design: refused (before anything is measured) unless asked for.
  if (baseline && stored && !a.allow_other_hardware) {
    Status same = report::checkSameHardware(*baseline, *stored, "--baseline " + a.baseline, "--allow-other-hardware");
    if (!same.isOk()) return fail(kCmd, kExitUsage, same.message());
  }
  if (!a.fixture.empty() && !a.dry_run && !stored) {
    return fail(kCmd, kExitUsage, "--fixture plans for another machine: use it with --dry-run (or --results RUN.json)");
  }
  if (!a.probe_methods.empty()) {
    if (auto m = probe::parseMethods(a.probe_methods); !m.isOk()) {
      return fail(kCmd, kExitUsage, "--probe-methods: " + m.status().message());
    }
  }

  if (a.full && !a.level.empty() && a.level != "full") {
    return fail(kCmd, kExitUsage, "--full is --level full: it excludes --level " + a.level);
  }
  std::optional<qualify::Level> level = a.full ? qualify::Level::kFull : qualify::Level::kStandard;
  if (!a.level.empty()) {
    level = qualify::parseLevel(a.level);
    if (!level) {
      return fail(kCmd, kExitUsage, "--level " + a.level + ": unknown level (known: " + qualify::levelNames() + ")");
    }
  }
  qualify::PlanOptions po;
  po.level = *level;
  po.concurrent = !a.serial;
  po.probe = !a.skip_probe;
  po.suites = qualify::splitList(a.suites);
  for (const std::string& s : po.suites) {
    if (!qualify::findSuite(s)) {
      return fail(kCmd, kExitUsage, "--suite " + s + ": unknown suite (known: " + qualify::suiteNames() + ")");
    }
  }
  // The probe's speed is a benchmark, not a health figure: qualify runs the probe itself, not probe_bench.
  if (po.suites.empty()) po.suites = qualify::qualifyDefaultSuites(po.level);
  if (a.skip_bench) po.suites = {};
  if (!a.pairs.empty()) {
    auto pairs = qualify::parsePairs(a.pairs);
    if (!pairs.isOk()) return fail(kCmd, kExitUsage, "--pairs: " + pairs.status().message());
    po.pairs = *pairs;
  }
  if (!a.probe_methods.empty()) po.probe_methods = qualify::splitList({a.probe_methods});

  // A stand-in machine, for tests of what runs qualify on nodes without a GPU (the Slurm wrappers): the topology of
  // the fixture PEERLAB_QUALIFY_STANDIN_TOPOLOGY names instead of this machine's, and no CUDA checks. The run file
  // records it (extra.injected.topology) and every output says the verdicts are not this machine's.
  const char* standinEnv = std::getenv("PEERLAB_QUALIFY_STANDIN_TOPOLOGY");
  const std::string standin = standinEnv && !stored && a.fixture.empty() ? standinEnv : "";

  // A stored run is checked against its own plan (the same verdict `peerlab report` gives); a --config re-plans its
  // expectations from the stored topology; a run without a plan is checked against a fixture's plan, or none.
  const bool storedPlan = stored && stored->plan && a.fixture.empty();
  StatusOr<qualify::PlanTopology> topo = PEERLAB_INTERNAL("no topology");
  if (storedPlan && stored->plan->topology) {
    topo = *stored->plan->topology;
  } else if (!stored || !a.fixture.empty()) {
    topo = qualify::loadPlanTopology(standin.empty() ? a.fixture : standin);
  }
  std::optional<qualify::Plan> plan;
  if (storedPlan && (a.config.empty() || !stored->plan->topology)) {
    plan = planOf(*stored->plan);
  } else if (storedPlan && topo.isOk()) {
    // A re-check keeps the run's facts (its suites, jobs, pairs, probe methods and notes, "not available" ones
    // included: they describe the machine that ran, not the one checking) and takes only the rules from --config.
    qualify::Plan facts = planOf(*stored->plan);
    qualify::PlanOptions rules = facts.options;
    std::erase_if(rules.suites, [](const std::string& s) { return !qualify::findSuite(s); });
    auto made = qualify::makePlan(*topo, *config, rules);
    if (!made.isOk()) return fail(kCmd, kExitUsage, made.status().message());
    facts.expectations = std::move(made->expectations);
    facts.latency = std::move(made->latency);
    facts.disabled_rules = std::move(made->disabled_rules);
    facts.require_link_info = made->require_link_info;
    facts.fail_unclaimed = made->fail_unclaimed;
    plan = std::move(facts);
  } else if (topo.isOk()) {
    auto made = qualify::makePlan(*topo, *config, po);
    if (!made.isOk()) return fail(kCmd, kExitUsage, made.status().message());
    plan = std::move(*made);
    if (a.skip_bench) plan->jobs.clear();
    // One GPU: no pair to probe; the host paths and the device-local copy qualify it.
    if (plan->options.probe && plan->options.pairs.empty() && !topo->gpus.empty()) {
      plan->options.probe = false;
      plan->notes.push_back("probe: skipped, the topology has no GPU pair");
    }
  } else if (!stored) {
    return fail(kCmd, topo.status().code() == StatusCode::kInvalidArgument ? kExitUsage : kExitRuntime,
                topo.status().message());
  }
  // The kind the run is filed under: --kind, $PEERLAB_KIND, or derived from the hardware (never the host name).
  std::optional<report::RunKind> kind;
  qualify::RunnerOptions ro;
  ro.bench_dir = a.bench_dir;
  Status executables = Status::ok();
  std::vector<std::string> stops;  // what would stop a real run before it measures anything (exit 4)
  if (plan && !stored) {
    auto chosen = report::chooseKind(report::kindRequest(a.kind, a.kind_override), report::deriveKind(plan->topology));
    if (!chosen.isOk()) return fail(kCmd, kExitUsage, chosen.status().message());
    kind = std::move(*chosen);
    if (baseline && !a.allow_other_hardware) {
      report::Run planned;
      for (const qualify::PlanGpu& g : plan->topology.gpus)
        planned.fingerprint.gpus.push_back({g.index, g.uuid, g.bus_id, g.model});
      planned.kind = *kind;
      Status same = report::checkSameHardware(*baseline, planned, "--baseline " + a.baseline, "--allow-other-hardware");
      if (!same.isOk()) return fail(kCmd, kExitUsage, same.message());
    }
    // The estimate: the model, or what past runs of this kind measured (--history).
    qualify::MeasuredWalls measured;
    if (!a.history.empty()) {
      auto past = loadHistory(a.history);
      if (!past.isOk()) return fail(kCmd, kExitUsage, past.status().message());
      measured = qualify::measuredWalls(*past, kind->name, kind->hardware);
      if (measured.runs == 0) {
        std::set<std::string> kinds;
        for (const report::Run& r : *past)
          kinds.insert(r.kind.empty() ? "no kind" : r.kind.name);
        std::string list;
        for (const std::string& k : kinds)
          list += (list.empty() ? "" : ", ") + k;
        plan->notes.push_back("--history " + a.history + ": none of its " + std::to_string(past->size()) +
                              " runs is of kind " + kind->name + " with process wall times (" +
                              (list.empty() ? std::string("no runs") : "kinds: " + list) +
                              "): the estimate is the model's");
      }
    }
    qualify::estimatePlan(*plan, measured);
    // Every executable the plan runs, resolved before anything is measured.
    executables = qualify::resolveExecutables(plan->jobs, ro);
    if (!executables.isOk()) stops.push_back(executables.message());
    const std::string no_code = qualify::missingKernelCode(plan->topology, host::builtArchitectures());
    if (!no_code.empty()) stops.push_back(no_code);
  }

  if (plan && (a.dry_run || !stored)) {
    // The plan as JSON: the same objects (expectations included) the run file carries under "plan".
    auto printJson = [&] {
      nlohmann::json doc = qualify::toJson(*plan);
      doc["config"] = config->source;
      if (kind) {
        doc["kind"] = kind->name;
        doc["kind_source"] = report::kindSourceName(kind->source);
        doc["kind_basis"] = kind->basis;
        doc["hardware_kind"] = kind->hardware;
        doc["kind_overridden"] = kind->overridden;
      }
      doc["stops"] = stops;
      std::puts(doc.dump(2).c_str());
    };
    if (plan->topology.gpus.empty()) {
      if (a.json) {
        printJson();
      } else {
        std::fputs(qualify::formatPlan(*plan).c_str(), stdout);
      }
      std::string why =
          plan->topology.no_gpu_message.empty() ? "no NVIDIA GPU in the topology" : plan->topology.no_gpu_message;
      return fail(kCmd, kExitNoGpu, why);
    }
    // A dry run exits as the real run would: 4 where it would stop before measuring, the plan printed all the same.
    auto dryRunExit = [&]() -> int {
      if (stops.empty()) return kExitOk;
      return fail(kCmd, kExitRuntime, "a real run would stop before measuring: " + stops.front());
    };
    if (a.dry_run && a.json) {
      printJson();
      return dryRunExit();
    }
    if (a.dry_run) {
      std::fputs(qualify::formatPlan(*plan).c_str(), stdout);
      std::printf("config: %s\n", config->source.c_str());
      if (kind) std::printf("kind: %s\n", report::describeKind(*kind).c_str());
      if (baseline)
        std::printf("baseline: %s (%s, %zu results); noise rule: %s\n", a.baseline.c_str(),
                    report::machineTitle(*baseline).c_str(), baseline->results.size(),
                    report::describeNoiseRule(noise_rule).c_str());
      if (!plan->jobs.empty() && executables.isOk())
        std::printf("executables: all %zu found (%s)\n", plan->jobs.size(), qualify::benchDirectoriesText(ro).c_str());
      for (const std::string& why : stops)
        std::printf("qualify would stop here (exit 4): %s\n", why.c_str());
      std::fflush(stdout);
      return dryRunExit();
    }
  } else if (a.dry_run) {
    return fail(kCmd, kExitUsage, "--dry-run: the run file has no plan and no --fixture was given to plan for");
  }
  // A missing executable is a setup error, not a verdict on the hardware.
  if (!executables.isOk()) return fail(kCmd, kExitRuntime, executables.message());
  if (!stored && standin.empty()) {
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

  const std::string dir = a.out.empty() ? qualify::defaultOutputName("peerlab-qualify") : a.out;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir)) {
    return fail(kCmd, kExitUsage, dir + ": cannot create the bundle directory" + (ec ? ": " + ec.message() : ""));
  }
  BundleMarker marker(dir);
  if (Status st = marker.begin(); !st.isOk()) return fail(kCmd, kExitUsage, st.message());
  const std::string planText = plan ? qualify::formatPlan(*plan)
                                    : "no plan: the run file carries none; its probe, health and data are checked\n";
  if (Status st = writeTextFile(dir + "/plan.txt", planText); !st.isOk()) {
    marker.failed(st.message());
    return fail(kCmd, kExitUsage, st.message() + " (bundle " + dir + " left marked INCOMPLETE)");
  }

  report::Run run;
  if (stored) {
    run = *stored;
    // A re-plan (--config, or a fixture for a run without a plan) is what the bundle's checks are made against.
    if (plan && !(storedPlan && a.config.empty())) run.extra["plan"] = qualify::toJson(*plan);
  } else {
    run = report::newRun();
    run.fingerprint = report::collectFingerprint({.probe = plan->options.probe, .nvml = !a.skip_health});
    run.fingerprint.injected.topology = standin;
    qualify::Progress progress(stdout, ::isatty(STDOUT_FILENO) != 0);
    std::printf("peerlab qualify: %zu GPUs, %zu ordered pairs, bundle %s\n", topo->gpus.size(),
                plan->options.pairs.size(), dir.c_str());
    if (run.fingerprint.injected.any()) {
      std::printf("peerlab qualify: INJECTED: %s: the verdicts of this run are not this machine's own\n",
                  printable(run.fingerprint.injected.describe(), 600).c_str());
    }
    std::optional<health::Stage> health;
    if (!a.skip_health) {
      // The watch ends by itself after every process's deadline has passed.
      double max_s = 600 + a.health_watch_s + (plan->options.probe ? (a.timeout_s > 0 ? a.timeout_s : 900) : 0);
      for (const qualify::BenchJob& j : plan->jobs)
        max_s += a.timeout_s > 0 ? a.timeout_s : std::max(180.0, 4 * j.deadline_s);
      health = health::Stage::begin(*health_thresholds, run.fingerprint, max_s, stdout);
    }
    if (plan->options.probe) {
      auto rows = runProbe(a, *plan, dir);
      run.results.insert(run.results.end(), rows.begin(), rows.end());
    }
    if (!plan->jobs.empty() && !process::interruptRequested()) {
      ro.gbench_dir = dir + "/gbench";
      if (a.timeout_s > 0) ro.timeout_s = a.timeout_s;
      ro.env = {"PEERLAB_BIN=" + selfExecutable()};
      qualify::BenchOutcome outcome = qualify::runJobs(plan->jobs, ro, progress);
      run.results.insert(run.results.end(), outcome.results.begin(), outcome.results.end());
      run.extra["bench"] = qualify::toJson(outcome, std::string(qualify::levelName(po.level)));
    }
    if (health) health->end(run, a.health_watch_s, process::interruptRequested);
    run.kind = *kind;
    auto node = report::localNodeIdentity(run.fingerprint, a.node);
    if (!node.isOk()) {
      marker.failed(node.status().message());
      return fail(kCmd, kExitUsage, node.status().message());
    }
    run.node = *node;
    run.extra["plan"] = qualify::toJson(*plan);
  }
  // The checks read the plan as the run file stores it: the same path `peerlab report` takes.
  if (Status st = report::attachPlan(run); !st.isOk()) {
    marker.failed("the plan does not read back: " + st.message());
    return fail(kCmd, kExitRuntime, "the plan does not read back: " + st.message());
  }

  report::EvaluateOptions eo;
  eo.baseline = baseline ? &*baseline : nullptr;
  eo.baseline_rule = noise_rule;
  std::vector<report::Check> checks = report::evaluateChecks(run, run.plan ? &*run.plan : nullptr, eo);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::vector<std::string> notes = {"config: " + config->source};
  if (baseline) {
    notes.push_back("baseline: " + a.baseline + " (" + report::machineTitle(*baseline) +
                    "); noise rule: " + report::describeNoiseRule(noise_rule));
  }
  if (plan) {
    for (const std::string& n : plan->notes)
      notes.push_back("note: " + n);
  }
  // The plan's estimate beside what the run took.
  std::string timing;
  if (!stored && plan) {
    char buf[200];
    std::snprintf(buf, sizeof(buf),
                  "time: %.0f s, estimated %.0f s (processes %.0f s + probe, topology, health and bundle %.0f s)", wall,
                  plan->budget_s, plan->processes_s, plan->overhead_s);
    timing = buf;
    notes.push_back(timing);
  }
  if (int rc = writeBundle(dir, run, checks, a, wall, notes, marker); rc != kExitOk) return rc;
  if (!timing.empty()) std::printf("peerlab qualify: %s\n", timing.c_str());
  const int rc = printVerdict(run, checks, dir);
  if (process::interruptRequested()) return fail(kCmd, kExitRuntime, "interrupted; partial bundle written to " + dir);
  return rc;
}

std::function<int()> setup(CLI::App& sub) {
  auto a = std::make_shared<QualifyArgs>();
  sub.add_option("--out", a->out, "Bundle directory (default ./peerlab-qualify-<host>-<date>)");
  sub.add_option("--config", a->config, "Thresholds file (default: the built-in reports/qualify.toml)");
  sub.add_option("--baseline", a->baseline,
                 "Run file to compare against: no result may be worse by more than the "
                 "threshold");
  sub.add_option("--threshold", a->threshold,
                 "Baseline minimum effect in percent (default from the config: 10; README \"Comparing runs and "
                 "baselines\")");
  sub.add_flag("--allow-other-hardware", a->allow_other_hardware,
               "Check against a --baseline of another GPU model or count (refused otherwise)");
  sub.add_option("--fixture", a->fixture, "Plan for a topology XML file instead of this machine (with --dry-run)");
  sub.add_flag("--dry-run", a->dry_run, "Print the plan (pairs, tests, expected figures) and exit");
  sub.add_flag("--json", a->json, "With --dry-run: print the plan as JSON (the run file's \"plan\" object)");
  sub.add_option("--bench-dir", a->bench_dir,
                 "Where the bench binaries are (default: libexec/peerlab of the installed tree, or beside peerlab in "
                 "a build tree)");
  sub.add_option("--suite", a->suites,
                 "Benchmark suites (default at --level standard: " + qualify::qualifyDefaultSuitesText() +
                     "; the alltoallv process also runs the moe rows; known: " + qualify::suiteNames() + ")");
  sub.add_option("--pairs", a->pairs, "Ordered GPU pairs to qualify, e.g. 0-1,1-0 (default: every pair)");
  sub.add_option("--probe-methods", a->probe_methods, "Probe methods, e.g. ce_write,sm_store (default all)");
  sub.add_option("--level", a->level,
                 "quick (seconds: topology, health, the probe at small sizes, a copy-engine spot check per pair and "
                 "GPU), standard (every check family; the default) or full (every size of every sweep)");
  sub.add_flag("--full", a->full, "The same as --level full");
  sub.add_flag("--serial", a->serial,
               "Run pairs one at a time, even where their links would let disjoint pairs run at once");
  sub.add_flag("--skip-probe", a->skip_probe, "Do not run the verified probe");
  sub.add_flag("--skip-bench", a->skip_bench, "Do not run the benchmarks");
  sub.add_flag("--skip-health", a->skip_health, "Do not read machine health through NVML");
  sub.add_option("--health-watch", a->health_watch_s,
                 "Watch health (XID events, clock event reasons) for at least this many seconds")
      ->check(CLI::NonNegativeNumber);
  sub.add_option("--results", a->results,
                 "Check an existing run file instead of measuring (re-check with another "
                 "config or baseline)");
  sub.add_option("--timeout", a->timeout_s, "Deadline per process in seconds (default: 4x its budget, >= 180)")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            char* end = nullptr;
            const double s = std::strtod(v.c_str(), &end);
            if (end == v.c_str() || *end || !(s > 0) || s > 86400 * 7)
              return "must be seconds above 0 (at most a week)";
            return "";
          },
          "SECONDS"));
  sub.add_option("--kind", a->kind,
                 "Machine kind recorded in the run file (default $PEERLAB_KIND, else derived from the hardware: GPU "
                 "model x count x interconnect, e.g. h200-x2-nvswitch); an alias of the hardware's kind "
                 "(nvidia-h200-x2) is filed under the canonical one, one that contradicts the hardware is refused");
  sub.add_flag("--kind-override", a->kind_override,
               "File the run under --kind (or $PEERLAB_KIND) even where it contradicts the hardware; the run file "
               "records that it was overridden");
  sub.add_option("--node", a->node,
                 "The Slurm NodeName this run is for (default $SLURMD_NODENAME): the history keys node states by it");
  sub.add_option("--history", a->history,
                 "Past runs for the time estimate: a run file or a directory of run files; processes that ran on "
                 "this kind are estimated from their measured wall times");
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
    return runQualify(*a);
  };
}

}  // namespace

PEERLAB_REGISTER_COMMAND(qualify, "qualify",
                         "Qualify this machine at a level (quick, standard, full): topology, health, verified probe, "
                         "benchmarks, checks; writes a bundle",
                         setup);

}  // namespace peerlab::cli
