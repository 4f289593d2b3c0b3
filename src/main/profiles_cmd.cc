#include "main/profiles_cmd.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/table.h"
#include "nlohmann/json.hpp"
#include "serving/latency_fit.h"
#include "serving/latency_model.h"

namespace gpusched {
namespace {

using serving::LatencyModel;
using Json = nlohmann::ordered_json;

// The operating points `profiles list` shows.
constexpr int64_t kPrefillTokens = 1024;
constexpr int64_t kDecodeBatch = 32;
constexpr int64_t kDecodeKvTokens = 32 * 1024;

struct FitFlags {
  std::string profiles;
  std::string out;
  bool keep_shadowed = false;
};

struct ListFlags {
  std::string models;
  std::string profiles;
  bool keep_shadowed = false;
  bool json = false;
};

int Fail(const char* command, absl::string_view msg) {
  std::fprintf(stderr, "gpusched profiles %s: %s\n", command,
               std::string(msg).c_str());
  return 1;
}

int RunFit(const FitFlags& flags) {
  serving::FitOptions options;
  options.keep_shadowed = flags.keep_shadowed;
  absl::StatusOr<serving::FitResult> result =
      serving::FitProfiles(flags.profiles, options);
  if (!result.ok()) return Fail("fit", result.status().message());
  for (const std::string& note : result->notes) {
    std::fprintf(stderr, "%s\n", note.c_str());
  }
  const std::string csv = serving::FormatLatencyModelsCsv(result->models);
  if (flags.out.empty()) {
    std::fputs(csv.c_str(), stdout);
    return 0;
  }
  std::ofstream out(flags.out, std::ios::binary);
  out << csv;
  out.close();
  if (!out) return Fail("fit", absl::StrCat(flags.out, ": cannot write"));
  std::fprintf(stderr, "wrote %zu latency models to %s\n",
               result->models.size(), flags.out.c_str());
  return 0;
}

int RunList(const ListFlags& flags) {
  std::vector<LatencyModel> models;
  std::string from = "built in (data/latency_models.csv)";
  if (!flags.profiles.empty()) {
    serving::FitOptions options;
    options.keep_shadowed = flags.keep_shadowed;
    absl::StatusOr<serving::FitResult> fit =
        serving::FitProfiles(flags.profiles, options);
    if (!fit.ok()) return Fail("list", fit.status().message());
    models = std::move(fit->models);
    from = absl::StrCat("fitted now from ", flags.profiles);
  } else if (flags.models.empty()) {
    models = serving::BuiltinLatencyModels();
  } else {
    absl::StatusOr<std::vector<LatencyModel>> loaded =
        serving::LoadLatencyModels(flags.models);
    if (!loaded.ok()) return Fail("list", loaded.status().message());
    models = *std::move(loaded);
    from = flags.models;
  }
  if (flags.json) {
    Json j;
    j["from"] = from;
    j["prefill_tokens"] = kPrefillTokens;
    j["decode_batch"] = kDecodeBatch;
    j["decode_kv_tokens"] = kDecodeKvTokens;
    j["models"] = Json::array();
    for (const LatencyModel& m : models) {
      j["models"].push_back({
          {"model", m.model},
          {"gpu", m.gpu},
          {"tensor_parallel", m.tensor_parallel},
          {"p0", m.p0},
          {"p1", m.p1},
          {"p2", m.p2},
          {"d0", m.d0},
          {"d1", m.d1},
          {"d2", m.d2},
          {"kv_capacity_tokens", m.kv_capacity_tokens},
          {"source", m.source},
          {"prefill_mape", m.prefill_mape},
          {"decode_mape", m.decode_mape},
          {"points", m.points},
          {"prefill_seconds", m.PrefillSeconds(kPrefillTokens)},
          {"decode_seconds", m.DecodeSeconds(kDecodeBatch, kDecodeKvTokens)},
      });
    }
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("Latency models: %s\n\n", from.c_str());
  std::vector<std::vector<std::string>> rows = {
      {"MODEL", "GPU", "TP", "PREFILL 1K", "DECODE B32 KV32K", "KV CAPACITY",
       "PREFILL MAPE", "DECODE MAPE", "SOURCE"}};
  bool over_capacity = false;
  for (const LatencyModel& m : models) {
    const bool over =
        m.kv_capacity_tokens > 0 && m.kv_capacity_tokens < kDecodeKvTokens;
    over_capacity |= over;
    rows.push_back(
        {m.model, m.gpu, absl::StrCat(m.tensor_parallel),
         absl::StrFormat("%.1f ms", 1000 * m.PrefillSeconds(kPrefillTokens)),
         absl::StrFormat("%.1f ms%s",
                         1000 * m.DecodeSeconds(kDecodeBatch, kDecodeKvTokens),
                         over ? "*" : ""),
         m.kv_capacity_tokens > 0 ? absl::StrCat(m.kv_capacity_tokens) : "-",
         absl::StrFormat("%.1f%%", m.prefill_mape),
         absl::StrFormat("%.1f%%", m.decode_mape), m.source});
  }
  PrintTable(rows);
  if (over_capacity) {
    std::printf(
        "\n* 32k tokens of KV exceed this replica's capacity: extrapolated.\n");
  }
  return 0;
}

}  // namespace

void AddProfilesCommand(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "profiles", "Engine latency models fitted from measured profiles");
  cmd->require_subcommand(1);

  auto fit_flags = std::make_shared<FitFlags>();
  CLI::App* fit = cmd->add_subcommand(
      "fit",
      "Fit latency models to a profiles directory and write the CSV table");
  fit->add_option("--profiles", fit_flags->profiles,
                  "Profiles directory (as ../shared/data/profiles)")
      ->required();
  fit->add_option("--out", fit_flags->out,
                  "Where to write the CSV (default: stdout)");
  fit->add_flag("--keep-shadowed", fit_flags->keep_shadowed,
                "Also write the fits that lost to a better source for the "
                "same (model, gpu, tp), for cross-checks (not a valid table)");
  fit->callback([fit_flags] {
    const int rc = RunFit(*fit_flags);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });

  auto list_flags = std::make_shared<ListFlags>();
  CLI::App* list = cmd->add_subcommand(
      "list", "Print the latency models with predictions and fit quality");
  list->add_option("--models", list_flags->models,
                   "A latency-model CSV to show instead of the built-in one");
  list->add_option("--profiles", list_flags->profiles,
                   "Fit a profiles directory now and show the result");
  list->add_flag("--keep-shadowed", list_flags->keep_shadowed,
                 "With --profiles: also show the fits that lost to a better "
                 "source for the same (model, gpu, tp)");
  list->add_flag("--json", list_flags->json, "Print JSON instead of a table");
  list->callback([list_flags] {
    const int rc = RunList(*list_flags);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace gpusched
