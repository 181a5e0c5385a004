#include "harness/slurm/outcome.h"

#include "harness/report/actions.h"
#include "harness/report/evaluate.h"
#include "harness/report/report.h"
#include "harness/slurm/client.h"

namespace peerlab::slurm {

const char* outcomeName(Outcome o) {
  switch (o) {
    case Outcome::kPass:
      return "pass";
    case Outcome::kFail:
      return "fail";
    case Outcome::kUnknown:
      return "unknown";
    case Outcome::kSetup:
      return "setup";
  }
  return "setup";
}

Judgement setupError(const std::string& why) {
  return {Outcome::kSetup, cleanReason(std::string(kReasonPrefix) + "setup error: " + why), "setup error: " + why};
}

Judgement judge(RunKind kind, bool started, const std::string& start_error, const process::ProcessResult& r,
                const std::string& run_file, double budget_s) {
  const char* name = kind == RunKind::kQualify ? "qualify" : "health";
  if (!started) return setupError(std::string("cannot run peerlab ") + name + ": " + start_error);
  char budget[32];
  std::snprintf(budget, sizeof budget, "%.0f", budget_s);
  if (r.timed_out) {
    return {Outcome::kUnknown, std::string(kReasonPrefix) + "unknown (timeout after " + budget + " s)",
            std::string("timeout after ") + budget + " s"};
  }
  if (r.interrupted) return setupError(std::string("peerlab ") + name + " interrupted");
  if (r.signal != 0) {
    const std::string sig = process::signalName(r.signal);
    return {Outcome::kUnknown, std::string(kReasonPrefix) + "unknown (" + name + " killed by " + sig + ")",
            "killed by " + sig};
  }
  const std::string exit = "exit " + std::to_string(r.exit_code);
  switch (r.exit_code) {
    case 0:
      return {Outcome::kPass, "", exit + " (pass)"};
    case 1: {
      std::string why;
      if (auto run = report::readRun(run_file); run.isOk()) why = report::drainReason(report::verdictOf(*run).checks);
      if (why.empty()) why = "a check failed (its run file does not say which)";
      return {Outcome::kFail, cleanReason(std::string(kReasonPrefix) + why), exit + " (a check failed)"};
    }
    case 3:
      return {
          Outcome::kFail,
          std::string(kReasonPrefix) + (kind == RunKind::kHealth ? "NVML shows no GPU (driver not loaded?): reboot node"
                                                                 : "no GPU visible: reboot node"),
          exit + " (no GPU)"};
    case 2:
      return setupError(std::string(name) + " refused its input (exit 2)");
    case 4:
      return setupError(std::string(name) + " runtime error (exit 4)");
    case 5:
      return setupError(std::string(name) + " checked nothing (exit 5)");
    default:
      return setupError(std::string("peerlab ") + name + " could not run (exit " + std::to_string(r.exit_code) + ")");
  }
}

}  // namespace peerlab::slurm
