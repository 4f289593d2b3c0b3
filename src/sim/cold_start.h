// Cold-start model of `gpusched sim serve`: how long a replica takes from
// its start to ready (loading the checkpoint, then the engine's own
// initialisation).
//
// A start takes: one load time drawn (seeded) from the model-load profile's
// rows of the configured checkpoint format (ServerlessLLM's measurements of
// OPT-6.7B: `loading_time_s`, 30 loads per format; testdata/model-load has
// the CSV), scaled by the model's parameter count / 6.7B (loading is
// bandwidth-bound, so time follows bytes), plus `engine_init_s`. The
// parameter count comes from the model name ("llama-2-13b" -> 13B, "8x7b"
// -> 56B); a name without one counts as 6.7B. Without a profile, the
// documented default is `default_s` (4.95 s: the profile's median
// safetensors load) per 6.7B parameters, with no randomness.
// Deterministic for a seed; not thread-safe.
#ifndef GPUSCHED_SIM_COLD_START_H_
#define GPUSCHED_SIM_COLD_START_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/random.h"
#include "config/serve_sim_config.h"

namespace gpusched::sim {

inline constexpr double kProfileParamsB = 6.7;  // OPT-6.7B

// Billions of parameters named in `model` ("llama-2-7b" -> 7, "opt-6.7b" ->
// 6.7, "mixtral-8x7b" -> 56); kProfileParamsB when none is named.
double ModelParamsB(absl::string_view model);

class ColdStartModel {
 public:
  // NotFound / InvalidArgument naming the file, line and column when the
  // profile cannot be read or has no row of the format.
  static absl::StatusOr<ColdStartModel> Create(const config::ColdStartSpec& s,
                                               uint64_t seed);

  // Seconds from start to ready for a replica of `model` with
  // `tensor_parallel` GPUs (each loads its shard in parallel); on a node
  // where its weights are local the load takes local_load_factor of it.
  double Sample(absl::string_view model, int tensor_parallel,
                bool weights_local = false);

  // The profile's load times (seconds, in file order); empty: default_s.
  const std::vector<double>& load_times() const { return load_times_; }

 private:
  ColdStartModel(config::ColdStartSpec spec, uint64_t seed)
      : spec_(std::move(spec)), rng_(seed) {}
  config::ColdStartSpec spec_;
  std::vector<double> load_times_;
  Rng rng_;
};

}  // namespace gpusched::sim

#endif  // GPUSCHED_SIM_COLD_START_H_
