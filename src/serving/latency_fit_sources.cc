#include "serving/latency_fit_sources.h"

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
#include "serving/model_catalog.h"

namespace gpusched::serving::fit_internal {

namespace fs = std::filesystem;

// ---------------------------------------------------------------------------
// Grouping.

Group& GetGroup(Groups& groups, const std::string& model,
                const std::string& gpu, int tp, const std::string& source,
                int priority) {
  Group& g = groups[GroupKey(model, gpu, tp, source)];
  if (g.model.empty()) {
    g.model = model;
    g.gpu = gpu;
    g.tp = tp;
    g.source = source;
    g.priority = priority;
  }
  return g;
}

absl::Status RowError(const CsvTable& table, const CsvRow& row,
                      absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat(table.name(), ":", row.line(), ": ", what));
}

absl::StatusOr<std::string> GetString(const CsvRow& row,
                                      absl::string_view column) {
  ASSIGN_OR_RETURN(const absl::string_view v, row.Get(column));
  return std::string(absl::StripAsciiWhitespace(v));
}

absl::StatusOr<int> GetTp(const CsvTable& table, const CsvRow& row,
                          absl::string_view column) {
  ASSIGN_OR_RETURN(const int64_t tp, row.GetInt(column));
  if (tp < 1 || tp > 1024) {
    return RowError(table, row,
                    absl::StrCat("column '", column, "': ", tp,
                                 " is not a tensor-parallel degree"));
  }
  return static_cast<int>(tp);
}

absl::StatusOr<double> GetPositive(const CsvTable& table, const CsvRow& row,
                                   absl::string_view column) {
  ASSIGN_OR_RETURN(const double v, row.GetDouble(column));
  if (!(v > 0) || !std::isfinite(v)) {
    return RowError(
        table, row,
        absl::StrCat("column '", column, "': must be > 0, got ", v));
  }
  return v;
}

bool Exists(const fs::path& p) {
  std::error_code ec;
  return fs::exists(p, ec);
}

// The prefill grid the formula-based sources (DistServe, Vidur) are sampled
// on, shaped like the measured ones: n prompts of L tokens, L a power of two
// from 16, n*L <= max_tokens.
std::vector<std::pair<int, int>> PrefillGrid(int64_t max_tokens) {
  std::vector<std::pair<int, int>> grid;
  for (int len = 16; len <= max_tokens; len *= 2) {
    for (int n = 1; n <= 128 && int64_t{n} * len <= max_tokens; n *= 2) {
      grid.emplace_back(n, len);
    }
  }
  return grid;
}

// The decode grid: B sequences of L context tokens, B*L <= max_kv.
std::vector<std::pair<int, int>> DecodeGrid(int64_t max_kv) {
  std::vector<std::pair<int, int>> grid;
  for (int b : {1, 2, 4, 8, 16, 32, 64, 96, 128, 192, 256}) {
    for (int len : {128, 256, 512, 1024, 2048, 4096}) {
      if (int64_t{b} * len <= max_kv) grid.emplace_back(b, len);
    }
  }
  return grid;
}

// KV capacity for sampling decode points, where the model shape is known.
int64_t DecodeKvLimit(const std::string& model, const std::string& gpu,
                      int tp) {
  constexpr int64_t kDefault = 256 * 1024;
  const ModelShape* shape = FindModelShape(model);
  const ServingGpu* g = FindServingGpu(gpu);
  if (shape == nullptr || g == nullptr) return kDefault;
  const int64_t cap = KvCapacityTokens(*shape, g->memory_mib, tp);
  return cap > 0 ? std::min(cap, kDefault) : kDefault;
}

// Flags the points a measured iteration cannot have: taking less than half
// the time of another point of the same measurements with no more work
// (fewer or equal tokens; fewer or equal sequences and context). Aegaeon runs
// whose prompt filled the model's context report 0.2-0.5 ms "decode
// iterations" (none ran); one Splitwise configuration (llama2-70b tp 2,
// 64 x 512 prompts) reports a prefill 8x shorter than that of 32 x 512.
// Apply it within one campaign only: two campaigns of one model and GPU may
// really differ (Aegaeon's A10 Qwen-7B runs decode 3x apart at one load).
template <typename Point, typename NoMoreWork>
std::vector<bool> Impossible(const std::vector<Point>& points,
                             NoMoreWork no_more_work) {
  std::vector<bool> bad(points.size(), false);
  for (size_t i = 0; i < points.size(); ++i) {
    for (const Point& p : points) {
      if (no_more_work(p, points[i]) && points[i].seconds < 0.5 * p.seconds) {
        bad[i] = true;
        break;
      }
    }
  }
  return bad;
}

std::vector<bool> ImpossiblePrefill(const std::vector<PrefillPoint>& points) {
  return Impossible(points, [](const PrefillPoint& p, const PrefillPoint& q) {
    return p.tokens <= q.tokens;
  });
}

std::vector<bool> ImpossibleDecode(const std::vector<DecodePoint>& points) {
  return Impossible(points, [](const DecodePoint& p, const DecodePoint& q) {
    return p.batch <= q.batch && p.kv_tokens <= q.kv_tokens;
  });
}

std::string DroppedNote(const fs::path& path, int prefill, int decode) {
  return absl::StrCat(path.string(), ": dropped ", prefill, " prefill and ",
                      decode,
                      " decode points faster than half a point with no more "
                      "work");
}

// ---------------------------------------------------------------------------
// Aegaeon: measured vLLM iterations, seconds.

// About 10 output tokens per run (README), so the decode iterations see on
// average input_len + 5 tokens of context per sequence.
constexpr double kAegaeonMeanDecodedTokens = 5;

std::string AegaeonGpu(absl::string_view raw) {
  static const auto* const kMap =
      new absl::flat_hash_map<std::string, std::string>{
          {"a10", "A10-24GB"},
          // The artifact does not say which A100; the paper's motivation uses
          // 80 GB A100s.
          {"a100", "A100-80GB"},
          // SXM assumed (the artifact's H-series machines are SXM servers).
          {"h100", "H100-SXM-80GB"},
          {"h800", "H800"},
          {"h20", "H20"},
      };
  auto it = kMap->find(absl::AsciiStrToLower(raw));
  return it == kMap->end() ? std::string(raw) : it->second;
}

// The prompts of an `n` x `len` batch that vLLM (without chunked prefill)
// puts in its first iteration under a budget of `cap` tokens (0 = none):
// whole prompts, at least one.
int64_t FirstIterationPrompts(int64_t n, int64_t len, int64_t cap) {
  if (cap <= 0) return n;
  return std::min(n, std::max<int64_t>(1, cap / len));
}

absl::Status ReadAegaeon(const fs::path& path, Groups& groups,
                         std::vector<std::string>& notes) {
  ASSIGN_OR_RETURN(const CsvTable table, CsvTable::ReadFile(path.string()));
  RETURN_IF_ERROR(
      table.RequireColumns({"model", "gpu", "tp", "input_len", "batch_size",
                            "prefill_p50_s", "decode_iter_p50_s"}));
  struct Run {
    int64_t len = 0, batch = 0;
    double prefill = 0, decode = 0;
  };
  // One benchmark campaign: (source, model, gpu, tp) as the file spells
  // them. Campaigns differ in their vLLM settings (below).
  using Campaign = std::tuple<std::string, std::string, std::string, int>;
  std::map<Campaign, std::vector<Run>> campaigns;
  int v100 = 0;
  for (const CsvRow& row : table.rows()) {
    ASSIGN_OR_RETURN(const std::string raw_gpu, GetString(row, "gpu"));
    if (absl::EqualsIgnoreCase(raw_gpu, "V100")) {
      ++v100;
      continue;
    }
    std::string source;
    if (table.HasColumn("source")) {
      ASSIGN_OR_RETURN(source, GetString(row, "source"));
    }
    ASSIGN_OR_RETURN(const std::string raw_model, GetString(row, "model"));
    ASSIGN_OR_RETURN(const int tp, GetTp(table, row, "tp"));
    Run run;
    ASSIGN_OR_RETURN(run.len, row.GetInt("input_len"));
    ASSIGN_OR_RETURN(run.batch, row.GetInt("batch_size"));
    if (run.len < 1 || run.batch < 1) {
      return RowError(table, row, "input_len and batch_size must be >= 1");
    }
    ASSIGN_OR_RETURN(run.prefill, GetPositive(table, row, "prefill_p50_s"));
    ASSIGN_OR_RETURN(run.decode, GetPositive(table, row, "decode_iter_p50_s"));
    campaigns[Campaign(source, raw_model, raw_gpu, tp)].push_back(run);
  }
  // The prefill times are of the batch's first iteration only: beyond
  // max_num_batched_tokens (4096 in most campaigns, 2048 for LLaMA-1, none
  // in some) they stop growing. The budget is not recorded, so each
  // campaign gets the one under which its prefill times fit best.
  std::map<int64_t, std::vector<std::string>> by_cap;
  // (input_len, batch, prefill, decode) per group: the artifact lists some
  // runs twice (under profiles/ and execution/, or a base and a chat name).
  std::map<std::tuple<std::string, std::string, int>,
           std::set<std::tuple<int64_t, int64_t, double, double>>>
      seen;
  int duplicates = 0, used = 0, bad_prefill = 0, bad_decode = 0;
  for (const auto& [campaign, runs] : campaigns) {
    const auto& [source, raw_model, raw_gpu, tp] = campaign;
    int64_t best_cap = 0;
    double best_mape = 0;
    for (int64_t cap : {0, 2048, 4096, 8192, 16384}) {
      std::vector<PrefillPoint> points;
      for (const Run& r : runs) {
        points.push_back(
            {static_cast<double>(FirstIterationPrompts(r.batch, r.len, cap) *
                                 r.len),
             r.prefill});
      }
      absl::StatusOr<LinearFit> fit = FitPrefill(points);
      if (fit.ok() && (cap == 0 || fit->mape < best_mape)) {
        best_cap = cap;
        best_mape = fit->mape;
      }
    }
    by_cap[best_cap].push_back(
        absl::StrCat(source.empty() ? "" : absl::StrCat(source, "/"), raw_model,
                     " ", raw_gpu, " tp ", tp));
    const std::string model = NormalizeModelName(raw_model);
    const std::string gpu = AegaeonGpu(raw_gpu);
    Group& g = GetGroup(groups, model, gpu, tp, "aegaeon", kMeasured);
    std::vector<PrefillSample> prefill;
    std::vector<PrefillPoint> prefill_points;
    std::vector<DecodePoint> decode;
    for (const Run& r : runs) {
      prefill.push_back(
          {FirstIterationPrompts(r.batch, r.len, best_cap), r.len, r.prefill});
      prefill_points.push_back(
          {static_cast<double>(prefill.back().n * r.len), r.prefill});
      decode.push_back(
          {static_cast<double>(r.batch),
           static_cast<double>(r.batch) *
               (static_cast<double>(r.len) + kAegaeonMeanDecodedTokens),
           r.decode});
    }
    const std::vector<bool> no_prefill = ImpossiblePrefill(prefill_points);
    const std::vector<bool> no_decode = ImpossibleDecode(decode);
    for (size_t i = 0; i < runs.size(); ++i) {
      const Run& r = runs[i];
      if (!seen[{model, gpu, tp}]
               .insert({r.len, r.batch, r.prefill, r.decode})
               .second) {
        ++duplicates;
        continue;
      }
      ++used;
      if (no_prefill[i]) {
        ++bad_prefill;
      } else {
        g.prefill.push_back(prefill[i]);
      }
      if (no_decode[i]) {
        ++bad_decode;
      } else {
        g.decode.push_back(decode[i]);
      }
    }
  }
  notes.push_back(absl::StrCat(
      path.string(), ": ", used, " runs used; skipped ", v100,
      " V100 rows (tp guessed from file names, 16 or 32 GB unknown) and ",
      duplicates, " repeated runs"));
  notes.push_back(DroppedNote(path, bad_prefill, bad_decode));
  for (const auto& [cap, names] : by_cap) {
    notes.push_back(absl::StrCat(
        path.string(), ": ", names.size(), " campaigns with ",
        cap > 0 ? absl::StrCat("the first prefill iteration capped at ", cap,
                               " tokens")
                : "no prefill cap",
        ": ", absl::StrJoin(names, ", ")));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Splitwise: measured iterations, ms, with repeats.

absl::Status ReadSplitwise(const fs::path& path, Groups& groups,
                           std::vector<std::string>& notes) {
  ASSIGN_OR_RETURN(const CsvTable table, CsvTable::ReadFile(path.string()));
  RETURN_IF_ERROR(table.RequireColumns(
      {"model", "hardware", "tensor_parallel", "prompt_size", "batch_size",
       "token_size", "prompt_time", "token_time"}));
  // Repeats of one configuration: (model, gpu, tp, prompt, batch, tokens).
  using Config =
      std::tuple<std::string, std::string, int, int64_t, int64_t, int64_t>;
  std::map<Config, std::pair<std::vector<double>, std::vector<double>>> runs;
  int capped = 0, rows = 0;
  for (const CsvRow& row : table.rows()) {
    ASSIGN_OR_RETURN(const std::string hw, GetString(row, "hardware"));
    std::string gpu;
    const std::string hw_lower = absl::AsciiStrToLower(hw);
    if (hw_lower == "a100-80gb") {
      gpu = "A100-80GB";
    } else if (hw_lower == "h100-80gb") {
      gpu = "H100-SXM-80GB";  // Splitwise measured DGX H100 (SXM)
    } else if (absl::EndsWith(hw_lower, "-pcap")) {
      ++capped;  // power-capped runs: not a different GPU, a setting
      continue;
    } else {
      gpu = hw;
    }
    ASSIGN_OR_RETURN(const std::string raw_model, GetString(row, "model"));
    ASSIGN_OR_RETURN(const int tp, GetTp(table, row, "tensor_parallel"));
    ASSIGN_OR_RETURN(const int64_t prompt, row.GetInt("prompt_size"));
    ASSIGN_OR_RETURN(const int64_t batch, row.GetInt("batch_size"));
    ASSIGN_OR_RETURN(const int64_t tokens, row.GetInt("token_size"));
    if (prompt < 1 || batch < 1 || tokens < 0) {
      return RowError(table, row,
                      "prompt_size and batch_size must be >= 1, token_size "
                      ">= 0");
    }
    ASSIGN_OR_RETURN(const double prompt_ms,
                     GetPositive(table, row, "prompt_time"));
    ASSIGN_OR_RETURN(const double token_ms,
                     GetPositive(table, row, "token_time"));
    auto& r = runs[Config(NormalizeModelName(raw_model), gpu, tp, prompt, batch,
                          tokens)];
    r.first.push_back(prompt_ms);
    r.second.push_back(token_ms);
    ++rows;
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  };
  // The prefill of one (prompt, batch) does not depend on how many tokens
  // are decoded afterwards: one prefill point per (prompt, batch).
  std::map<std::tuple<std::string, std::string, int, int64_t, int64_t>,
           std::vector<double>>
      prefill;
  for (const auto& [config, times] : runs) {
    const auto& [model, gpu, tp, prompt, batch, tokens] = config;
    Group& g = GetGroup(groups, model, gpu, tp, "splitwise", kMeasured);
    // Decode iterations see prompt .. prompt + tokens of context: on
    // average prompt + tokens / 2 per sequence.
    g.decode.push_back(
        {static_cast<double>(batch),
         static_cast<double>(batch) *
             (static_cast<double>(prompt) + static_cast<double>(tokens) / 2),
         median(times.second) / 1000});
    auto& p = prefill[{model, gpu, tp, prompt, batch}];
    p.insert(p.end(), times.first.begin(), times.first.end());
  }
  for (const auto& [key, times] : prefill) {
    const auto& [model, gpu, tp, prompt, batch] = key;
    Group& g = GetGroup(groups, model, gpu, tp, "splitwise", kMeasured);
    g.prefill.push_back({batch, prompt, median(times) / 1000});
  }
  // Each (model, gpu, tp) is one campaign here.
  int bad_prefill = 0, bad_decode = 0;
  for (auto& [key, g] : groups) {
    if (g.source != "splitwise") continue;
    std::vector<PrefillPoint> points;
    for (const PrefillSample& p : g.prefill) {
      points.push_back({static_cast<double>(p.n * p.len), p.seconds});
    }
    const std::vector<bool> no_prefill = ImpossiblePrefill(points);
    const std::vector<bool> no_decode = ImpossibleDecode(g.decode);
    std::vector<PrefillSample> prefill;
    for (size_t i = 0; i < g.prefill.size(); ++i) {
      if (no_prefill[i]) {
        ++bad_prefill;
      } else {
        prefill.push_back(g.prefill[i]);
      }
    }
    std::vector<DecodePoint> decode;
    for (size_t i = 0; i < g.decode.size(); ++i) {
      if (no_decode[i]) {
        ++bad_decode;
      } else {
        decode.push_back(g.decode[i]);
      }
    }
    g.prefill = std::move(prefill);
    g.decode = std::move(decode);
  }
  notes.push_back(absl::StrCat(path.string(), ": ", rows, " runs in ",
                               runs.size(),
                               " configurations (median of repeats); "
                               "skipped ",
                               capped, " power-capped H100 rows"));
  notes.push_back(DroppedNote(path, bad_prefill, bad_decode));
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// DistServe: fitted formulas on A100-80GB, ms.

struct DistServeCoefficients {
  bool has_prefill = false, has_small = false, has_large = false;
  double prefill[3] = {0, 0, 0};
  double small[3] = {0, 0, 0};
  double large[3] = {0, 0, 0};
  double threshold = 0;
};

absl::Status ReadDistServe(const fs::path& path, Groups& groups,
                           std::vector<std::string>& notes) {
  ASSIGN_OR_RETURN(const CsvTable table, CsvTable::ReadFile(path.string()));
  RETURN_IF_ERROR(table.RequireColumns({"engine", "model", "tp", "phase",
                                        "c0_ms", "c1_ms_per_token", "c2",
                                        "decode_large_small_bs_threshold"}));
  std::map<std::tuple<std::string, std::string, int>, DistServeCoefficients>
      by_key;
  for (const CsvRow& row : table.rows()) {
    ASSIGN_OR_RETURN(const std::string engine, GetString(row, "engine"));
    ASSIGN_OR_RETURN(const std::string raw_model, GetString(row, "model"));
    ASSIGN_OR_RETURN(const int tp, GetTp(table, row, "tp"));
    ASSIGN_OR_RETURN(const std::string phase, GetString(row, "phase"));
    double c[3];
    ASSIGN_OR_RETURN(c[0], row.GetDouble("c0_ms"));
    ASSIGN_OR_RETURN(c[1], row.GetDouble("c1_ms_per_token"));
    ASSIGN_OR_RETURN(c[2], row.GetDouble("c2"));
    ASSIGN_OR_RETURN(const double threshold,
                     row.GetDouble("decode_large_small_bs_threshold"));
    DistServeCoefficients& k = by_key[{absl::AsciiStrToLower(engine),
                                       NormalizeModelName(raw_model), tp}];
    double* dst = nullptr;
    if (phase == "prefill") {
      k.has_prefill = true;
      dst = k.prefill;
    } else if (phase == "decoding_smallbs") {
      k.has_small = true;
      dst = k.small;
    } else if (phase == "decoding_largebs") {
      k.has_large = true;
      dst = k.large;
      k.threshold = threshold;
    } else {
      return RowError(table, row,
                      absl::StrCat("column 'phase': unknown phase '", phase,
                                   "' (prefill, decoding_smallbs, "
                                   "decoding_largebs)"));
    }
    std::copy(c, c + 3, dst);
  }
  int fitted = 0;
  for (const auto& [key, k] : by_key) {
    const auto& [engine, model, tp] = key;
    if (!k.has_prefill || !(k.has_small || k.has_large)) {
      notes.push_back(absl::StrCat(path.string(), ": ", engine, " ", model,
                                   " tp ", tp,
                                   " lacks a prefill or decoding row; "
                                   "skipped"));
      continue;
    }
    const bool vllm = engine == "vllm";
    Group& g = GetGroup(groups, model, "A100-80GB", tp,
                        absl::StrCat("distserve/", engine),
                        vllm ? kDistServe : kDistServeOwnEngine);
    // prefill_ms = c0 + c1*sum(len) + c2*sum(len^2), sampled on n prompts of
    // len tokens: sum(len) = T, sum(len^2) = n*len^2 = T*len.
    for (const auto& [n, len] : PrefillGrid(8192)) {
      const double t = double{1} * n * len;
      const double ms =
          k.prefill[0] + k.prefill[1] * t + k.prefill[2] * t * len;
      if (ms > 0) g.prefill.push_back({n, len, ms / 1000});
    }
    // decode_ms = c0 + c1*sum(context) + c2*batch, small-batch coefficients
    // below the threshold, large-batch ones from it.
    for (const auto& [b, len] : DecodeGrid(DecodeKvLimit(model, g.gpu, tp))) {
      const bool large = k.has_large && (b >= k.threshold || !k.has_small);
      const double* c = large ? k.large : k.small;
      const double kv = double{1} * b * len;
      const double ms = c[0] + c[1] * kv + c[2] * b;
      if (ms > 0) g.decode.push_back({static_cast<double>(b), kv, ms / 1000});
    }
    ++fitted;
  }
  notes.push_back(absl::StrCat(
      path.string(), ": ", fitted,
      " (engine, model, tp) formulas sampled on the prefill grid (n prompts "
      "of len, n*len <= 8192) and the decode grid (B <= 256 sequences of "
      "128..4096 tokens within the KV capacity); vLLM's are used, "
      "DistServe's own engine only with --keep-shadowed"));
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Vidur: per-operator times (ms) plus roofline attention and LM head, and
// NCCL all-reduce times.

// FlashAttention-2's forward pass reaches 50-73% of an A100's peak (Dao,
// 2023); 0.5 is the conservative end. Memory-bound kernels get 80% of peak
// bandwidth.
constexpr double kFlopsEfficiency = 0.5;
constexpr double kBandwidthEfficiency = 0.8;
// One attention kernel per layer costs at least this much (ms): Vidur's own
// A100 profile of a tiny prefill (README: attn_prefill median 0.011 ms).
constexpr double kAttentionKernelMs = 0.011;

const std::vector<std::string>& VidurOps() {
  static const auto* const kOps =
      new std::vector<std::string>{"input_layernorm",
                                   "attn_pre_proj",
                                   "attn_rope",
                                   "attn_post_proj",
                                   "post_attention_layernorm",
                                   "mlp_up_proj",
                                   "mlp_act",
                                   "mlp_down_proj",
                                   "add"};
  return *kOps;
}

// y(x) by linear interpolation, clamped at both ends; `xy` sorted by x.
double Interpolate(const std::vector<std::pair<double, double>>& xy, double x) {
  if (x <= xy.front().first) return xy.front().second;
  if (x >= xy.back().first) return xy.back().second;
  auto hi = std::lower_bound(
      xy.begin(), xy.end(), x,
      [](const std::pair<double, double>& p, double v) { return p.first < v; });
  auto lo = hi - 1;
  const double f = (x - lo->first) / (hi->first - lo->first);
  return lo->second + f * (hi->second - lo->second);
}

// Averages the values of equal x (the profiles repeat some sizes).
std::vector<std::pair<double, double>> SortedCurve(
    const std::map<double, std::vector<double>>& samples) {
  std::vector<std::pair<double, double>> out;
  for (const auto& [x, ys] : samples) {
    double s = 0;
    for (double y : ys) s += y;
    out.emplace_back(x, s / static_cast<double>(ys.size()));
  }
  return out;
}

struct VidurShape {
  int n_head = 0, n_kv_head = 0, n_embd = 0, vocab = 0;
};

// Per tp: num_tokens -> (one layer's ops, embedding) in ms.
struct VidurCompute {
  VidurShape shape;
  std::map<int, std::vector<std::pair<double, double>>> layer_ms, emb_ms;
};

absl::StatusOr<VidurCompute> ReadVidurMlp(const fs::path& path) {
  ASSIGN_OR_RETURN(const CsvTable table, CsvTable::ReadFile(path.string()));
  std::vector<std::string> required = {"num_tokens",
                                       "num_tensor_parallel_workers",
                                       "n_head",
                                       "n_kv_head",
                                       "n_embd",
                                       "vocab_size",
                                       "time_stats.emb.median"};
  for (const std::string& op : VidurOps()) {
    required.push_back(absl::StrCat("time_stats.", op, ".median"));
  }
  RETURN_IF_ERROR(table.RequireColumns(required));
  std::map<int, std::map<double, std::vector<double>>> layer, emb;
  VidurCompute out;
  for (const CsvRow& row : table.rows()) {
    ASSIGN_OR_RETURN(const int64_t tokens, row.GetInt("num_tokens"));
    ASSIGN_OR_RETURN(const int tp,
                     GetTp(table, row, "num_tensor_parallel_workers"));
    if (tokens < 1) return RowError(table, row, "num_tokens must be >= 1");
    VidurShape s;
    ASSIGN_OR_RETURN(const int64_t n_head, row.GetInt("n_head"));
    ASSIGN_OR_RETURN(const int64_t n_kv_head, row.GetInt("n_kv_head"));
    ASSIGN_OR_RETURN(const int64_t n_embd, row.GetInt("n_embd"));
    ASSIGN_OR_RETURN(const int64_t vocab, row.GetInt("vocab_size"));
    s.n_head = static_cast<int>(n_head);
    s.n_kv_head = static_cast<int>(n_kv_head);
    s.n_embd = static_cast<int>(n_embd);
    s.vocab = static_cast<int>(vocab);
    if (out.shape.n_embd == 0) {
      out.shape = s;
    } else if (s.n_head != out.shape.n_head ||
               s.n_kv_head != out.shape.n_kv_head ||
               s.n_embd != out.shape.n_embd || s.vocab != out.shape.vocab) {
      return RowError(table, row, "the model shape changes within the file");
    }
    double sum = 0;
    for (const std::string& op : VidurOps()) {
      ASSIGN_OR_RETURN(const double ms, row.GetDouble(absl::StrCat(
                                            "time_stats.", op, ".median")));
      sum += ms;
    }
    ASSIGN_OR_RETURN(const double emb_ms,
                     row.GetDouble("time_stats.emb.median"));
    layer[tp][static_cast<double>(tokens)].push_back(sum);
    emb[tp][static_cast<double>(tokens)].push_back(emb_ms);
  }
  for (const auto& [tp, samples] : layer) {
    out.layer_ms[tp] = SortedCurve(samples);
    out.emb_ms[tp] = SortedCurve(emb.at(tp));
  }
  return out;
}

// workers -> (fp16 elements -> all-reduce ms), for single-node rings.
absl::StatusOr<std::map<int, std::vector<std::pair<double, double>>>>
ReadVidurAllReduce(const fs::path& path) {
  ASSIGN_OR_RETURN(const CsvTable table, CsvTable::ReadFile(path.string()));
  RETURN_IF_ERROR(
      table.RequireColumns({"num_workers", "devices_per_node", "size",
                            "time_stats.all_reduce.median"}));
  std::map<int, std::map<double, std::vector<double>>> samples;
  for (const CsvRow& row : table.rows()) {
    ASSIGN_OR_RETURN(const int64_t workers, row.GetInt("num_workers"));
    ASSIGN_OR_RETURN(const int64_t per_node, row.GetInt("devices_per_node"));
    if (workers != per_node) continue;  // multi-node rings
    ASSIGN_OR_RETURN(const double size, row.GetDouble("size"));
    ASSIGN_OR_RETURN(const double ms,
                     row.GetDouble("time_stats.all_reduce.median"));
    samples[static_cast<int>(workers)][size].push_back(ms);
  }
  std::map<int, std::vector<std::pair<double, double>>> out;
  for (const auto& [workers, s] : samples) out[workers] = SortedCurve(s);
  return out;
}

std::string VidurGpu(absl::string_view dir) {
  if (dir == "a100") return "A100-80GB";  // Vidur profiled A100 80GB
  if (dir == "h100") return "H100-SXM-80GB";
  return "";
}

absl::Status ReadVidur(const fs::path& root, Groups& groups,
                       std::vector<std::string>& notes) {
  const fs::path compute = root / "compute";
  std::vector<fs::path> files;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(compute, ec), end; !ec && it != end;
       it.increment(ec)) {
    if (it->is_regular_file() && it->path().filename() == "mlp.csv") {
      files.push_back(it->path());
    }
  }
  if (ec) {
    return absl::InternalError(
        absl::StrCat(compute.string(), ": cannot list: ", ec.message()));
  }
  std::sort(files.begin(), files.end());
  for (const fs::path& file : files) {
    // compute/<gpu>/<org>/<model>/mlp.csv
    const fs::path rel = fs::relative(file, compute, ec);
    std::vector<std::string> parts;
    for (const fs::path& p : rel) parts.push_back(p.string());
    if (ec || parts.size() < 3) continue;
    const std::string gpu_dir = absl::AsciiStrToLower(parts.front());
    const std::string model = NormalizeModelName(parts[parts.size() - 2]);
    const std::string gpu = VidurGpu(gpu_dir);
    const ModelShape* shape = FindModelShape(model);
    const ServingGpu* g = gpu.empty() ? nullptr : FindServingGpu(gpu);
    if (shape == nullptr || g == nullptr || g->fp16_dense_tflops <= 0 ||
        g->memory_bandwidth_gbps <= 0) {
      notes.push_back(absl::StrCat(file.string(), ": skipped (",
                                   shape == nullptr ? "model shape" : "GPU",
                                   " not known to the fitter)"));
      continue;
    }
    ASSIGN_OR_RETURN(const VidurCompute vc, ReadVidurMlp(file));
    if (vc.shape.n_embd != shape->hidden || vc.shape.n_head != shape->heads ||
        vc.shape.n_kv_head != shape->kv_heads) {
      return absl::FailedPreconditionError(absl::StrCat(
          file.string(), ": shape n_embd ", vc.shape.n_embd, " n_head ",
          vc.shape.n_head, " n_kv_head ", vc.shape.n_kv_head,
          " disagrees with serving/model_catalog.cc's ", model));
    }
    const fs::path net =
        root / "network" / absl::StrCat(gpu_dir, "_dgx") / "all_reduce.csv";
    std::map<int, std::vector<std::pair<double, double>>> all_reduce;
    if (Exists(net)) {
      ASSIGN_OR_RETURN(all_reduce, ReadVidurAllReduce(net));
    }
    const double flops_per_ms = g->fp16_dense_tflops * 1e9 * kFlopsEfficiency;
    const double bytes_per_ms =
        g->memory_bandwidth_gbps * 1e6 * kBandwidthEfficiency;
    const double hidden = shape->hidden;
    const double layers = shape->layers;
    for (const auto& tp_curve : vc.layer_ms) {
      // Named, not a structured binding: dense_ms captures them (clang 14).
      const int tp = tp_curve.first;
      const auto& layer_ms = tp_curve.second;
      const int64_t capacity = KvCapacityTokens(*shape, g->memory_mib, tp);
      if (capacity <= 0) {
        notes.push_back(absl::StrCat(file.string(), ": tp ", tp,
                                     " skipped: the weights do not fit"));
        continue;
      }
      const std::vector<std::pair<double, double>>* ar = nullptr;
      if (tp > 1) {
        auto it = all_reduce.find(tp);
        if (it == all_reduce.end()) {
          notes.push_back(absl::StrCat(file.string(), ": tp ", tp,
                                       " skipped: no all-reduce profile in ",
                                       net.string()));
          continue;
        }
        ar = &it->second;
      }
      const auto& emb_ms = vc.emb_ms.at(tp);
      const double lm_head_bytes = hidden * vc.shape.vocab * 2 / tp;
      // Everything but attention for `tokens` tokens of `seqs` sequences.
      auto dense_ms = [&](double tokens, double seqs) {
        double ms = Interpolate(emb_ms, tokens) +
                    layers * Interpolate(layer_ms, tokens);
        if (ar != nullptr) ms += 2 * layers * Interpolate(*ar, tokens * hidden);
        // LM head on each sequence's last token: a GEMM, usually bound by
        // reading its weights.
        ms += std::max(2 * seqs * lm_head_bytes / flops_per_ms,
                       lm_head_bytes / bytes_per_ms);
        return ms;
      };
      const int64_t max_tokens =
          std::min<int64_t>(8192, static_cast<int64_t>(layer_ms.back().first));
      Group& grp = GetGroup(groups, model, gpu, tp, "vidur+roofline", kVidur);
      for (const auto& [n, len] : PrefillGrid(max_tokens)) {
        const double t = double{1} * n * len;
        // Causal attention: QK^T and PV, 2 FLOPs per MAC, half the square.
        const double attn_flops = 2.0 * n * len * len * hidden / tp;
        const double ms = dense_ms(t, n) + layers * (kAttentionKernelMs +
                                                     attn_flops / flops_per_ms);
        grp.prefill.push_back({n, len, ms / 1000});
      }
      const double kv_bytes_per_token_layer =
          static_cast<double>(shape->KvBytesPerToken(tp)) / layers / tp;
      for (const auto& [b, len] : DecodeGrid(
               std::min<int64_t>(capacity, static_cast<int64_t>(256) * 1024))) {
        const double kv = double{1} * b * len;
        // Decode attention reads every cached K and V once.
        const double ms =
            dense_ms(b, b) +
            layers * (kAttentionKernelMs +
                      kv * kv_bytes_per_token_layer / bytes_per_ms);
        grp.decode.push_back({static_cast<double>(b), kv, ms / 1000});
      }
    }
  }
  notes.push_back(absl::StrCat(
      root.string(), ": ", files.size(),
      " operator profiles; attention (not in the snapshot) and the LM head "
      "by roofline at ",
      kFlopsEfficiency * 100, "% of peak FLOPs and ",
      kBandwidthEfficiency * 100,
      "% of peak bandwidth; no CPU overhead (scheduling, sampling), so these "
      "run fast"));
  return absl::OkStatus();
}

}  // namespace gpusched::serving::fit_internal
