#include "runtime/engine_template.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"

namespace gpusched::runtime {
namespace {

// Python engines buffer stdout when it is a file; the log would lag.
constexpr char kPythonUnbuffered[] = "PYTHONUNBUFFERED";

EngineTemplate Reference() {
  EngineTemplate t;
  t.name = "reference";
  // The reference engine serves under the deployment's name ({name}).
  t.argv = {"{self}", "engine", "--host",  "{host}",
            "--port", "{port}", "--model", "{name}"};
  t.readiness.path = "/v2/health/ready";
  t.metrics_prefix = "vllm:";
  return t;
}

EngineTemplate Vllm() {
  EngineTemplate t;
  t.weights_path = "{model}";
  t.name = "vllm";
  t.argv = {"vllm",
            "serve",
            "{model}",
            "--host",
            "{host}",
            "--port",
            "{port}",
            "--gpu-memory-utilization",
            "{gpu_memory_fraction}",
            "--tensor-parallel-size",
            "{tensor_parallel}",
            "--served-model-name",
            "{name}"};
  t.env = {{kPythonUnbuffered, "1"}};
  t.readiness.path = "/health";
  t.metrics_prefix = "vllm:";
  t.gpu_memory = GpuMemoryFlag::kFractionOfTotal;
  return t;
}

EngineTemplate Sglang() {
  EngineTemplate t;
  t.weights_path = "{model}";
  t.name = "sglang";
  t.argv = {"python3",
            "-m",
            "sglang.launch_server",
            "--model-path",
            "{model}",
            "--host",
            "{host}",
            "--port",
            "{port}",
            "--mem-fraction-static",
            "{gpu_memory_fraction}",
            "--tp",
            "{tensor_parallel}",
            "--served-model-name",
            "{name}",
            "--enable-metrics"};
  t.env = {{kPythonUnbuffered, "1"}};
  t.readiness.path = "/health";
  t.metrics_prefix = "sglang:";
  t.gpu_memory = GpuMemoryFlag::kStaticPoolFraction;
  return t;
}

EngineTemplate LlamaCpp() {
  EngineTemplate t;
  t.weights_path = "{model}";
  t.name = "llama-cpp";
  // Offloads every layer to the visible GPUs; --metrics enables /metrics.
  t.argv = {"llama-server", "-m",        "{model}", "--port",
            "{port}",       "--host",    "{host}",  "--n-gpu-layers",
            "999",          "--metrics", "--alias", "{name}"};
  t.readiness.path = "/health";
  t.metrics_prefix = "llamacpp:";
  return t;
}

EngineTemplate Tgi() {
  EngineTemplate t;
  t.weights_path = "{model}";
  t.name = "tgi";
  t.argv = {"text-generation-launcher",
            "--model-id",
            "{model}",
            "--hostname",
            "{host}",
            "--port",
            "{port}",
            "--num-shard",
            "{tensor_parallel}",
            "--cuda-memory-fraction",
            "{gpu_memory_fraction}"};
  t.readiness.path = "/health";
  t.metrics_prefix = "tgi_";
  t.gpu_memory = GpuMemoryFlag::kAllocatorFraction;
  return t;
}

EngineTemplate Triton() {
  EngineTemplate t;
  t.weights_path = "{model}";
  t.name = "triton";
  // gRPC is off so that replicas on one host never collide on its fixed
  // default port; metrics live on their own port in Triton.
  t.argv = {
      "tritonserver", "--model-repository", "{model}",       "--http-address",
      "{host}",       "--http-port",        "{port}",        "--allow-grpc",
      "false",        "--metrics-port",     "{metrics_port}"};
  t.readiness.path = "/v2/health/ready";
  t.metrics_on_separate_port = true;
  t.metrics_prefix = "nv_";
  return t;
}

EngineTemplate Command() {
  EngineTemplate t;
  t.name = "command";
  t.readiness.path = "/health";
  return t;
}

std::vector<EngineTemplate> BuiltIns() {
  return {Reference(), Vllm(),   Sglang(), LlamaCpp(),
          Tgi(),       Triton(), Command()};
}

std::string KnownNames(
    const absl::flat_hash_map<std::string, std::string>& values) {
  std::vector<std::string> names;
  names.reserve(values.size());
  for (const auto& [name, value] : values) names.push_back(name);
  std::sort(names.begin(), names.end());
  if (names.empty()) return "none";
  return absl::StrJoin(names, ", ");
}

}  // namespace

absl::string_view GpuMemoryFlagName(GpuMemoryFlag flag) {
  switch (flag) {
    case GpuMemoryFlag::kNone:
      return "none";
    case GpuMemoryFlag::kFractionOfTotal:
      return "fraction_of_total";
    case GpuMemoryFlag::kStaticPoolFraction:
      return "static_pool_fraction";
    case GpuMemoryFlag::kAllocatorFraction:
      return "allocator_fraction";
  }
  return "unknown";
}

std::vector<std::string> TemplateNames() {
  std::vector<std::string> names;
  for (const EngineTemplate& t : BuiltIns()) names.push_back(t.name);
  return names;
}

absl::StatusOr<EngineTemplate> FindTemplate(absl::string_view name) {
  for (EngineTemplate& t : BuiltIns()) {
    if (t.name == name) return std::move(t);
  }
  return absl::NotFoundError(
      absl::StrCat("unknown engine \"", name,
                   "\"; known: ", absl::StrJoin(TemplateNames(), ", ")));
}

EngineTemplate CommandTemplate(std::vector<std::string> argv) {
  EngineTemplate t = Command();
  t.argv = std::move(argv);
  return t;
}

absl::StatusOr<std::string> ExpandPlaceholders(
    absl::string_view text,
    const absl::flat_hash_map<std::string, std::string>& values) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (c == '{' && i + 1 < text.size() && text[i + 1] == '{') {
      out.push_back('{');
      i += 2;
    } else if (c == '}' && i + 1 < text.size() && text[i + 1] == '}') {
      out.push_back('}');
      i += 2;
    } else if (c == '}') {
      return absl::InvalidArgumentError(
          absl::StrCat("lone '}' in \"", text, "\" (write }} for a brace)"));
    } else if (c == '{') {
      const size_t close = text.find('}', i + 1);
      if (close == absl::string_view::npos) {
        return absl::InvalidArgumentError(absl::StrCat(
            "unclosed '{' in \"", text, "\" (write {{ for a brace)"));
      }
      const std::string name(text.substr(i + 1, close - i - 1));
      auto it = values.find(name);
      if (it == values.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("unknown placeholder {", name, "} in \"", text,
                         "\"; known: ", KnownNames(values)));
      }
      out += it->second;
      i = close + 1;
    } else {
      out.push_back(c);
      ++i;
    }
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> ExpandArgv(
    const EngineTemplate& engine,
    const absl::flat_hash_map<std::string, std::string>& values) {
  if (engine.argv.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "engine \"", engine.name, "\" has no argv (the command engine needs ",
        "the program and its arguments)"));
  }
  std::vector<std::string> argv;
  argv.reserve(engine.argv.size() + engine.extra_args.size());
  for (const std::string& arg : engine.argv) {
    ASSIGN_OR_RETURN(std::string expanded, ExpandPlaceholders(arg, values));
    argv.push_back(std::move(expanded));
  }
  if (argv.front().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "engine \"", engine.name, "\": the program (argv[0]) is empty"));
  }
  argv.insert(argv.end(), engine.extra_args.begin(), engine.extra_args.end());
  return argv;
}

absl::StatusOr<absl::flat_hash_map<std::string, std::string>> ExpandEnv(
    const EngineTemplate& engine,
    const absl::flat_hash_map<std::string, std::string>& values) {
  absl::flat_hash_map<std::string, std::string> env;
  for (const auto& [name, value] : engine.env) {
    ASSIGN_OR_RETURN(std::string expanded, ExpandPlaceholders(value, values));
    env[name] = std::move(expanded);
  }
  return env;
}

absl::StatusOr<absl::flat_hash_map<std::string, std::string>> GpuEnv(
    const std::vector<std::string>& gpu_ids_or_mig_uuids,
    std::optional<int> mps_active_thread_percentage,
    std::optional<int64_t> mps_pinned_mem_mib) {
  int mig_count = 0;
  for (const std::string& id : gpu_ids_or_mig_uuids) {
    if (id.empty() || absl::StrContains(id, ',') ||
        absl::StrContains(id, ' ')) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad GPU id \"", id,
                       "\": want an index, a GPU-... UUID or a MIG-... UUID"));
    }
    if (absl::StartsWith(id, "MIG-")) ++mig_count;
  }
  if (mig_count > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CUDA uses only one MIG device per process; got ", mig_count, ": ",
        absl::StrJoin(gpu_ids_or_mig_uuids, ",")));
  }
  absl::flat_hash_map<std::string, std::string> env;
  env["CUDA_VISIBLE_DEVICES"] = absl::StrJoin(gpu_ids_or_mig_uuids, ",");
  if (mps_active_thread_percentage.has_value()) {
    const int pct = *mps_active_thread_percentage;
    if (pct < 1 || pct > 100) {
      return absl::InvalidArgumentError(absl::StrCat(
          "MPS active thread percentage ", pct, " is outside 1..100"));
    }
    env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = absl::StrCat(pct);
  }
  if (mps_pinned_mem_mib.has_value()) {
    const int64_t mib = *mps_pinned_mem_mib;
    if (mib <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("MPS pinned memory limit ", mib, " MiB is not > 0"));
    }
    if (gpu_ids_or_mig_uuids.empty()) {
      return absl::InvalidArgumentError(
          "an MPS pinned memory limit needs at least one GPU");
    }
    std::vector<std::string> limits;
    for (size_t ordinal = 0; ordinal < gpu_ids_or_mig_uuids.size(); ++ordinal) {
      limits.push_back(absl::StrCat(ordinal, "=", mib, "M"));
    }
    env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = absl::StrJoin(limits, ",");
  }
  return env;
}

}  // namespace gpusched::runtime
