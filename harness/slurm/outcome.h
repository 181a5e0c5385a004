#pragma once
/// What a peerlab run on a node means for the node: the one table from `peerlab qualify` and `peerlab health` exit
/// codes (README "Exit codes") to pass, fail, unknown or setup error, and the drain reason each gives.

#include <string>

#include "reference/core/process.h"

namespace peerlab::slurm {

enum class Outcome {
  kPass,     ///< every check passed: the node may take jobs
  kFail,     ///< a check failed: drained with the failed check's reason
  kUnknown,  ///< no verdict (the deadline passed, the run was killed): drained, never a silent pass
  kSetup,    ///< peerlab itself could not run or check anything: the setup-error action (settings)
};
const char* outcomeName(Outcome o);

/// The prefix of every drain reason peerlab writes. It says who wrote the reason; it is not what ownership is decided
/// by (the history's journal is).
inline constexpr const char* kReasonPrefix = "peerlab: ";

struct Judgement {
  Outcome outcome = Outcome::kSetup;
  std::string reason;  ///< the drain reason with kReasonPrefix: "peerlab: nvlink_state GPU0: reset GPU, reseat NVLink"
  std::string what;    ///< how the run ended, for the log: "exit 1 (a check failed)", "timeout after 40 s"
};

/// What ran: qualify (a bundle's results.json) or health (its run file).
enum class RunKind { kQualify, kHealth };

/// Judges a finished run: its process result (`started` false: it could not be started, `start_error` says why),
/// its run file (read for the failed check's reason when it exited 1) and its budget.
///   exit 0 pass; 1 fail (the run's drain reason); 3 fail (no GPU: reboot node); 2, 4 and 5 setup error (bad input,
///   runtime error, nothing checked); the deadline: unknown; killed by a signal: unknown; 126, 127 and anything else,
///   or not started: setup error.
Judgement judge(RunKind kind, bool started, const std::string& start_error, const process::ProcessResult& result,
                const std::string& run_file, double budget_s);

/// A setup error's judgement ("peerlab: setup error: <why>").
Judgement setupError(const std::string& why);

}  // namespace peerlab::slurm
