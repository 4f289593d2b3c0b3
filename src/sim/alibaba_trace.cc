#include "sim/alibaba_trace.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/csv.h"
#include "common/status.h"

namespace gpusched::sim {

using inventory::GpuKind;

absl::StatusOr<std::vector<TracePod>> ReadAlibabaPods(const std::string& path) {
  ASSIGN_OR_RETURN(CsvTable table, CsvTable::ReadFile(path));
  RETURN_IF_ERROR(table.RequireColumns(
      {"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"}));
  const bool has_spec = table.HasColumn("gpu_spec");
  std::vector<TracePod> pods;
  pods.reserve(table.rows().size());
  for (const CsvRow& row : table.rows()) {
    auto bad = [&](absl::string_view what) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", row.line(), ": ", what));
    };
    TracePod pod;
    ASSIGN_OR_RETURN(absl::string_view name, row.Get("name"));
    if (name.empty()) return bad("empty pod name");
    pod.name = std::string(name);
    inventory::ResourceRequest& r = pod.request;
    ASSIGN_OR_RETURN(r.cpu_milli, row.GetInt("cpu_milli"));
    ASSIGN_OR_RETURN(r.memory_mib, row.GetInt("memory_mib"));
    ASSIGN_OR_RETURN(int64_t num_gpu, row.GetInt("num_gpu"));
    ASSIGN_OR_RETURN(int64_t gpu_milli, row.GetInt("gpu_milli"));
    if (r.cpu_milli < 0 || r.memory_mib < 0) {
      return bad("cpu_milli and memory_mib must not be negative");
    }
    if (num_gpu < 0 || num_gpu > 64) return bad("num_gpu must be 0..64");
    if (gpu_milli < 0 || gpu_milli > 1000) {
      return bad(absl::StrCat("gpu_milli must be 0..1000, got ", gpu_milli));
    }
    if (num_gpu == 0) {
      r.kind = GpuKind::kNone;
    } else if (gpu_milli == 1000) {
      r.kind = GpuKind::kWhole;
      r.gpus = static_cast<int>(num_gpu);
    } else if (num_gpu == 1 && gpu_milli > 0) {
      r.kind = GpuKind::kFraction;
      r.gpu_milli = static_cast<int>(gpu_milli);
    } else {
      return bad(absl::StrCat("num_gpu ", num_gpu, " with gpu_milli ",
                              gpu_milli,
                              ": a share below 1000 needs num_gpu = 1"));
    }
    if (has_spec && r.kind != GpuKind::kNone) {
      ASSIGN_OR_RETURN(absl::string_view spec, row.Get("gpu_spec"));
      for (absl::string_view m : absl::StrSplit(spec, '|', absl::SkipEmpty())) {
        r.gpu_models.emplace_back(m);
      }
    }
    pods.push_back(std::move(pod));
  }
  return pods;
}

}  // namespace gpusched::sim
