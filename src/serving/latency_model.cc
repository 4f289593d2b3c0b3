#include "serving/latency_model.h"

#include <charconv>
#include <cmath>
#include <map>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/check.h"
#include "common/csv.h"
#include "common/status.h"
#include "serving/latency_models_data.h"

namespace gpusched::serving {
namespace {

constexpr char kBuiltinName[] = "data/latency_models.csv (built in)";

// Shortest text that reads back to exactly `v`.
std::string FormatDouble(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  CHECK(ec == std::errc()) << "to_chars failed";
  return std::string(buf, end);
}

absl::Status RowError(const CsvTable& table, const CsvRow& row,
                      absl::string_view column, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(
      table.name(), ":", row.line(), ": column '", column, "': ", what));
}

// A coefficient: finite and >= 0 (a negative term would make latency fall as
// work grows).
absl::StatusOr<double> ReadCoefficient(const CsvTable& table, const CsvRow& row,
                                       const std::string& column) {
  ASSIGN_OR_RETURN(const double v, row.GetDouble(column));
  if (!std::isfinite(v) || v < 0) {
    return RowError(table, row, column,
                    absl::StrCat("must be a finite number >= 0, got ", v));
  }
  return v;
}

absl::StatusOr<std::string> ReadName(const CsvTable& table, const CsvRow& row,
                                     const std::string& column) {
  ASSIGN_OR_RETURN(const absl::string_view v, row.Get(column));
  const absl::string_view name = absl::StripAsciiWhitespace(v);
  if (name.empty()) return RowError(table, row, column, "empty");
  return std::string(name);
}

absl::StatusOr<LatencyModel> ReadRow(const CsvTable& table, const CsvRow& row) {
  LatencyModel m;
  ASSIGN_OR_RETURN(m.model, ReadName(table, row, "model"));
  ASSIGN_OR_RETURN(m.gpu, ReadName(table, row, "gpu"));
  ASSIGN_OR_RETURN(const int64_t tp, row.GetInt("tensor_parallel"));
  if (tp < 1 || tp > 1024) {
    return RowError(table, row, "tensor_parallel",
                    absl::StrCat("must be 1 to 1024, got ", tp));
  }
  m.tensor_parallel = static_cast<int>(tp);
  ASSIGN_OR_RETURN(m.p0, ReadCoefficient(table, row, "p0"));
  ASSIGN_OR_RETURN(m.p1, ReadCoefficient(table, row, "p1"));
  ASSIGN_OR_RETURN(m.p2, ReadCoefficient(table, row, "p2"));
  ASSIGN_OR_RETURN(m.d0, ReadCoefficient(table, row, "d0"));
  ASSIGN_OR_RETURN(m.d1, ReadCoefficient(table, row, "d1"));
  ASSIGN_OR_RETURN(m.d2, ReadCoefficient(table, row, "d2"));
  ASSIGN_OR_RETURN(m.kv_capacity_tokens, row.GetInt("kv_capacity_tokens"));
  if (m.kv_capacity_tokens < 0) {
    return RowError(table, row, "kv_capacity_tokens",
                    "must be >= 0 (0 = unknown)");
  }
  if (m.p0 + m.p1 + m.p2 <= 0) {
    return RowError(table, row, "p0",
                    "p0, p1 and p2 are all 0: prefill would take no time");
  }
  if (m.d0 + m.d1 + m.d2 <= 0) {
    return RowError(table, row, "d0",
                    "d0, d1 and d2 are all 0: decode would take no time");
  }
  // The optional columns may be absent or empty.
  auto optional = [&](const char* column) -> absl::StatusOr<bool> {
    if (!table.HasColumn(column)) return false;
    ASSIGN_OR_RETURN(const absl::string_view v, row.Get(column));
    return !absl::StripAsciiWhitespace(v).empty();
  };
  ASSIGN_OR_RETURN(const bool has_source, optional("source"));
  if (has_source) {
    ASSIGN_OR_RETURN(const absl::string_view source, row.Get("source"));
    m.source = std::string(absl::StripAsciiWhitespace(source));
  }
  ASSIGN_OR_RETURN(const bool has_prefill_mape, optional("prefill_mape"));
  if (has_prefill_mape) {
    ASSIGN_OR_RETURN(m.prefill_mape,
                     ReadCoefficient(table, row, "prefill_mape"));
  }
  ASSIGN_OR_RETURN(const bool has_decode_mape, optional("decode_mape"));
  if (has_decode_mape) {
    ASSIGN_OR_RETURN(m.decode_mape, ReadCoefficient(table, row, "decode_mape"));
  }
  ASSIGN_OR_RETURN(const bool has_points, optional("points"));
  if (has_points) {
    ASSIGN_OR_RETURN(const int64_t points, row.GetInt("points"));
    if (points < 0 || points > 1'000'000'000) {
      return RowError(table, row, "points", "must be 0 to 1e9");
    }
    m.points = static_cast<int>(points);
  }
  return m;
}

std::string Key(absl::string_view model, absl::string_view gpu, int tp) {
  return absl::StrCat(absl::AsciiStrToLower(model), "|",
                      absl::AsciiStrToLower(gpu), "|", tp);
}

absl::StatusOr<std::vector<LatencyModel>> FromTable(const CsvTable& table) {
  RETURN_IF_ERROR(
      table.RequireColumns({"model", "gpu", "tensor_parallel", "p0", "p1", "p2",
                            "d0", "d1", "d2", "kv_capacity_tokens"}));
  std::vector<LatencyModel> models;
  absl::flat_hash_map<std::string, int> first_line;
  for (const CsvRow& row : table.rows()) {
    ASSIGN_OR_RETURN(LatencyModel m, ReadRow(table, row));
    const auto [it, inserted] =
        first_line.emplace(Key(m.model, m.gpu, m.tensor_parallel), row.line());
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrCat(
          table.name(), ":", row.line(), ": ", m.model, " on ", m.gpu, " tp ",
          m.tensor_parallel, " is already given on line ", it->second));
    }
    models.push_back(std::move(m));
  }
  return models;
}

}  // namespace

const std::vector<std::string>& LatencyModelColumns() {
  static const auto* const kColumns =
      new std::vector<std::string>{"model",
                                   "gpu",
                                   "tensor_parallel",
                                   "p0",
                                   "p1",
                                   "p2",
                                   "d0",
                                   "d1",
                                   "d2",
                                   "kv_capacity_tokens",
                                   "source",
                                   "prefill_mape",
                                   "decode_mape",
                                   "points"};
  return *kColumns;
}

absl::StatusOr<std::vector<LatencyModel>> ParseLatencyModels(
    const std::string& text, const std::string& name) {
  ASSIGN_OR_RETURN(const CsvTable table, CsvTable::Parse(text, name));
  return FromTable(table);
}

absl::StatusOr<std::vector<LatencyModel>> LoadLatencyModels(
    const std::string& path) {
  ASSIGN_OR_RETURN(const CsvTable table, CsvTable::ReadFile(path));
  return FromTable(table);
}

std::string FormatLatencyModelsCsv(const std::vector<LatencyModel>& models) {
  std::string out =
      absl::StrCat(absl::StrJoin(LatencyModelColumns(), ","), "\n");
  for (const LatencyModel& m : models) {
    absl::StrAppend(&out, m.model, ",", m.gpu, ",", m.tensor_parallel, ",",
                    FormatDouble(m.p0), ",", FormatDouble(m.p1), ",",
                    FormatDouble(m.p2), ",", FormatDouble(m.d0), ",",
                    FormatDouble(m.d1), ",", FormatDouble(m.d2), ",",
                    m.kv_capacity_tokens, ",", m.source, ",",
                    FormatDouble(m.prefill_mape), ",",
                    FormatDouble(m.decode_mape), ",", m.points, "\n");
  }
  return out;
}

const std::vector<LatencyModel>& BuiltinLatencyModels() {
  static const auto* const kModels = [] {
    absl::StatusOr<std::vector<LatencyModel>> models =
        ParseLatencyModels(internal::kBuiltinLatencyModelsCsv, kBuiltinName);
    CHECK(models.ok()) << "the built-in latency table does not parse: "
                       << models.status().message();
    return new std::vector<LatencyModel>(*std::move(models));
  }();
  return *kModels;
}

absl::StatusOr<LatencyModel> FindLatencyModel(
    const std::vector<LatencyModel>& models, const std::string& model,
    const std::string& gpu, int tensor_parallel) {
  std::vector<std::string> same_model;
  std::map<std::string, int> all_models;  // sorted, for the message
  for (const LatencyModel& m : models) {
    ++all_models[m.model];
    if (!absl::EqualsIgnoreCase(m.model, model)) continue;
    if (absl::EqualsIgnoreCase(m.gpu, gpu) &&
        m.tensor_parallel == tensor_parallel) {
      return m;
    }
    same_model.push_back(absl::StrCat(m.gpu, " tp ", m.tensor_parallel));
  }
  if (!same_model.empty()) {
    return absl::NotFoundError(absl::StrCat(
        "no latency model for ", model, " on ", gpu, " tp ", tensor_parallel,
        "; ", model, " has: ", absl::StrJoin(same_model, ", ")));
  }
  std::vector<std::string> names;
  for (const auto& [name, count] : all_models) names.push_back(name);
  return absl::NotFoundError(absl::StrCat(
      "no latency model for model '", model, "'; models with one: ",
      names.empty() ? "(none)" : absl::StrJoin(names, ", ")));
}

}  // namespace gpusched::serving
