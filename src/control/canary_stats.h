// The statistics a canary analysis (control/rollout.h) rests on: a rank
// test for latencies and exact tests for error counts. Plain functions on
// plain data: no state, no I/O. Thread-safe.
//
// - MannWhitneyGreater: the one-sided Mann-Whitney U test that the canary's
//   values are stochastically greater than the stable's (Kayenta's judge).
//   The p-value is the normal approximation with the tie correction and a
//   continuity correction: from 10 samples a side it is within 0.03 of the
//   exact permutation p-value, and above it (conservative) in the far
//   tail, e.g. 9e-5 where the exact test gives 5e-6 (canary_stats_test.cc
//   compares it with a brute-force permutation). Below kMinRankSamples a
//   side the caller must not judge. All values equal: p = 1, as the exact
//   test gives.
// - FisherGreater: the one-sided Fisher exact test that the canary's error
//   rate is above the stable's (p = P[X >= canary errors] for the
//   hypergeometric X of the pooled counts). 0 errors of 10 against 0 of 50
//   is p = 1: no evidence either way.
// - BinomialGreater: P[X >= k] for X ~ Binomial(n, p0): the evidence that a
//   rate is above the cap p0.
// Each sums its tail in log space until the terms vanish, so its cost is
// bounded by the counts it is given.
#ifndef GPUSCHED_CONTROL_CANARY_STATS_H_
#define GPUSCHED_CONTROL_CANARY_STATS_H_

#include <cstdint>
#include <vector>

namespace gpusched::control {

// The normal approximation needs this many values per side.
inline constexpr int64_t kMinRankSamples = 10;

struct RankTest {
  int64_t n_canary = 0, n_stable = 0;
  double u = 0;  // pairs (canary > stable) + half the ties
  double z = 0;
  double p_value = 1;  // one-sided: canary greater
};
RankTest MannWhitneyGreater(const std::vector<double>& canary,
                            const std::vector<double>& stable);

// The smallest n >= kMinRankSamples such that n values a side, every
// canary value above every stable value, reach p < alpha: the sample count
// a confidence of 1 - alpha needs. alpha in (0, 1).
int64_t MinRankSamples(double alpha);

// One-sided Fisher exact test; counts must satisfy 0 <= errors <= requests.
double FisherGreater(int64_t canary_errors, int64_t canary_requests,
                     int64_t stable_errors, int64_t stable_requests);

// P[X >= k], X ~ Binomial(n, p0); p0 in [0, 1].
double BinomialGreater(int64_t k, int64_t n, double p0);

// Standard normal upper tail P[Z > z].
double NormalUpper(double z);

}  // namespace gpusched::control

#endif  // GPUSCHED_CONTROL_CANARY_STATS_H_
