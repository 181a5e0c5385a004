#include "harness/qualify/pipeline.h"

#include <unistd.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <sstream>

#include <algorithm>
#include <set>

#include "harness/health/stage.h"
#include "harness/qualify/gpu_models.h"
#include "harness/report/compare.h"
#include "harness/topology/topology.h"
#include "reference/core/devices.h"
#include "reference/core/files.h"
#include "reference/core/process.h"
#include "reference/core/text.h"
#include "reference/host/host_copy.h"

namespace peerlab::qualify {

namespace {

// The plan of a stored run, as Plan (for plan.txt and re-planning with another config).
Plan planOf(const report::RunPlan& stored) {
  Plan plan;
  if (stored.topology) plan.topology = *stored.topology;
  plan.options.level = stored.level;
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

bool isBundleDir(const std::filesystem::path& dir) {
  return !report::bundleResults(dir.string()).empty();
}

}  // namespace

Status Pipeline::readInputs() {
  // Inputs first: config, baseline, stored results; each bad one is a one-line error naming it.
  StatusOr<QualifyConfig> config = in_.config.empty() ? defaultConfig() : loadConfig(in_.config);
  if (!config.isOk()) return PEERLAB_INVALID_ARGUMENT("--config " + config.status().message());
  config_ = std::move(*config);
  StatusOr<health::Thresholds> thresholds = loadHealthThresholds(in_.config);
  if (!thresholds.isOk()) return PEERLAB_INVALID_ARGUMENT("--config " + thresholds.status().message());
  health_ = *thresholds;
  noise_rule_ = config_.baseline_rule;
  if (!in_.threshold.empty()) {
    auto t = report::parseThresholdPct(in_.threshold);
    if (!t.isOk()) return PEERLAB_INVALID_ARGUMENT("--threshold: " + t.status().message());
    noise_rule_.threshold_pct = *t;
  }
  if (!in_.baseline.empty()) {
    auto b = report::readRun(in_.baseline);
    if (!b.isOk()) return PEERLAB_INVALID_ARGUMENT("--baseline " + b.status().message());
    if (b->results.empty()) {
      return PEERLAB_INVALID_ARGUMENT("--baseline " + in_.baseline +
                                      ": holds no results: nothing to hold the run against");
    }
    if (const std::string injected = report::injectionNote(*b); !injected.empty()) {
      return PEERLAB_INVALID_ARGUMENT("--baseline " + in_.baseline + ": ran with stand-ins or injected faults (" +
                                      printable(injected, 300) + "): a baseline is a real machine's run");
    }
    baseline_ = std::move(*b);
  }
  if (!in_.results.empty()) {
    auto r = report::readRun(in_.results);
    if (!r.isOk()) return PEERLAB_INVALID_ARGUMENT("--results " + r.status().message());
    stored_ = std::move(*r);
  }
  // A baseline of other hardware differs by design: refused (before anything is measured) unless asked for.
  if (baseline_ && stored_ && !in_.allow_other_hardware) {
    PEERLAB_RETURN_IF_ERROR(
        report::checkSameHardware(*baseline_, *stored_, "--baseline " + in_.baseline, "--allow-other-hardware"));
  }
  if (!in_.fixture.empty() && !in_.dry_run && !stored_) {
    return PEERLAB_INVALID_ARGUMENT("--fixture plans for another machine: use it with --dry-run" +
                                    std::string(in_.command == "qualify" ? " (or --results RUN.json)" : ""));
  }
  if (!in_.probe_methods.empty()) {
    if (auto m = probe::parseMethods(in_.probe_methods); !m.isOk())
      return PEERLAB_INVALID_ARGUMENT("--probe-methods: " + m.status().message());
    options_.probe_methods = splitList({in_.probe_methods});
  }
  PEERLAB_ASSIGN_OR_RETURN(options_.level, report::chooseLevel(in_.level));
  // qualify's node name (--node, else $SLURMD_NODENAME) is checked before anything runs; bench leaves a malformed
  // $SLURMD_NODENAME out of its run file, never a reason to lose the run.
  if (in_.command == "qualify" && !stored_) {
    if (auto node = report::localNodeIdentity(report::Fingerprint{}, in_.node); !node.isOk()) return node.status();
  }
  options_.concurrent = !in_.serial;
  options_.probe = in_.probe;
  for (const std::string& s : splitList(in_.suites)) {
    // bench: "all" is every suite.
    if (s == "all" && in_.command == "bench") {
      options_.suites.clear();
      break;
    }
    if (!findSuite(s)) {
      return PEERLAB_INVALID_ARGUMENT("--suite " + s + ": unknown suite (known: " + suiteNames() +
                                      (in_.command == "bench" ? ", all)" : ")"));
    }
    options_.suites.push_back(s);
  }
  // qualify: the suites of the level (the probe's speed is a benchmark, not a health figure: qualify runs the probe
  // itself, not probe_bench).
  if (in_.command == "qualify" && options_.suites.empty()) options_.suites = qualifyDefaultSuites(options_.level);
  if (in_.skip_bench) options_.suites = {};
  if (!in_.pairs.empty()) {
    auto pairs = parsePairs(in_.pairs);
    if (!pairs.isOk()) return PEERLAB_INVALID_ARGUMENT("--pairs: " + pairs.status().message());
    options_.pairs = *pairs;
  }
  // A stand-in machine, for tests of what runs qualify on nodes without a GPU (the Slurm wrappers): the topology of
  // the fixture PEERLAB_QUALIFY_STANDIN_TOPOLOGY names instead of this machine's, and no CUDA checks. The run file
  // records it (fingerprint.injected.topology) and every output says the verdicts are not this machine's.
  const char* standin = std::getenv("PEERLAB_QUALIFY_STANDIN_TOPOLOGY");
  if (in_.command == "qualify" && standin && !stored_ && in_.fixture.empty()) standin_ = standin;
  runner_.bench_dir = in_.bench_dir;
  runner_.gbench_dir = in_.gbench_dir;
  runner_.extra_args = in_.bench_args;
  if (in_.timeout_s > 0) runner_.timeout_s = in_.timeout_s;
  return Status::ok();
}

// A stored run is checked against its own plan (the same verdict `peerlab report` gives); a --config re-plans its
// expectations from the stored topology; a run without a plan is checked against a fixture's plan, or none.
Status Pipeline::planStored() {
  const bool stored_plan = stored_->plan && in_.fixture.empty();
  if (stored_plan && (in_.config.empty() || !stored_->plan->topology)) {
    plan_ = planOf(*stored_->plan);
    return Status::ok();
  }
  if (stored_plan) {
    // A re-check keeps the run's facts (its suites, jobs, pairs, probe methods and notes, "not available" ones
    // included: they describe the machine that ran, not the one checking) and takes only the rules from --config.
    Plan facts = planOf(*stored_->plan);
    PlanOptions rules = facts.options;
    std::erase_if(rules.suites, [](const std::string& s) { return !findSuite(s); });
    PEERLAB_ASSIGN_OR_RETURN(Plan made, qualify::makePlan(*stored_->plan->topology, config_, rules));
    facts.expectations = std::move(made.expectations);
    facts.latency = std::move(made.latency);
    facts.disabled_rules = std::move(made.disabled_rules);
    facts.require_link_info = made.require_link_info;
    facts.fail_unclaimed = made.fail_unclaimed;
    plan_ = std::move(facts);
    return Status::ok();
  }
  if (in_.fixture.empty()) return Status::ok();  // no plan: its probe, health and data are checked
  PEERLAB_ASSIGN_OR_RETURN(PlanTopology topo, loadPlanTopology(in_.fixture));
  PEERLAB_ASSIGN_OR_RETURN(Plan made, qualify::makePlan(topo, config_, options_));
  plan_ = std::move(made);
  return Status::ok();
}

Status Pipeline::makePlan() {
  if (stored_) return planStored();
  PEERLAB_ASSIGN_OR_RETURN(PlanTopology topo, loadPlanTopology(standin_.empty() ? in_.fixture : standin_));
  auto made = qualify::makePlan(topo, config_, options_);
  if (!made.isOk()) return PEERLAB_INVALID_ARGUMENT(made.status().message());
  plan_ = std::move(*made);
  if (in_.skip_bench) plan_->jobs.clear();
  // One GPU: no pair to probe; the host paths and the device-local copy qualify it.
  if (plan_->options.probe && plan_->options.pairs.empty() && !topo.gpus.empty()) {
    plan_->options.probe = false;
    plan_->notes.push_back("probe: skipped, the topology has no GPU pair");
  }
  // The kind the run is filed under: --kind, $PEERLAB_KIND, or derived from the hardware (never the host name).
  PEERLAB_ASSIGN_OR_RETURN(
      kind_, report::chooseKind(report::kindRequest(in_.kind, in_.kind_override), report::deriveKind(plan_->topology)));
  if (baseline_ && !in_.allow_other_hardware) {
    report::Run planned;
    for (const PlanGpu& g : plan_->topology.gpus)
      planned.fingerprint.gpus.push_back({g.index, g.uuid, g.bus_id, g.model});
    planned.kind = *kind_;
    PEERLAB_RETURN_IF_ERROR(
        report::checkSameHardware(*baseline_, planned, "--baseline " + in_.baseline, "--allow-other-hardware"));
  }
  PEERLAB_RETURN_IF_ERROR(estimate());
  // Every executable the plan runs, resolved before anything is measured.
  executables_ = resolveExecutables(plan_->jobs, runner_);
  if (!executables_.isOk()) stops_.push_back(executables_.message());
  const std::string no_code = missingKernelCode(plan_->topology, host::builtArchitectures());
  if (!no_code.empty()) stops_.push_back(no_code);
  return Status::ok();
}

// The estimate: the model, or what past runs of this kind measured (--history), which the plan's notes account for.
Status Pipeline::estimate() {
  MeasuredWalls measured;
  if (!in_.history.empty()) {
    const auto t0 = std::chrono::steady_clock::now();
    PEERLAB_ASSIGN_OR_RETURN(std::vector<report::Run> past, loadHistory(in_.history));
    measured = measuredWalls(past, kind_->name, kind_->hardware);
    measured.read_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::set<std::string> kinds;
    for (const report::Run& r : past)
      kinds.insert(r.kind.empty() ? "no kind" : r.kind.name);
    std::string list;
    for (const std::string& k : kinds)
      list += (list.empty() ? "" : ", ") + k;
    if (measured.runs == 0) {
      plan_->notes.push_back("--history " + in_.history + ": none of its " + std::to_string(past.size()) +
                             " runs is of kind " + kind_->name + " with process wall times (" +
                             (list.empty() ? std::string("no runs") : "kinds: " + list) +
                             "; runs whose plan records no level are not counted): the estimate is the model's");
    } else {
      plan_->notes.push_back("--history " + in_.history + ": " + std::to_string(measured.runs) + " of its " +
                             std::to_string(past.size()) + " runs are of kind " + kind_->name +
                             " with process wall times");
    }
  }
  estimatePlan(*plan_, measured);
  return Status::ok();
}

std::vector<report::Result> Pipeline::runProbe(const std::string& base) {
  const ProbeRun how = verifiedProbeRun(plan_->options.level);
  std::vector<std::string> args = how.args;
  if (!in_.probe_methods.empty()) args.insert(args.end(), {"--methods", in_.probe_methods});
  if (!in_.pairs.empty()) args.insert(args.end(), {"--pairs", in_.pairs});
  const std::string log = base + ".log";
  std::printf("probe: peerlab probe on %zu ordered pairs (log %s)\n", plan_->options.pairs.size(), log.c_str());
  std::fflush(stdout);
  const auto start = std::chrono::steady_clock::now();
  std::vector<report::Result> rows =
      runProbeChild(args, base + ".json", log, in_.timeout_s > 0 ? in_.timeout_s : how.deadline_s);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const bool failed = !rows.empty() && rows.back().name == "process";
  std::printf("probe: %s (%.1f s)\n",
              failed ? rows.back().status.c_str() : (std::to_string(rows.size()) + " results").c_str(), wall);
  std::fflush(stdout);
  return rows;
}

report::Run Pipeline::run(const std::string& dir, const std::string& probe_base) {
  if (stored_) {
    report::Run run = *stored_;
    // A re-plan (--config, or a fixture for a run without a plan) is what the bundle's checks are made against.
    if (plan_ && !(stored_->plan && in_.fixture.empty() && in_.config.empty())) run.extra["plan"] = toJson(*plan_);
    return run;
  }
  report::Run run = report::newRun();
  run.fingerprint = report::collectFingerprint({.probe = plan_->options.probe, .nvml = in_.health});
  run.fingerprint.injected.topology = standin_;
  if (in_.command == "qualify" && run.fingerprint.injected.any()) {
    std::printf("peerlab qualify: INJECTED: %s: the verdicts of this run are not this machine's own\n",
                printable(run.fingerprint.injected.describe(), 600).c_str());
  }
  Progress progress(stdout, ::isatty(STDOUT_FILENO) != 0);
  std::optional<health::Stage> health;
  if (in_.health) {
    // The watch ends by itself after every process's deadline has passed.
    const ProbeRun how = verifiedProbeRun(plan_->options.level);
    double max_s = 600 + in_.health_watch_s;
    if (plan_->options.probe) max_s += in_.timeout_s > 0 ? in_.timeout_s : how.deadline_s;
    for (const BenchJob& j : plan_->jobs)
      max_s += in_.timeout_s > 0 ? in_.timeout_s : std::max(180.0, 4 * j.deadline_s);
    health = health::Stage::begin(health_, run.fingerprint, max_s, stdout);
  }
  if (plan_->options.probe) {
    std::vector<report::Result> rows = runProbe(probe_base.empty() ? dir + "/probe" : probe_base);
    run.results.insert(run.results.end(), rows.begin(), rows.end());
  }
  if (!plan_->jobs.empty() && !process::interruptRequested()) {
    // qualify keeps each process's JSON, log and plan in its bundle.
    if (in_.command == "qualify") runner_.gbench_dir = dir + "/gbench";
    outcome_ = runJobs(plan_->jobs, runner_, progress);
    run.results.insert(run.results.end(), outcome_->results.begin(), outcome_->results.end());
    run.extra["bench"] = toJson(*outcome_);
  }
  if (health) health->end(run, in_.health_watch_s, process::interruptRequested);
  run.kind = *kind_;
  auto node = report::localNodeIdentity(run.fingerprint, in_.node);
  run.node = node.isOk() ? *node : report::nodeIdentity(run.fingerprint, report::readBoardSerial());
  run.extra["plan"] = toJson(*plan_);
  return run;
}

StatusOr<std::vector<report::Check>> Pipeline::evaluate(report::Run& run) const {
  // The checks read the plan as the run file stores it: the same path `peerlab report` takes.
  if (Status st = report::attachPlan(run); !st.isOk())
    return PEERLAB_INTERNAL("the plan does not read back: " + st.message());
  report::EvaluateOptions eo;
  eo.baseline = baseline_ ? &*baseline_ : nullptr;
  eo.baseline_rule = noise_rule_;
  return report::evaluateChecks(run, run.plan ? &*run.plan : nullptr, eo);
}

nlohmann::json Pipeline::planJson() const {
  nlohmann::json doc = toJson(*plan_);
  doc["config"] = config_.source;
  if (kind_) {
    doc["kind"] = kind_->name;
    doc["kind_source"] = report::kindSourceName(kind_->source);
    doc["kind_basis"] = kind_->basis;
    doc["hardware_kind"] = kind_->hardware;
    doc["kind_overridden"] = kind_->overridden;
  }
  doc["stops"] = stops_;
  return doc;
}

StatusOr<std::vector<report::Run>> loadHistory(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<std::string> files;
  if (fs::is_directory(path, ec)) {
    // Run files, and bundles (a directory holding results.json), one level down.
    for (const auto& e : fs::directory_iterator(path, ec)) {
      const std::string p = e.path().string();
      if (report::isRunFileName(p) && e.is_regular_file(ec)) {
        files.push_back(p);
      } else if (e.is_directory(ec) && isBundleDir(e.path())) {
        files.push_back(report::bundleResults(p));
      }
    }
    if (isBundleDir(path)) files.push_back(report::bundleResults(path));
    std::sort(files.begin(), files.end());
    if (files.empty()) {
      return PEERLAB_INVALID_ARGUMENT("--history " + path +
                                      ": holds no run file (*.json, *.json.gz) and no bundle (a directory with "
                                      "results.json): nothing to estimate from");
    }
  } else if (fs::is_regular_file(path, ec) && report::isRunFileName(path)) {
    files.push_back(path);
  } else if (fs::is_regular_file(path, ec) || path.rfind("postgres", 0) == 0) {
    // The history store keeps results, not each process's wall time (bench.jobs[].wall_s of the run file).
    return PEERLAB_INVALID_ARGUMENT("--history " + path +
                                    ": not a run file or a directory of run files or bundles (a history database keeps "
                                    "no per-process wall times: pass the run files it was given)");
  } else {
    return PEERLAB_INVALID_ARGUMENT("--history " + path + ": no such run file or directory");
  }
  std::vector<report::Run> runs;
  for (const std::string& f : files) {
    auto run = report::readRun(f);
    if (!run.isOk()) return PEERLAB_INVALID_ARGUMENT("--history: " + run.status().message());
    runs.push_back(std::move(*run));
  }
  return runs;
}

StatusOr<ProbeOptions> readProbeOptions(const ProbeOptionsText& text) {
  ProbeOptions o;
  auto methods = probe::parseMethods(text.methods);
  if (!methods.isOk()) return PEERLAB_INVALID_ARGUMENT("--methods: " + methods.status().message());
  o.methods = *methods;
  if (!text.pairs.empty()) {
    auto p = probe::parsePairs(text.pairs);
    if (!p.isOk()) return PEERLAB_INVALID_ARGUMENT("--pairs: " + p.status().message());
    o.pairs = *p;
  }
  const std::string option = text.sizes.empty() ? "--bytes: " : "--sizes: ";
  if (!text.sizes.empty()) {
    for (const std::string& item : splitList({text.sizes})) {
      auto b = probe::parseBytes(item);
      if (!b.isOk()) return PEERLAB_INVALID_ARGUMENT(option + b.status().message());
      if (std::find(o.sizes.begin(), o.sizes.end(), *b) == o.sizes.end()) o.sizes.push_back(*b);
    }
    if (o.sizes.empty()) return PEERLAB_INVALID_ARGUMENT(option + "no size given");
  } else {
    auto b = probe::parseBytes(text.bytes);
    if (!b.isOk()) return PEERLAB_INVALID_ARGUMENT(option + b.status().message());
    o.sizes = {4096};
    if (*b != 4096) o.sizes.push_back(*b);
  }
  for (uint64_t b : o.sizes) {
    if (Status st = probe::validateCellBytes(b); !st.isOk()) return PEERLAB_INVALID_ARGUMENT(option + st.message());
  }
  auto timeout = probe::parseDuration(text.timeout);
  if (!timeout.isOk()) return PEERLAB_INVALID_ARGUMENT("--timeout: " + timeout.status().message());
  o.timeout = *timeout;
  auto setup = probe::parseDuration(text.setup_timeout);
  if (!setup.isOk()) return PEERLAB_INVALID_ARGUMENT("--setup-timeout: " + setup.status().message());
  o.setup_timeout = *setup;
  return o;
}

StatusOr<PlanTopology> loadPlanTopology(const std::string& fixture) {
  PEERLAB_ASSIGN_OR_RETURN(topology::Topology topo, topology::load(fixture));
  if (topo.gpus().size() > static_cast<size_t>(kMaxPlanGpus)) {
    return PEERLAB_INVALID_ARGUMENT((fixture.empty() ? std::string("this machine") : fixture) + ": " +
                                    std::to_string(topo.gpus().size()) + " GPUs; peerlab plans for at most " +
                                    std::to_string(kMaxPlanGpus) + " GPUs in one machine");
  }
  PlanTopology plan = fromTopology(topo);
  if (fixture.empty()) {
    // The DRAM peak, for the device-local copy expectation; a GPU CUDA cannot see keeps none.
    for (const PlanGpu& g : plan.gpus) {
      auto peak = host::memoryPeakGbps(g.index);
      if (peak.isOk()) plan.memory_peak_gbps[g.index] = *peak;
    }
  }
  return plan;
}

Status cudaGpusVisible() {
  auto n = deviceCount();
  if (!n.isOk()) return n.status();
  if (*n < 1) return PEERLAB_UNAVAILABLE("CUDA sees no GPU");
  return Status::ok();
}

std::string defaultOutputName(const std::string& prefix) {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0 || !host[0]) std::snprintf(host, sizeof(host), "host");
  std::string h = host;
  for (char& c : h) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) c = '_';
  }
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char date[32];
  std::strftime(date, sizeof(date), "%Y%m%d-%H%M%S", &tm);
  return prefix + "-" + h + "-" + date;
}

std::vector<std::string> splitList(const std::vector<std::string>& items) {
  std::vector<std::string> out;
  for (const std::string& item : items) {
    std::stringstream ss(item);
    std::string part;
    while (std::getline(ss, part, ',')) {
      if (!part.empty()) out.push_back(part);
    }
  }
  return out;
}

std::vector<report::Result> runProbeChild(const std::vector<std::string>& extra_args, const std::string& json_path,
                                          const std::string& log_path, double timeout_s, const std::string& peerlab) {
  std::vector<report::Result> rows;
  process::ProcessOptions po;
  // `peerlab probe`: the subcommand (not a suite).
  po.argv = {peerlab.empty() ? selfExecutable() : peerlab, "probe", "--json", json_path, "--no-cache"};
  po.argv.insert(po.argv.end(), extra_args.begin(), extra_args.end());
  po.stdout_path = log_path;
  po.stderr_path = log_path;
  po.timeout = std::chrono::milliseconds(static_cast<long long>(timeout_s * 1000));
  std::error_code ec;
  std::filesystem::remove(json_path, ec);
  std::string error;
  auto proc = process::runProcess(po);
  if (!proc.isOk()) {
    error = proc.status().message();
  } else {
    if (std::filesystem::exists(json_path)) {
      auto run = report::readRun(json_path);
      if (run.isOk()) {
        rows = run->results;
      } else {
        error = run.status().message();
      }
    }
    if (error.empty() && !(proc->exit_code == 0 || proc->exit_code == 1)) {
      std::string last = tailOfFile(log_path, 1);
      if (!last.empty() && last.back() == '\n') last.pop_back();
      error = "peerlab probe: " + process::describeExit(*proc, po.timeout) + (last.empty() ? "" : " (" + last + ")");
    }
    if (error.empty() && rows.empty()) error = "peerlab probe wrote no cells (see " + log_path + ")";
  }
  if (!error.empty()) {
    report::Result r;
    r.suite = probe::kResultSuite;
    r.name = "process";
    r.impl = "peerlab.probe";
    r.status = "failed: " + error;
    rows.push_back(r);
  }
  return rows;
}

std::string shellQuote(const std::string& arg) {
  if (!arg.empty() &&
      arg.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.,/:=+@%") ==
          std::string::npos) {
    return arg;
  }
  std::string q = "'";
  for (char c : arg) {
    if (c == '\'') {
      q += "'\\''";
    } else {
      q += c;
    }
  }
  return q + "'";
}

}  // namespace peerlab::qualify
