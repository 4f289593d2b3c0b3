// The latency-profile readers of FitProfiles (serving/latency_fit.h): one
// per public source (Aegaeon, Splitwise, DistServe, Vidur), each turning its
// files into measured or sampled iterations grouped by (model, GPU, TP,
// source). Internal to serving/latency_fit*.cc.
#ifndef GPUSCHED_SERVING_LATENCY_FIT_SOURCES_H_
#define GPUSCHED_SERVING_LATENCY_FIT_SOURCES_H_

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "serving/latency_fit.h"

namespace gpusched::serving::fit_internal {

// Higher wins for the same (model, gpu, tp).
enum Priority {
  kVidur = 0,
  kDistServeOwnEngine = 1,
  kDistServe = 2,
  kMeasured = 3
};

// One prefill iteration as measured or sampled: `n` prompts of `len` tokens.
struct PrefillSample {
  int64_t n = 1, len = 0;
  double seconds = 0;
};

struct Group {
  std::string model, gpu;
  int tp = 1;
  std::string source;
  int priority = 0;
  std::vector<PrefillSample> prefill;
  std::vector<DecodePoint> decode;
};

using GroupKey = std::tuple<std::string, std::string, int, std::string>;
using Groups = std::map<GroupKey, Group>;

bool Exists(const std::filesystem::path& p);

// Each adds its groups to `groups` and what it dropped or assumed to
// `notes`.
absl::Status ReadAegaeon(const std::filesystem::path& path, Groups& groups,
                         std::vector<std::string>& notes);
absl::Status ReadSplitwise(const std::filesystem::path& path, Groups& groups,
                           std::vector<std::string>& notes);
absl::Status ReadDistServe(const std::filesystem::path& path, Groups& groups,
                           std::vector<std::string>& notes);
absl::Status ReadVidur(const std::filesystem::path& root, Groups& groups,
                       std::vector<std::string>& notes);

}  // namespace gpusched::serving::fit_internal

#endif  // GPUSCHED_SERVING_LATENCY_FIT_SOURCES_H_
