#pragma once
/// Pieces `peerlab bench`, `qualify` and `repro` share: topology loading for planning, GPU presence, default output
/// names, comma lists.

#include <string>
#include <vector>

#include "harness/qualify/plan.h"
#include "harness/report/report.h"
#include "reference/core/status.h"

namespace peerlab::qualify {

/// Most GPUs of one machine peerlab plans for (the probe's workers take at most as many); a topology with more is
/// refused before anything is planned.
inline constexpr int kMaxPlanGpus = 64;

/// The plan's view of the live machine (`fixture` empty) or of a topology XML file. `invalid_argument` names a bad
/// file or one of more than kMaxPlanGpus GPUs; the live machine without GPUs loads (with none).
StatusOr<PlanTopology> loadPlanTopology(const std::string& fixture);

/// Ok when CUDA sees at least one GPU; otherwise the reason (no driver, no device).
Status cudaGpusVisible();

/// "<prefix>-<host>-<YYYYmmdd-HHMMSS>" in local time, e.g. peerlab-qualify-h200-20261121-090000.
std::string defaultOutputName(const std::string& prefix);

/// Splits "a,b" entries of a repeatable option into a flat list (empty entries dropped).
std::vector<std::string> splitList(const std::vector<std::string>& items);

/// The verified probe as a child process: `<peerlab> probe --json <json_path> --no-cache <extra_args>` (`peerlab` is
/// this binary when empty), output in `log_path`, under a deadline. Returns its run file's rows; a probe that could not
/// run, crashed or wrote nothing adds one failed row (suite probe, name "process") saying why. Exit 1 (a claimed cell
/// failed) is a result, not a failure of the run.
std::vector<report::Result> runProbeChild(const std::vector<std::string>& extra_args, const std::string& json_path,
                                          const std::string& log_path, double timeout_s,
                                          const std::string& peerlab = "");

/// Quotes an argument for a shell command line when it needs it.
std::string shellQuote(const std::string& arg);

}  // namespace peerlab::qualify
