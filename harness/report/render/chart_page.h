#pragma once
/// Page and chart helpers shared by the single-run report and the history site: a self-contained HTML page with
/// Chart.js (Debian's libjs-chart.js, found at configure time) inlined, charts declared as JSON configs that one
/// boot script draws, and colour scales for pair heatmaps.

#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "harness/report/render/escape.h"
#include "harness/report/render/format.h"

namespace peerlab::report {

/// A plot holds at most this many measured series; bigger groups are split over several plots.
inline constexpr size_t kMaxSeriesPerChart = 8;

/// The one palette every chart draws its series from: nine colours that stay distinct from one another (Tableau 10
/// without its red, which pages keep for failed checks).
const std::vector<std::string>& chartPalette();

/// One colour per implementation on a page, from chartPalette(): every chart draws an implementation in the same
/// colour, and implementations of one suite (drawn together) get different colours where the palette allows. Built
/// from every (suite, implementation) a page shows, in a stable order, so the same set gets the same colours on every
/// page.
class ImplColours {
 public:
  ImplColours() = default;
  explicit ImplColours(const std::vector<std::pair<std::string, std::string>>& suite_impls);
  /// The implementation's colour; "" when it was not among those given.
  std::string of(const std::string& impl) const;
  const std::map<std::string, std::string>& all() const { return colour_; }

 private:
  std::map<std::string, std::string> colour_;
};

/// Path of chart.min.js: $PEERLAB_CHARTJS when set (empty: none), else share/peerlab/chart.min.js of the tree peerlab
/// runs from, else the file CMake found; "" when none.
std::string chartJsPath();

/// Largest Chart.js build read (Chart.js 3 and 4 minified are about 200 KB).
inline constexpr size_t kMaxChartJsBytes = size_t{4} << 20;

/// Chart.js as read from chartJsPath(), once per path: a regular file of at most kMaxChartJsBytes (a FIFO, a device
/// such as /dev/zero or a directory is refused without blocking or reading it).
struct ChartJsFile {
  std::string path;
  std::string source;   ///< "" when not usable
  std::string problem;  ///< why not, for the pages' notice: "$PEERLAB_CHARTJS /dev/zero: not a regular file"
};
const ChartJsFile& chartJs();
/// chartJs().source.
std::string chartJsSource();

/// How a page gets Chart.js.
enum class ChartJsUse {
  kNone,    ///< the page draws no chart
  kInline,  ///< inlined into the page (a single self-contained report)
  kShared,  ///< <script src="chart.min.js">: the file beside the page, written once per site
};
/// The shared library's file name beside the pages of a site.
inline constexpr const char* kSharedChartJsName = "chart.min.js";

/// The start of a page up to and including <body>: title, the shared CSS plus `extra_css`. The shared CSS holds the
/// classes of a cell's state: cell-ok, cell-fail (a failed check, the only red), cell-warn, cell-info (ok, with
/// counters worth a look), cell-skip (not run: skipped or unsupported, hatched grey), cell-na (does not apply: nothing
/// measured there), cell-self (a GPU with itself); and .tablebox, a box that scrolls a wide table sideways.
std::string pageBegin(const std::string& title, const std::string& extra_css = "");
/// The end of a page: Chart.js as `use` says, the notice shown (moved to the top) when a page with charts cannot draw
/// them, and the boot script, then </body></html>. The script draws every chart and sets on <html>:
/// data-peerlab-ready ("ok", "no-chartjs" when charts were declared but Chart.js is missing, or "error: ..."),
/// data-peerlab-charts (charts drawn), data-peerlab-chart-blocks (charts declared) and data-peerlab-height (page
/// height in px, for screenshots).
std::string pageEnd(ChartJsUse use = ChartJsUse::kInline);

/// One series of a line chart: points are {"x": number or label, "y": number, "note": tooltip text (optional)}.
struct ChartSeries {
  std::string label;
  nlohmann::json points = nlohmann::json::array();
  bool dashed = false;  ///< baselines (NCCL, CUDA) are drawn dashed
  std::string colour;   ///< the implementation's (ImplColours); "" takes the palette's next colour
};

/// A marker set drawn over a chart (change points, driver changes): not counted in kMaxSeriesPerChart.
struct ChartMarkers {
  std::string label;
  std::string colour;
  std::string shape;  ///< Chart.js pointStyle: "triangle", "rectRot", "star"
  nlohmann::json points = nlohmann::json::array();
};

struct LineChart {
  std::string title;
  std::string x_label;  ///< with its unit: "message size (bytes)", "run (oldest first)"
  std::string y_label;  ///< with its unit: "algbw (GB/s)", "time (us)"
  bool x_log = false;
  bool y_log = false;
  bool y_autoscale = false;  ///< a linear y axis zooms to the data instead of starting at 0 (its title says so)
  bool x_bytes = false;      ///< x values are log2(bytes) on a linear axis, ticks labelled as sizes (4 KiB, 256 MiB)
  std::vector<std::string> x_labels;  ///< category axis when not empty (points then use these labels as x)
  std::vector<ChartSeries> series;    ///< at most kMaxSeriesPerChart; coloured from chartPalette() in order
  std::vector<ChartMarkers> markers;
};

/// The Chart.js config of a chart (exposed for tests).
nlohmann::json chartConfig(const LineChart& chart);
/// A chart block: a canvas and its config; drawn by pageEnd()'s script.
std::string chartBlock(const LineChart& chart);

/// Splits `n` items into consecutive groups of at most `max_per_group` (sizes as even as possible).
std::vector<std::pair<size_t, size_t>> splitEvenly(size_t n, size_t max_per_group);

/// Background colour for a heatmap cell at `fraction` of its reference. `checked`: the reference is the figure a check
/// expects, so the cell is red below 1 (its check fails) and green from 1. Otherwise (the row's best or fastest, which
/// no check compares against) amber at 0.7 and below, shading to green at 0.95 and above: a weak link stands out,
/// but only a failed check is red.
std::string fractionColour(double fraction, bool checked = false);

/// How a suite counts the bytes behind its bandwidth (GB/s is 10^9 bytes per second everywhere); "" for suites that
/// show no bandwidth.
std::string bytesConvention(const std::string& suite);

/// One cell of a pair heatmap.
struct HeatCell {
  std::optional<double> value;     ///< in the heatmap's unit; none: not measured
  std::optional<double> expected;  ///< the figure the cell should reach (bandwidth), when known
  std::string status;              ///< "" or "ok"; else shown instead of a value (failed, skipped)
};

/// A pair heatmap as an HTML table (row = source GPU, column = destination), `cells` row-major gpus x gpus.
/// Bandwidth (unit "GB/s"): cells with an expected figure show % of it; others are coloured against the row's best.
/// Time (unit "us"): microseconds, coloured against the row's fastest pair. Red only where a cell's expected figure
/// is missed (fractionColour); skipped cells are hatched, pairs without a result "n/a", the diagonal grey.
std::string heatmapTable(const std::string& title, const std::string& unit, int gpus,
                         const std::vector<HeatCell>& cells);

}  // namespace peerlab::report
