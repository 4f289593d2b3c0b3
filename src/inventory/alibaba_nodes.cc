#include "inventory/alibaba_nodes.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"

namespace gpusched::inventory {
namespace {

// Collects the first error of each row.
class RowReader {
 public:
  RowReader(const std::string& file, std::vector<std::string>& errors)
      : file_(file), errors_(errors) {}

  bool Int(const CsvRow& row, absl::string_view column, int64_t* out) {
    absl::StatusOr<int64_t> v = row.GetInt(column);
    if (!v.ok()) return Fail(v.status());
    if (*v < 0) {
      return Fail(absl::InvalidArgumentError(
          absl::StrCat(file_, ":", row.line(), ": column '", column,
                       "': negative value ", *v)));
    }
    *out = *v;
    return true;
  }

  bool Fail(const absl::Status& status) {
    errors_.push_back(std::string(status.message()));
    return false;
  }

 private:
  const std::string& file_;
  std::vector<std::string>& errors_;
};

}  // namespace

absl::StatusOr<std::vector<NodeSpec>> AlibabaNodesFromCsv(
    const CsvTable& table, const GpuCatalog& catalog) {
  RETURN_IF_ERROR(
      table.RequireColumns({"sn", "cpu_milli", "memory_mib", "gpu", "model"}));
  std::vector<NodeSpec> nodes;
  std::vector<std::string> errors;
  RowReader reader(table.name(), errors);
  for (const CsvRow& row : table.rows()) {
    NodeSpec spec;
    absl::StatusOr<absl::string_view> sn = row.Get("sn");
    absl::StatusOr<absl::string_view> model = row.Get("model");
    if (!sn.ok() || !model.ok()) {
      reader.Fail(!sn.ok() ? sn.status() : model.status());
      continue;
    }
    spec.name = std::string(absl::StripAsciiWhitespace(*sn));
    if (spec.name.empty()) {
      errors.push_back(
          absl::StrCat(table.name(), ":", row.line(), ": column 'sn': empty"));
      continue;
    }
    int64_t gpus = 0;
    if (!reader.Int(row, "cpu_milli", &spec.cpu_milli) ||
        !reader.Int(row, "memory_mib", &spec.memory_mib) ||
        !reader.Int(row, "gpu", &gpus)) {
      continue;
    }
    if (gpus < 0 || gpus > ClusterState::kMaxGpusPerNode) {
      errors.push_back(absl::StrCat(table.name(), ":", row.line(),
                                    ": column 'gpu': ", gpus, " GPUs; want 0..",
                                    ClusterState::kMaxGpusPerNode));
      continue;
    }
    std::string code(absl::StripAsciiWhitespace(*model));
    if (absl::AsciiStrToLower(code) == "nan") code.clear();
    if (gpus > 0 && code.empty()) {
      errors.push_back(absl::StrCat(table.name(), ":", row.line(),
                                    ": column 'model': node has ", gpus,
                                    " GPUs but no model"));
      continue;
    }
    if (gpus > 0) {
      spec.gpu_count = static_cast<int>(gpus);
      spec.gpu_model = code;
      if (const GpuModelSpec* m = catalog.Find(code)) {
        spec.gpu_memory_mib = m->memory_mib;
      }
    }
    spec.simulated = true;
    nodes.push_back(std::move(spec));
  }
  if (!errors.empty()) {
    return absl::InvalidArgumentError(absl::StrJoin(errors, "\n"));
  }
  return nodes;
}

absl::StatusOr<std::vector<NodeSpec>> ReadAlibabaNodes(
    const std::string& path, const GpuCatalog& catalog) {
  ASSIGN_OR_RETURN(CsvTable table, CsvTable::ReadFile(path));
  return AlibabaNodesFromCsv(table, catalog);
}

}  // namespace gpusched::inventory
