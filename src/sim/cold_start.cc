#include "sim/cold_start.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/csv.h"
#include "common/status.h"

namespace gpusched::sim {

double ModelParamsB(absl::string_view model) {
  // The last "<number>b" (or "<n>x<number>b") token, case-insensitive,
  // ending the name or followed by a non-alphanumeric character.
  double found = -1;
  for (size_t i = 0; i < model.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(model[i]))) continue;
    if (i > 0 && (std::isalnum(static_cast<unsigned char>(model[i - 1])) ||
                  model[i - 1] == '.')) {
      continue;  // not the start of a number
    }
    size_t j = i;
    while (j < model.size() &&
           (std::isdigit(static_cast<unsigned char>(model[j])) ||
            model[j] == '.')) {
      ++j;
    }
    double experts = 1;
    size_t k = j;
    if (k < model.size() && (model[k] == 'x' || model[k] == 'X')) {
      size_t m = k + 1;
      while (m < model.size() &&
             (std::isdigit(static_cast<unsigned char>(model[m])) ||
              model[m] == '.')) {
        ++m;
      }
      if (m > k + 1 && absl::SimpleAtod(model.substr(i, j - i), &experts)) {
        i = k + 1;
        j = m;
      }
    }
    if (j < model.size() && (model[j] == 'b' || model[j] == 'B') &&
        (j + 1 == model.size() ||
         !std::isalnum(static_cast<unsigned char>(model[j + 1])))) {
      double v = 0;
      if (absl::SimpleAtod(model.substr(i, j - i), &v) && v > 0) {
        found = v * experts;
      }
    }
    i = j;
  }
  return found > 0 ? found : kProfileParamsB;
}

absl::StatusOr<ColdStartModel> ColdStartModel::Create(
    const config::ColdStartSpec& s, uint64_t seed) {
  ColdStartModel m(s, seed);
  if (s.profile.empty()) return m;
  ASSIGN_OR_RETURN(CsvTable table, CsvTable::ReadFile(s.profile));
  RETURN_IF_ERROR(
      table.RequireColumns({"checkpoint_format", "loading_time_s"}));
  for (const CsvRow& row : table.rows()) {
    ASSIGN_OR_RETURN(absl::string_view format, row.Get("checkpoint_format"));
    if (format != s.format) continue;
    ASSIGN_OR_RETURN(double t, row.GetDouble("loading_time_s"));
    if (!std::isfinite(t) || t < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(s.profile, ":", row.line(),
                       ": column 'loading_time_s': expected seconds >= 0, "
                       "got ",
                       t));
    }
    m.load_times_.push_back(t);
  }
  if (m.load_times_.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(s.profile, ": no row with checkpoint_format '", s.format,
                     "' (cold_start.format)"));
  }
  return m;
}

double ColdStartModel::Sample(absl::string_view model, int tensor_parallel,
                              bool weights_local) {
  const double per_profile =
      load_times_.empty() ? spec_.default_s
                          : load_times_[rng_.Uniform(load_times_.size())];
  const double scale =
      ModelParamsB(model) / kProfileParamsB / std::max(1, tensor_parallel);
  const double local = weights_local ? spec_.local_load_factor : 1.0;
  return per_profile * scale * local + spec_.engine_init_s;
}

}  // namespace gpusched::sim
