#include "control/canary_stats.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace gpusched::control {

namespace {

double LogChoose(int64_t n, int64_t k) {
  return std::lgamma(static_cast<double>(n) + 1) -
         std::lgamma(static_cast<double>(k) + 1) -
         std::lgamma(static_cast<double>(n - k) + 1);
}

// Sums exp(log_term(i)) for i = from..to, stopping once past the largest
// term the terms have fallen below 1e-17 of the sum.
template <typename F>
double TailSum(int64_t from, int64_t to, F log_term) {
  double sum = 0, peak = -INFINITY;
  for (int64_t i = from; i <= to; ++i) {
    const double l = log_term(i);
    if (l < peak && l < peak - 40) break;  // e^-40 ~ 4e-18 of the largest
    peak = std::max(peak, l);
    sum += std::exp(l);
  }
  return std::min(1.0, sum);
}

}  // namespace

double NormalUpper(double z) { return 0.5 * std::erfc(z / std::sqrt(2.0)); }

RankTest MannWhitneyGreater(const std::vector<double>& canary,
                            const std::vector<double>& stable) {
  RankTest t;
  t.n_canary = static_cast<int64_t>(canary.size());
  t.n_stable = static_cast<int64_t>(stable.size());
  if (canary.empty() || stable.empty()) return t;
  // (value, is canary), ranked with ties at their average rank.
  std::vector<std::pair<double, bool>> all;
  all.reserve(canary.size() + stable.size());
  for (double v : canary) all.push_back({v, true});
  for (double v : stable) all.push_back({v, false});
  std::sort(all.begin(), all.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  const double n = static_cast<double>(all.size());
  double rank_sum = 0, ties = 0;
  for (size_t i = 0; i < all.size();) {
    size_t j = i;
    int64_t in_canary = 0;
    while (j < all.size() && all[j].first == all[i].first) {
      in_canary += all[j].second ? 1 : 0;
      ++j;
    }
    const double count = static_cast<double>(j - i);
    const double rank =
        (static_cast<double>(i + 1) + static_cast<double>(j)) / 2;
    rank_sum += rank * static_cast<double>(in_canary);
    ties += count * count * count - count;
    i = j;
  }
  const double n1 = static_cast<double>(t.n_canary);
  const double n2 = static_cast<double>(t.n_stable);
  t.u = rank_sum - n1 * (n1 + 1) / 2;
  const double mean = n1 * n2 / 2;
  const double var = n1 * n2 / 12 * ((n + 1) - ties / (n * (n - 1)));
  if (var <= 0) {  // every value equal: every permutation gives this U
    t.z = 0;
    t.p_value = 1;
    return t;
  }
  const double d = t.u - mean;
  // Continuity correction towards the mean.
  t.z = (d - (d > 0 ? 0.5 : d < 0 ? -0.5 : 0)) / std::sqrt(var);
  t.p_value = NormalUpper(t.z);
  return t;
}

int64_t MinRankSamples(double alpha) {
  for (int64_t n = kMinRankSamples;; ++n) {
    const double nn = static_cast<double>(n);
    const double var = nn * nn / 12 * (2 * nn + 1);
    const double z = (nn * nn / 2 - 0.5) / std::sqrt(var);
    if (NormalUpper(z) < alpha || n >= 1000) return n;
  }
}

double FisherGreater(int64_t canary_errors, int64_t canary_requests,
                     int64_t stable_errors, int64_t stable_requests) {
  const int64_t n = canary_requests + stable_requests;
  const int64_t k = canary_errors + stable_errors;
  const int64_t draws = canary_requests;
  if (canary_errors <= 0 || n <= 0) return 1;
  const int64_t hi = std::min(draws, k);
  const double denom = LogChoose(n, draws);
  return TailSum(canary_errors, hi, [&](int64_t i) {
    return LogChoose(k, i) + LogChoose(n - k, draws - i) - denom;
  });
}

double BinomialGreater(int64_t k, int64_t n, double p0) {
  if (k <= 0) return 1;
  if (k > n) return 0;
  if (p0 <= 0) return 0;
  if (p0 >= 1) return 1;
  const double lp = std::log(p0), lq = std::log1p(-p0);
  return TailSum(k, n, [&](int64_t i) {
    return LogChoose(n, i) + static_cast<double>(i) * lp +
           static_cast<double>(n - i) * lq;
  });
}

}  // namespace gpusched::control
