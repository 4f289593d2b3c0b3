#include "control/prices.h"

#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/check.h"
#include "common/csv.h"
#include "common/status.h"
#include "control/prices_data.h"

namespace gpusched::control {
namespace {

absl::StatusOr<std::vector<GpuPrice>> FromTable(const CsvTable& t) {
  RETURN_IF_ERROR(t.RequireColumns(
      {"gpu", "spot", "gpus_per_node", "usd_per_node_hour", "source"}));
  if (t.rows().size() > static_cast<size_t>(kMaxPriceRows)) {
    return absl::InvalidArgumentError(absl::StrCat(
        t.name(), ": ", t.rows().size(), " rows, at most ", kMaxPriceRows));
  }
  std::vector<GpuPrice> out;
  for (const CsvRow& row : t.rows()) {
    auto where = [&](const char* column) {
      return absl::StrCat(t.name(), ":", row.line(), ": column ", column, ": ");
    };
    GpuPrice p;
    ASSIGN_OR_RETURN(absl::string_view gpu, row.Get("gpu"));
    p.gpu = std::string(gpu);
    if (p.gpu.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(where("gpu"), "required"));
    }
    ASSIGN_OR_RETURN(absl::string_view spot, row.Get("spot"));
    if (spot != "true" && spot != "false") {
      return absl::InvalidArgumentError(
          absl::StrCat(where("spot"), "true or false, not '", spot, "'"));
    }
    p.spot = spot == "true";
    ASSIGN_OR_RETURN(int64_t n, row.GetInt("gpus_per_node"));
    if (n < 1 || n > 16) {
      return absl::InvalidArgumentError(
          absl::StrCat(where("gpus_per_node"), "must be 1..16, not ", n));
    }
    p.gpus_per_node = static_cast<int>(n);
    ASSIGN_OR_RETURN(p.usd_per_node_hour, row.GetDouble("usd_per_node_hour"));
    if (!std::isfinite(p.usd_per_node_hour) || p.usd_per_node_hour < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(where("usd_per_node_hour"), "must be a number >= 0"));
    }
    for (auto [column, field] : {std::pair{"instance", &p.instance},
                                 {"provider", &p.provider},
                                 {"region", &p.region},
                                 {"as_of", &p.as_of},
                                 {"source", &p.source}}) {
      if (t.HasColumn(column)) {
        ASSIGN_OR_RETURN(absl::string_view v, row.Get(column));
        *field = std::string(v);
      }
    }
    for (const GpuPrice& q : out) {
      if (absl::EqualsIgnoreCase(q.gpu, p.gpu) && q.spot == p.spot) {
        return absl::InvalidArgumentError(absl::StrCat(
            where("gpu"), p.gpu, p.spot ? " (spot)" : "", " is given twice"));
      }
    }
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<GpuPrice>> ParseGpuPrices(const std::string& text,
                                                     const std::string& name) {
  ASSIGN_OR_RETURN(CsvTable t, CsvTable::Parse(text, name));
  return FromTable(t);
}

absl::StatusOr<std::vector<GpuPrice>> LoadGpuPrices(const std::string& path) {
  ASSIGN_OR_RETURN(CsvTable t, CsvTable::ReadFile(path));
  return FromTable(t);
}

const std::vector<GpuPrice>& BuiltinGpuPrices() {
  static const std::vector<GpuPrice>* table = [] {
    auto parsed =
        ParseGpuPrices(internal::kBuiltinGpuPricesCsv, "data/gpu_prices.csv");
    CHECK(parsed.ok()) << parsed.status();
    return new std::vector<GpuPrice>(*std::move(parsed));
  }();
  return *table;
}

absl::StatusOr<GpuPrice> FindGpuPrice(const std::vector<GpuPrice>& table,
                                      const std::string& gpu, bool spot) {
  std::vector<std::string> known;
  for (const GpuPrice& p : table) {
    if (absl::EqualsIgnoreCase(p.gpu, gpu) && p.spot == spot) return p;
    known.push_back(absl::StrCat(p.gpu, p.spot ? " (spot)" : ""));
  }
  return absl::NotFoundError(
      absl::StrCat("no ", spot ? "spot " : "", "price for GPU '", gpu,
                   "' in the price table (it has: ", absl::StrJoin(known, ", "),
                   "); set the pool's price_per_node_hour"));
}

}  // namespace gpusched::control
