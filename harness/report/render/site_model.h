#pragma once
/// The history site's data model: what `peerlab history html` builds from the history (history::buildSiteModel) and
/// the site renders (renderHistorySite), one KindModel per machine kind. The structs below are the model; toJson
/// writes it as `history html --model` prints it (and `history regressions` / `history fleet` print their parts), and
/// siteModelFromJson reads one back from untrusted JSON.

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "harness/report/checks.h"
#include "harness/report/compare.h"
#include "reference/core/status.h"

namespace peerlab::report {

/// Most machine kinds one site shows; a model with more is refused before anything is written.
inline constexpr size_t kMaxSiteKinds = 1000;
/// Largest heatmap side (GPUs) drawn.
inline constexpr int kMaxHeatmapGpus = 128;

/// One run's figure in a series.
struct SitePoint {
  std::optional<std::int64_t> run_id;  ///< the stored run; a point without one is told apart by time and commit
  std::string timestamp, git_sha, driver;
  std::optional<double> value;
  std::optional<double> p10, p90;  ///< the within-run spread, in the metric's unit
};

/// A change in a series (E-Divisive): `index` is the first point after it.
struct SiteChangePoint {
  int index = 0;
  std::optional<double> before, after, change_pct, p_value;
  std::optional<double> p_floor;  ///< the smallest p the permutation test resolves ("p < p_floor")
};

/// What names a series or a regression: (suite, impl, name, src, dst, ranks, bytes) and its metric.
struct SiteSeriesKey {
  std::string suite, impl, name;
  std::optional<int> src, dst;
  int ranks = 1;
  std::optional<double> bytes;
  std::string metric, unit;
};

/// One series of a kind, oldest point first; series of one `group` share plots.
struct SiteSeries {
  SiteSeriesKey key;
  std::string id;
  std::string group;  ///< "peer_copy uni peerlab.ce (GB/s)", with " 2/3" where a group is split
  std::string host;   ///< the host of its latest point
  std::vector<SitePoint> points;
  std::vector<SiteChangePoint> change_points;
};

/// A series whose latest change point is a worsening (as `history regressions --json` lists it).
struct SiteRegression {
  SiteSeriesKey key;
  std::string series_id, machine, host, node, kind;
  std::int64_t run_id = 0;  ///< the first run after the change
  std::string git_sha, timestamp, previous_git_sha;
  std::optional<double> before, after, change_pct, p_value, p_floor;
  double worsening_pct = 0;
  std::vector<std::string> fingerprint_changes;  ///< "driver 580.65 -> 580.95"
  ChangeDecision noise_rule;                     ///< written to JSON, not read back (no page shows it)
};

/// A host whose latest figure of a series sits outside its fleet.
struct SiteOutlier {
  std::string host, label, slurm_node, newest_time;
  std::string age;  ///< how old the node's newest run is ("7 d"); "" when not known
  std::string series_id;
  std::optional<double> value, median, mad, z;
};

/// One pair of a heatmap: the figure in the heatmap's unit and, for bandwidth, the expected one.
struct SiteHeatCell {
  int src = 0, dst = 0;
  std::optional<double> value, expected;
};

/// A pair heatmap of a kind's latest run that measured pairs.
struct SiteHeatmap {
  std::string title, unit;
  int gpus = 0;      ///< GPU ordinals 0..gpus-1; a heatmap outside 1..kMaxHeatmapGpus is named, not drawn
  int left_out = 0;  ///< results naming a GPU outside the run's GPUs, not drawn
  std::vector<SiteHeatCell> cells;
};

/// A failed check as stored at ingest, with the id of its recommended action.
struct SiteFailedCheck {
  std::string category, name, action;
};

/// What the fleet page's node x check matrix shows of a run: counts per check category and the first failures.
struct SiteCheckDetails {
  std::map<std::string, CheckCounts> categories;
  std::vector<SiteFailedCheck> failures;
};

/// A node of a kind with its latest run that counts and its recorded scheduler state (as `history fleet --json`
/// lists it; the site adds its age).
struct SiteNode {
  std::string kind;  ///< "" for a node with a recorded state and no run
  std::string node, host, slurm_node, name;
  std::string state, reason, state_recorded_at;  ///< "" when no state was recorded
  std::optional<std::int64_t> run_id;            ///< its latest run; none for a node that never ran
  std::string time, verdict, tool, git_sha;
  std::optional<CheckCounts> checks;              ///< none for runs stored before verdicts were kept
  std::optional<SiteCheckDetails> check_details;  ///< none for runs stored before details were kept
  int outliers = 0;                               ///< its series outside the fleet
  std::optional<std::string> age;                 ///< the site's: how old its latest run is ("" when not known)
};

/// A run counted nowhere (stand-ins, injected faults), as lists and pages show it.
struct SiteInjectedRun {
  std::optional<std::int64_t> run_id;
  std::string kind, host, node, slurm_node, name, time, verdict;
  std::optional<CheckCounts> checks;
  std::string injected;  ///< what was not the machine's own
};

/// A stored run as the model refers to it.
struct SiteRunRef {
  std::int64_t run_id = 0;
  std::string time, git_sha;
};

/// The latest run of a kind and the verdict the checks engine gave it at ingest.
struct SiteVerdict {
  SiteRunRef run;
  std::string verdict;  ///< "PASS", "FAIL", "EMPTY"; "" for runs stored before verdicts were kept
  std::optional<CheckCounts> checks;
};

/// How many of a kind's series are long enough for the change-point test: min_segment runs on each side.
struct SiteTestable {
  int min_runs_to_test = 0;
  int series_testable = 0;
  int series_too_short = 0;
};

/// One machine kind: its trend page and its fleet page.
struct KindModel {
  std::string kind;
  std::vector<SiteSeries> series;
  std::vector<SiteRegression> regressions;
  std::vector<SiteOutlier> fleet;
  std::vector<SiteNode> nodes;  ///< out of service and failing first
  std::vector<SiteHeatmap> heatmaps;
  std::optional<SiteRunRef> heatmaps_run;  ///< the run the heatmaps are of
  std::vector<SiteInjectedRun> injected_runs;
  std::optional<SiteVerdict> latest_verdict;
  int runs = 0;  ///< runs that count, whether or not they left points to draw
  std::optional<SiteTestable> testable;
  /// Set only by siteModelFromJson: why this kind's part of the JSON cannot be used (the site lists the kind as not
  /// rendered, naming it by `kind`, or "kinds[k]" where the JSON gave no name).
  std::string unreadable;
};

struct SiteModel {
  std::string generated;  ///< ISO timestamp
  std::vector<KindModel> kinds;
  std::vector<SiteNode> unrun_nodes;  ///< nodes the scheduler's records name that have no counted run
};

/// Refuses a site of more than kMaxSiteKinds kinds: "the history holds 1001 machine kinds; a site shows at most 1000
/// (nothing written)".
Status checkSiteKinds(size_t kinds);

nlohmann::json toJson(const SiteModel& m);
/// {"suite","impl","name","src","dst","ranks","bytes","metric","unit"}: the fields every series' JSON starts from.
nlohmann::json toJson(const SiteSeriesKey& k);
nlohmann::json toJson(const KindModel& k);
nlohmann::json toJson(const SiteRegression& r);
nlohmann::json toJson(const SiteNode& n);
nlohmann::json toJson(const SiteInjectedRun& r);
/// {} when none (runs stored before verdicts or details were kept).
nlohmann::json toJson(const std::optional<CheckCounts>& c);
nlohmann::json toJson(const std::optional<SiteCheckDetails>& d);

/// Reads a model from untrusted JSON (a file, a fuzz input). A root that is not {"kinds": [...]} ("unrun_nodes", when
/// given, an array), or more than kMaxSiteKinds kinds, is refused with the reason. A kind whose part is malformed is
/// kept with `unreadable` naming the part ("kinds[1].series[0]: needs a \"points\" array"): it needs a non-empty
/// string "kind"; "series", "regressions", "fleet", "heatmaps" and "nodes" arrays where given; each series a
/// "points" array of objects whose "value" is a number or null, and change points whose "index" points into them.
/// Anything else of the wrong type reads as absent; a heatmap whose "gpus" is not a whole number from 1 to 128 or
/// whose "cells" is not an array reads with gpus 0 (named on its page, not drawn).
StatusOr<SiteModel> siteModelFromJson(const nlohmann::json& j);
/// The check details as stored ({} or {"categories", "failures"}), read as siteModelFromJson reads a node's.
std::optional<SiteCheckDetails> checkDetailsFromJson(const nlohmann::json& j);

}  // namespace peerlab::report
