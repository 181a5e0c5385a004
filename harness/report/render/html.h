#pragma once
/// The self-contained HTML report of a run: inline CSS, Chart.js charts (the library inlined, see chart_page.h), pair
/// matrices and tables. No external scripts, fonts, styles or images.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "harness/report/checks.h"
#include "harness/report/render/chart_page.h"
#include "harness/report/report.h"

namespace peerlab::report {

struct HtmlOptions {
  std::string title;                         ///< default "peerlab report: <hostname>"
  std::optional<std::vector<Check>> checks;  ///< default: the run's own "qualify"."checks", when it has them
};

/// Renders the report. The page's script (pageEnd() in chart_page.h) sets data-peerlab-ready="ok" on <html> once every
/// chart is drawn ("no-chartjs" without the library, "error: ..." otherwise), data-peerlab-charts to the number drawn
/// and data-peerlab-height to the page height.
std::string renderHtml(const Run& run, const HtmlOptions& options = {});

}  // namespace peerlab::report
