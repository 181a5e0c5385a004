#include "harness/report/stats.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace peerlab::report {

namespace {

/// P(U <= u) under the null hypothesis for sample sizes n and m (no ties): counts of rank arrangements by U.
double exactCdf(int n, int m, double u) {
  // ways[i][j][k]: arrangements of i and j samples with U = k; built one sample size at a time.
  const int maxU = n * m;
  std::vector<std::vector<std::vector<double>>> ways(n + 1, std::vector<std::vector<double>>(m + 1));
  for (int i = 0; i <= n; ++i) {
    for (int j = 0; j <= m; ++j) {
      ways[i][j].assign(i * j + 1, 0.0);
      if (i == 0 || j == 0) {
        ways[i][j][0] = 1.0;
        continue;
      }
      for (int k = 0; k <= i * j; ++k) {
        // The largest value comes from the first sample (it beats all j of the second) or from the second.
        double w = 0;
        if (k - j >= 0 && k - j <= (i - 1) * j) w += ways[i - 1][j][k - j];
        if (k <= i * (j - 1)) w += ways[i][j - 1][k];
        ways[i][j][k] = w;
      }
    }
  }
  double total = 0, below = 0;
  for (int k = 0; k <= maxU; ++k) {
    total += ways[n][m][k];
    if (k <= u + 1e-9) below += ways[n][m][k];
  }
  return below / total;
}

}  // namespace

double mannWhitneyPValue(const std::vector<double>& a, const std::vector<double>& b) {
  const size_t n = a.size();
  const size_t m = b.size();
  if (n == 0 || m == 0) return 1.0;
  std::vector<std::pair<double, int>> all;
  all.reserve(n + m);
  for (double v : a)
    all.emplace_back(v, 0);
  for (double v : b)
    all.emplace_back(v, 1);
  std::sort(all.begin(), all.end());
  // Mid-ranks for ties; tie term sum(t^3 - t) for the variance correction.
  double rankSumA = 0;
  double tieTerm = 0;
  bool ties = false;
  for (size_t i = 0; i < all.size();) {
    size_t j = i;
    while (j < all.size() && all[j].first == all[i].first)
      ++j;
    const double t = static_cast<double>(j - i);
    const double rank = (static_cast<double>(i + 1) + static_cast<double>(j)) / 2.0;
    for (size_t k = i; k < j; ++k)
      if (all[k].second == 0) rankSumA += rank;
    if (t > 1) {
      ties = true;
      tieTerm += t * t * t - t;
    }
    i = j;
  }
  const double nn = static_cast<double>(n);
  const double mm = static_cast<double>(m);
  const double u1 = rankSumA - nn * (nn + 1) / 2.0;
  const double u2 = nn * mm - u1;
  if (!ties && std::min(n, m) <= 8 && std::max(n, m) <= 400) {
    const double u = std::max(u1, u2);
    // P(U >= u) = P(U <= nm - u) by symmetry.
    const double p = 2.0 * exactCdf(static_cast<int>(n), static_cast<int>(m), nn * mm - u);
    return std::min(1.0, p);
  }
  const double mu = nn * mm / 2.0;
  const double N = nn + mm;
  const double var = nn * mm / 12.0 * ((N + 1) - tieTerm / (N * (N - 1)));
  if (var <= 0) return 1.0;
  const double u = std::max(u1, u2);
  const double z = (u - mu - 0.5) / std::sqrt(var);
  return std::min(1.0, std::erfc(z / std::sqrt(2.0)));
}

}  // namespace peerlab::report
