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

}  // namespace peerlab::report
