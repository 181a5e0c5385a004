#pragma once
/// Series over the stored history, their change points, the regressions among them and fleet outliers.

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "harness/history/edivisive.h"
#include "harness/history/store.h"
#include "harness/report/compare.h"
#include "harness/report/metric.h"
#include "harness/report/render/site_model.h"

namespace peerlab::history {

struct SeriesPoint {
  std::int64_t run_id = 0;
  double value = 0;
  std::optional<double> p10;  ///< in the metric's unit (bandwidth from the p90 time, and the other way round)
  std::optional<double> p90;
};

/// One series: (machine, suite, impl, name, src, dst, ranks, bytes) and its metric, oldest point first.
struct Series {
  std::string id;       ///< "h200-x4-nvswitch/peer_copy/peerlab.ce/uni/0->1/r1/268435456"
  std::string machine;  ///< kind, or the node (runs without a kind); "<kind>@<node>" with --by-host
  std::string suite, impl, name;
  std::optional<int> src, dst;
  int ranks = 1;
  std::optional<double> bytes;
  report::SeriesMetric metric;
  std::vector<SeriesPoint> points;
  std::vector<ChangePoint> change_points;
};

struct History {
  std::vector<RunInfo> runs;                 ///< oldest first; only the runs that count (none injected)
  std::vector<RunInfo> injected;             ///< runs with stand-ins or injected faults: listed, never counted
  std::map<std::int64_t, size_t> run_index;  ///< run id -> position in `runs`
  std::vector<Series> series;
  const RunInfo& run(std::int64_t id) const { return runs[run_index.at(id)]; }
};

struct HistoryOptions {
  std::string kind;      ///< only runs of this kind (or node, or host) when not empty
  bool by_host = false;  ///< one series per node within each kind
};

/// Whether a run is selected by --kind: its kind (or an alias of it), its node or its host.
bool machineMatches(const RunInfo& run, const std::string& kind);

/// Reads every run and result; keeps performance results (report::seriesMetric) whose status is ok and whose value
/// is positive. A run with stand-ins or injected faults (RunInfo::injected) goes to `injected` and into no series.
StatusOr<History> loadHistory(HistoryStore& store, const HistoryOptions& options = {});

/// Finds change points in every series, on `threads` threads (0: one per core).
void detectChangePoints(History& history, const EDivisiveOptions& options = {}, int threads = 0);

struct Regression {
  const Series* series = nullptr;
  ChangePoint change;
  const RunInfo* run = nullptr;       ///< the first run after the change
  const RunInfo* previous = nullptr;  ///< the run before it
  double worsening_pct = 0;           ///< positive: worse, whatever the metric's direction
  std::vector<std::string> fingerprint_changes;
  report::ChangeDecision decision;  ///< the noise rule's decision (test "e-divisive")
};

/// Series whose latest change point the noise rule (report::decideChange, its test E-Divisive's, minimum effect
/// `threshold_pct`) calls a regression, worst first.
std::vector<Regression> findRegressions(const History& history, double threshold_pct);
/// What changed between two runs: host, driver, CUDA, NCCL, GPUs ("driver 580.65 -> 580.95").
std::vector<std::string> fingerprintChanges(const RunInfo& before, const RunInfo& after);
/// As the site model and `history regressions --json` carry it.
report::SiteRegression siteRegression(const Regression& r);
nlohmann::json toJson(const Regression& r);

struct FleetOptions {
  double z_threshold = 3.5;     ///< modified z-score (Iglewicz and Hoaglin): 0.6745 (x - median) / MAD
  double min_change_pct = 3.0;  ///< and at least this far from the median
  int min_hosts = 4;            ///< fewer hosts of a kind are not a fleet
};

/// How a node is named wherever peerlab lists nodes (fleet page, trend page outliers, `history fleet`): its Slurm
/// NodeName where its runs record one, else its identity with the host name ("gpus-3fa2b81c04d9 (host vm)": cloud VMs
/// share host names), else the host name.
std::string nodeLabel(const std::string& slurm_node, const std::string& identity, const std::string& host);
/// Whole seconds from `time` to `now` (both ISO 8601); nullopt when either does not read.
std::optional<long long> ageSeconds(const std::string& time, const std::string& now);
/// An age as pages print it: "40 s", "12 min", "5 h", "7 d".
std::string ageText(long long seconds);

struct FleetOutlier {
  std::string machine;      ///< the kind
  std::string host;         ///< the host name of the node's latest run
  std::string node;         ///< the node (its identity; the host name for runs stored before identities were kept)
  std::string slurm_node;   ///< its Slurm NodeName, where its runs record one
  std::string label;        ///< nodeLabel()
  std::string newest_time;  ///< the time of the node's newest run of any kind
  const Series* series = nullptr;
  std::int64_t run_id = 0;
  double value = 0, median = 0, mad = 0;
  double z = 0;                     ///< signed modified z-score; the outlier is on the worse side
  report::ChangeDecision decision;  ///< the noise rule's decision (test "mad-z", minimum effect min_change_pct)
};

/// Per kind and series, the hosts whose latest figure sits on the worse side of the fleet beyond the threshold,
/// largest |z| first. Series must be grouped by kind (not by host).
std::vector<FleetOutlier> fleetOutliers(const History& history, const FleetOptions& options = {});
nlohmann::json toJson(const FleetOutlier& f);

/// One node of a kind's fleet: its latest run of that kind, its recorded scheduler state, and how many of its series
/// sit outside the fleet (reported, never a reason to drain by themselves).
struct FleetNode {
  std::string machine;     ///< the kind; "" for a node with a recorded state and no run in the history
  std::string node;        ///< the node's identity (RunInfo::nodeOrHost)
  std::string host;        ///< the host name of its latest run
  std::string slurm_node;  ///< the Slurm NodeName its newest run that names one ran under
  std::string name;        ///< how it is shown: nodeLabel()
  const RunInfo* latest = nullptr;
  std::optional<NodeState> state;
  int outliers = 0;
  bool outOfService() const { return state && state->outOfService(); }
  bool failed() const { return latest && latest->verdict == "FAIL"; }
  /// Its latest run checked nothing (EMPTY): never a pass.
  bool unchecked() const { return latest && latest->verdict == "EMPTY"; }
};

/// Every node of every kind in `history` (its latest run that counts, whatever its verdict): drained and down nodes
/// first, then nodes whose latest run failed, then those whose latest run checked nothing (EMPTY), then the others,
/// by kind and name within each group. A recorded state joins the node whose runs name that Slurm NodeName, or whose
/// identity it names (never a host name: hosts share names); a state that joins no node is listed last as a node of
/// its own with machine "" (a node the sweep found out of service before it ever ran).
std::vector<FleetNode> fleetNodes(const History& history, const std::vector<NodeState>& states,
                                  const std::vector<FleetOutlier>& outliers);
/// As the site model and `history fleet --json` carry it (report::SiteNode, without its age).
report::SiteNode siteNode(const FleetNode& n);
nlohmann::json toJson(const FleetNode& n);

/// A run counted nowhere (stand-ins, injected faults), as lists and pages show it (named by nodeLabel()).
report::SiteInjectedRun siteInjectedRun(const RunInfo& r);
nlohmann::json injectedRunJson(const RunInfo& r);

/// (after - before) / before x 100, signed so that a positive number is a worsening for `metric`.
double worseningPct(const report::SeriesMetric& metric, double before, double after);

/// What names a series: suite, impl, name, src, dst, ranks, bytes, metric, unit.
report::SiteSeriesKey seriesKey(const Series& s);
/// seriesKey as JSON.
nlohmann::json seriesFields(const Series& s);

}  // namespace peerlab::history
