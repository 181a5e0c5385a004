#pragma once
/// The self-contained HTML report of a run: inline CSS, Chart.js charts (the library inlined, see chart_page.h), pair
/// matrices and tables. No external scripts, fonts, styles or images.

#include <string>
#include <string_view>
#include <vector>

#include "harness/report/checks.h"
#include "harness/report/render/chart_page.h"
#include "harness/report/report.h"

namespace peerlab::report {

struct HtmlOptions {
  std::string title;  ///< default "peerlab report: <kind, node (host)>" (machineTitle)
};

/// Renders the report of `run` and its evaluated `checks` (the checks engine's, made once by the caller and handed to
/// every renderer alike: the console, summary.md, junit.xml and this page show the same checks and counts). The page's
/// script (pageEnd() in chart_page.h) sets data-peerlab-ready="ok" on <html> once every chart is drawn ("no-chartjs"
/// without the library, "error: ..." otherwise), data-peerlab-charts to the number drawn and data-peerlab-height to
/// the page height. Sections, in this order, each left out where the run has nothing for it: checks, bandwidth and
/// time against size, pair matrices, probe, latency, host copies, machine health, tests, topology, machine, benchmark
/// processes, failed and skipped, all results.
std::string renderHtml(const Run& run, const std::vector<Check>& checks, const HtmlOptions& options = {});

}  // namespace peerlab::report
