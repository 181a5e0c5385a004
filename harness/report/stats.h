#pragma once
/// Small statistics for comparing measurements: the two-sided Mann-Whitney U test, as Google Benchmark's compare.py
/// (scipy.stats.mannwhitneyu) uses it on repetitions.

#include <vector>

namespace peerlab::report {

/// Two-sided p-value of the Mann-Whitney U test of samples `a` and `b`, as scipy's method="auto": exact when there
/// are no ties and one side holds at most 8 samples, else the normal approximation with tie correction and
/// continuity correction. 1 when either side is empty.
double mannWhitneyPValue(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace peerlab::report
