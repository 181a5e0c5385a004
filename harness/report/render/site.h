#pragma once
/// The static history site: index.html linking one self-contained page per machine kind with trend plots (change
/// points, commit and driver annotations), the regression list, fleet outliers and pair heatmaps.

#include <string>
#include <vector>

#include "harness/report/render/site_model.h"
#include "reference/core/status.h"

namespace peerlab::report {

/// Writes the site into `out_dir` (created when missing): one page per kind (kindPageName) and its fleet page
/// (fleetPageName, harness/report/render/fleet_page.h: the kind's nodes), chart.min.js once (the trend pages load it
/// from beside them; without Chart.js they say why charts are missing), then index.html. Every file is written through
/// reference/core writeTextFile (a temporary renamed into place; no symlink followed). Series of one group share
/// plots, at most kMaxSeriesPerChart per plot. Heatmaps in GB/s show % of the expected figure (or of the row's best
/// where no cell has one); heatmaps in us show microseconds, coloured against the row's fastest; a heatmap whose gpus
/// is not 1..kMaxHeatmapGpus is named on the page, not drawn.
/// The site is rendered kind by kind: a kind that is `unreadable` (siteModelFromJson names the malformed part), or
/// whose page cannot be written, is listed on index.html as not rendered and the other kinds are written all the same;
/// `failures` (when given) gets one line per such kind and the status is `invalid_argument` naming them. A model of
/// more than kMaxSiteKinds kinds writes nothing; an index.html that cannot be written is the write's error.
Status renderHistorySite(const SiteModel& model, const std::string& out_dir,
                         std::vector<std::string>* failures = nullptr);

/// The file name of a kind's page: "kind-" + the first 40 characters of the kind with anything but [A-Za-z0-9-]
/// replaced by '_' + "-" + 12 hex digits of a hash of the whole kind + ".html": short, stable, and different for kinds
/// that sanitize alike ("a/b", "a_b").
std::string kindPageName(const std::string& kind);

}  // namespace peerlab::report
