#pragma once
/// Regression compare of two run files: results matched by identity, the metric of seriesMetric() per row, and a
/// change counted only when it is both significant (Mann-Whitney U on the samples, else p10/p90 apart) and larger
/// than the minimum effect.

#include <optional>
#include <string>
#include <vector>

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
/// "4 KiB", "256 MiB", "1.5 GiB", "24 B".
std::string formatBytes(double bytes);

struct CompareOptions {
  double threshold_pct = 5.0;  ///< minimum effect: changes within +-threshold are noise even when significant
  double alpha = 0.05;         ///< significance level of the Mann-Whitney U test
  size_t min_samples = 4;      ///< samples each side needs for the U test (with 4 the smallest two-sided p is 0.029)
};

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
  std::optional<double> p_value;  ///< Mann-Whitney U two-sided p-value, when the samples allowed the test
  bool significant = false;       ///< the change is beyond the noise (by `test`)
  Verdict verdict = Verdict::kSame;
  std::string note;  ///< why, for status rows ("ok -> failed: ...")
};

struct CompareReport {
  std::vector<CompareRow> rows;  ///< base order first, then rows only in the new run
  double threshold_pct = 5.0;
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
