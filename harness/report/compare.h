#pragma once
/// Regression compare of two run files: results matched by identity, the metric of seriesMetric() per row, and a
/// change counted only when it is both significant (Mann-Whitney U on the samples, else p10/p90 apart) and larger
/// than the minimum effect.

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/report/format.h"
#include "harness/report/report.h"

namespace peerlab::report {

/// How a result compares between the base run and the new run.
enum class Verdict {
  kSame,             ///< not significant, or within the minimum effect
  kImproved,         ///< better beyond the threshold
  kRegressed,        ///< worse beyond the threshold
  kStatusRegressed,  ///< status got worse (ok -> failed/corrupt/skipped, skipped -> failed) or wrong elements appeared
  kFixed,            ///< status got better (failed -> ok, unsupported -> ok)
  kUnchangedStatus,  ///< neither side measured (both skipped, both failing): nothing to compare
  kOnlyBase,         ///< present in the base run only
  kOnlyNew,          ///< present in the new run only
};

/// Short lower-case name of a verdict ("regressed", "only in base", ...).
const char* verdictName(Verdict v);
/// True for verdicts that make a compare (and a qualify baseline check) fail.
bool isRegression(Verdict v);

/// Ranks a status: 2 good ("ok"), 1 neutral ("skipped: ...", "unsupported", health "warn"), 0 bad (failed, fail,
/// corrupt, hang...).
int statusRank(const std::string& status);

/// Identity of a result: suite, name, impl, pair (src,dst), size (bytes), ranks and the host memory's NUMA node.
/// Payload types and modes are part of impl and name (peerlab.dispatch_ll_fp8, graph/T=128).
std::string resultKey(const Result& r);
/// The identity for people: "peer_copy uni peerlab.ce 0->1 256 MiB", "host_copy h2d peerlab.ce gpu 0 host numa 1".
std::string describeResult(const Result& r);
/// " 0->1" for a pair, " gpu 0" for one GPU's own figure, plus " host numa N" when the host memory's node is known.
std::string describeWhere(const Result& r);

/// The noise rule: when a change between two measurements counts. One rule for `report --compare`, qualify's baseline
/// checks, `history regressions` and `history fleet` (decideChange); every output prints it beside each row.
///
/// A change counts when it is larger than the minimum effect, the largest of
///   - `threshold_pct`;
///   - `spread_factor` times the spread either side shows on its own (p90 - p10 over the median, when it has them):
///     two processes' medians differ by several times one process's spread;
///   - between a single-run base and a run, `jitter_us` of timing over the base time (for a bandwidth, the change a
///     time `jitter_us` longer gives): between two processes a small-message time moves by microseconds whatever its
///     own spread (host-driven NCCL, UCX and NIXL most);
///   - against a base of several runs (a baseline that records each run's time), the range of those times over their
///     median instead of the jitter: what that row's time really does from process to process;
///   - against a baseline that records the kind's fleet (each board's time for the row, from the committed runs of
///     that kind), how far the farthest board stands from the base, also instead of the jitter: a new board is held
///     to how far the kind's boards stand apart, not to one board's noise (small-message rows differ most);
/// and the noise test finds it significant: Mann-Whitney U (p < alpha, at least `min_samples` samples a side), else
/// the two p10..p90 ranges apart, else the minimum effect alone ("threshold"); or a test made elsewhere over many runs
/// (E-Divisive's permutation test, the fleet's modified z-score), which then replaces the spread, range and jitter.
/// The defaults are calibrated on the committed runs of one kind (docs/compare.md): every machine compared with
/// itself the same day passes, a stable row 11% worse fails; ci/self_compare.py gives the outcome on repeated runs.
inline constexpr double kDefaultThresholdPct = 10.0;
inline constexpr double kDefaultSpreadFactor = 3.0;
inline constexpr double kDefaultJitterUs = 7.5;
struct NoiseRule {
  double threshold_pct = kDefaultThresholdPct;  ///< minimum effect in percent
  double alpha = 0.05;                          ///< significance level of the Mann-Whitney U test
  size_t min_samples = 4;  ///< samples each side needs for the U test (with 4 the smallest two-sided p is 0.029)
  double jitter_us = kDefaultJitterUs;          ///< timing jitter between two processes, microseconds
  double spread_factor = kDefaultSpreadFactor;  ///< times the larger within-run spread
};
using CompareOptions = NoiseRule;

/// One side of a comparison: the metric's value and what is known of its spread.
struct Side {
  double value = 0;
  std::optional<double> time_us;  ///< the time behind the value (the jitter is judged in time)
  std::optional<double> p10_us;   ///< within-run spread, when the run measured it
  std::optional<double> p90_us;
  std::vector<double> samples_us;  ///< per-sample times, for the U test
  double samples = 0;              ///< samples behind the value (samples_us, or the result's "samples")
  int runs = 1;                    ///< runs behind the value (a history segment, a fleet, a baseline)
  std::vector<double> runs_us;     ///< each run's time, where a baseline of several runs recorded them
  /// Each board's time (the median of that machine's runs) across the kind's fleet, where a baseline recorded them
  /// ("fleet_time_us"): how far boards of one kind stand apart, the noise a new board is judged with.
  std::vector<double> fleet_us;
};

/// A noise test made elsewhere over many runs.
struct RunsTest {
  std::string name;  ///< "e-divisive", "mad-z"
  bool significant = false;
  std::optional<double> p_value;
  /// The smallest p-value the test resolves (a permutation test's 1 / (permutations + 1)): a p_value below it is
  /// shown as "p < floor", never as the smaller number another test beside it gave.
  std::optional<double> p_floor;
  std::optional<double> z;
};

/// "p < 0.01" when `p` lies below `floor` (what the permutation count can tell), else "p=0.0123".
std::string formatPValue(double p, std::optional<double> floor);

/// What the rule decided, with everything it rested on.
struct ChangeDecision {
  Verdict verdict = Verdict::kSame;  ///< kSame, kImproved or kRegressed
  double change_pct = 0;             ///< (new - base) / base x 100, raw
  double worsening_pct = 0;          ///< the same, signed so that positive is worse for the metric
  std::string test;                  ///< "u-test", "p10/p90", "threshold", or the RunsTest's name
  std::optional<double> p_value;
  std::optional<double> p_floor;  ///< RunsTest::p_floor
  std::optional<double> z;
  bool significant = false;
  double noise_pct = 0;       ///< the larger within-run spread of the two sides
  double spread_factor = 0;   ///< the rule's factor on noise_pct
  double between_pct = 0;     ///< the range of a multi-run base's times over their median (0 when not known)
  double fleet_pct = 0;       ///< how far the kind's boards stand from the base (the farthest, percent; 0: not known)
  int fleet_boards = 0;       ///< boards behind fleet_pct
  double jitter_pct = 0;      ///< jitter_us over the base time (for a bandwidth, over base time + jitter), percent
  double min_effect_pct = 0;  ///< max(threshold, spread_factor x noise, between, jitter)
  double threshold_pct = 0;
  double base_samples = 0, new_samples = 0;
  int base_runs = 1, new_runs = 1;
  /// One line for people: "|+27.1%| <= min 112.3% (jitter 7.5 us / 6.68 us; threshold 10%, 3 x spread 40.9%,
  /// jitter 112.3%); p10-p90 apart n=25/25".
  std::string rule;
  /// Short cells for tables: "112.3% jitter", "p10-p90 apart n=25/25".
  std::string minEffectCell() const;
  std::string testCell() const;
};

/// The one decision: improved, same or regressed for `metric`, by `rule`. `runs_test`, when given, is the noise test
/// (over many runs) instead of the per-run evidence, and the spread, range and jitter are not applied.
ChangeDecision decideChange(bool higher_is_better, const Side& base, const Side& fresh, const NoiseRule& rule,
                            const RunsTest* runs_test = nullptr);

/// A result's side for `metric_field` (its value, time, p10/p90, samples).
Side sideOf(const Result& r, double value);

/// The rule's parameters as JSON: {"threshold_pct", "spread_factor", "jitter_us", "alpha", "min_samples", "text"}.
nlohmann::json toJson(const NoiseRule& rule);
/// The rule in words, for the header of every compare.
std::string describeNoiseRule(const NoiseRule& rule);
/// A decision's fields as JSON: test, p_value, p_floor, z, significant, noise_pct, jitter_pct, min_effect_pct,
/// threshold_pct, base_samples, new_samples, base_runs, new_runs, rule.
nlohmann::json toJson(const ChangeDecision& d);

/// Runs of different hardware (GPU model or count, or a known interconnect) are not compared unless asked:
/// `invalid_argument` "<what>: different hardware: <base> against <new>; pass <flag> ..." naming both fingerprints.
Status checkSameHardware(const Run& base, const Run& fresh, const std::string& what, const std::string& flag);

/// Per-sample times of a result (key "samples_us", microseconds), empty when the run file has none.
std::vector<double> samplesOf(const Result& r);

/// What changed between two fingerprints, one line each: "driver 580.159.04 -> 590.10.01", "CUDA ...", "NCCL ...",
/// "GPUs: 4x NVIDIA H200 -> 3x NVIDIA H200", "host a -> b". Empty when nothing did.
std::vector<std::string> fingerprintChanges(const Fingerprint& base, const Fingerprint& fresh);

struct CompareRow {
  std::string key;
  std::optional<Result> base;
  std::optional<Result> fresh;
  std::string metric;  ///< "algbw_gbps" (higher is better), "time_us" (lower is better) or "status"
  std::optional<double> base_value;
  std::optional<double> new_value;
  std::optional<double> change_pct;  ///< (new - base) / base x 100, raw: the verdict says whether that is better
  double noise_pct = 0;  ///< the larger spread within one run (p90 - p10 over the median) of the two sides, percent
  std::string test;      ///< how significance was judged: "u-test", "p10/p90" or "threshold"
  std::optional<double> p_value;           ///< Mann-Whitney U two-sided p-value, when the samples allowed the test
  bool significant = false;                ///< the change is beyond the noise (by `test`)
  std::optional<ChangeDecision> decision;  ///< the rule's decision, for rows compared on a metric
  Verdict verdict = Verdict::kSame;
  std::string note;  ///< why, for status rows ("ok -> failed: ...")
};

struct CompareReport {
  std::vector<CompareRow> rows;  ///< base order first, then rows only in the new run
  NoiseRule rule;
  double threshold_pct = kDefaultThresholdPct;
  double alpha = 0.05;
  std::vector<std::string> fingerprint_changes;  ///< base -> new
  int count(Verdict v) const;
  int regressions() const;
  /// Results of the base run missing from the new one: they fail a compare.
  int missing() const { return count(Verdict::kOnlyBase); }
};

/// Matches results of `base` and `fresh` and gives each a verdict. A key occurring several times in one run is matched
/// by occurrence (first with first).
CompareReport compareRuns(const Run& base, const Run& fresh, const CompareOptions& options = {});
/// Compares one pair of matched results (exposed for qualify's baseline checks).
CompareRow compareResults(const Result& base, const Result& fresh, const CompareOptions& options = {});

/// Fingerprint changes first, then a fixed-width table like Google Benchmark's compare tool, one line per result,
/// then the missing results and a summary line. `only_changes` leaves out rows within the noise and rows with
/// unchanged status.
std::string formatCompare(const CompareReport& report, bool only_changes = false);

/// Parses a threshold given as "5", "5%" or "2.5" (percent). `invalid_argument` names the text.
StatusOr<double> parseThresholdPct(const std::string& text);
/// "5%", "2.5%".
std::string formatThreshold(double pct);

}  // namespace peerlab::report
