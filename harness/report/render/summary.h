#pragma once
/// summary.md: the verdict, the machine, failed checks first, then the figures that matter, in Markdown.

#include <string>
#include <vector>

#include "harness/report/checks.h"
#include "harness/report/report.h"

namespace peerlab::report {

struct SummaryOptions {
  std::string title = "peerlab qualify";
  std::string command;             ///< the command line that produced the run, shown verbatim
  std::vector<std::string> files;  ///< files of the bundle, listed at the end
  std::vector<std::string> notes;  ///< extra lines (config used, baseline used, plan source)
  bool verdict = true;             ///< title with PASS/FAIL and the check counts (off for a plain run without checks)
};

std::string renderSummary(const Run& run, const std::vector<Check>& checks, const SummaryOptions& options = {});

/// "<short>: <text>" of a failed check's recommended action (harness/report/actions.h), "" when it has none.
std::string actionLine(const Check& c);
/// The console's view of checks (`peerlab qualify` and `peerlab report` print it): one line per check that did not
/// pass, failures first, "FAIL category: name: measured M, expected E (basis): reason", a failed check followed by
/// "  action: <short>: <text>".
std::string formatCheckLines(const std::vector<Check>& checks);

}  // namespace peerlab::report
