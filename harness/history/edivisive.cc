#include "harness/history/edivisive.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <utility>

namespace peerlab::history {
namespace {

// Counts and sums of the values added so far, indexed by rank, for sums of |v - x_i| in O(log n).
class Fenwick {
 public:
  explicit Fenwick(int n) : count_(n + 1, 0), sum_(n + 1, 0.0) {}
  void add(int rank, double v) {
    for (int i = rank + 1; i < static_cast<int>(count_.size()); i += i & -i) {
      count_[i] += 1;
      sum_[i] += v;
    }
  }
  // Count and sum of values with rank <= `rank`.
  std::pair<long, double> prefix(int rank) const {
    long c = 0;
    double s = 0;
    for (int i = rank + 1; i > 0; i -= i & -i) {
      c += count_[i];
      s += sum_[i];
    }
    return {c, s};
  }

 private:
  std::vector<long> count_;
  std::vector<double> sum_;
};

// within[k] = sum over i < j < k of |x_i - x_j| for the order given; ranks index the sorted values.
void prefixPairSums(const std::vector<double>& x, const std::vector<int>& rank, std::vector<double>& within) {
  const int n = static_cast<int>(x.size());
  Fenwick tree(n);
  within.assign(n + 1, 0.0);
  double total = 0;
  for (int k = 0; k < n; ++k) {
    auto [lessCount, lessSum] = tree.prefix(rank[k]);
    const double v = x[k];
    const double dist = (v * lessCount - lessSum) + ((total - lessSum) - v * (k - lessCount));
    within[k + 1] = within[k] + dist;
    tree.add(rank[k], v);
    total += v;
  }
}

std::vector<int> ranksOf(const std::vector<double>& x) {
  std::vector<int> order(x.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return x[a] < x[b]; });
  std::vector<int> rank(x.size());
  for (size_t i = 0; i < order.size(); ++i)
    rank[order[i]] = static_cast<int>(i);
  return rank;
}

// Q(tau) from prefix and suffix pair sums; values and ranks in the same order.
std::vector<double> statistics(const std::vector<double>& x, const std::vector<int>& rank) {
  const int n = static_cast<int>(x.size());
  std::vector<double> prefix, suffix;
  prefixPairSums(x, rank, prefix);
  std::vector<double> rx(x.rbegin(), x.rend());
  std::vector<int> rr(rank.rbegin(), rank.rend());
  prefixPairSums(rx, rr, suffix);  // suffix[k] = pairs within the last k values
  const double all = prefix[n];
  std::vector<double> q(n, 0.0);
  for (int tau = 1; tau < n; ++tau) {
    const double a = prefix[tau], b = suffix[n - tau], c = all - a - b;
    const double nx = tau, ny = n - tau;
    const double e = 2.0 * c / (nx * ny) - 2.0 * a / (nx * nx) - 2.0 * b / (ny * ny);
    q[tau] = nx * ny / (nx + ny) * e;
  }
  return q;
}

struct Candidate {
  int index = -1;  // absolute
  double q = -1;
};

// The best split of x[lo, hi) with at least `minSeg` points on each side.
Candidate bestSplit(const std::vector<double>& x, int lo, int hi, int minSeg) {
  Candidate best;
  if (hi - lo < 2 * minSeg) return best;
  std::vector<double> w(x.begin() + lo, x.begin() + hi);
  const std::vector<double> q = statistics(w, ranksOf(w));
  for (int tau = minSeg; tau <= hi - lo - minSeg; ++tau) {
    if (q[tau] > best.q) best = {lo + tau, q[tau]};
  }
  return best;
}

// Largest statistic over all windows after shuffling each window's values.
double permutedMax(const std::vector<double>& x, const std::vector<int>& bounds, int minSeg, std::mt19937_64& rng) {
  double best = -1;
  for (size_t k = 0; k + 1 < bounds.size(); ++k) {
    const int lo = bounds[k], hi = bounds[k + 1];
    if (hi - lo < 2 * minSeg) continue;
    std::vector<double> w(x.begin() + lo, x.begin() + hi);
    for (int i = static_cast<int>(w.size()) - 1; i > 0; --i) {
      std::uniform_int_distribution<int> pick(0, i);
      std::swap(w[i], w[pick(rng)]);
    }
    const std::vector<double> q = statistics(w, ranksOf(w));
    for (int tau = minSeg; tau <= hi - lo - minSeg; ++tau)
      best = std::max(best, q[tau]);
  }
  return best;
}

// Continued fraction of the regularized incomplete beta function (Numerical Recipes, betacf).
double betaContinuedFraction(double a, double b, double x) {
  constexpr double kTiny = 1e-300;
  const double qab = a + b, qap = a + 1, qam = a - 1;
  double c = 1, d = 1 - qab * x / qap;
  d = 1 / (std::fabs(d) < kTiny ? kTiny : d);
  double h = d;
  for (int m = 1; m <= 300; ++m) {
    const int m2 = 2 * m;
    double aa = m * (b - m) * x / ((qam + m2) * (a + m2));
    d = 1 + aa * d;
    c = 1 + aa / c;
    d = 1 / (std::fabs(d) < kTiny ? kTiny : d);
    c = std::fabs(c) < kTiny ? kTiny : c;
    h *= d * c;
    aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2));
    d = 1 + aa * d;
    c = 1 + aa / c;
    d = 1 / (std::fabs(d) < kTiny ? kTiny : d);
    c = std::fabs(c) < kTiny ? kTiny : c;
    const double del = d * c;
    h *= del;
    if (std::fabs(del - 1) < 1e-13) break;
  }
  return h;
}

double incompleteBeta(double a, double b, double x) {
  if (x <= 0) return 0;
  if (x >= 1) return 1;
  const double front =
      std::exp(std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) + b * std::log1p(-x));
  if (x < (a + 1) / (a + b + 2)) return front * betaContinuedFraction(a, b, x) / a;
  return 1 - front * betaContinuedFraction(b, a, 1 - x) / b;
}

}  // namespace

double welchPValue(const std::vector<double>& x, int begin, int mid, int end) {
  const double n1 = mid - begin, n2 = end - mid;
  if (n1 < 2 || n2 < 2) return 0;  // no variance to test with: the permutation test alone decides
  auto moments = [&](int lo, int hi, double n) {
    double mean = 0;
    for (int i = lo; i < hi; ++i)
      mean += x[i];
    mean /= n;
    double var = 0;
    for (int i = lo; i < hi; ++i)
      var += (x[i] - mean) * (x[i] - mean);
    return std::make_pair(mean, var / (n - 1));
  };
  const auto [m1, v1] = moments(begin, mid, n1);
  const auto [m2, v2] = moments(mid, end, n2);
  const double s1 = v1 / n1, s2 = v2 / n2, se2 = s1 + s2;
  if (se2 <= 0) return m1 == m2 ? 1.0 : 0.0;
  const double t = (m2 - m1) / std::sqrt(se2);
  const double df = se2 * se2 / (s1 * s1 / (n1 - 1) + s2 * s2 / (n2 - 1));
  return incompleteBeta(df / 2, 0.5, df / (df + t * t));
}

double median(const std::vector<double>& x, int begin, int end) {
  std::vector<double> v(x.begin() + begin, x.begin() + end);
  if (v.empty()) return 0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  if (v.size() % 2 == 1) return v[mid];
  const double upper = v[mid];
  return (upper + *std::max_element(v.begin(), v.begin() + mid)) / 2.0;
}

std::vector<double> energyStatistics(const std::vector<double>& x) {
  return statistics(x, ranksOf(x));
}

std::vector<int> eDivisive(const std::vector<double>& series, const EDivisiveOptions& options,
                           std::vector<double>* p_values) {
  const int n = static_cast<int>(series.size());
  const int minSeg = std::max(1, options.min_segment);
  std::mt19937_64 rng(options.seed);
  std::vector<std::pair<int, double>> found;  // index, p
  std::map<std::pair<int, int>, Candidate> memo;
  // The permutation test stops as soon as the candidate can no longer be significant.
  const int allowed = static_cast<int>(std::floor(options.max_p_value * (options.permutations + 1) + 1e-9));
  while (true) {
    std::vector<int> bounds = {0};
    for (auto& f : found)
      bounds.push_back(f.first);
    bounds.push_back(n);
    std::sort(bounds.begin(), bounds.end());
    Candidate best;
    for (size_t k = 0; k + 1 < bounds.size(); ++k) {
      const auto key = std::make_pair(bounds[k], bounds[k + 1]);
      auto it = memo.find(key);
      if (it == memo.end()) it = memo.emplace(key, bestSplit(series, key.first, key.second, minSeg)).first;
      if (it->second.q > best.q) best = it->second;
    }
    if (best.index < 0 || best.q <= 0) break;
    int atLeast = 0;
    for (int p = 0; p < options.permutations && atLeast <= allowed; ++p) {
      if (permutedMax(series, bounds, minSeg, rng) >= best.q) ++atLeast;
    }
    if (atLeast > allowed) break;
    found.emplace_back(best.index, static_cast<double>(atLeast) / (options.permutations + 1));
  }
  std::sort(found.begin(), found.end());
  std::vector<int> out;
  if (p_values) p_values->clear();
  for (auto& [index, p] : found) {
    out.push_back(index);
    if (p_values) p_values->push_back(p);
  }
  return out;
}

std::vector<ChangePoint> detectChangePoints(const std::vector<double>& series, const EDivisiveOptions& options) {
  std::vector<double> pValues;
  const std::vector<int> indices = eDivisive(series, options, &pValues);
  std::vector<ChangePoint> cps;
  // p-values of the permutation test, kept beside the change points as they merge.
  for (size_t i = 0; i < indices.size(); ++i) {
    ChangePoint cp;
    cp.index = indices[i];
    cp.p_value = pValues[i];
    cp.p_floor = 1.0 / (std::max(options.permutations, 0) + 1);
    cps.push_back(cp);
  }
  const int n = static_cast<int>(series.size());
  // Merge away the weakest change point that is too small or whose segments do not differ by Welch's t-test, until
  // none is left.
  while (true) {
    int weakest = -1;
    for (size_t i = 0; i < cps.size(); ++i) {
      const int lo = i == 0 ? 0 : cps[i - 1].index;
      const int hi = i + 1 == cps.size() ? n : cps[i + 1].index;
      cps[i].before = median(series, lo, cps[i].index);
      cps[i].after = median(series, cps[i].index, hi);
      cps[i].change_pct = cps[i].before != 0 ? (cps[i].after - cps[i].before) / cps[i].before * 100.0 : 0.0;
      cps[i].p_value = std::max(pValues[i], welchPValue(series, lo, cps[i].index, hi));
      const bool weak = std::fabs(cps[i].change_pct) < options.min_change_pct || cps[i].p_value > options.max_p_value;
      if (weak && (weakest < 0 || std::fabs(cps[i].change_pct) < std::fabs(cps[weakest].change_pct))) {
        weakest = static_cast<int>(i);
      }
    }
    if (weakest < 0) break;
    cps.erase(cps.begin() + weakest);
    pValues.erase(pValues.begin() + weakest);
  }
  return cps;
}

}  // namespace peerlab::history
