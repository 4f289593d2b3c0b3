#include "serving/latency_model.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "inventory/gpu_catalog.h"
#include "serving/latency_fit.h"
#include "serving/model_catalog.h"

namespace gpusched::serving {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr double kTolerance = 0.01;  // "recovered within 1%"

void ExpectNear(double got, double want, const std::string& what) {
  EXPECT_NEAR(got, want, std::abs(want) * kTolerance + 1e-15) << what;
}

// A fresh directory under the test's temp dir.
fs::path MakeTempDir(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) /
                       absl::StrCat("latency_model_test_", getpid(), "_", name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void WriteFile(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary);
  out << text;
  ASSERT_TRUE(out.good()) << path;
}

// --- The least-squares fits -------------------------------------------------

TEST(FitPrefillTest, RecoversKnownCoefficients) {
  const double p0 = 0.012, p1 = 6e-5, p2 = 3e-10;
  std::vector<PrefillPoint> points;
  for (int t = 16; t <= 16384; t *= 2) {
    points.push_back({double(t), p0 + p1 * t + p2 * double(t) * t});
  }
  absl::StatusOr<LinearFit> fit = FitPrefill(points);
  ASSERT_TRUE(fit.ok()) << fit.status();
  ExpectNear(fit->c0, p0, "p0");
  ExpectNear(fit->c1, p1, "p1");
  ExpectNear(fit->c2, p2, "p2");
  EXPECT_LT(fit->mape, 1e-6);
  EXPECT_EQ(fit->points, static_cast<int>(points.size()));
}

TEST(FitPrefillTest, ConcaveDataGetsLinearFitNotNegativeP2) {
  // Sub-linear growth: an unconstrained quadratic would have p2 < 0.
  std::vector<PrefillPoint> points;
  for (int t = 64; t <= 8192; t *= 2) {
    points.push_back({double(t), 0.01 + 0.002 * std::sqrt(double(t))});
  }
  absl::StatusOr<LinearFit> fit = FitPrefill(points);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_EQ(fit->c2, 0);
  EXPECT_GE(fit->c0, 0);
  EXPECT_GT(fit->c1, 0);
  EXPECT_GT(fit->mape, 0);
}

TEST(FitDecodeTest, RecoversKnownCoefficients) {
  const double d0 = 0.011, d1 = 1.5e-4, d2 = 2e-7;
  std::vector<DecodePoint> points;
  for (int b : {1, 2, 4, 8, 16, 64, 128}) {
    for (int len : {128, 1024, 4096}) {
      const double kv = double(b) * len;
      points.push_back({double(b), kv, d0 + d1 * b + d2 * kv});
    }
  }
  absl::StatusOr<LinearFit> fit = FitDecode(points);
  ASSERT_TRUE(fit.ok()) << fit.status();
  ExpectNear(fit->c0, d0, "d0");
  ExpectNear(fit->c1, d1, "d1");
  ExpectNear(fit->c2, d2, "d2");
  EXPECT_LT(fit->mape, 1e-6);
}

TEST(FitDecodeTest, NegativeTermIsDroppedAndTheRestRefitted) {
  // Time falls with batch at fixed KV: the best unconstrained d1 is < 0.
  std::vector<DecodePoint> points;
  for (int b : {1, 2, 4, 8, 16}) {
    for (int kv : {1024, 8192, 32768}) {
      points.push_back({double(b), double(kv), 0.02 - 0.0004 * b + 1e-7 * kv});
    }
  }
  absl::StatusOr<LinearFit> fit = FitDecode(points);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_EQ(fit->c1, 0);
  EXPECT_GT(fit->c0, 0);
  EXPECT_GT(fit->c2, 0);
}

TEST(FitDecodeTest, MapeIsMeanAbsolutePercentageError) {
  std::vector<DecodePoint> points = {{1, 100, 0.010},
                                     {2, 200, 0.013},
                                     {4, 400, 0.011},
                                     {8, 800, 0.020},
                                     {16, 1600, 0.025}};
  absl::StatusOr<LinearFit> fit = FitDecode(points);
  ASSERT_TRUE(fit.ok()) << fit.status();
  double sum = 0;
  for (const DecodePoint& p : points) {
    const double pred = fit->c0 + fit->c1 * p.batch + fit->c2 * p.kv_tokens;
    sum += std::abs(pred - p.seconds) / p.seconds;
  }
  EXPECT_NEAR(fit->mape, 100 * sum / points.size(), 1e-9);
  EXPECT_GT(fit->mape, 1);
}

TEST(FitTest, RejectsEmptyAndNonPositive) {
  EXPECT_FALSE(FitPrefill({}).ok());
  EXPECT_THAT(std::string(FitPrefill({{128, 0}}).status().message()),
              HasSubstr("must be > 0"));
  EXPECT_FALSE(FitDecode({{1, -5, 0.01}}).ok());
}

// --- Model names and shapes -------------------------------------------------

TEST(NormalizeModelNameTest, ProfileSpellings) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"llama2_13b_chat", "llama-2-13b"},
      {"llama2-7b-chat", "llama-2-7b"},
      {"llama2_7b", "llama-2-7b"},
      {"llama-7b-hf", "llama-7b"},
      {"llama3-8b", "llama-3-8b"},
      {"Llama-2-70b-hf", "llama-2-70b"},
      {"Meta-Llama-3-8B", "llama-3-8b"},
      {"llama2-70b", "llama-2-70b"},
      {"facebook/opt-13b", "opt-13b"},
      {"qwen_7b_chat", "qwen-7b"},
      {"qwen-7b-chat", "qwen-7b"},
      {"qwen1_5_14b_chat", "qwen1.5-14b"},
      {"qwen1.5-14b-chat", "qwen1.5-14b"},
      {"qwen1_5_moe_a2_7b_chat", "qwen1.5-moe-a2.7b"},
      {"qwen2_5_7b", "qwen2.5-7b"},
      {"yi1_5_9b_chat", "yi-1.5-9b"},
      {"internlm2_5_7b_chat", "internlm2.5-7b"},
      {"llava1_5_13b", "llava-1.5-13b"},
      {"baichuan2_13b_chat", "baichuan2-13b"},
      {"Some_New_Model", "some-new-model"},
  };
  for (const auto& [raw, want] : cases) {
    EXPECT_EQ(NormalizeModelName(raw), want) << raw;
  }
}

TEST(ModelCatalogTest, KvBytesAndCapacity) {
  const ModelShape* l7 = FindModelShape("LLAMA-2-7B");
  ASSERT_NE(l7, nullptr);
  EXPECT_EQ(l7->KvBytesPerToken(), 2 * 32 * 32 * 128 * 2);  // 0.5 MiB
  const ModelShape* l70 = FindModelShape("llama-2-70b");
  ASSERT_NE(l70, nullptr);
  EXPECT_EQ(l70->KvBytesPerToken(8), 2 * 80 * 8 * 128 * 2);    // GQA, 8 heads
  EXPECT_EQ(l70->KvBytesPerToken(16), 2 * 80 * 16 * 128 * 2);  // replicated
  // 70B in fp16 does not fit one 80 GB GPU.
  EXPECT_EQ(KvCapacityTokens(*l70, 81920, 1), 0);
  EXPECT_GT(KvCapacityTokens(*l70, 81920, 2), 0);
  // DistServe's own profiler found room for 66,144 OPT-13B tokens on one
  // A100-80GB (distserve/max_num_tokens.csv); ours is within 15%.
  const ModelShape* opt = FindModelShape("opt-13b");
  ASSERT_NE(opt, nullptr);
  const int64_t cap = KvCapacityTokens(*opt, 81920, 1);
  EXPECT_NEAR(static_cast<double>(cap), 66144, 66144 * 0.15);
}

TEST(ModelCatalogTest, GpuFiguresAgreeWithTheInventoryCatalog) {
  const inventory::GpuCatalog& catalog = inventory::GpuCatalog::Builtin();
  for (const ServingGpu& g : BuiltinServingGpus()) {
    const inventory::GpuModelSpec* spec = catalog.Find(g.name);
    if (!g.in_catalog) {
      // When the catalog learns this GPU, use its name and figures here.
      EXPECT_EQ(spec, nullptr) << g.name << " is in the catalog now";
      continue;
    }
    ASSERT_NE(spec, nullptr) << g.name;
    EXPECT_EQ(spec->name, g.name);
    EXPECT_EQ(spec->memory_mib, g.memory_mib) << g.name;
    EXPECT_EQ(spec->memory_bandwidth_gbps, g.memory_bandwidth_gbps) << g.name;
  }
}

// --- Fitting a profiles directory -------------------------------------------

struct Truth {
  double p0, p1, p2, d0, d1, d2;
};

// Aegaeon-format rows for `model` on `gpu` with exact latencies.
// With `cap` > 0 the prefill time is that of the first iteration only,
// holding whole prompts up to `cap` tokens, as in most Aegaeon campaigns.
std::string AegaeonRows(const std::string& model, const std::string& gpu,
                        int tp, const Truth& t, int cap = 0) {
  std::string out;
  for (int len = 16; len <= 4096; len *= 2) {
    for (int b : {1, 2, 4, 8, 16, 30, 60, 100, 200}) {
      if (len * b > 8192) continue;
      const int first = cap > 0 ? std::min(b, std::max(1, cap / len)) : b;
      const double tokens = double(len) * first;
      const double kv = double(b) * (len + 5);
      const double prefill = t.p0 + t.p1 * tokens + t.p2 * tokens * tokens;
      const double decode = t.d0 + t.d1 * b + t.d2 * kv;
      absl::StrAppendFormat(&out,
                            "profiles,%s,%s,%d,%d,%d,0,%.17g,0,0,%.17g,0,12\n",
                            model, gpu, tp, len, b, prefill, decode);
    }
  }
  return out;
}

constexpr char kAegaeonHeader[] =
    "source,model,gpu,tp,input_len,batch_size,prefill_avg_s,prefill_p50_s,"
    "prefill_p90_s,decode_iter_avg_s,decode_iter_p50_s,decode_iter_p90_s,"
    "n_samples\n";

// A minimal Vidur operator profile: every op takes `ms_per_token` per token
// plus 0.01 ms.
std::string VidurMlp(int n_head, int n_kv_head, int n_embd) {
  const std::vector<std::string> ops = {
      "emb",         "input_layernorm", "attn_pre_proj",
      "attn_rope",   "attn_post_proj",  "post_attention_layernorm",
      "mlp_up_proj", "mlp_act",         "mlp_down_proj",
      "add"};
  std::string out;
  for (const std::string& op : ops)
    absl::StrAppend(&out, "time_stats.", op, ".median,");
  absl::StrAppend(&out,
                  "n_head,n_kv_head,n_embd,vocab_size,num_tokens,"
                  "num_tensor_parallel_workers\n");
  for (int tokens = 1; tokens <= 4096; tokens *= 2) {
    for (size_t i = 0; i < ops.size(); ++i) {
      absl::StrAppendFormat(&out, "%.9g,", 0.01 + 1e-5 * tokens);
    }
    absl::StrAppendFormat(&out, "%d,%d,%d,32000,%d,1\n", n_head, n_kv_head,
                          n_embd, tokens);
  }
  return out;
}

class FitProfilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir(
        ::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(FitProfilesTest, RecoversAegaeonCoefficientsAndNormalizesNames) {
  const Truth t = {0.010, 5e-5, 2e-9, 0.012, 1e-4, 2e-7};
  std::string csv = kAegaeonHeader;
  csv += AegaeonRows("llama2_7b", "A100", 1, t);
  // The same runs again under the chat name: merged, not double-counted.
  csv += AegaeonRows("llama2-7b-chat", "A100", 1, t);
  // V100 rows are skipped (tp is a guess there).
  csv += AegaeonRows("qwen-7b", "V100", 2, t);
  // A run whose prompt filled the context: no decode ran.
  const double tokens = 4096 * 3;
  absl::StrAppendFormat(&csv,
                        "profiles,llama2_7b,A100,1,4096,3,0,%.17g,0,0,0.0004,"
                        "0,12\n",
                        t.p0 + t.p1 * tokens + t.p2 * tokens * tokens);
  WriteFile(dir_ / "aegaeon" / "vllm_prefill_decode_latency.csv", csv);

  absl::StatusOr<FitResult> result = FitProfiles(dir_.string());
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->models.size(), 1u);
  const LatencyModel& m = result->models[0];
  EXPECT_EQ(m.model, "llama-2-7b");
  EXPECT_EQ(m.gpu, "A100-80GB");
  EXPECT_EQ(m.tensor_parallel, 1);
  EXPECT_EQ(m.source, "aegaeon");
  ExpectNear(m.p0, t.p0, "p0");
  ExpectNear(m.p1, t.p1, "p1");
  ExpectNear(m.p2, t.p2, "p2");
  ExpectNear(m.d0, t.d0, "d0");
  ExpectNear(m.d1, t.d1, "d1");
  ExpectNear(m.d2, t.d2, "d2");
  EXPECT_LT(m.decode_mape, 0.01);
  EXPECT_GT(m.kv_capacity_tokens, 100000);
  EXPECT_THAT(absl::StrJoin(result->notes, "\n"),
              HasSubstr("dropped 0 prefill and 1 decode points"));
}

TEST_F(FitProfilesTest, RecoversExactAegaeonFit) {
  const Truth t = {0.009, 3e-5, 1e-9, 0.008, 2e-4, 1e-7};
  WriteFile(dir_ / "aegaeon" / "vllm_prefill_decode_latency.csv",
            kAegaeonHeader + AegaeonRows("qwen_7b", "H800", 2, t));
  absl::StatusOr<std::vector<LatencyModel>> models =
      FitLatencyModels(dir_.string());
  ASSERT_TRUE(models.ok()) << models.status();
  ASSERT_EQ(models->size(), 1u);
  const LatencyModel& m = (*models)[0];
  EXPECT_EQ(m.model, "qwen-7b");
  EXPECT_EQ(m.gpu, "H800");  // not in the catalog: the profile's name
  EXPECT_EQ(m.tensor_parallel, 2);
  ExpectNear(m.p0, t.p0, "p0");
  ExpectNear(m.p1, t.p1, "p1");
  ExpectNear(m.p2, t.p2, "p2");
  ExpectNear(m.d0, t.d0, "d0");
  ExpectNear(m.d1, t.d1, "d1");
  ExpectNear(m.d2, t.d2, "d2");
  EXPECT_LT(m.prefill_mape, 0.01);
  EXPECT_LT(m.decode_mape, 0.01);
  EXPECT_GT(m.points, 100);
}

TEST_F(FitProfilesTest, FindsAegaeonFirstIterationCapPerCampaign) {
  const Truth t = {0.012, 6e-5, 3e-9, 0.012, 1e-4, 2e-7};
  // The same model measured twice: once timing whole-batch prefills, once
  // (under another source) only the first iteration of at most 4096 tokens.
  std::string csv = kAegaeonHeader + AegaeonRows("qwen_7b", "A10", 1, t);
  std::string capped = AegaeonRows("qwen-7b-chat", "A10", 1, t, 4096);
  absl::StrReplaceAll({{"profiles,", "execution,"}}, &capped);
  csv += capped;
  WriteFile(dir_ / "aegaeon" / "vllm_prefill_decode_latency.csv", csv);
  absl::StatusOr<FitResult> result = FitProfiles(dir_.string());
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->models.size(), 1u);
  const LatencyModel& m = result->models[0];
  EXPECT_EQ(m.model, "qwen-7b");
  EXPECT_EQ(m.gpu, "A10-24GB");
  ExpectNear(m.p0, t.p0, "p0");
  ExpectNear(m.p1, t.p1, "p1");
  ExpectNear(m.p2, t.p2, "p2");
  EXPECT_LT(m.prefill_mape, 0.01);
  const std::string notes = absl::StrJoin(result->notes, "\n");
  EXPECT_THAT(notes, HasSubstr("1 campaigns with no prefill cap: "
                               "profiles/qwen_7b A10 tp 1"));
  EXPECT_THAT(notes, HasSubstr("1 campaigns with the first prefill iteration "
                               "capped at 4096 tokens: execution/qwen-7b-chat "
                               "A10 tp 1"));
}

TEST_F(FitProfilesTest, SplitwiseInMillisecondsWithRepeats) {
  const Truth t = {0.05, 2e-4, 5e-9, 0.04, 3e-4, 1e-7};  // seconds
  std::string csv =
      "model,hardware,prompt_size,batch_size,token_size,peak_power,"
      "average_power,prompt_time,token_time,e2e_time,tensor_parallel\n";
  for (int prompt : {128, 512, 2048, 8192}) {
    for (int b : {1, 4, 16, 64}) {
      for (int tokens : {128, 512}) {
        const double tok = double(prompt) * b;
        const double kv = double(b) * (prompt + tokens / 2.0);
        const double pre = t.p0 + t.p1 * tok + t.p2 * tok * tok;
        const double dec = t.d0 + t.d1 * b + t.d2 * kv;
        // Three repeats, the median being the true value.
        for (double noise : {0.9, 1.0, 1.3}) {
          absl::StrAppendFormat(&csv,
                                "llama2-70b,a100-80gb,%d,%d,%d,1,0.7,%.17g,"
                                "%.17g,0,4\n",
                                prompt, b, tokens, pre * 1000 * noise,
                                dec * 1000 * noise);
          absl::StrAppendFormat(&csv,
                                "llama2-70b,h100-80gb-pcap,%d,%d,%d,1,0.7,1,1,"
                                "0,4\n",
                                prompt, b, tokens);
        }
      }
    }
  }
  // A batch reported 8x faster than half its size: dropped.
  const double kv = 128.0 * (512 + 64);
  absl::StrAppendFormat(&csv,
                        "llama2-70b,a100-80gb,512,128,128,1,0.7,1000,%.17g,0,"
                        "4\n",
                        (t.d0 + t.d1 * 128 + t.d2 * kv) * 1000);
  WriteFile(dir_ / "splitwise-sim" / "perf_model.csv", csv);
  absl::StatusOr<FitResult> result = FitProfiles(dir_.string());
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->models.size(), 1u);
  const LatencyModel& m = result->models[0];
  EXPECT_EQ(m.model, "llama-2-70b");
  EXPECT_EQ(m.gpu, "A100-80GB");
  EXPECT_EQ(m.tensor_parallel, 4);
  EXPECT_EQ(m.source, "splitwise");
  EXPECT_THAT(absl::StrJoin(result->notes, "\n"),
              HasSubstr("dropped 1 prefill and 0 decode points"));
  ExpectNear(m.p0, t.p0, "p0");
  ExpectNear(m.p1, t.p1, "p1");
  ExpectNear(m.p2, t.p2, "p2");
  ExpectNear(m.d0, t.d0, "d0");
  ExpectNear(m.d1, t.d1, "d1");
  ExpectNear(m.d2, t.d2, "d2");
}

TEST_F(FitProfilesTest, DistServeFormulasMapOntoOurs) {
  // With c2 = 0 for prefill and one decode formula for both batch regimes,
  // the mapping is exact: p0 = c0, p1 = c1; d0 = c0, d1 = c2, d2 = c1.
  WriteFile(
      dir_ / "distserve" / "latency_model_coefficients_a100.csv",
      "engine,model,tp,phase,c0_ms,c1_ms_per_token,c2,"
      "decode_large_small_bs_threshold\n"
      "vllm,facebook/opt-13b,1,prefill,20,0.14,0,95\n"
      "vllm,facebook/opt-13b,1,decoding_smallbs,22,0.0006,0.07,95\n"
      "vllm,facebook/opt-13b,1,decoding_largebs,22,0.0006,0.07,95\n"
      "distserve,facebook/opt-13b,1,prefill,10,0.1,0,95\n"
      "distserve,facebook/opt-13b,1,decoding_smallbs,10,0.0005,0.03,95\n"
      "distserve,facebook/opt-13b,1,decoding_largebs,10,0.0005,0.03,95\n");
  absl::StatusOr<FitResult> result = FitProfiles(dir_.string());
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->models.size(), 1u);
  const LatencyModel& m = result->models[0];
  EXPECT_EQ(m.model, "opt-13b");
  EXPECT_EQ(m.gpu, "A100-80GB");
  EXPECT_EQ(m.source, "distserve/vllm");  // vLLM's engine wins
  ExpectNear(m.p0, 0.020, "p0");
  ExpectNear(m.p1, 0.14e-3, "p1");
  EXPECT_NEAR(m.p2, 0, 1e-15);
  ExpectNear(m.d0, 0.022, "d0");
  ExpectNear(m.d1, 0.07e-3, "d1");
  ExpectNear(m.d2, 0.0006e-3, "d2");

  FitOptions all;
  all.keep_shadowed = true;
  result = FitProfiles(dir_.string(), all);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->models.size(), 2u);
  EXPECT_EQ(result->models[1].source, "distserve/distserve (shadowed)");
}

TEST_F(FitProfilesTest, DistServeNegativeC2StaysNonNegative) {
  WriteFile(dir_ / "distserve" / "latency_model_coefficients_a100.csv",
            "engine,model,tp,phase,c0_ms,c1_ms_per_token,c2,"
            "decode_large_small_bs_threshold\n"
            "vllm,facebook/opt-66b,2,prefill,58,0.38,-7e-6,95\n"
            "vllm,facebook/opt-66b,2,decoding_smallbs,57,0.0036,0.22,95\n"
            "vllm,facebook/opt-66b,2,decoding_largebs,27,0.0062,0.45,95\n");
  absl::StatusOr<std::vector<LatencyModel>> models =
      FitLatencyModels(dir_.string());
  ASSERT_TRUE(models.ok()) << models.status();
  ASSERT_EQ(models->size(), 1u);
  const LatencyModel& m = (*models)[0];
  EXPECT_EQ(m.p2, 0);
  for (double c : {m.p0, m.p1, m.d0, m.d1, m.d2}) EXPECT_GE(c, 0);
}

TEST_F(FitProfilesTest, VidurIsShadowedByMeasuredData) {
  // Llama-2-7B shape: 32 heads, 32 KV heads, hidden 4096.
  WriteFile(dir_ / "vidur" / "compute" / "a100" / "meta-llama" /
                "Llama-2-7b-hf" / "mlp.csv",
            VidurMlp(32, 32, 4096));
  absl::StatusOr<FitResult> vidur_only = FitProfiles(dir_.string());
  ASSERT_TRUE(vidur_only.ok()) << vidur_only.status();
  ASSERT_EQ(vidur_only->models.size(), 1u);
  const LatencyModel& v = vidur_only->models[0];
  EXPECT_EQ(v.model, "llama-2-7b");
  EXPECT_EQ(v.gpu, "A100-80GB");
  EXPECT_EQ(v.source, "vidur+roofline");
  EXPECT_GT(v.PrefillSeconds(4096), v.PrefillSeconds(1024));
  EXPECT_GT(v.DecodeSeconds(32, 32 * 2048), v.DecodeSeconds(1, 2048));

  const Truth t = {0.010, 5e-5, 2e-9, 0.012, 1e-4, 2e-7};
  WriteFile(dir_ / "aegaeon" / "vllm_prefill_decode_latency.csv",
            kAegaeonHeader + AegaeonRows("llama2_7b", "A100", 1, t));
  FitOptions all;
  all.keep_shadowed = true;
  absl::StatusOr<FitResult> both = FitProfiles(dir_.string(), all);
  ASSERT_TRUE(both.ok()) << both.status();
  ASSERT_EQ(both->models.size(), 2u);
  EXPECT_EQ(both->models[0].source, "aegaeon");
  EXPECT_EQ(both->models[1].source, "vidur+roofline (shadowed)");
}

TEST_F(FitProfilesTest, VidurShapeMismatchIsAnError) {
  WriteFile(dir_ / "vidur" / "compute" / "a100" / "meta-llama" /
                "Llama-2-7b-hf" / "mlp.csv",
            VidurMlp(32, 8, 4096));
  absl::StatusOr<FitResult> result = FitProfiles(dir_.string());
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(std::string(result.status().message()),
              HasSubstr("disagrees with serving/model_catalog.cc"));
}

TEST_F(FitProfilesTest, EmptyDirectoryIsNotFound) {
  absl::StatusOr<FitResult> result = FitProfiles(dir_.string());
  EXPECT_TRUE(absl::IsNotFound(result.status())) << result.status();
}

TEST_F(FitProfilesTest, MalformedRowNamesFileAndLine) {
  const fs::path file = dir_ / "aegaeon" / "vllm_prefill_decode_latency.csv";
  WriteFile(file, std::string(kAegaeonHeader) +
                      "profiles,llama2_7b,A100,1,16,1,0,0.01,0,0,0.01,0,12\n"
                      "profiles,llama2_7b,A100,1,16,2,0,fast,0,0,0.01,0,12\n");
  absl::StatusOr<FitResult> result = FitProfiles(dir_.string());
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(
      std::string(result.status().message()),
      HasSubstr(absl::StrCat(file.string(), ":3: column 'prefill_p50_s'")));
}

// --- The table format -------------------------------------------------------

constexpr char kHeader[] =
    "model,gpu,tensor_parallel,p0,p1,p2,d0,d1,d2,kv_capacity_tokens,source,"
    "prefill_mape,decode_mape,points\n";

TEST(LatencyModelTableTest, FormatParsesBackExactly) {
  LatencyModel m;
  m.model = "llama-2-7b";
  m.gpu = "A100-80GB";
  m.tensor_parallel = 2;
  m.p0 = 0.1 + 0.2;  // not exactly representable in few digits
  m.p1 = 1.0 / 3 * 1e-5;
  m.p2 = 2.718281828459045e-10;
  m.d0 = 0.0123456789012345678;
  m.d1 = 0;
  m.d2 = 1e-300;
  m.kv_capacity_tokens = 123456;
  m.source = "aegaeon";
  m.prefill_mape = 3.14159;
  m.decode_mape = 2.5;
  m.points = 170;
  const std::string csv = FormatLatencyModelsCsv({m});
  EXPECT_EQ(csv.substr(0, csv.find('\n') + 1), kHeader);
  absl::StatusOr<std::vector<LatencyModel>> back =
      ParseLatencyModels(csv, "t.csv");
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->size(), 1u);
  const LatencyModel& b = (*back)[0];
  EXPECT_EQ(b.model, m.model);
  EXPECT_EQ(b.gpu, m.gpu);
  EXPECT_EQ(b.tensor_parallel, m.tensor_parallel);
  EXPECT_EQ(b.p0, m.p0);
  EXPECT_EQ(b.p1, m.p1);
  EXPECT_EQ(b.p2, m.p2);
  EXPECT_EQ(b.d0, m.d0);
  EXPECT_EQ(b.d1, m.d1);
  EXPECT_EQ(b.d2, m.d2);
  EXPECT_EQ(b.kv_capacity_tokens, m.kv_capacity_tokens);
  EXPECT_EQ(b.source, m.source);
  EXPECT_EQ(b.prefill_mape, m.prefill_mape);
  EXPECT_EQ(b.decode_mape, m.decode_mape);
  EXPECT_EQ(b.points, m.points);
}

TEST(LatencyModelTableTest, LoaderErrorsNameFileLineAndColumn) {
  struct Case {
    std::string text;
    std::string want;
  };
  const std::string row_ok = "m,A100-80GB,1,0.01,1e-4,0,0.01,1e-4,1e-7,1000\n";
  const std::vector<Case> cases = {
      {"model,gpu,tensor_parallel,p0,p2,d0,d1,d2,kv_capacity_tokens\n",
       "bad.csv:1: missing column(s) p1"},
      {absl::StrCat(kHeader, row_ok,
                    "m,H800,1,0.01,1e-4,0,0.01,fast,1e-7,1000\n"),
       "bad.csv:3: column 'd1': expected a number, got 'fast'"},
      {absl::StrCat(kHeader, "m,H800,1,0.01,-1e-4,0,0.01,0,1e-7,1000\n"),
       "bad.csv:2: column 'p1': must be a finite number >= 0"},
      {absl::StrCat(kHeader, "m,H800,0,0.01,1e-4,0,0.01,0,1e-7,1000\n"),
       "bad.csv:2: column 'tensor_parallel': must be 1 to 1024"},
      {absl::StrCat(kHeader, "m,H800,1,0.01,1e-4,0,0.01,0,1e-7,-1\n"),
       "bad.csv:2: column 'kv_capacity_tokens'"},
      {absl::StrCat(kHeader, ",H800,1,0.01,1e-4,0,0.01,0,1e-7,1\n"),
       "bad.csv:2: column 'model': empty"},
      {absl::StrCat(kHeader, "m,H800,1,0,0,0,0.01,0,1e-7,1\n"),
       "bad.csv:2: column 'p0': p0, p1 and p2 are all 0"},
      {absl::StrCat(kHeader, row_ok, "M,a100-80gb,1,0.02,1e-4,0,0.01,0,0,1\n"),
       "bad.csv:3: M on a100-80gb tp 1 is already given on line 2"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<std::vector<LatencyModel>> got =
        ParseLatencyModels(c.text, "bad.csv");
    ASSERT_FALSE(got.ok()) << c.text;
    EXPECT_THAT(std::string(got.status().message()), HasSubstr(c.want))
        << c.text;
  }
}

TEST(LatencyModelTableTest, LoadFromFile) {
  const fs::path dir = MakeTempDir("load");
  const fs::path file = dir / "models.csv";
  WriteFile(file, absl::StrCat(
                      "model,gpu,tensor_parallel,p0,p1,p2,d0,d1,d2,"
                      "kv_capacity_tokens\n",
                      "my-model,L4-24GB,1,0.02,2e-4,0,0.03,1e-4,1e-7,50000\n"));
  absl::StatusOr<std::vector<LatencyModel>> models =
      LoadLatencyModels(file.string());
  ASSERT_TRUE(models.ok()) << models.status();
  ASSERT_EQ(models->size(), 1u);
  EXPECT_EQ((*models)[0].model, "my-model");
  EXPECT_EQ((*models)[0].source, "");
  EXPECT_DOUBLE_EQ((*models)[0].PrefillSeconds(100), 0.02 + 2e-2);

  WriteFile(file, absl::StrCat(kHeader, "x,y,1,1,1,1,1,1,1,1,s,1,1,oops\n"));
  models = LoadLatencyModels(file.string());
  ASSERT_FALSE(models.ok());
  EXPECT_THAT(std::string(models.status().message()),
              HasSubstr(absl::StrCat(file.string(), ":2: column 'points'")));
  EXPECT_TRUE(absl::IsNotFound(
      LoadLatencyModels((dir / "missing.csv").string()).status()));
  fs::remove_all(dir);
}

TEST(FindLatencyModelTest, FindsCaseInsensitivelyAndExplainsMisses) {
  std::vector<LatencyModel> models(3);
  models[0].model = "llama-2-7b";
  models[0].gpu = "A100-80GB";
  models[1].model = "llama-2-7b";
  models[1].gpu = "H800";
  models[1].tensor_parallel = 2;
  models[2].model = "qwen-7b";
  models[2].gpu = "A10-24GB";

  absl::StatusOr<LatencyModel> m =
      FindLatencyModel(models, "Llama-2-7B", "a100-80gb", 1);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->gpu, "A100-80GB");

  m = FindLatencyModel(models, "llama-2-7b", "H800", 1);
  EXPECT_TRUE(absl::IsNotFound(m.status()));
  EXPECT_EQ(m.status().message(),
            "no latency model for llama-2-7b on H800 tp 1; llama-2-7b has: "
            "A100-80GB tp 1, H800 tp 2");

  m = FindLatencyModel(models, "mistral-7b", "H800", 1);
  EXPECT_TRUE(absl::IsNotFound(m.status()));
  EXPECT_EQ(m.status().message(),
            "no latency model for model 'mistral-7b'; models with one: "
            "llama-2-7b, qwen-7b");
}

// --- The shipped table ------------------------------------------------------

TEST(BuiltinLatencyModelsTest, ParsesAndIsMonotone) {
  const std::vector<LatencyModel>& models = BuiltinLatencyModels();
  ASSERT_FALSE(models.empty());
  for (const LatencyModel& m : models) {
    SCOPED_TRACE(absl::StrCat(m.model, " on ", m.gpu, " tp ", m.tensor_parallel,
                              " (", m.source, ")"));
    for (double c : {m.p0, m.p1, m.p2, m.d0, m.d1, m.d2}) EXPECT_GE(c, 0);
    EXPECT_GT(m.p1 + m.p2, 0) << "prefill must grow with tokens";
    EXPECT_GT(m.d1 + m.d2, 0) << "decode must grow with load";
    double last = 0;
    for (int64_t t = 1; t <= 32768; t *= 2) {
      EXPECT_GT(m.PrefillSeconds(t), last) << t << " tokens";
      last = m.PrefillSeconds(t);
    }
    last = 0;
    for (int64_t b = 1; b <= 256; b *= 2) {
      EXPECT_GT(m.DecodeSeconds(b, b * 1024), last) << "batch " << b;
      last = m.DecodeSeconds(b, b * 1024);
      // Neither more sequences at the same KV nor more KV at the same batch
      // is faster.
      EXPECT_GE(m.DecodeSeconds(b + 1, b * 1024), m.DecodeSeconds(b, b * 1024));
      EXPECT_GE(m.DecodeSeconds(b, b * 2048), m.DecodeSeconds(b, b * 1024));
    }
    EXPECT_GT(m.kv_capacity_tokens, 0);
    EXPECT_FALSE(m.source.empty());
    EXPECT_GT(m.points, 0);
  }
}

TEST(BuiltinLatencyModelsTest, MatchesDataFile) {
  absl::StatusOr<std::vector<LatencyModel>> file =
      LoadLatencyModels(GPUSCHED_SOURCE_DIR "/data/latency_models.csv");
  ASSERT_TRUE(file.ok()) << file.status();
  const std::vector<LatencyModel>& builtin = BuiltinLatencyModels();
  ASSERT_EQ(file->size(), builtin.size())
      << "rebuild: the embedded table is stale";
  EXPECT_EQ(FormatLatencyModelsCsv(*file), FormatLatencyModelsCsv(builtin));
}

// Refits ../shared/data/profiles (when this checkout has it) and compares
// with the shipped table, so a change to the fitter shows up as a diff to
// regenerate and review.
TEST(BuiltinLatencyModelsTest, RefitMatchesShippedTable) {
  std::string dir;
  for (const char* candidate : {GPUSCHED_SOURCE_DIR "/../shared/data/profiles",
                                "/work/../shared/data/profiles"}) {
    if (fs::exists(fs::path(candidate) / "README.md")) {
      dir = candidate;
      break;
    }
  }
  if (dir.empty()) GTEST_SKIP() << "skipped: no ../shared/data/profiles here";
  absl::StatusOr<std::vector<LatencyModel>> refit = FitLatencyModels(dir);
  ASSERT_TRUE(refit.ok()) << refit.status();
  const std::vector<LatencyModel>& shipped = BuiltinLatencyModels();
  ASSERT_EQ(refit->size(), shipped.size())
      << "regenerate: gpusched profiles fit --profiles " << dir
      << " --out data/latency_models.csv";
  auto close = [](double a, double b) {
    return std::abs(a - b) <=
           1e-9 * std::max(std::abs(a), std::abs(b)) + 1e-300;
  };
  for (size_t i = 0; i < shipped.size(); ++i) {
    const LatencyModel& a = (*refit)[i];
    const LatencyModel& b = shipped[i];
    SCOPED_TRACE(
        absl::StrCat(b.model, " on ", b.gpu, " tp ", b.tensor_parallel));
    EXPECT_EQ(a.model, b.model);
    EXPECT_EQ(a.gpu, b.gpu);
    EXPECT_EQ(a.tensor_parallel, b.tensor_parallel);
    EXPECT_EQ(a.source, b.source);
    EXPECT_EQ(a.kv_capacity_tokens, b.kv_capacity_tokens);
    EXPECT_EQ(a.points, b.points);
    for (auto [x, y] : {std::pair{a.p0, b.p0},
                        {a.p1, b.p1},
                        {a.p2, b.p2},
                        {a.d0, b.d0},
                        {a.d1, b.d1},
                        {a.d2, b.d2},
                        {a.prefill_mape, b.prefill_mape},
                        {a.decode_mape, b.decode_mape}}) {
      EXPECT_TRUE(close(x, y)) << x << " vs " << y;
    }
  }
}

}  // namespace
}  // namespace gpusched::serving
