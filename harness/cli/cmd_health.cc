// peerlab health: machine health through NVML (PCIe link and errors, NVLink, fabric, ECC, retired pages, row remap,
// XIDs and clock event reasons over a watch), with the thresholds of the qualify config's [health] section.
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "harness/cli/command.h"
#include "harness/health/health.h"
#include "harness/health/stage.h"
#include "harness/qualify/config.h"
#include "harness/report/report.h"
#include "reference/core/process.h"

namespace peerlab::cli {
namespace {

constexpr const char* kCmd = "health";

struct HealthArgs {
  std::string config;
  std::string json;
  double watch_s = 5;
};

int runHealth(const HealthArgs& a) {
  std::string text = qualify::defaultConfigText();
  if (!a.config.empty()) {
    std::ifstream f(a.config);
    if (!f) return fail(kCmd, kExitUsage, a.config + ": cannot read");
    std::stringstream ss;
    ss << f.rdbuf();
    text = ss.str();
  }
  auto t = health::parseThresholds(text, a.config.empty() ? "built-in reports/qualify.toml" : a.config);
  if (!t.isOk()) return fail(kCmd, kExitUsage, t.status().message());

  report::Run run = report::newRun();
  run.fingerprint = report::collectFingerprint();
  health::Stage stage = health::Stage::begin(*t, run.fingerprint, a.watch_s + 60, stdout);
  if (!stage.unavailable().empty()) return fail(kCmd, kExitNoGpu, stage.unavailable());
  std::vector<health::CheckResult> checks = stage.end(run, a.watch_s, process::interruptRequested);
  if (checks.empty()) return fail(kCmd, kExitNoGpu, "NVML shows no GPU");

  int failed = 0, warned = 0, unsupported = 0;
  for (const health::CheckResult& c : checks) {
    failed += c.verdict == health::Verdict::kFail;
    warned += c.verdict == health::Verdict::kWarn;
    unsupported += c.verdict == health::Verdict::kUnsupported;
    std::printf("%-11s GPU %d %-14s %s\n", health::verdictName(c.verdict), c.gpu, c.name.c_str(), c.detail.c_str());
  }
  if (!a.json.empty()) {
    if (Status st = report::writeRun(run, a.json); !st.isOk()) return fail(kCmd, kExitUsage, st.message());
  }
  std::printf("peerlab health: %s: %zu checks, %d failed, %d warnings, %d unsupported\n", failed ? "FAIL" : "PASS",
              checks.size(), failed, warned, unsupported);
  return failed ? kExitCheckFailed : kExitOk;
}

std::function<int()> setup(CLI::App& sub) {
  auto a = std::make_shared<HealthArgs>();
  sub.add_option("--config", a->config, "Thresholds file (default: the built-in reports/qualify.toml, [health])");
  sub.add_option("--watch", a->watch_s, "Seconds to watch for XID events and clock event reasons (default 5)")
      ->check(CLI::Range(0.0, 86400.0));
  sub.add_option("--json", a->json, "Write the results as a run file");
  return [a] { return runHealth(*a); };
}

}  // namespace

PEERLAB_REGISTER_COMMAND(health, "health",
                         "Machine health through NVML: PCIe, NVLink, fabric, ECC, row remap, XIDs, clock events",
                         setup);

}  // namespace peerlab::cli
