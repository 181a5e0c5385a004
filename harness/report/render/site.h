#pragma once
/// The static history site: index.html linking one self-contained page per machine kind with trend plots (change
/// points, commit and driver annotations), the regression list, fleet outliers and pair heatmaps.

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>
#include <vector>

#include "reference/core/status.h"

namespace peerlab::report {

/// Most machine kinds one site shows; a model with more is refused before anything is written.
inline constexpr size_t kMaxSiteKinds = 1000;

/// Writes the site into `out_dir` (created when missing): one page per kind (kindPageName) and its fleet page
/// (fleetPageName, harness/report/render/fleet_page.h: the kind's "nodes"), chart.min.js once (the trend pages load it
/// from beside them; without Chart.js they say why charts are missing), then index.html. Every file is written through
/// reference/core writeTextFile (a temporary renamed into place; no symlink followed). The model:
/// {"generated": ISO, "kinds": [{"kind",
///   "series": [{"id","group","suite","impl","name","src","dst","ranks","bytes","metric","unit","host",
///               "points": [{"run_id","timestamp","git_sha","driver","value","p10","p90"}],   (oldest first)
///               "change_points": [{"index","before","after","change_pct","p_value"}]}],    (index into points)
///   "regressions": [{"suite","impl","name","src","dst","ranks","bytes","metric","host","git_sha","timestamp",
///                    "before","after","change_pct","p_value","fingerprint_changes":[...]}],
///   "fleet": [{"host","series_id","value","median","mad","z"}],
///   "heatmaps": [{"title","unit","gpus","cells": [{"src","dst","value","expected"}],"left_out"}]}]}
/// Series of one "group" share plots, at most kMaxSeriesPerChart per plot. Heatmaps in GB/s show % of "expected"
/// (or of the row's best where no cell has an expectation); heatmaps in us show microseconds, coloured against the
/// row's fastest; a heatmap without a usable "gpus" (1..128) or "cells" is named on the page, not drawn.
/// The site is rendered kind by kind: a kind whose part of the model is malformed (the message names the part), or
/// whose page cannot be written, is listed on index.html as not rendered and the other kinds are written all the same;
/// `failures` (when given) gets one line per such kind and the status is `invalid_argument` naming them. A model whose
/// root is not {"kinds": [...]} writes nothing; an index.html that cannot be written is the write's error.
Status renderHistorySite(const nlohmann::json& model, const std::string& out_dir,
                         std::vector<std::string>* failures = nullptr);

/// The file name of a kind's page: "kind-" + the first 40 characters of the kind with anything but [A-Za-z0-9-]
/// replaced by '_' + "-" + 12 hex digits of a hash of the whole kind + ".html": short, stable, and different for kinds
/// that sanitize alike ("a/b", "a_b").
std::string kindPageName(const std::string& kind);

}  // namespace peerlab::report
