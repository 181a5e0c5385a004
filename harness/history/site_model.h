#pragma once
/// The history site's data model (one page per machine kind): what `peerlab history html` hands the renderer.
///
/// {"generated", "kinds":[{"kind", "series":[{"id","group","suite","impl","name","src","dst","ranks","bytes","metric",
///   "unit","host","points":[{"run_id","timestamp","git_sha","driver","value","p10","p90"}],
///   "change_points":[{"index","before","after","change_pct","p_value"}]}], "regressions":[...as `history
///   regressions --json`...], "fleet":[{"host","series_id","value","median","mad","z"}],
///   "heatmaps":[{"title","unit","gpus" (count),"cells":[{"src","dst","value","expected"}],"left_out" (cells not
///   drawn, when any)}], "nodes":[...as `history fleet --json` "nodes", out of service and failing first...],
///   "runs" (the runs that count), "latest_verdict":{"run_id","time","git_sha","verdict","checks"},
///   "min_runs_to_test", "series_testable", "series_too_short" (series shorter than the change-point test needs:
///   min_segment runs on each side), "injected_runs":[...injectedRunJson: runs counted nowhere...]}]}

#include <nlohmann/json.hpp>

#include <string>

#include "harness/history/analysis.h"
#include "harness/history/store.h"

namespace peerlab::history {

/// Most series drawn in one plot; a larger group is split into parts.
inline constexpr size_t kMaxSeriesPerPlot = 8;

struct SiteOptions {
  EDivisiveOptions detect;
  double threshold_pct = 3.0;  ///< worsening listed as a regression
  FleetOptions fleet;
  std::string generated;  ///< ISO timestamp; now when empty
};

/// Loads the history, finds change points, regressions and fleet outliers, and builds the model.
StatusOr<nlohmann::json> buildSiteModel(HistoryStore& store, const SiteOptions& options = {});

/// Largest heatmap drawn for a run that does not say how many GPUs it had.
inline constexpr int kMaxHeatmapGpus = 128;

/// Heatmaps of one run: per (suite, name, impl) with pair results, bandwidth at the largest size in GB/s with the
/// run's expected figure beside each cell where its plan has one (the page shows the percentage), and time at the
/// smallest size in us. Cells naming a GPU outside [0, gpus) (the run's GPU count; kMaxHeatmapGpus when 0) are
/// counted in "left_out" and not drawn.
nlohmann::json runHeatmaps(const std::vector<StoredResult>& results, const nlohmann::json& expectations, int gpus = 0);

}  // namespace peerlab::history
