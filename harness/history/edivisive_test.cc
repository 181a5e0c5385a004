#include "harness/history/edivisive.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <vector>

namespace peerlab::history {
namespace {

// Relative noise: normal with a standard deviation of `spread` (0.02 = 2%) around `level`.
std::vector<double> noisy(std::mt19937_64& rng, int n, double level, double spread) {
  std::normal_distribution<double> noise(0.0, spread);
  std::vector<double> x(n);
  for (double& v : x)
    v = level * (1.0 + noise(rng));
  return x;
}

// The reference's O(n^2) sum over the distance matrix.
std::vector<double> naiveStatistics(const std::vector<double>& x) {
  const int n = static_cast<int>(x.size());
  std::vector<double> q(n, 0.0);
  for (int tau = 1; tau < n; ++tau) {
    double a = 0, b = 0, c = 0;
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < n; ++j) {
        const double d = std::fabs(x[i] - x[j]);
        if (i < tau && j < tau)
          a += d;
        else if (i >= tau && j >= tau)
          b += d;
        else if (i < tau)
          c += d;
      }
    }
    const double nx = tau, ny = n - tau;
    q[tau] = nx * ny / (nx + ny) * (2 * c / (nx * ny) - a / (nx * nx) - b / (ny * ny));
  }
  return q;
}

TEST(EDivisive, StatisticsMatchTheDistanceMatrixSum) {
  std::mt19937_64 rng(1);
  for (int n : {2, 3, 17, 64}) {
    std::vector<double> x = noisy(rng, n, 10.0, 0.1);
    x[n / 2] = x[0];  // a tie
    const std::vector<double> fast = energyStatistics(x);
    const std::vector<double> slow = naiveStatistics(x);
    ASSERT_EQ(fast.size(), slow.size());
    for (int i = 0; i < n; ++i)
      EXPECT_NEAR(fast[i], slow[i], 1e-9 * (1 + std::fabs(slow[i]))) << "n=" << n << " tau=" << i;
  }
}

TEST(EDivisive, WelchPValueMatchesScipy) {
  // scipy.stats.ttest_ind(a, b, equal_var=False).pvalue
  const std::vector<double> x = {1, 2, 3, 4, 5, 3, 4, 5, 6, 7, 8.5};
  EXPECT_NEAR(welchPValue(x, 0, 5, 11), 0.04095301260858316, 1e-10);
  const std::vector<double> y = {10, 10.2, 9.9, 10.1, 10.4, 10.5, 10.3, 10.6, 10.2, 10.45, 10.5};
  EXPECT_NEAR(welchPValue(y, 0, 4, 11), 0.003156776377134683, 1e-10);
  EXPECT_EQ(welchPValue(y, 0, 1, 11), 0.0);  // one point: no variance, no verdict
}

TEST(EDivisive, ShortNoisySegmentAtTheEndOfALongHistoryIsNoChangePoint) {
  // 1,000 runs of 2% noise: no change point, the short ends included (a long history tests many splits).
  std::mt19937_64 rng(24);
  int flagged = 0;
  for (int s = 0; s < 20; ++s) {
    if (!detectChangePoints(noisy(rng, 1000, 100.0, 0.02)).empty()) ++flagged;
  }
  EXPECT_LE(flagged, 1) << flagged << " of 20 long noise series flagged";
}

TEST(EDivisive, SameSeedSameAnswer) {
  std::mt19937_64 rng(2);
  std::vector<double> x = noisy(rng, 60, 100.0, 0.02);
  for (int i = 30; i < 60; ++i)
    x[i] *= 1.04;
  EDivisiveOptions o;
  std::vector<double> p1, p2;
  EXPECT_EQ(eDivisive(x, o, &p1), eDivisive(x, o, &p2));
  EXPECT_EQ(p1, p2);
}

TEST(EDivisive, PureNoiseTwoPercentSixtyRunsFlagsFewerThan1In100Series) {
  std::mt19937_64 rng(20);
  int flagged = 0;
  const int series = 1000;
  for (int s = 0; s < series; ++s) {
    if (!detectChangePoints(noisy(rng, 60, 100.0, 0.02)).empty()) ++flagged;
  }
  EXPECT_LT(flagged, series / 100) << flagged << " of " << series << " pure-noise series flagged";
  std::printf("pure noise: %d of %d series flagged\n", flagged, series);
}

TEST(EDivisive, FivePercentStepAfterRun30FoundIn95Of100WithinTwoRuns) {
  std::mt19937_64 rng(21);
  int found = 0, placed = 0;
  for (int s = 0; s < 100; ++s) {
    std::vector<double> x = noisy(rng, 60, 100.0, 0.02);
    const double step = s % 2 == 0 ? 1.05 : 0.95;  // both directions
    for (int i = 30; i < 60; ++i)
      x[i] *= step;
    const std::vector<ChangePoint> cps = detectChangePoints(x);
    if (cps.empty()) continue;
    ++found;
    for (const ChangePoint& cp : cps) {
      if (std::abs(cp.index - 30) <= 2) {
        ++placed;
        EXPECT_NEAR(cp.change_pct, (step - 1) * 100, 2.0);
        EXPECT_LE(cp.p_value, 0.01);
        break;
      }
    }
  }
  EXPECT_GE(placed, 95) << "5% steps placed within 2 runs: " << placed << " of 100 (" << found << " found)";
  std::printf("5%% step: %d of 100 found, %d placed within 2 runs\n", found, placed);
}

TEST(EDivisive, SingleTwentyPercentOutlierIsNotAChangePoint) {
  std::mt19937_64 rng(22);
  int flagged = 0;
  for (int s = 0; s < 100; ++s) {
    std::vector<double> x = noisy(rng, 60, 100.0, 0.02);
    const int at = s < 10 ? 59 - s : 3 + (s * 7) % 54;  // the latest runs included
    x[at] *= s % 2 == 0 ? 1.2 : 0.8;
    const std::vector<ChangePoint> cps = detectChangePoints(x);
    for (const ChangePoint& cp : cps) {
      EXPECT_FALSE(cp.index == at || cp.index == at + 1) << "outlier at " << at << " made a change point";
    }
    if (!cps.empty()) ++flagged;
  }
  EXPECT_LT(flagged, 2) << flagged << " of 100 series with one 20% outlier flagged";
}

TEST(EDivisive, TenPercentStepInTheLastFiveRunsIsFound) {
  std::mt19937_64 rng(25);
  int found = 0;
  for (int s = 0; s < 100; ++s) {
    std::vector<double> x = noisy(rng, 60, 100.0, 0.02);
    for (int i = 55; i < 60; ++i)
      x[i] *= 1.10;
    const std::vector<ChangePoint> cps = detectChangePoints(x);
    if (!cps.empty() && cps.back().index == 55) ++found;
  }
  EXPECT_GE(found, 90) << "10% steps 5 runs before the end found in " << found << " of 100";
  std::printf("10%% step in the last 5 runs: %d of 100 found\n", found);
}

TEST(EDivisive, TwoStepsBothFound) {
  std::mt19937_64 rng(23);
  std::vector<double> x = noisy(rng, 90, 100.0, 0.01);
  for (int i = 30; i < 90; ++i)
    x[i] *= 0.9;
  for (int i = 60; i < 90; ++i)
    x[i] *= 1.2;
  const std::vector<ChangePoint> cps = detectChangePoints(x);
  ASSERT_EQ(cps.size(), 2u);
  EXPECT_NEAR(cps[0].index, 30, 1);
  EXPECT_NEAR(cps[1].index, 60, 1);
  EXPECT_LT(cps[0].change_pct, -8);
  EXPECT_GT(cps[1].change_pct, 15);
}

TEST(EDivisive, ShortOrConstantSeriesHaveNoChangePoint) {
  EXPECT_TRUE(detectChangePoints({}).empty());
  EXPECT_TRUE(detectChangePoints({1.0, 2.0, 3.0}).empty());
  EXPECT_TRUE(detectChangePoints(std::vector<double>(40, 5.0)).empty());
}

}  // namespace
}  // namespace peerlab::history
