// Engine templates: how gpusched starts one replica of an inference engine.
//
// A template is an argv with {placeholders} (never a shell command line), the
// environment it adds, the HTTP readiness probe and metrics path gpusched
// reads from it, and what its GPU memory flag means. The built-in ones cover
// the reference engine (`gpusched engine`), vLLM, SGLang, llama.cpp server,
// TGI and Triton; `command` runs any argv the user gives. Templates are plain
// values; the runtime expands one per replica and hands the argv and env to a
// Launcher. Everything here is pure (no I/O, no environment reads) and
// thread-compatible. docs/engines.md lists the templates and placeholders.
#ifndef GPUSCHED_RUNTIME_ENGINE_TEMPLATE_H_
#define GPUSCHED_RUNTIME_ENGINE_TEMPLATE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/clock.h"

namespace gpusched::runtime {

// Placeholders the runtime fills for every replica (docs/engines.md).
inline constexpr absl::string_view kSelfKey = "self";  // gpusched binary
inline constexpr absl::string_view kModelKey = "model";
inline constexpr absl::string_view kPortKey = "port";
inline constexpr absl::string_view kMetricsPortKey = "metrics_port";
inline constexpr absl::string_view kGpuMemoryFractionKey =
    "gpu_memory_fraction";
inline constexpr absl::string_view kTensorParallelKey = "tensor_parallel";
inline constexpr absl::string_view kReplicaKey = "replica";

// SkyServe-style readiness probe: GET http://127.0.0.1:{port}{path} until it
// answers 200, at most `startup_timeout` after start (loading a large model
// takes minutes), then every `period` as a health check.
struct ReadinessProbe {
  std::string path = "/health";
  Micros period = 1 * kMicrosPerSecond;
  Micros timeout = 5 * kMicrosPerSecond;  // per probe request
  Micros startup_timeout = 1200 * kMicrosPerSecond;
  int failure_threshold = 3;  // consecutive failures once ready -> unhealthy
};

// What the engine's GPU memory knob ({gpu_memory_fraction}) limits.
enum class GpuMemoryFlag {
  // No flag: the engine takes what it needs (llama.cpp, Triton, command).
  // Only an MPS pinned-memory limit (GpuEnv) bounds it.
  kNone,
  // Fraction of each visible GPU's total memory the whole engine may use:
  // weights, activations and KV cache (vLLM --gpu-memory-utilization).
  kFractionOfTotal,
  // Fraction of GPU memory for the static pool: weights plus KV cache
  // (SGLang --mem-fraction-static; activations come on top).
  kStaticPoolFraction,
  // Fraction of GPU memory the CUDA allocator may use (TGI
  // --cuda-memory-fraction).
  kAllocatorFraction,
};

absl::string_view GpuMemoryFlagName(GpuMemoryFlag flag);

struct EngineTemplate {
  std::string name;
  // argv with {placeholders}; `{{` and `}}` stand for literal braces.
  std::vector<std::string> argv;
  // Appended after the expanded argv, verbatim (not expanded), so user flags
  // such as JSON values need no escaping.
  std::vector<std::string> extra_args;
  // Added to the inherited environment; values are expanded like argv.
  absl::flat_hash_map<std::string, std::string> env;
  ReadinessProbe readiness;
  // Prometheus text endpoint; served on {metrics_port} when
  // `metrics_on_separate_port`, else on {port}.
  std::string metrics_path = "/metrics";
  bool metrics_on_separate_port = false;
  // Metric name prefix of the engine's own metrics ("vllm:" for vLLM and
  // the reference engine), so routing reads the same signals from each.
  std::string metrics_prefix;
  GpuMemoryFlag gpu_memory = GpuMemoryFlag::kNone;
  // Where the engine reads the model's weights, with placeholders ({model},
  // {name}); "" when it declares none. The controller records the nodes
  // where they are local and places replicas there first.
  std::string weights_path;
};

// Names of the built-in templates, in a fixed order.
std::vector<std::string> TemplateNames();

// The built-in template called `name`; NotFound lists the names.
absl::StatusOr<EngineTemplate> FindTemplate(absl::string_view name);

// The `command` template running `argv` (placeholders allowed).
EngineTemplate CommandTemplate(std::vector<std::string> argv);

// Expands every {name} in `text` from `values`. An unknown name, an unclosed
// `{` or a lone `}` is InvalidArgument naming it and the known names.
absl::StatusOr<std::string> ExpandPlaceholders(
    absl::string_view text,
    const absl::flat_hash_map<std::string, std::string>& values);

// The template's argv expanded, then its extra_args appended. An empty argv
// (the bare `command` template) is InvalidArgument.
absl::StatusOr<std::vector<std::string>> ExpandArgv(
    const EngineTemplate& engine,
    const absl::flat_hash_map<std::string, std::string>& values);

// The template's env with its values expanded.
absl::StatusOr<absl::flat_hash_map<std::string, std::string>> ExpandEnv(
    const EngineTemplate& engine,
    const absl::flat_hash_map<std::string, std::string>& values);

// The environment that gives a replica its GPUs:
//  - CUDA_VISIBLE_DEVICES: the ids joined by commas (indices, GPU-... UUIDs
//    or MIG-... UUIDs); empty hides every GPU (a CPU-only replica). CUDA
//    uses only one MIG device per process, so more than one MIG UUID is an
//    error rather than a silently idle slice.
//  - CUDA_MPS_ACTIVE_THREAD_PERCENTAGE: 1..100, the share of SMs.
//  - CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: "0=NNNNM,1=NNNNM,..." one entry per
//    visible device ordinal, in MiB (> 0).
absl::StatusOr<absl::flat_hash_map<std::string, std::string>> GpuEnv(
    const std::vector<std::string>& gpu_ids_or_mig_uuids,
    std::optional<int> mps_active_thread_percentage,
    std::optional<int64_t> mps_pinned_mem_mib);

}  // namespace gpusched::runtime

#endif  // GPUSCHED_RUNTIME_ENGINE_TEMPLATE_H_
