// Request traces for `gpusched sim serve`: readers for public LLM serving
// traces and a seeded synthetic workload generator.
//
// Readers: the Azure LLM inference trace 2023 (Splitwise, ISCA'24), the
// Mooncake FAST'25 traces (with chained 512-token prefix-block hashes) and the
// VTC (OSDI'24) multi-tenant LMSYS replay. The generator builds per-tenant
// arrivals from a Poisson or Gamma process, or from a ServeGen
// (arXiv:2505.09999) client's per-window arrival model, with lengths that are
// fixed, uniform, or drawn from a ServeGen length PMF.
//
// A Trace is a plain value owned by the caller (the simulator driver); nothing
// here keeps state between calls and every function is reentrant.
// Thread-compatible. Reader errors are absl::InvalidArgumentError (or
// NotFoundError for a missing file) and name the file, the 1-based line and
// the problem. The same SyntheticWorkload (seed included) always yields the
// same Trace: every draw comes from common/random.h's portable Rng (libm's
// log and pow, used to shape the draws, are the only platform dependence).
#ifndef GPUSCHED_SIM_SERVE_TRACE_H_
#define GPUSCHED_SIM_SERVE_TRACE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "common/random.h"
#include "config/serve_sim_config.h"

namespace gpusched::sim {

// Tokens per prefix block in the Mooncake traces.
inline constexpr int kMooncakeBlockTokens = 512;

// The file formats ReadTrace accepts.
inline constexpr const char* kTraceFormats[] = {"azure", "mooncake", "vtc",
                                                "aegaeon"};

struct TraceRequest {
  Micros arrival = 0;  // from the trace's start
  std::string tenant;  // "" when the trace has none
  std::string model;   // "" when the trace has none
  int32_t input_tokens = 0;
  // May be 0 (a prefill-only request) where the source says so.
  int32_t output_tokens = 0;
  // Chained block hashes: equal values at position i mean equal tokens in
  // blocks 0..i (Trace::block_tokens tokens each). Empty when unknown.
  std::vector<uint64_t> prefix_blocks;
};

struct Trace {
  std::string source;    // the path read, or "synthetic"
  std::string format;    // azure | mooncake | vtc | synthetic
  int block_tokens = 0;  // tokens per prefix block; 0 when no hashes
  std::vector<TraceRequest> requests;  // sorted by arrival (stable)
};

// Azure LLM inference trace (AzureLLMInferenceTrace_{code,conv}*.csv): columns
// TIMESTAMP ("YYYY-MM-DD HH:MM:SS.fffffff", read exactly as a UTC calendar
// time, no locale or time zone), ContextTokens, GeneratedTokens. Arrivals are
// relative to the earliest row (the first: the files are in time order),
// rounded to the microsecond. No tenant, model or prefix hashes.
absl::StatusOr<Trace> ReadAzureTrace(const std::string& path);

// Mooncake FAST'25 JSONL: one object per line with timestamp (ms from trace
// start), input_length, output_length and hash_ids (one per 512-token block;
// len(hash_ids) must be ceil(input_length / 512)). Other fields are ignored.
absl::StatusOr<Trace> ReadMooncakeTrace(const std::string& path);

// VTC multi-tenant replay (requests.csv): arrival_s, tenant, prompt_len,
// output_len. A numeric tenant n becomes "tenant-<n>"; a name is kept.
absl::StatusOr<Trace> ReadVtcTrace(const std::string& path);

// Dispatches on `format` (one of kTraceFormats).
// Aegaeon's synthetic multi-model traces: `Request Time` (HH:MM:SS.fff from
// the start), `Model Name` (the deployment), `Input Length`, `Output
// Length`.
absl::StatusOr<Trace> ReadAegaeonTrace(const std::string& path);

absl::StatusOr<Trace> ReadTrace(const std::string& format,
                                const std::string& path);

// ---- Synthetic workloads -------------------------------------------------

// One synthetic tenant's arrival process and lengths (defined with the
// config that names its fields).
using SyntheticTenant = config::SyntheticTenant;

struct SyntheticWorkload {
  double duration_s = 60;  // arrivals fall in [0, duration_s)
  uint64_t seed = 42;
  std::vector<SyntheticTenant> tenants;
};

// Generates the workload; errors name the tenant (and the file:line for
// ServeGen inputs). Each tenant draws from its own streams derived from
// `seed` and its position, so adding a tenant at the end, or changing one
// tenant's lengths, leaves the other arrivals unchanged. At most
// kMaxSyntheticRequests requests (about 1 GB as TraceRequests).
inline constexpr int64_t kMaxSyntheticRequests = 10'000'000;
absl::StatusOr<Trace> GenerateSynthetic(const SyntheticWorkload& w);

// Divides every arrival by `time_scale` (> 1 compresses time and raises the
// load). Precondition, CHECKed: time_scale is finite and > 0 (the caller
// validates its flag).
void ScaleTrace(Trace& t, double time_scale);
// Keeps the first `max_requests` requests (<= 0: no cap) that arrive before
// `max_seconds` (<= 0: no cap).
void TruncateTrace(Trace& t, int64_t max_requests, double max_seconds);

// ---- ServeGen building blocks (used by GenerateSynthetic) ----------------

// One row of a ServeGen client trace: `timestamp,rate,cv,pattern,shape,scale`.
struct ServeGenWindow {
  enum class Pattern { kIdle, kGamma, kWeibull };
  double start_s = 0;     // from the client trace's start
  double length_s = 600;  // to the next row (the last keeps the previous)
  double rate = 0;        // mean req/s; 0 = idle
  double cv = 0;          // of the gaps (informational)
  Pattern pattern = Pattern::kIdle;
  double shape =
      0;  // scipy gamma(a=shape, scale) / weibull_min(c=shape, scale)
  double scale = 0;
};
// Rows must have increasing timestamps; a row with rate > 0 needs a Gamma or
// Weibull pattern with positive shape and scale.
absl::StatusOr<std::vector<ServeGenWindow>> ReadServeGenTrace(
    const std::string& path);

// A discrete length distribution.
struct LengthPmf {
  std::vector<int32_t> values;  // ascending, each with probability > 0
  std::vector<double> cdf;      // cumulative, ends at 1
  int32_t Sample(Rng& rng) const;
  double Mean() const;
};

struct ServeGenLengths {
  double start_s = 0;  // window start, from the client trace's start
  LengthPmf input;
  LengthPmf output;
};
// Reads a ServeGen chunk-<i>-dataset.json: {"<start_s>": {"input_tokens":
// "{tokens: prob, ...}", "output_tokens": "{...}", ...}, ...}, the PMFs being
// Python-dict strings. Windows whose PMFs are empty ("{}") are left out;
// other fields (reason_ratio) are ignored. Sorted by start_s.
absl::StatusOr<std::vector<ServeGenLengths>> ReadServeGenDataset(
    const std::string& path);

}  // namespace gpusched::sim

#endif  // GPUSCHED_SIM_SERVE_TRACE_H_
