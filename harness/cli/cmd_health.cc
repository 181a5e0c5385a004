// peerlab health: machine health through NVML (PCIe link and errors, NVLink, fabric, ECC, retired pages, row remap,
// XIDs and clock event reasons over a watch), with the thresholds of the qualify config's [health] section.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>

#include "harness/cli/command.h"
#include "harness/health/health.h"
#include "harness/health/stage.h"
#include "harness/qualify/config.h"
#include "harness/report/actions.h"
#include "harness/report/evaluate.h"
#include "harness/report/report.h"
#include "reference/core/process.h"
#include "reference/core/text.h"

namespace peerlab::cli {
namespace {

constexpr const char* kCmd = "health";

struct HealthArgs {
  std::string config;
  std::string json;
  std::string watch = "1";
  std::string node;
  bool nvml_only = false;
};

int runHealth(const HealthArgs& a) {
  std::string text = qualify::defaultConfigText();
  if (!a.config.empty()) {
    auto read = qualify::readConfigText(a.config);
    if (!read.isOk()) return fail(kCmd, kExitUsage, read.status().message());
    text = std::move(*read);
  }
  auto t = health::parseThresholds(text, a.config.empty() ? "built-in reports/qualify.toml" : a.config);
  if (!t.isOk()) return fail(kCmd, kExitUsage, t.status().message());
  auto watch = parseNumberOption("--watch", a.watch, 0, 86400);
  if (!watch.isOk()) return fail(kCmd, kExitUsage, watch.status().message());
  const double watch_s = *watch;
  // With --json - the run file is stdout's only content; the check lines go to stderr.
  FILE* out = summaryStream(a.json);

  report::Run run = report::newRun();
  const auto t0 = std::chrono::steady_clock::now();
  if (a.nvml_only) {
    // Nothing of CUDA is touched: no driver context on GPUs users' jobs hold.
    auto fp = health::nvmlFingerprint();
    if (!fp.isOk()) return fail(kCmd, kExitNoGpu, fp.status().message());
    run.fingerprint = *fp;
  } else {
    run.fingerprint = report::collectFingerprint({.probe = false, .nvml = true});
  }
  auto node = report::localNodeIdentity(run.fingerprint, a.node);
  if (!node.isOk()) return fail(kCmd, kExitUsage, node.status().message());
  run.node = *node;
  const double fingerprint_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  health::Stage stage = health::Stage::begin(*t, run.fingerprint, watch_s + 60, out, !a.nvml_only);
  if (!stage.unavailable().empty()) return fail(kCmd, kExitNoGpu, stage.unavailable());
  std::vector<health::CheckResult> checks = stage.end(run, watch_s, process::interruptRequested);
  if (checks.empty()) return fail(kCmd, kExitNoGpu, "NVML shows no GPU");
  if (run.extra["health"].contains("timing")) run.extra["health"]["timing"]["fingerprint_s"] = fingerprint_s;

  // A failed check's recommended action, from the checks engine (as qualify and report print it).
  std::map<std::string, std::string> actions;
  for (const report::Check& c : report::evaluateChecks(run, nullptr))
    if (c.failed()) actions[c.name] = report::actionLine(c);
  int failed = 0, warned = 0, unsupported = 0;
  std::string firstFailed;
  for (const health::CheckResult& c : checks) {
    failed += c.verdict == health::Verdict::kFail;
    warned += c.verdict == health::Verdict::kWarn;
    unsupported += c.verdict == health::Verdict::kUnsupported;
    if (c.verdict == health::Verdict::kFail && firstFailed.empty()) {
      firstFailed = "GPU " + std::to_string(c.gpu) + " " + c.name + (c.detail.empty() ? "" : ": " + c.detail);
    }
    std::fprintf(out, "%-11s GPU %d %-14s %s\n", health::verdictName(c.verdict), c.gpu, c.name.c_str(),
                 printable(c.detail, 300).c_str());
    const auto a = actions.find(c.name + " GPU " + std::to_string(c.gpu));
    if (c.verdict == health::Verdict::kFail && a != actions.end() && !a->second.empty())
      std::fprintf(out, "%-11s action: %s\n", "", a->second.c_str());
  }
  if (!a.json.empty()) {
    Status st = writeOutput(a.json, report::toJson(run).dump(2) + "\n");
    if (!st.isOk()) return fail(kCmd, kExitUsage, "--json: " + st.message());
  }
  // Before the summary line, which stays the last (the Slurm health check logs it).
  if (run.fingerprint.injected.any()) {
    std::fprintf(out, "peerlab health: INJECTED: %s: these readings are not this machine's own\n",
                 printable(run.fingerprint.injected.describe(), 600).c_str());
  }
  std::fprintf(out, "peerlab health: %s: %zu checks, %d failed, %d warnings, %d unsupported\n",
               failed ? "FAIL" : "PASS", checks.size(), failed, warned, unsupported);
  if (failed) {
    return fail(kCmd, kExitCheckFailed,
                "FAIL: " + std::to_string(failed) + " of " + std::to_string(checks.size()) +
                    " checks failed (first: " + printable(firstFailed, 200) + ")");
  }
  return kExitOk;
}

std::function<int()> setup(CLI::App& sub) {
  auto a = std::make_shared<HealthArgs>();
  sub.add_option("--config", a->config, "Thresholds file (default: the built-in reports/qualify.toml, [health])");
  sub.add_option("--watch", a->watch,
                 "Seconds to watch for XID events and clock event reasons, 0 to 86400 (default 1: the whole check in a "
                 "few seconds, as a scheduler's health program needs)");
  sub.add_option("--json", a->json, "Write the results as a run file (\"-\": stdout, the check lines to stderr)");
  sub.add_option("--node", a->node,
                 "The Slurm NodeName the run is for (default $SLURMD_NODENAME): the history keys node states by it");
  sub.add_flag("--nvml-only", a->nvml_only,
               "Read NVML alone: no CUDA (no driver context), no copies to wake the PCIe links (read as they are). "
               "For nodes running users' jobs; GPUs are numbered as NVML numbers them");
  return [a] { return runHealth(*a); };
}

}  // namespace

PEERLAB_REGISTER_COMMAND(health, "health",
                         "Machine health through NVML: PCIe, NVLink, fabric, ECC, row remap, XIDs, clock events",
                         setup);

}  // namespace peerlab::cli
