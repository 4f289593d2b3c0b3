#include "runtime/engine_template.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpusched::runtime {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

using Values = absl::flat_hash_map<std::string, std::string>;

Values FullValues() {
  return {{"self", "/opt/gpusched/bin/gpusched"},
          {"host", "127.0.0.1"},
          {"model", "meta-llama/Llama-3.1-8B-Instruct"},
          {"port", "18001"},
          {"metrics_port", "18002"},
          {"gpu_memory_fraction", "0.45"},
          {"tensor_parallel", "2"},
          {"replica", "llama-0"},
          {"name", "llama"}};
}

struct ExpandCase {
  std::string engine;
  std::vector<std::string> argv;
  std::string readiness_path;
  GpuMemoryFlag gpu_memory;
};

TEST(EngineTemplateTest, EveryBuiltInExpandsWithFullValues) {
  const std::vector<ExpandCase> cases = {
      {"reference",
       {"/opt/gpusched/bin/gpusched", "engine", "--host", "127.0.0.1", "--port",
        "18001", "--model", "llama"},
       "/v2/health/ready",
       GpuMemoryFlag::kNone},
      {"vllm",
       {"vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--host",
        "127.0.0.1", "--port", "18001", "--gpu-memory-utilization", "0.45",
        "--tensor-parallel-size", "2", "--served-model-name", "llama"},
       "/health",
       GpuMemoryFlag::kFractionOfTotal},
      {"sglang",
       {"python3", "-m", "sglang.launch_server", "--model-path",
        "meta-llama/Llama-3.1-8B-Instruct", "--host", "127.0.0.1", "--port",
        "18001", "--mem-fraction-static", "0.45", "--tp", "2",
        "--served-model-name", "llama", "--enable-metrics"},
       "/health",
       GpuMemoryFlag::kStaticPoolFraction},
      {"llama-cpp",
       {"llama-server", "-m", "meta-llama/Llama-3.1-8B-Instruct", "--port",
        "18001", "--host", "127.0.0.1", "--n-gpu-layers", "999", "--metrics",
        "--alias", "llama"},
       "/health",
       GpuMemoryFlag::kNone},
      {"tgi",
       {"text-generation-launcher", "--model-id",
        "meta-llama/Llama-3.1-8B-Instruct", "--hostname", "127.0.0.1", "--port",
        "18001", "--num-shard", "2", "--cuda-memory-fraction", "0.45"},
       "/health",
       GpuMemoryFlag::kAllocatorFraction},
      {"triton",
       {"tritonserver", "--model-repository",
        "meta-llama/Llama-3.1-8B-Instruct", "--http-address", "127.0.0.1",
        "--http-port", "18001", "--allow-grpc", "false", "--metrics-port",
        "18002"},
       "/v2/health/ready",
       GpuMemoryFlag::kNone},
  };
  for (const ExpandCase& c : cases) {
    SCOPED_TRACE(c.engine);
    absl::StatusOr<EngineTemplate> t = FindTemplate(c.engine);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->name, c.engine);
    absl::StatusOr<std::vector<std::string>> argv =
        ExpandArgv(*t, FullValues());
    ASSERT_TRUE(argv.ok()) << argv.status();
    EXPECT_THAT(*argv, ElementsAreArray(c.argv));
    EXPECT_EQ(t->readiness.path, c.readiness_path);
    EXPECT_EQ(t->metrics_path, "/metrics");
    EXPECT_EQ(t->gpu_memory, c.gpu_memory);
    EXPECT_TRUE(ExpandEnv(*t, FullValues()).ok());
  }
}

TEST(EngineTemplateTest, NamesAreListedAndFindable) {
  EXPECT_THAT(TemplateNames(),
              ElementsAre("reference", "vllm", "sglang", "llama-cpp", "tgi",
                          "triton", "command"));
  for (const std::string& name : TemplateNames()) {
    EXPECT_TRUE(FindTemplate(name).ok()) << name;
  }
}

TEST(EngineTemplateTest, UnknownEngineListsNames) {
  absl::StatusOr<EngineTemplate> t = FindTemplate("vllm2");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(t.status().message(), HasSubstr("vllm2"));
  EXPECT_THAT(t.status().message(),
              HasSubstr("reference, vllm, sglang, llama-cpp, tgi, triton, "
                        "command"));
}

TEST(EngineTemplateTest, ExtraArgsAreAppendedVerbatim) {
  EngineTemplate t = *FindTemplate("vllm");
  t.extra_args = {"--override-generation-config", "{\"temperature\": 0.5}"};
  absl::StatusOr<std::vector<std::string>> argv = ExpandArgv(t, FullValues());
  ASSERT_TRUE(argv.ok()) << argv.status();
  ASSERT_GE(argv->size(), 2u);
  EXPECT_EQ((*argv)[argv->size() - 2], "--override-generation-config");
  EXPECT_EQ(argv->back(), "{\"temperature\": 0.5}");
}

TEST(EngineTemplateTest, EnvValuesAreExpanded) {
  EngineTemplate t = *FindTemplate("vllm");
  t.env["REPLICA_NAME"] = "{replica}";
  absl::StatusOr<Values> env = ExpandEnv(t, FullValues());
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_THAT(*env, UnorderedElementsAre(Pair("PYTHONUNBUFFERED", "1"),
                                         Pair("REPLICA_NAME", "llama-0")));
}

TEST(EngineTemplateTest, CommandNeedsArgv) {
  absl::StatusOr<std::vector<std::string>> bare =
      ExpandArgv(*FindTemplate("command"), FullValues());
  ASSERT_FALSE(bare.ok());
  EXPECT_EQ(bare.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bare.status().message(), HasSubstr("command"));

  absl::StatusOr<std::vector<std::string>> argv =
      ExpandArgv(CommandTemplate({"./my-server", "--listen=127.0.0.1:{port}"}),
                 FullValues());
  ASSERT_TRUE(argv.ok()) << argv.status();
  EXPECT_THAT(*argv, ElementsAre("./my-server", "--listen=127.0.0.1:18001"));
}

struct PlaceholderCase {
  std::string text;
  bool ok;
  std::string want;  // the expansion, or a substring of the error
};

TEST(EngineTemplateTest, PlaceholderTable) {
  const Values values = {{"port", "8000"}, {"model", "m"}};
  const std::vector<PlaceholderCase> cases = {
      {"", true, ""},
      {"plain", true, "plain"},
      {"{port}", true, "8000"},
      {"--port={port}", true, "--port=8000"},
      {"{model}:{port}", true, "m:8000"},
      {"{{port}}", true, "{port}"},
      {"{{{port}}}", true, "{8000}"},
      {"{{\"a\": 1}}", true, "{\"a\": 1}"},
      {"{prot}", false, "unknown placeholder {prot}"},
      {"{prot}", false, "known: model, port"},
      {"{}", false, "unknown placeholder {}"},
      {"{port", false, "unclosed '{'"},
      {"port}", false, "lone '}'"},
      {"{\"a\": 1}", false, "unknown placeholder"},
  };
  for (const PlaceholderCase& c : cases) {
    SCOPED_TRACE(c.text);
    absl::StatusOr<std::string> got = ExpandPlaceholders(c.text, values);
    if (c.ok) {
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(*got, c.want);
    } else {
      ASSERT_FALSE(got.ok());
      EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(got.status().message(), HasSubstr(c.want));
    }
  }
}

TEST(EngineTemplateTest, MissingValueInTemplateIsNamed) {
  Values values = FullValues();
  values.erase("tensor_parallel");
  absl::StatusOr<std::vector<std::string>> argv =
      ExpandArgv(*FindTemplate("vllm"), values);
  ASSERT_FALSE(argv.ok());
  EXPECT_THAT(argv.status().message(), HasSubstr("{tensor_parallel}"));
  EXPECT_THAT(argv.status().message(), HasSubstr("gpu_memory_fraction"));
}

struct GpuEnvCase {
  std::string label;
  std::vector<std::string> ids;
  std::optional<int> pct;
  std::optional<int64_t> mib;
  bool ok;
  Values want;        // when ok
  std::string error;  // substring when !ok
};

TEST(GpuEnvTest, Table) {
  const std::vector<GpuEnvCase> cases = {
      {"one gpu", {"0"}, {}, {}, true, {{"CUDA_VISIBLE_DEVICES", "0"}}, ""},
      {"two gpus",
       {"2", "3"},
       {},
       {},
       true,
       {{"CUDA_VISIBLE_DEVICES", "2,3"}},
       ""},
      {"cpu only", {}, {}, {}, true, {{"CUDA_VISIBLE_DEVICES", ""}}, ""},
      {"gpu uuid",
       {"GPU-5c1d2a3b-0000-1111-2222-333344445555"},
       {},
       {},
       true,
       {{"CUDA_VISIBLE_DEVICES", "GPU-5c1d2a3b-0000-1111-2222-333344445555"}},
       ""},
      {"mig slice",
       {"MIG-aaaa-bbbb"},
       {},
       {},
       true,
       {{"CUDA_VISIBLE_DEVICES", "MIG-aaaa-bbbb"}},
       ""},
      {"mps share",
       {"1"},
       30,
       20480,
       true,
       {{"CUDA_VISIBLE_DEVICES", "1"},
        {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "30"},
        {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=20480M"}},
       ""},
      {"mps on two gpus",
       {"0", "1"},
       {},
       1024,
       true,
       {{"CUDA_VISIBLE_DEVICES", "0,1"},
        {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=1024M,1=1024M"}},
       ""},
      {"two mig slices",
       {"MIG-a", "MIG-b"},
       {},
       {},
       false,
       {},
       "one MIG device per process"},
      {"empty id", {""}, {}, {}, false, {}, "bad GPU id"},
      {"comma in id", {"0,1"}, {}, {}, false, {}, "bad GPU id"},
      {"pct 0", {"0"}, 0, {}, false, {}, "outside 1..100"},
      {"pct 101", {"0"}, 101, {}, false, {}, "outside 1..100"},
      {"mem 0", {"0"}, {}, 0, false, {}, "not > 0"},
      {"mem without gpu", {}, {}, 512, false, {}, "at least one GPU"},
  };
  for (const GpuEnvCase& c : cases) {
    SCOPED_TRACE(c.label);
    absl::StatusOr<Values> env = GpuEnv(c.ids, c.pct, c.mib);
    if (c.ok) {
      ASSERT_TRUE(env.ok()) << env.status();
      EXPECT_EQ(*env, c.want);
    } else {
      ASSERT_FALSE(env.ok());
      EXPECT_EQ(env.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(env.status().message(), HasSubstr(c.error));
    }
  }
}

}  // namespace
}  // namespace gpusched::runtime
