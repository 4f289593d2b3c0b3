// The latency fitter: turns the measured profiles in a profiles directory
// (../shared/data/profiles, laid out as its README.md describes) into
// LatencyModels, one per (model, GPU, tensor parallelism). Offline tooling
// behind `gpusched profiles fit`; pure functions, thread-compatible.
//
// Sources, each read when its file is there (docs/latency-model.md has the
// details and the reasons):
//   aegaeon/vllm_prefill_decode_latency.csv   measured vLLM iterations (s)
//   splitwise-sim/perf_model.csv              measured iterations (ms)
//   distserve/latency_model_coefficients_a100.csv
//                                             DistServe's fitted formulas (ms)
//   vidur/compute/<gpu>/<org>/<model>/mlp.csv per-operator times (ms) plus a
//                                             roofline for attention and the
//                                             LM head, and NCCL all-reduce
//                                             times from vidur/network/
// A (model, gpu, tp) measured end to end (Aegaeon, Splitwise) wins over
// DistServe's formulas, which win over Vidur's operator sums.
//
// Cleaning, all reported in FitResult::notes:
//   * Aegaeon timed only the first prefill iteration of a batch; vLLM puts
//     whole prompts up to max_num_batched_tokens in it. Each campaign (the
//     file's source, model, gpu, tp) gets the budget among none, 2048, 4096,
//     8192 and 16384 tokens under which its prefill times fit best, and its
//     points count only the prompts that budget admits.
//   * Measured points faster than half a point of the same campaign with no
//     more work are dropped (Aegaeon "decode iterations" of 0.3 ms where no
//     decode ran).
//   * Aegaeon's V100 rows are skipped (tensor parallelism guessed upstream),
//     as are Splitwise's power-capped H100 rows.
//
// Each group is fitted by least squares on relative error (so a 10 ms
// iteration counts as much as a 2 s one), with every coefficient >= 0: the
// best fit over the subsets of terms whose unconstrained solution is
// non-negative (exact non-negative least squares for three terms).
#ifndef GPUSCHED_SERVING_LATENCY_FIT_H_
#define GPUSCHED_SERVING_LATENCY_FIT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "serving/latency_model.h"

namespace gpusched::serving {

// One prefill iteration: `tokens` prompt tokens in total (all sequences).
struct PrefillPoint {
  double tokens = 0;
  double seconds = 0;
};

// One decode iteration: `batch` sequences holding `kv_tokens` context tokens.
struct DecodePoint {
  double batch = 0;
  double kv_tokens = 0;
  double seconds = 0;
};

// c0 + c1*x1 + c2*x2, all c >= 0, and how well it fits.
struct LinearFit {
  double c0 = 0, c1 = 0, c2 = 0;
  double mape = 0;  // percent
  int points = 0;
};

// prefill_s(T) = c0 + c1*T + c2*T^2. InvalidArgument when there is no point
// or a point has seconds <= 0 or tokens < 0.
absl::StatusOr<LinearFit> FitPrefill(const std::vector<PrefillPoint>& points);
// decode_s(B, KV) = c0 + c1*B + c2*KV. Same errors.
absl::StatusOr<LinearFit> FitDecode(const std::vector<DecodePoint>& points);

struct FitOptions {
  // Also return the groups that lost to a better source for the same
  // (model, gpu, tp), and DistServe's own engine next to its vLLM one, with
  // the source suffixed " (shadowed)". For cross-checks only: the result
  // then has duplicate keys and is not a valid table.
  bool keep_shadowed = false;
};

struct FitResult {
  std::vector<LatencyModel> models;  // sorted by model, gpu, tp
  // What was read, skipped and assumed, one line each (for the CLI).
  std::vector<std::string> notes;
};

// Fits every source found in `profiles_dir`. NotFound when none of them is
// there; InvalidArgument naming file:line for a malformed row.
absl::StatusOr<FitResult> FitProfiles(const std::string& profiles_dir,
                                      const FitOptions& options = {});
absl::StatusOr<std::vector<LatencyModel>> FitLatencyModels(
    const std::string& profiles_dir);

// gpusched's short name for a model name found in a profile
// ("llama2_13b_chat" -> "llama-2-13b", "facebook/opt-13b" -> "opt-13b").
// Names it does not know are lower-cased, lose an "org/" prefix and a
// "-chat"/"-hf" suffix, and get '-' for '_'.
std::string NormalizeModelName(absl::string_view raw);

}  // namespace gpusched::serving

#endif  // GPUSCHED_SERVING_LATENCY_FIT_H_
