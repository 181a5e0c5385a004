#pragma once
/// Builds the history site's data model (report::SiteModel, harness/report/render/site_model.h) from a history:
/// what `peerlab history html` renders.

#include <string>

#include "harness/history/analysis.h"
#include "harness/history/store.h"
#include "harness/report/render/site_model.h"

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
StatusOr<report::SiteModel> buildSiteModel(HistoryStore& store, const SiteOptions& options = {});

/// Heatmaps of one run: per (suite, name, impl) with pair results, bandwidth at the largest size in GB/s with the
/// run's expected figure beside each cell where its plan has one (the page shows the percentage), and time at the
/// smallest size in us. Cells naming a GPU outside [0, gpus) (the run's GPU count; report::kMaxHeatmapGpus when 0, and
/// at most that) are counted in left_out and not drawn.
std::vector<report::SiteHeatmap> runHeatmaps(const std::vector<StoredResult>& results,
                                             const nlohmann::json& expectations, int gpus = 0);

}  // namespace peerlab::history
