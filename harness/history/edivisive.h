#pragma once
/// E-Divisive means change-point detection (Matteson and James 2014, "A nonparametric approach for multiple change
/// point analysis of multivariate data"), univariate with alpha = 1 as in MongoDB's signal-processing-algorithms and
/// Apache Otava, plus a minimum segment length and a minimum magnitude.

#include <cstdint>
#include <vector>

namespace peerlab::history {

struct EDivisiveOptions {
  /// Significance: a permutation test (the window's values shuffled, the largest statistic over all windows compared
  /// with the candidate's), p = (permutations at least as large) / (permutations + 1), as the reference does.
  double max_p_value = 0.01;
  int permutations = 99;
  std::uint64_t seed = 20;  ///< the permutation test's RNG (std::mt19937_64): the same series gives the same answer
  /// Fewest points on each side of a change point (1 matches the reference implementation).
  int min_segment = 3;
  /// A change point whose segment medians differ by less than this (percent of the one before), or whose adjacent
  /// segments do not differ by Welch's t-test at `max_p_value`, is merged away, the weakest first, as Otava does;
  /// medians keep a single outlier run from making a change point, the t-test keeps a short noisy segment at either
  /// end of a long history from making one.
  double min_change_pct = 3.0;
};

struct ChangePoint {
  int index = 0;          ///< first point after the change
  double before = 0;      ///< median of the segment before
  double after = 0;       ///< median of the segment after
  double change_pct = 0;  ///< (after - before) / before x 100
  /// The larger of the permutation test's p (permutations whose statistic is at least the change point's, over
  /// permutations + 1, as the reference computes it) and Welch's t-test's between the adjacent segments. With no
  /// permutation as large the permutation p is 0 and Welch's alone is left, far smaller than the permutations can
  /// tell: p_floor says so, and every output then shows "p < p_floor".
  double p_value = 1;
  double p_floor = 0.01;  ///< 1 / (permutations + 1): the smallest p the permutation test resolves
};

/// The E-Divisive statistic Q(tau) for every split tau in [0, n): X = x[0, tau), Y = x[tau, n), computed in
/// O(n log n) with a Fenwick tree (the reference's O(n^2) distance-matrix sum gives the same numbers).
std::vector<double> energyStatistics(const std::vector<double>& x);

/// Significant change points (sorted) by recursive bisection with the permutation test; no magnitude filter.
/// `p_values`, when given, receives each one's p-value in the same order.
std::vector<int> eDivisive(const std::vector<double>& series, const EDivisiveOptions& options,
                           std::vector<double>* p_values = nullptr);

/// eDivisive, then change points below `min_change_pct` merged away; each with its segment medians.
std::vector<ChangePoint> detectChangePoints(const std::vector<double>& series, const EDivisiveOptions& options = {});

/// Two-sided p-value of Welch's t-test between x[begin, mid) and x[mid, end); 0 when a side has fewer than 2 points.
double welchPValue(const std::vector<double>& x, int begin, int mid, int end);

/// Median of x[begin, end).
double median(const std::vector<double>& x, int begin, int end);

}  // namespace peerlab::history
