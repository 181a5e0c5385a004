#pragma once
/// The static history site: index.html linking one self-contained page per machine kind with trend plots (change
/// points, commit and driver annotations), the regression list, fleet outliers and pair heatmaps.

#include <nlohmann/json.hpp>

#include <string>

#include "reference/core/status.h"

namespace peerlab::report {

/// Writes the site into `out_dir` (created when missing): index.html and kind-<name>.html per kind. The model:
/// {"generated": ISO, "kinds": [{"kind",
///   "series": [{"id","group","suite","impl","name","src","dst","ranks","bytes","metric","unit","host",
///               "points": [{"run_id","timestamp","git_sha","driver","value","p10","p90"}],   (oldest first)
///               "change_points": [{"index","before","after","change_pct","p_value"}]}],    (index into points)
///   "regressions": [{"suite","impl","name","src","dst","ranks","bytes","metric","host","git_sha","timestamp",
///                    "before","after","change_pct","p_value","fingerprint_changes":[...]}],
///   "fleet": [{"host","series_id","value","median","mad","z"}],
///   "heatmaps": [{"title","unit","gpus","cells": [{"src","dst","value","expected"}]}]}]}
/// Series of one "group" share plots, at most kMaxSeriesPerChart per plot. Heatmaps in GB/s show % of "expected"
/// (or of the row's best where no cell has an expectation); heatmaps in us show microseconds, coloured against the
/// row's fastest. `invalid_argument` names the first malformed part of the model; `internal` a write that failed.
Status renderHistorySite(const nlohmann::json& model, const std::string& out_dir);

/// The file name of a kind's page: "kind-" + the kind with anything but [A-Za-z0-9._-] replaced by '_' + ".html".
std::string kindPageName(const std::string& kind);

}  // namespace peerlab::report
