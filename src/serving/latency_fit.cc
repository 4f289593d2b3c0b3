#include "serving/latency_fit.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <system_error>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "common/csv.h"
#include "common/status.h"
#include "serving/latency_fit_sources.h"
#include "serving/model_catalog.h"

namespace gpusched::serving {
namespace {

namespace fs = std::filesystem;
using fit_internal::Exists;
using fit_internal::Group;
using fit_internal::Groups;
using fit_internal::PrefillSample;
using fit_internal::ReadAegaeon;
using fit_internal::ReadDistServe;
using fit_internal::ReadSplitwise;
using fit_internal::ReadVidur;

// ---------------------------------------------------------------------------
// Non-negative least squares on relative error, for three terms.

struct Row {
  std::array<double, 3> x;  // the terms' values; x[0] is 1 for the intercept
  double y = 0;
};

struct Solution {
  std::array<double, 3> c = {0, 0, 0};
  double sse = 0;  // sum of squared relative errors
};

// Unconstrained least squares of sum(((x.c - y) / y)^2) over the terms in
// `mask`; the others stay 0. Columns are scaled to unit norm before the
// normal equations are solved (T^2 reaches 1e8 next to an intercept of 1).
// False when the chosen columns are (nearly) collinear.
bool SolveSubset(const std::vector<Row>& rows, unsigned mask, Solution* out) {
  std::vector<int> cols;
  for (int j = 0; j < 3; ++j) {
    if (mask & (1u << j)) cols.push_back(j);
  }
  const int k = static_cast<int>(cols.size());
  std::array<double, 3> norm = {0, 0, 0};
  for (const Row& r : rows) {
    for (int a = 0; a < k; ++a) {
      const double v = r.x[cols[a]] / r.y;
      norm[a] += v * v;
    }
  }
  for (int a = 0; a < k; ++a) {
    if (norm[a] <= 0) return false;
    norm[a] = std::sqrt(norm[a]);
  }
  // [A | b] for the scaled normal equations.
  double m[3][4] = {};
  for (const Row& r : rows) {
    double v[3];
    for (int a = 0; a < k; ++a) v[a] = r.x[cols[a]] / r.y / norm[a];
    for (int a = 0; a < k; ++a) {
      for (int b = 0; b < k; ++b) m[a][b] += v[a] * v[b];
      m[a][3] += v[a];  // target y / y = 1
    }
  }
  for (int a = 0; a < k; ++a) m[a][k] = m[a][3];
  // Gaussian elimination with partial pivoting.
  for (int p = 0; p < k; ++p) {
    int best = p;
    for (int a = p + 1; a < k; ++a) {
      if (std::abs(m[a][p]) > std::abs(m[best][p])) best = a;
    }
    if (std::abs(m[best][p]) < 1e-12) return false;
    if (best != p) {
      for (int b = 0; b <= k; ++b) std::swap(m[p][b], m[best][b]);
    }
    for (int a = p + 1; a < k; ++a) {
      const double f = m[a][p] / m[p][p];
      for (int b = p; b <= k; ++b) m[a][b] -= f * m[p][b];
    }
  }
  double z[3] = {0, 0, 0};
  for (int a = k - 1; a >= 0; --a) {
    double s = m[a][k];
    for (int b = a + 1; b < k; ++b) s -= m[a][b] * z[b];
    z[a] = s / m[a][a];
  }
  Solution sol;
  for (int a = 0; a < k; ++a) sol.c[cols[a]] = z[a] / norm[a];
  for (const Row& r : rows) {
    const double pred =
        sol.c[0] * r.x[0] + sol.c[1] * r.x[1] + sol.c[2] * r.x[2];
    const double e = (pred - r.y) / r.y;
    sol.sse += e * e;
  }
  *out = sol;
  return true;
}

// The non-negative optimum is the unconstrained optimum of some subset of
// terms that happens to be non-negative (KKT), so with three terms trying
// all seven subsets is exact.
absl::StatusOr<LinearFit> FitNonNegative(const std::vector<Row>& rows,
                                         absl::string_view what) {
  if (rows.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("no ", what, " points"));
  }
  for (const Row& r : rows) {
    if (!(r.y > 0) || !std::isfinite(r.y) || r.x[1] < 0 || r.x[2] < 0 ||
        !std::isfinite(r.x[1]) || !std::isfinite(r.x[2])) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " point (", r.x[1], ", ", r.x[2], ") -> ", r.y,
                       " s: times must be > 0 and sizes >= 0"));
    }
  }
  bool found = false;
  Solution best;
  for (unsigned mask = 1; mask < 8; ++mask) {
    Solution s;
    if (!SolveSubset(rows, mask, &s)) continue;
    if (s.c[0] < 0 || s.c[1] < 0 || s.c[2] < 0) continue;
    if (!found || s.sse < best.sse) {
      best = s;
      found = true;
    }
  }
  if (!found) {
    return absl::InvalidArgumentError(
        absl::StrCat("no non-negative ", what, " fit"));
  }
  LinearFit fit;
  fit.c0 = best.c[0];
  fit.c1 = best.c[1];
  fit.c2 = best.c[2];
  fit.points = static_cast<int>(rows.size());
  double sum = 0;
  for (const Row& r : rows) {
    const double pred = fit.c0 + fit.c1 * r.x[1] + fit.c2 * r.x[2];
    sum += std::abs(pred - r.y) / r.y;
  }
  fit.mape = 100 * sum / static_cast<double>(rows.size());
  return fit;
}

absl::StatusOr<LatencyModel> FitGroup(const Group& g) {
  const std::string what =
      absl::StrCat(g.source, " ", g.model, " on ", g.gpu, " tp ", g.tp);
  std::vector<PrefillPoint> prefill;
  for (const PrefillSample& p : g.prefill) {
    prefill.push_back({static_cast<double>(p.n * p.len), p.seconds});
  }
  absl::StatusOr<LinearFit> pf = FitPrefill(prefill);
  if (!pf.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", pf.status().message()));
  }
  absl::StatusOr<LinearFit> df = FitDecode(g.decode);
  if (!df.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", df.status().message()));
  }
  LatencyModel m;
  m.model = g.model;
  m.gpu = g.gpu;
  m.tensor_parallel = g.tp;
  m.p0 = pf->c0;
  m.p1 = pf->c1;
  m.p2 = pf->c2;
  m.d0 = df->c0;
  m.d1 = df->c1;
  m.d2 = df->c2;
  m.source = g.source;
  m.prefill_mape = pf->mape;
  m.decode_mape = df->mape;
  m.points = pf->points + df->points;
  const ModelShape* shape = FindModelShape(g.model);
  const ServingGpu* gpu = FindServingGpu(g.gpu);
  if (shape != nullptr && gpu != nullptr) {
    m.kv_capacity_tokens = KvCapacityTokens(*shape, gpu->memory_mib, g.tp);
  }
  return m;
}

}  // namespace

absl::StatusOr<LinearFit> FitPrefill(const std::vector<PrefillPoint>& points) {
  std::vector<Row> rows;
  for (const PrefillPoint& p : points) {
    rows.push_back({{1, p.tokens, p.tokens * p.tokens}, p.seconds});
  }
  return FitNonNegative(rows, "prefill");
}

absl::StatusOr<LinearFit> FitDecode(const std::vector<DecodePoint>& points) {
  std::vector<Row> rows;
  for (const DecodePoint& p : points) {
    rows.push_back({{1, p.batch, p.kv_tokens}, p.seconds});
  }
  return FitNonNegative(rows, "decode");
}

std::string NormalizeModelName(absl::string_view raw) {
  std::string s = absl::AsciiStrToLower(absl::StripAsciiWhitespace(raw));
  if (const size_t slash = s.rfind('/'); slash != std::string::npos) {
    s = s.substr(slash + 1);
  }
  absl::StrReplaceAll({{"_", "-"}}, &s);
  for (absl::string_view suffix : {"-chat", "-hf", "-instruct"}) {
    if (absl::EndsWith(s, suffix)) {
      s.resize(s.size() - suffix.size());
      break;
    }
  }
  // Spellings in the profiles (after the steps above) -> gpusched's names.
  static const auto* const kAliases =
      new absl::flat_hash_map<std::string, std::string>{
          {"llama2-7b", "llama-2-7b"},
          {"llama2-13b", "llama-2-13b"},
          {"llama2-70b", "llama-2-70b"},
          {"llama3-8b", "llama-3-8b"},
          {"llama3-70b", "llama-3-70b"},
          {"meta-llama-3-8b", "llama-3-8b"},
          {"meta-llama-3-70b", "llama-3-70b"},
          {"qwen1-5-4b", "qwen1.5-4b"},
          {"qwen1-5-7b", "qwen1.5-7b"},
          {"qwen1-5-14b", "qwen1.5-14b"},
          {"qwen1-5-moe-a2-7b", "qwen1.5-moe-a2.7b"},
          {"qwen2-5-7b", "qwen2.5-7b"},
          {"internlm2-5-7b", "internlm2.5-7b"},
          {"yi1-5-6b", "yi-1.5-6b"},
          {"yi1-5-9b", "yi-1.5-9b"},
          {"llava1-5-13b", "llava-1.5-13b"},
      };
  auto it = kAliases->find(s);
  return it == kAliases->end() ? s : it->second;
}

absl::StatusOr<FitResult> FitProfiles(const std::string& profiles_dir,
                                      const FitOptions& options) {
  const fs::path root(profiles_dir);
  const fs::path aegaeon = root / "aegaeon" / "vllm_prefill_decode_latency.csv";
  const fs::path splitwise = root / "splitwise-sim" / "perf_model.csv";
  const fs::path distserve =
      root / "distserve" / "latency_model_coefficients_a100.csv";
  const fs::path vidur = root / "vidur";
  FitResult result;
  Groups groups;
  bool any = false;
  if (Exists(aegaeon)) {
    any = true;
    RETURN_IF_ERROR(ReadAegaeon(aegaeon, groups, result.notes));
  }
  if (Exists(splitwise)) {
    any = true;
    RETURN_IF_ERROR(ReadSplitwise(splitwise, groups, result.notes));
  }
  if (Exists(distserve)) {
    any = true;
    RETURN_IF_ERROR(ReadDistServe(distserve, groups, result.notes));
  }
  if (Exists(vidur / "compute")) {
    any = true;
    RETURN_IF_ERROR(ReadVidur(vidur, groups, result.notes));
  }
  if (!any) {
    return absl::NotFoundError(
        absl::StrCat(profiles_dir, ": no profiles found; expected one of ",
                     aegaeon.string(), ", ", splitwise.string(), ", ",
                     distserve.string(), ", ", (vidur / "compute").string()));
  }
  // Best source per (model, gpu, tp); ties (two measured sources) go to the
  // one with more points.
  using Key = std::tuple<std::string, std::string, int>;
  std::map<Key, std::vector<std::pair<const Group*, LatencyModel>>> by_key;
  for (const auto& [unused, g] : groups) {
    ASSIGN_OR_RETURN(LatencyModel fit, FitGroup(g));
    by_key[Key(g.model, g.gpu, g.tp)].emplace_back(&g, std::move(fit));
  }
  std::set<std::string> no_capacity;
  for (auto& [key, candidates] : by_key) {
    size_t best = 0;
    for (size_t i = 1; i < candidates.size(); ++i) {
      const int p = candidates[i].first->priority;
      const int q = candidates[best].first->priority;
      if (p > q || (p == q && candidates[i].second.points >
                                  candidates[best].second.points)) {
        best = i;
      }
    }
    const LatencyModel& fit = candidates[best].second;
    if (fit.kv_capacity_tokens == 0) {
      no_capacity.insert(absl::StrCat(fit.model, " on ", fit.gpu));
    }
    result.models.push_back(fit);
    if (!options.keep_shadowed) continue;
    for (size_t i = 0; i < candidates.size(); ++i) {
      if (i == best) continue;
      LatencyModel m = candidates[i].second;
      m.source += " (shadowed)";
      result.models.push_back(std::move(m));
    }
  }
  if (!no_capacity.empty()) {
    result.notes.push_back(absl::StrCat(
        "kv_capacity_tokens left 0 (model shape or GPU memory unknown): ",
        absl::StrJoin(no_capacity, ", ")));
  }
  std::stable_sort(result.models.begin(), result.models.end(),
                   [](const LatencyModel& a, const LatencyModel& b) {
                     return std::tie(a.model, a.gpu, a.tensor_parallel) <
                            std::tie(b.model, b.gpu, b.tensor_parallel);
                   });
  return result;
}

absl::StatusOr<std::vector<LatencyModel>> FitLatencyModels(
    const std::string& profiles_dir) {
  ASSIGN_OR_RETURN(FitResult result, FitProfiles(profiles_dir));
  return std::move(result.models);
}

}  // namespace gpusched::serving
