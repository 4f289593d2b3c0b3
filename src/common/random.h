// Seeded, portable pseudo-random numbers.
//
// std::uniform_int_distribution differs between standard libraries, so every
// seeded decision in gpusched (shuffles, tie-breaks, trace inflation) draws
// from this generator instead: the same seed gives the same run everywhere.
// Not thread-safe; each owner keeps its own Rng.
#ifndef GPUSCHED_COMMON_RANDOM_H_
#define GPUSCHED_COMMON_RANDOM_H_

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace gpusched {

// SplitMix64's step: a fixed, seed-independent 64-bit mix (hashing block
// ids, ring points, token ids). Mix64(x) is the value SplitMix64 returns
// after its state becomes x + golden ratio.
inline uint64_t Mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// xoshiro256** seeded through SplitMix64.
class Rng {
 public:
  explicit Rng(uint64_t seed);

  uint64_t Next();
  // Uniform integer in [0, n); n must be > 0. Unbiased (Lemire's method).
  uint64_t Uniform(uint64_t n);
  // Uniform double in [0, 1).
  double UniformDouble();

  // Fisher-Yates shuffle.
  template <typename T>
  void Shuffle(std::vector<T>& v) {
    for (size_t i = v.size(); i > 1; --i) {
      std::swap(v[i - 1], v[Uniform(i)]);
    }
  }

 private:
  uint64_t s_[4];
};

}  // namespace gpusched

#endif  // GPUSCHED_COMMON_RANDOM_H_
