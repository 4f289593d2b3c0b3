#include "sim/serve_trace.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpusched::sim {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string Testdata(const std::string& rel) {
  return std::string(GPUSCHED_SOURCE_DIR) + "/testdata/" + rel;
}

// Writes `content` to a fresh file under the test's temp dir.
std::string WriteTemp(const std::string& name, const std::string& content) {
  const std::string path = ::testing::TempDir() + "serve_trace_test_" + name;
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

// Error message of a StatusOr that must have failed.
template <typename T>
std::string ErrorOf(const absl::StatusOr<T>& s) {
  EXPECT_FALSE(s.ok());
  return s.ok() ? "" : std::string(s.status().message());
}

std::vector<double> Gaps(const Trace& t, const std::string& tenant = "") {
  std::vector<double> gaps;
  Micros prev = -1;
  for (const TraceRequest& r : t.requests) {
    if (!tenant.empty() && r.tenant != tenant) continue;
    if (prev >= 0) gaps.push_back(ToSeconds(r.arrival - prev));
    prev = r.arrival;
  }
  return gaps;
}

double Cv(const std::vector<double>& v) {
  double mean = 0, sq = 0;
  for (double x : v) mean += x;
  mean /= v.size();
  for (double x : v) sq += (x - mean) * (x - mean);
  return std::sqrt(sq / (v.size() - 1)) / mean;
}

// Requests per window of `window_s` seconds.
std::vector<int64_t> PerWindow(const Trace& t, double window_s, int windows) {
  std::vector<int64_t> counts(windows, 0);
  for (const TraceRequest& r : t.requests) {
    const int w = static_cast<int>(ToSeconds(r.arrival) / window_s);
    if (w < windows) ++counts[w];
  }
  return counts;
}

bool SortedByArrival(const Trace& t) {
  for (size_t i = 1; i < t.requests.size(); ++i) {
    if (t.requests[i].arrival < t.requests[i - 1].arrival) return false;
  }
  return true;
}

// ---- Azure
// -------------------------------------------------------------------

TEST(AzureTraceTest, ReadsShippedSample) {
  const std::string path =
      Testdata("azure-llm-inference-2023/code_first600.csv");
  absl::StatusOr<Trace> t = ReadAzureTrace(path);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->format, "azure");
  EXPECT_EQ(t->source, path);
  EXPECT_EQ(t->block_tokens, 0);
  ASSERT_EQ(t->requests.size(), 600u);
  const TraceRequest& first = t->requests.front();
  EXPECT_EQ(first.arrival, 0);
  EXPECT_EQ(first.input_tokens, 4808);
  EXPECT_EQ(first.output_tokens, 10);
  EXPECT_EQ(first.tenant, "");
  EXPECT_EQ(first.model, "");
  EXPECT_TRUE(first.prefix_blocks.empty());
  // 18:17:04.0319600 - 18:17:03.9799600
  EXPECT_EQ(t->requests[1].arrival, 52'000);
  // 18:21:25.6159590 - 18:17:03.9799600 = 261.6359990 s
  const TraceRequest& last = t->requests.back();
  EXPECT_EQ(last.arrival, 261'635'999);
  EXPECT_EQ(last.input_tokens, 3634);
  EXPECT_EQ(last.output_tokens, 7);
  EXPECT_TRUE(SortedByArrival(*t));
}

TEST(AzureTraceTest, TimestampsAreExactCalendarArithmetic) {
  // Leap day, month end, 'T' separator, short fractions, and an earlier row
  // last: arrivals count from the earliest row.
  const std::string path = WriteTemp("azure_exact.csv",
                                     "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                     "2024-02-28 23:59:59.0000000,1,1\n"
                                     "2024-02-29 00:00:00.0000004,2,2\n"
                                     "2024-03-01 00:00:00.1234567,3,3\n"
                                     "2024-03-01T00:00:01.5,4,4\n"
                                     "2024-02-28 23:59:58.0000000,5,5\n");
  absl::StatusOr<Trace> t = ReadAzureTrace(path);
  ASSERT_TRUE(t.ok()) << t.status();
  std::vector<Micros> arrivals;
  std::vector<int32_t> inputs;
  for (const TraceRequest& r : t->requests) {
    arrivals.push_back(r.arrival);
    inputs.push_back(r.input_tokens);
  }
  EXPECT_THAT(inputs, ElementsAre(5, 1, 2, 3, 4));
  EXPECT_THAT(arrivals, ElementsAre(0, 1'000'000, 2'000'000, 86'402'123'457,
                                    86'403'500'000));
}

TEST(AzureTraceTest, ErrorsNameFileAndLine) {
  struct Case {
    std::string body;
    std::string want;
  };
  const std::vector<Case> cases = {
      {"TIMESTAMP,ContextTokens,GeneratedTokens\n"
       "2023-11-16 18:17:03.9799600,10,1\n"
       "2023-02-30 00:00:00.0000000,10,1\n",
       ":3: column 'TIMESTAMP': expected"},
      {"TIMESTAMP,ContextTokens,GeneratedTokens\n"
       "2023-11-16 18:17:03.9799600,10,1\n"
       "2023-11-16 18:17:03,10,1\n"
       "2023-11-16 18:17:03.97996001234,10,1\n",
       ":4: column 'TIMESTAMP'"},
      {"TIMESTAMP,ContextTokens,GeneratedTokens\n"
       "2023-11-16 18:17:03.9799600,-5,1\n",
       ":2: column 'ContextTokens': token count must be"},
      {"TIMESTAMP,ContextTokens,GeneratedTokens\n"
       "2023-11-16 18:17:03.9799600,10,many\n",
       ":2: column 'GeneratedTokens': expected an integer"},
      {"TIMESTAMP,ContextTokens\n2023-11-16 18:17:03.9799600,10\n",
       ":1: missing column(s) GeneratedTokens"},
      // Found by fuzz_trace_csv: nanoseconds since 1970 overflowed.
      {"TIMESTAMP,ContextTokens,GeneratedTokens\n"
       "1450-11-16 18:17:03.9799600,10,1\n",
       ":2: column 'TIMESTAMP': expected"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string path =
        WriteTemp(absl::StrCat("azure_bad", i, ".csv"), cases[i].body);
    const std::string err = ErrorOf(ReadAzureTrace(path));
    EXPECT_THAT(err, HasSubstr(path + cases[i].want)) << "case " << i;
  }
}

// ---- Mooncake
// ------------------------------------------------------------------

TEST(MooncakeTraceTest, ReadsShippedSample) {
  absl::StatusOr<Trace> t = ReadMooncakeTrace(
      Testdata("mooncake-fast25/conversation_first800.jsonl"));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->format, "mooncake");
  EXPECT_EQ(t->block_tokens, 512);
  ASSERT_EQ(t->requests.size(), 800u);
  const TraceRequest& first = t->requests.front();
  EXPECT_EQ(first.arrival, 0);
  EXPECT_EQ(first.input_tokens, 6758);
  EXPECT_EQ(first.output_tokens, 500);
  EXPECT_THAT(first.prefix_blocks,
              ElementsAre(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13));
  const TraceRequest& last = t->requests.back();
  EXPECT_EQ(last.arrival, 267'000 * kMicrosPerMilli);
  EXPECT_EQ(last.input_tokens, 36707);
  EXPECT_EQ(last.output_tokens, 602);
  ASSERT_EQ(last.prefix_blocks.size(), 72u);
  EXPECT_EQ(last.prefix_blocks[1], 7047u);
  EXPECT_EQ(last.prefix_blocks.back(), 17808u);
  size_t blocks = 0;
  std::set<uint64_t> distinct;
  for (const TraceRequest& r : t->requests) {
    EXPECT_EQ(r.prefix_blocks.size(), (r.input_tokens + 511u) / 512u);
    blocks += r.prefix_blocks.size();
    distinct.insert(r.prefix_blocks.begin(), r.prefix_blocks.end());
  }
  EXPECT_EQ(blocks, 22023u);
  EXPECT_EQ(distinct.size(), 17809u);
  EXPECT_TRUE(SortedByArrival(*t));
}

TEST(MooncakeTraceTest, LenientAboutLayoutAndExtraFields) {
  const std::string path = WriteTemp(
      "mooncake_ok.jsonl",
      "\n"
      "{\"hash_ids\":[7],\"output_length\":0,\"input_length\":512,"
      "\"timestamp\":1.5,\"extra\":{\"a\":[1,\"x\\\"y\",null,true,-2e3]}}\r\n"
      "  { \"timestamp\" : 0 , \"input_length\" : 0 , \"output_length\" : 3 ,"
      " \"hash_ids\" : [ ] }  \n");
  absl::StatusOr<Trace> t = ReadMooncakeTrace(path);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->requests.size(), 2u);
  EXPECT_EQ(t->requests[0].arrival, 0);  // sorted
  EXPECT_EQ(t->requests[0].output_tokens, 3);
  EXPECT_EQ(t->requests[1].arrival, 1500);
  EXPECT_THAT(t->requests[1].prefix_blocks, ElementsAre(7));
}

TEST(MooncakeTraceTest, ErrorsNameFileAndLine) {
  const std::string good =
      "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 1, "
      "\"hash_ids\": [1, 2]}\n";
  struct Case {
    std::string line;
    std::string want;
  };
  const std::vector<Case> cases = {
      {"{\"timestamp\": 5, \"input_length\": 1025, \"output_length\": 1, "
       "\"hash_ids\": [1, 2]}",
       ":2: hash_ids has 2 entries but input_length 1025 needs 3"},
      {"{\"timestamp\": 5, \"input_length\": 10, \"output_length\": 1}",
       ":2: missing field \"hash_ids\""},
      {"{\"timestamp\": 5, \"input_length\": 10 \"output_length\": 1}",
       ":2:37: expected ',' or '}'"},
      {"{\"timestamp\": 5, \"input_length\": -3, \"output_length\": 1, "
       "\"hash_ids\": []}",
       ":2:34: input_length must be an integer"},
      {"{\"timestamp\": 5, \"input_length\": 3.5, \"output_length\": 1, "
       "\"hash_ids\": [1]}",
       ":2:34: input_length must be an integer"},
      {"{\"timestamp\": -1, \"input_length\": 3, \"output_length\": 1, "
       "\"hash_ids\": [1]}",
       ":2:15: timestamp must be a non-negative number"},
      {"{\"timestamp\": 5, \"input_length\": 3, \"output_length\": 1, "
       "\"hash_ids\": [1",
       ":2:"},
      {"{\"timestamp\": 5, \"input_length\": 3, \"output_length\": 1, "
       "\"hash_ids\": [-1]}",
       ":2:"},
      {"{\"timestamp\": 5, \"input_length\": 3, \"output_length\": 1, "
       "\"hash_ids\": [1]} x",
       "unexpected text after the object"},
      {"[1, 2]", ":2:1: expected a JSON object"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string path =
        WriteTemp(absl::StrCat("mooncake_bad", i, ".jsonl"),
                  good + cases[i].line + "\n" + good);
    const std::string err = ErrorOf(ReadMooncakeTrace(path));
    EXPECT_THAT(err, HasSubstr(path + ":2:")) << "case " << i;
    EXPECT_THAT(err, HasSubstr(cases[i].want)) << "case " << i;
  }
}

// ---- VTC
// ------------------------------------------------------------------------

TEST(VtcTraceTest, ReadsShippedTrace) {
  absl::StatusOr<Trace> t =
      ReadVtcTrace(Testdata("vtc-lmsys-multitenant/requests.csv"));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->format, "vtc");
  ASSERT_EQ(t->requests.size(), 1500u);
  EXPECT_EQ(t->requests[0].arrival, 0);
  EXPECT_EQ(t->requests[0].tenant, "tenant-13");
  EXPECT_EQ(t->requests[0].input_tokens, 13);
  EXPECT_EQ(t->requests[0].output_tokens, 199);
  EXPECT_EQ(t->requests[1].arrival, 207'938);
  EXPECT_EQ(t->requests[1].tenant, "tenant-2");
  const TraceRequest& last = t->requests.back();
  EXPECT_EQ(last.arrival, 600 * kMicrosPerSecond);
  EXPECT_EQ(last.tenant, "tenant-10");
  EXPECT_EQ(last.input_tokens, 28);
  EXPECT_EQ(last.output_tokens, 513);
  std::map<std::string, int> per_tenant;
  int64_t prompt = 0;
  for (const TraceRequest& r : t->requests) {
    ++per_tenant[r.tenant];
    prompt += r.input_tokens;
  }
  EXPECT_EQ(per_tenant.size(), 27u);
  EXPECT_EQ(per_tenant["tenant-2"], 296);
  EXPECT_EQ(per_tenant["tenant-10"], 262);
  EXPECT_EQ(prompt, 204398);
  EXPECT_TRUE(SortedByArrival(*t));
}

TEST(VtcTraceTest, SortsStablyAndKeepsNames) {
  const std::string path = WriteTemp("vtc_order.csv",
                                     "arrival_s,tenant,prompt_len,output_len\n"
                                     "2.0,1,10,11\n"
                                     "1.0, alice ,20,21\n"
                                     "2.0,2,30,31\n");
  absl::StatusOr<Trace> t = ReadVtcTrace(path);
  ASSERT_TRUE(t.ok()) << t.status();
  std::vector<std::string> tenants;
  for (const TraceRequest& r : t->requests) tenants.push_back(r.tenant);
  EXPECT_THAT(tenants, ElementsAre("alice", "tenant-1", "tenant-2"));
  EXPECT_EQ(t->requests[0].arrival, kMicrosPerSecond);
}

TEST(VtcTraceTest, ErrorsNameFileAndLine) {
  const std::string header = "arrival_s,tenant,prompt_len,output_len\n";
  struct Case {
    std::string body;
    std::string want;
  };
  const std::vector<Case> cases = {
      {"1.0,,10,10\n", ":2: column 'tenant': empty"},
      {"-1.0,3,10,10\n", ":2: column 'arrival_s': expected seconds >= 0"},
      {"1.0,3,10,10\n2.0,3,ten,10\n", ":3: column 'prompt_len'"},
      {"1.0,3,10,99999999999\n", ":2: column 'output_len': token count"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string path =
        WriteTemp(absl::StrCat("vtc_bad", i, ".csv"), header + cases[i].body);
    EXPECT_THAT(ErrorOf(ReadVtcTrace(path)), HasSubstr(path + cases[i].want))
        << "case " << i;
  }
}

TEST(ReadTraceTest, DispatchesAndListsFormats) {
  absl::StatusOr<Trace> t =
      ReadTrace("vtc", Testdata("vtc-lmsys-multitenant/requests.csv"));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->requests.size(), 1500u);
  EXPECT_THAT(ErrorOf(ReadTrace("sharegpt", "x.json")),
              HasSubstr("unknown trace format 'sharegpt'; expected one of: "
                        "azure, mooncake, vtc"));
  absl::StatusOr<Trace> missing = ReadTrace("mooncake", "/nonexistent.jsonl");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(ErrorOf(missing), HasSubstr("/nonexistent.jsonl"));
}

// ---- Synthetic: Poisson and Gamma
// ---------------------------------------------------

SyntheticTenant Tenant(std::string name, std::string arrival, double rate,
                       double cv = 1) {
  SyntheticTenant t;
  t.name = std::move(name);
  t.arrival = std::move(arrival);
  t.rate = rate;
  t.cv = cv;
  return t;
}

bool SameRequests(const Trace& a, const Trace& b) {
  if (a.requests.size() != b.requests.size()) return false;
  for (size_t i = 0; i < a.requests.size(); ++i) {
    const TraceRequest& x = a.requests[i];
    const TraceRequest& y = b.requests[i];
    if (x.arrival != y.arrival || x.tenant != y.tenant || x.model != y.model ||
        x.input_tokens != y.input_tokens ||
        x.output_tokens != y.output_tokens) {
      return false;
    }
  }
  return true;
}

TEST(SyntheticTest, SameSeedSameTrace) {
  SyntheticWorkload w;
  w.duration_s = 300;
  w.seed = 7;
  w.tenants = {Tenant("a", "poisson", 5), Tenant("b", "gamma", 3, 2.5)};
  w.tenants[0].model = "llama";
  w.tenants[0].input_max = 2048;
  w.tenants[1].output_max = 512;
  absl::StatusOr<Trace> x = GenerateSynthetic(w);
  absl::StatusOr<Trace> y = GenerateSynthetic(w);
  ASSERT_TRUE(x.ok()) << x.status();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(x->format, "synthetic");
  EXPECT_EQ(x->source, "synthetic");
  EXPECT_TRUE(SameRequests(*x, *y));
  EXPECT_TRUE(SortedByArrival(*x));
  for (const TraceRequest& r : x->requests) {
    ASSERT_GE(r.arrival, 0);
    ASSERT_LT(r.arrival, 300 * kMicrosPerSecond);
    if (r.tenant == "a") {
      EXPECT_EQ(r.model, "llama");
      EXPECT_GE(r.input_tokens, 512);
      EXPECT_LE(r.input_tokens, 2048);
      EXPECT_EQ(r.output_tokens, 128);
    } else {
      EXPECT_EQ(r.input_tokens, 512);
      EXPECT_GE(r.output_tokens, 128);
      EXPECT_LE(r.output_tokens, 512);
    }
  }

  w.seed = 8;
  absl::StatusOr<Trace> z = GenerateSynthetic(w);
  ASSERT_TRUE(z.ok());
  EXPECT_FALSE(SameRequests(*x, *z));

  // Appending a tenant leaves the others' requests as they were.
  w.seed = 7;
  w.tenants.push_back(Tenant("c", "poisson", 50));
  absl::StatusOr<Trace> more = GenerateSynthetic(w);
  ASSERT_TRUE(more.ok());
  std::erase_if(more->requests,
                [](const TraceRequest& r) { return r.tenant == "c"; });
  EXPECT_TRUE(SameRequests(*x, *more));
}

TEST(SyntheticTest, PoissonMeanRate) {
  SyntheticWorkload w;
  w.duration_s = 2000;
  w.seed = 1;
  w.tenants = {Tenant("p", "poisson", 50)};
  absl::StatusOr<Trace> t = GenerateSynthetic(w);
  ASSERT_TRUE(t.ok()) << t.status();
  const double rate = t->requests.size() / w.duration_s;
  EXPECT_NEAR(rate, 50, 50 * 0.05) << "seed " << w.seed;
  EXPECT_NEAR(Cv(Gaps(*t)), 1.0, 0.05) << "seed " << w.seed;
}

TEST(SyntheticTest, GammaRateAndCv) {
  for (double cv : {0.5, 1.0, 3.0}) {
    SyntheticWorkload w;
    w.duration_s = 5000;
    w.seed = 2;
    w.tenants = {Tenant("g", "gamma", 20, cv)};
    absl::StatusOr<Trace> t = GenerateSynthetic(w);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_NEAR(t->requests.size() / w.duration_s, 20, 20 * 0.05)
        << "cv " << cv << " seed " << w.seed;
    EXPECT_NEAR(Cv(Gaps(*t)), cv, cv * 0.10)
        << "cv " << cv << " seed " << w.seed;
  }
}

TEST(SyntheticTest, GammaWithZeroCvIsEvenlySpaced) {
  SyntheticWorkload w;
  w.duration_s = 10;
  w.tenants = {Tenant("even", "gamma", 4, 0)};
  absl::StatusOr<Trace> t = GenerateSynthetic(w);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->requests.size(), 39u);  // 0.25, 0.5, ..., 9.75
  EXPECT_EQ(t->requests[0].arrival, 250'000);
  EXPECT_EQ(t->requests.back().arrival, 9'750'000);
}

// ---- Synthetic: ServeGen
// -----------------------------------------------------------

constexpr char kChunk14[] = "servegen/language/m-small/chunk-14-trace.csv";
constexpr char kChunk2[] = "servegen/language/m-small/chunk-2-trace.csv";
constexpr char kChunk13[] = "servegen/language/m-small/chunk-13-trace.csv";
constexpr char kChunk13Data[] =
    "servegen/language/m-small/chunk-13-dataset.json";

SyntheticTenant ServeGenTenant(const std::string& trace, double offset = 0) {
  SyntheticTenant t;
  t.name = "sg";
  t.arrival = "servegen";
  t.servegen_trace = Testdata(trace);
  t.servegen_offset_s = offset;
  return t;
}

TEST(ServeGenTest, ReadsClientTrace) {
  absl::StatusOr<std::vector<ServeGenWindow>> w =
      ReadServeGenTrace(Testdata(kChunk14));
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_EQ(w->size(), 144u);
  EXPECT_EQ((*w)[0].start_s, 0);
  EXPECT_EQ((*w)[0].length_s, 600);
  EXPECT_DOUBLE_EQ((*w)[0].rate, 19.053333333333335);
  EXPECT_EQ((*w)[0].pattern, ServeGenWindow::Pattern::kWeibull);
  EXPECT_DOUBLE_EQ((*w)[0].shape, 0.405171048754724);
  EXPECT_DOUBLE_EQ((*w)[0].scale, 0.02819138519386574);
  EXPECT_EQ(w->back().start_s, 85800);
  EXPECT_EQ(w->back().length_s, 600);

  absl::StatusOr<std::vector<ServeGenWindow>> idle =
      ReadServeGenTrace(Testdata(kChunk13));
  ASSERT_TRUE(idle.ok()) << idle.status();
  EXPECT_EQ((*idle)[0].pattern, ServeGenWindow::Pattern::kIdle);
  EXPECT_EQ((*idle)[0].rate, 0);
}

TEST(ServeGenTest, EachWindowHoldsItsRate) {
  absl::StatusOr<std::vector<ServeGenWindow>> windows =
      ReadServeGenTrace(Testdata(kChunk2));
  ASSERT_TRUE(windows.ok()) << windows.status();
  SyntheticWorkload w;
  w.duration_s = 86400;
  w.seed = 3;
  w.tenants = {ServeGenTenant(kChunk2)};
  absl::StatusOr<Trace> t = GenerateSynthetic(w);
  ASSERT_TRUE(t.ok()) << t.status();
  const std::vector<int64_t> counts = PerWindow(*t, 600, 144);
  for (int i = 0; i < 144; ++i) {
    const double want = (*windows)[i].rate * 600;
    // Stochastic rounding: floor or ceil of rate x 600.
    EXPECT_LE(std::abs(counts[i] - want), 1.0)
        << "window " << i << " seed " << w.seed;
  }

  // A busy, bursty (Weibull, CV about 5) client, entered half-way through a
  // window: the partial windows get their share.
  w.duration_s = 1200;
  w.tenants = {ServeGenTenant(kChunk14, /*offset=*/300)};
  t = GenerateSynthetic(w);
  ASSERT_TRUE(t.ok()) << t.status();
  const std::vector<int64_t> busy = PerWindow(*t, 300, 4);
  const double want[4] = {19.053333333333335 * 300, 14.16 * 300, 14.16 * 300,
                          14.848333333333333 * 300};
  EXPECT_NEAR(busy[0], want[0], 1) << "seed " << w.seed;
  EXPECT_NEAR(busy[1] + busy[2], want[1] + want[2], 1) << "seed " << w.seed;
  EXPECT_NEAR(busy[3], want[3], 1) << "seed " << w.seed;
  EXPECT_GT(Cv(Gaps(*t)), 2.0) << "seed " << w.seed;

  // servegen_rate_scale multiplies every window's rate.
  w.tenants[0].servegen_rate_scale = 0.5;
  t = GenerateSynthetic(w);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_NEAR(static_cast<double>(t->requests.size()),
              (want[0] + want[1] + want[2] + want[3]) / 2, 2);
}

TEST(ServeGenTest, IdleWindowsAndTraceEndHaveNoArrivals) {
  SyntheticWorkload w;
  w.duration_s = 36600;  // chunk 13 is idle until 36,600 s
  w.tenants = {ServeGenTenant(kChunk13)};
  absl::StatusOr<Trace> t = GenerateSynthetic(w);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->requests.empty());

  w.duration_s = 1000;  // the sample ends at 86,400 s
  w.tenants = {ServeGenTenant(kChunk14, /*offset=*/86000)};
  t = GenerateSynthetic(w);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_FALSE(t->requests.empty());
  EXPECT_LT(t->requests.back().arrival, 400 * kMicrosPerSecond);
}

TEST(ServeGenTest, ReadsDatasetPmfs) {
  absl::StatusOr<std::vector<ServeGenLengths>> d =
      ReadServeGenDataset(Testdata(kChunk13Data));
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->size(), 31u);  // non-empty 6-hour windows
  EXPECT_EQ(d->front().start_s, 21600);
  for (size_t i = 0; i < d->size(); ++i) {
    const ServeGenLengths& l = (*d)[i];
    if (i > 0) {
      EXPECT_GT(l.start_s, (*d)[i - 1].start_s);
    }
    EXPECT_GT(l.input.Mean(), 0);
    EXPECT_GT(l.output.Mean(), 0);
    EXPECT_DOUBLE_EQ(l.input.cdf.back(), 1.0);
    EXPECT_TRUE(std::is_sorted(l.input.values.begin(), l.input.values.end()));
  }
}

TEST(ServeGenTest, SamplesLengthsFromTheWindowInForce) {
  const std::string path =
      WriteTemp("dataset_ok.json",
                "{\"1200\": {\"input_tokens\": \"{1000: 1.0}\",\n"
                " \"output_tokens\": \"{0: 0.5, 7: 0.5}\"},\n"
                " \"0\": {\"input_tokens\": \"{200: 0.75, 100: 2.5e-01}\",\n"
                " \"output_tokens\": \"{5: 1.0}\", \"reason_ratio\": \"{}\"},\n"
                " \"600\": {\"input_tokens\": \"{}\", \"output_tokens\": "
                "\"{}\"}}\n");
  absl::StatusOr<std::vector<ServeGenLengths>> d = ReadServeGenDataset(path);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->size(), 2u);
  EXPECT_EQ((*d)[0].start_s, 0);
  EXPECT_THAT((*d)[0].input.values, ElementsAre(100, 200));
  EXPECT_DOUBLE_EQ((*d)[0].input.Mean(), 175);

  SyntheticWorkload w;
  w.duration_s = 1800;
  w.seed = 4;
  SyntheticTenant t = Tenant("pmf", "poisson", 100);
  t.servegen_dataset = path;
  w.tenants = {t};
  absl::StatusOr<Trace> trace = GenerateSynthetic(w);
  ASSERT_TRUE(trace.ok()) << trace.status();
  int64_t early = 0, early100 = 0, late = 0, late0 = 0;
  for (const TraceRequest& r : trace->requests) {
    if (r.arrival < 1200 * kMicrosPerSecond) {
      ++early;
      ASSERT_TRUE(r.input_tokens == 100 || r.input_tokens == 200);
      ASSERT_EQ(r.output_tokens, 5);
      early100 += r.input_tokens == 100;
    } else {
      ++late;
      ASSERT_EQ(r.input_tokens, 1000);
      ASSERT_TRUE(r.output_tokens == 0 || r.output_tokens == 7);
      late0 += r.output_tokens == 0;
    }
  }
  ASSERT_GT(early, 100'000);
  ASSERT_GT(late, 50'000);
  EXPECT_NEAR(static_cast<double>(early100) / early, 0.25, 0.01)
      << "seed " << w.seed;
  EXPECT_NEAR(static_cast<double>(late0) / late, 0.5, 0.01)
      << "seed " << w.seed;

  // The offset moves the whole workload into the 1200 s window.
  w.tenants[0].servegen_offset_s = 1200;
  trace = GenerateSynthetic(w);
  ASSERT_TRUE(trace.ok());
  for (const TraceRequest& r : trace->requests) {
    ASSERT_EQ(r.input_tokens, 1000);
  }
}

TEST(ServeGenTest, ShippedClientWithItsLengths) {
  SyntheticWorkload w;
  w.duration_s = 3 * 3600;
  SyntheticTenant t = ServeGenTenant(kChunk13, /*offset=*/36000);
  t.servegen_dataset = Testdata(kChunk13Data);
  t.model = "m-small";
  w.tenants = {t};
  absl::StatusOr<Trace> trace = GenerateSynthetic(w);
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_GT(trace->requests.size(), 1000u);
  for (const TraceRequest& r : trace->requests) {
    ASSERT_GT(r.input_tokens, 0);
    ASSERT_EQ(r.model, "m-small");
  }
}

TEST(ServeGenTest, TraceErrorsNameFileAndLine) {
  const std::string good = "0,0,0,,0,0\n600,1.5,1.0,Gamma,1.0,0.6\n";
  struct Case {
    std::string line;
    std::string want;
  };
  const std::vector<Case> cases = {
      {"1200,1.5,1.0,Gamma,1.0", "expected 6 fields"},
      {"1200,1.5,1.0,,0,0", "rate > 0 needs a pattern"},
      {"1200,1.5,1.0,Poisson,1,1", "pattern: expected Gamma or Weibull"},
      {"1200,1.5,1.0,Weibull,0,1", "needs shape > 0 and scale > 0"},
      {"1200,fast,1.0,Gamma,1,1", "rate: expected a number"},
      {"600,1.5,1.0,Gamma,1,1", "does not follow the previous row"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string path = WriteTemp(absl::StrCat("sg_bad", i, ".csv"),
                                       good + cases[i].line + "\n");
    const std::string err = ErrorOf(ReadServeGenTrace(path));
    EXPECT_THAT(err, HasSubstr(path + ":3: ")) << "case " << i;
    EXPECT_THAT(err, HasSubstr(cases[i].want)) << "case " << i;
  }
}

TEST(ServeGenTest, DatasetErrorsNameFileAndLine) {
  struct Case {
    std::string body;
    std::string want;
  };
  const std::vector<Case> cases = {
      {"{\n  \"0\": {\n    \"input_tokens\": \"{1: 1.0}\"\n"
       "    \"output_tokens\": \"{1: 1.0}\"\n  }\n}\n",
       ":4: invalid JSON"},
      {"{\n  \"0\": {\n    \"input_tokens\": \"{1: 1.0}\",\n"
       "    \"output_tokens\": \"{1: 0.5, 2 0.5}\"\n  }\n}\n",
       ":4: window 0 output_tokens: expected ':' at character"},
      {"{\n  \"0\": {\n    \"input_tokens\": \"{1: 1.0}\",\n"
       "    \"output_tokens\": \"{1: 0.5}\"\n  }\n}\n",
       ":4: window 0 output_tokens: probabilities sum to 0.5"},
      {"{\n  \"0\": {\n    \"input_tokens\": \"{1: 1.0}\",\n"
       "    \"output_tokens\": \"{1: 1.0}\"\n  },\n  \"600\": {\n"
       "    \"input_tokens\": \"{0.5: 1.0}\",\n"
       "    \"output_tokens\": \"{1: 1.0}\"\n  }\n}\n",
       ":7: window 600 input_tokens: expected a token count, got '0.5'"},
      {"{\n  \"0\": {\n    \"text_tokens\": \"{1: 1.0}\"\n  }\n}\n",
       ":2: window 0: no input_tokens PMF"},
      {"[1, 2]\n", ":1: expected a JSON object"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string path =
        WriteTemp(absl::StrCat("sg_bad", i, ".json"), cases[i].body);
    EXPECT_THAT(ErrorOf(ReadServeGenDataset(path)),
                HasSubstr(path + cases[i].want))
        << "case " << i;
  }
}

TEST(SyntheticTest, ConfigErrorsNameTheTenant) {
  struct Case {
    SyntheticTenant tenant;
    std::string want;
  };
  SyntheticTenant uniform_bad = Tenant("u", "poisson", 1);
  uniform_bad.input_max = 100;
  SyntheticTenant no_trace = Tenant("s", "servegen", 1);
  SyntheticTenant bad_file = ServeGenTenant("missing.csv");
  const std::vector<Case> cases = {
      {Tenant("x", "bursty", 1),
       "tenant 1 'x': unknown arrival 'bursty'; expected poisson, gamma or "
       "servegen"},
      {Tenant("x", "poisson", 0), "tenant 1 'x': rate must be > 0"},
      {Tenant("x", "gamma", 1, -1), "tenant 1 'x': cv must be >= 0"},
      {Tenant("", "poisson", 1), "tenant 1 '': name is empty"},
      {uniform_bad, "input_max must be 0 (fixed) or >= input_tokens (512)"},
      {no_trace, "arrival servegen needs servegen_trace"},
      {bad_file, "missing.csv: cannot open file"},
      {Tenant("x", "poisson", 1e9), "exceeds 10000000 requests"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SyntheticWorkload w;
    w.tenants = {cases[i].tenant};
    EXPECT_THAT(ErrorOf(GenerateSynthetic(w)), HasSubstr(cases[i].want))
        << "case " << i;
  }
  SyntheticWorkload empty;
  EXPECT_THAT(ErrorOf(GenerateSynthetic(empty)), HasSubstr("needs a tenant"));
  SyntheticWorkload zero;
  zero.duration_s = 0;
  zero.tenants = {Tenant("x", "poisson", 1)};
  EXPECT_THAT(ErrorOf(GenerateSynthetic(zero)), HasSubstr("duration_s"));
}

// ---- Scale and truncate
// -------------------------------------------------------------

Trace Arrivals(std::vector<Micros> at) {
  Trace t;
  for (Micros a : at) {
    TraceRequest r;
    r.arrival = a;
    t.requests.push_back(r);
  }
  return t;
}

std::vector<Micros> ArrivalsOf(const Trace& t) {
  std::vector<Micros> at;
  for (const TraceRequest& r : t.requests) at.push_back(r.arrival);
  return at;
}

TEST(ScaleTraceTest, DividesArrivals) {
  Trace t = Arrivals({0, 1000, 3001, 10'000'000});
  ScaleTrace(t, 2);
  EXPECT_THAT(ArrivalsOf(t), ElementsAre(0, 500, 1501, 5'000'000));
  ScaleTrace(t, 0.25);
  EXPECT_THAT(ArrivalsOf(t), ElementsAre(0, 2000, 6004, 20'000'000));
}

TEST(ScaleTraceDeathTest, RejectsNonPositiveFactor) {
  Trace t = Arrivals({1});
  EXPECT_DEATH(ScaleTrace(t, 0), "time_scale must be finite and > 0");
}

TEST(TruncateTraceTest, CapsCountAndWindow) {
  const Trace base = Arrivals({0, 500'000, 999'999, 1'000'000, 2'000'000});
  Trace t = base;
  TruncateTrace(t, 0, 0);
  EXPECT_EQ(t.requests.size(), 5u);
  TruncateTrace(t, 2, 0);
  EXPECT_THAT(ArrivalsOf(t), ElementsAre(0, 500'000));
  t = base;
  TruncateTrace(t, 0, 1.0);
  EXPECT_THAT(ArrivalsOf(t), ElementsAre(0, 500'000, 999'999));
  t = base;
  TruncateTrace(t, 4, 1.5);
  EXPECT_THAT(ArrivalsOf(t), ElementsAre(0, 500'000, 999'999, 1'000'000));
  t = base;
  TruncateTrace(t, -1, 1e300);
  EXPECT_EQ(t.requests.size(), 5u);
}

// ---- The full traces, when the shared data folder is there
// -------------------------

TEST(FullTracesTest, CountsMatchTheReadmes) {
  const std::string data = std::string(GPUSCHED_SOURCE_DIR) + "/../shared/data";
  if (!std::filesystem::exists(data)) {
    GTEST_SKIP() << "skipped: ../shared/data absent";
  }
  auto timed = [](auto read, const std::string& path) {
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<Trace> t = read(path);
    const double ms = std::chrono::duration<double, std::milli>(
                          std::chrono::steady_clock::now() - start)
                          .count();
    if (t.ok()) {
      std::printf("read %zu requests from %s in %.1f ms\n", t->requests.size(),
                  path.c_str(), ms);
    }
    return t;
  };
  absl::StatusOr<Trace> azure =
      timed(ReadAzureTrace, data +
                                "/azure-llm-inference-2023/"
                                "AzureLLMInferenceTrace_code.csv");
  ASSERT_TRUE(azure.ok()) << azure.status();
  EXPECT_EQ(azure->requests.size(), 8819u);
  // 19:14:19.9280160 - 18:17:03.9799600
  EXPECT_EQ(azure->requests.back().arrival, 3'435'948'056);

  absl::StatusOr<Trace> conv = timed(
      ReadMooncakeTrace, data + "/mooncake-fast25/conversation_trace.jsonl");
  ASSERT_TRUE(conv.ok()) << conv.status();
  EXPECT_EQ(conv->requests.size(), 12031u);
  EXPECT_EQ(conv->requests.back().arrival, 3'536'999 * kMicrosPerMilli);
  size_t blocks = 0;
  for (const TraceRequest& r : conv->requests) blocks += r.prefix_blocks.size();
  EXPECT_EQ(blocks, 288'500u);

  absl::StatusOr<Trace> synth =
      timed(ReadMooncakeTrace, data + "/mooncake-fast25/synthetic_trace.jsonl");
  ASSERT_TRUE(synth.ok()) << synth.status();
  EXPECT_EQ(synth->requests.size(), 3993u);

  absl::StatusOr<Trace> vtc =
      timed(ReadVtcTrace, data + "/vtc-lmsys-multitenant/requests.csv");
  ASSERT_TRUE(vtc.ok()) << vtc.status();
  EXPECT_EQ(vtc->requests.size(), 1500u);

  absl::StatusOr<std::vector<ServeGenWindow>> client =
      ReadServeGenTrace(data + "/servegen/language/m-small/chunk-14-trace.csv");
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_EQ(client->size(), 2016u);

  // The largest m-small length PMFs (3.9 MB of Python-dict strings).
  const std::string big =
      data + "/servegen/language/m-small/chunk-21-dataset.json";
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::vector<ServeGenLengths>> lengths =
      ReadServeGenDataset(big);
  const double ms = std::chrono::duration<double, std::milli>(
                        std::chrono::steady_clock::now() - start)
                        .count();
  ASSERT_TRUE(lengths.ok()) << lengths.status();
  EXPECT_FALSE(lengths->empty());
  std::printf("read %zu length-PMF windows from %s in %.1f ms\n",
              lengths->size(), big.c_str(), ms);
}

}  // namespace
}  // namespace gpusched::sim
