// LatencyModel: how long one engine iteration takes for a model on a GPU.
//
// Fitted from measured profiles (../shared/data/profiles: Vidur, Splitwise,
// DistServe, Aegaeon) by `gpusched profiles fit`, shipped in
// data/latency_models.csv and embedded in the binary. Used by the
// latency-predictive router, deadline admission and the simulator's replicas.
// Immutable after construction; safe to share across threads.
//
//   prefill_s(T)     = p0 + p1*T + p2*T^2      T: prompt tokens prefilled in
//                                              the iteration (all sequences)
//   decode_s(B, KV)  = d0 + d1*B + d2*KV       B: sequences decoding,
//                                              KV: their total context tokens
#ifndef GPUSCHED_SERVING_LATENCY_MODEL_H_
#define GPUSCHED_SERVING_LATENCY_MODEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace gpusched::serving {

struct LatencyModel {
  std::string model;  // e.g. "llama-2-7b"
  std::string gpu;    // catalog name, e.g. "A100-80GB"
  int tensor_parallel = 1;
  double p0 = 0, p1 = 0, p2 = 0;  // prefill coefficients (seconds)
  double d0 = 0, d1 = 0, d2 = 0;  // decode coefficients (seconds)
  // KV-cache capacity of one replica in tokens (GPU memory left after weights
  // and the runtime reserve, divided by the model's KV bytes per token).
  int64_t kv_capacity_tokens = 0;
  // Where the coefficients came from and how well they fit (for reports):
  // mean absolute percentage error (in percent) of the fitted formulas
  // against the points they were fitted to, and how many points there were
  // (prefill plus decode). For sources that are themselves formulas
  // (DistServe) or operator sums (Vidur) the points are sampled from those,
  // so the MAPE measures only the reshaping into this form.
  std::string source;
  double prefill_mape = 0, decode_mape = 0;
  int points = 0;

  double PrefillSeconds(int64_t tokens) const {
    if (tokens <= 0) return 0;
    const double t = static_cast<double>(tokens);
    return p0 + p1 * t + p2 * t * t;
  }
  double DecodeSeconds(int64_t batch, int64_t kv_tokens) const {
    if (batch <= 0) return 0;
    return d0 + d1 * static_cast<double>(batch) +
           d2 * static_cast<double>(kv_tokens);
  }
};

// The fitted table shipped with gpusched: data/latency_models.csv, embedded
// at build time and parsed once on first use.
const std::vector<LatencyModel>& BuiltinLatencyModels();

// The CSV columns, in the order FormatLatencyModelsCsv writes them. `source`,
// `prefill_mape`, `decode_mape` and `points` are optional when reading.
const std::vector<std::string>& LatencyModelColumns();

// Reads a user-supplied table in the shipped CSV format. Errors name the file,
// the line and the column: unknown number, negative or non-finite
// coefficient, tensor_parallel < 1, a (model, gpu, tp) given twice.
absl::StatusOr<std::vector<LatencyModel>> LoadLatencyModels(
    const std::string& path);
// The same for `text` read from a file called `name`.
absl::StatusOr<std::vector<LatencyModel>> ParseLatencyModels(
    const std::string& text, const std::string& name);

// The CSV text of `models` (header first). Numbers are written in the
// shortest form that reads back to the same double.
std::string FormatLatencyModelsCsv(const std::vector<LatencyModel>& models);

// Finds (model, gpu, tp) in `models`, names compared case-insensitively.
// NotFound names the (gpu, tp) pairs that exist for `model`, or the models
// there are when `model` has none.
absl::StatusOr<LatencyModel> FindLatencyModel(
    const std::vector<LatencyModel>& models, const std::string& model,
    const std::string& gpu, int tensor_parallel);

}  // namespace gpusched::serving

#endif  // GPUSCHED_SERVING_LATENCY_MODEL_H_
