#include "gateway/kserve.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpusched::gateway {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

// The Open Inference Protocol's inference request example, with input1's
// data filled to its shape (the published example's BOOL tensor of shape
// [3] carries one element, which Triton rejects too; see the next test).
constexpr char kSpecExample[] = R"({
  "id" : "42",
  "inputs" : [
    {"name" : "input0", "shape" : [ 2, 2 ], "datatype" : "UINT32",
     "data" : [ 1, 2, 3, 4 ]},
    {"name" : "input1", "shape" : [ 3 ], "datatype" : "BOOL",
     "data" : [ true, false, true ]}
  ],
  "outputs" : [ {"name" : "output0"} ]
})";

TEST(KServeTest, TheProtocolsExampleIsValid) {
  EXPECT_TRUE(ValidateInferRequest(json::parse(kSpecExample)).ok());
}

TEST(KServeTest, NestedRowMajorDataCounts) {
  // The protocol allows the data flat or nested as the shape.
  json body = json::parse(kSpecExample);
  body["inputs"][0]["data"] = json::parse("[[1, 2], [3, 4]]");
  EXPECT_TRUE(ValidateInferRequest(body).ok());
}

struct Bad {
  std::string name;
  std::string body;
  std::string message;  // a part of the error
};

class KServeBadTest : public ::testing::TestWithParam<Bad> {};

TEST_P(KServeBadTest, NamesTheField) {
  const json body = json::parse(GetParam().body);
  const absl::Status st = ValidateInferRequest(body);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr(GetParam().message));
}

std::string One(const std::string& tensor) {
  return R"({"inputs": [)" + tensor + "]}";
}

INSTANTIATE_TEST_SUITE_P(
    Requests, KServeBadTest,
    ::testing::ValuesIn(std::vector<Bad>{
        {"published_example_shape_mismatch",
         R"({"id": "42", "inputs": [{"name": "input1", "shape": [3],
             "datatype": "BOOL", "data": [true]}]})",
         "inputs[0] (input1): shape [3] holds 3 elements but data has 1"},
        {"not_an_object", "[1, 2]", "must be a JSON object"},
        {"no_inputs", R"({"id": "1"})", "inputs must be a non-empty array"},
        {"empty_inputs", R"({"inputs": []})", "non-empty array"},
        {"id_not_string", R"({"id": 42, "inputs": []})", "id must be a string"},
        {"request_parameters_not_object", R"({"parameters": [], "inputs": []})",
         "parameters must be an object"},
        {"unnamed", One(R"({"shape": [1], "datatype": "FP32", "data": [1]})"),
         "inputs[0]: name must be a non-empty string"},
        {"duplicate_name",
         R"({"inputs": [{"name": "a", "shape": [1], "datatype": "FP32", "data": [1]},
                        {"name": "a", "shape": [1], "datatype": "FP32", "data": [1]}]})",
         "inputs[1] (a): the name is used by another input"},
        {"unknown_datatype",
         One(R"({"name": "a", "shape": [1], "datatype": "FLOAT", "data": [1]})"),
         "datatype must be one of BOOL, UINT8"},
        {"missing_shape",
         One(R"({"name": "a", "datatype": "FP32", "data": [1]})"),
         "shape must be an array"},
        {"negative_dim",
         One(R"({"name": "a", "shape": [-1, 2], "datatype": "FP32", "data": [1, 2]})"),
         "shape[0] must be an integer >= 0"},
        {"too_many_elements",
         One(R"({"name": "a", "shape": [2], "datatype": "FP32", "data": [1, 2, 3]})"),
         "holds 2 elements but data has more"},
        {"too_few_nested",
         One(R"({"name": "a", "shape": [2, 2], "datatype": "INT32", "data": [[1, 2], [3]]})"),
         "holds 4 elements but data has 3"},
        {"missing_data",
         One(R"({"name": "a", "shape": [1], "datatype": "FP32"})"),
         "data is missing"},
        {"wrong_element_type",
         One(R"({"name": "a", "shape": [2], "datatype": "INT32", "data": [1, "x"]})"),
         "data element 1 (\"x\") is not a valid INT32 value"},
        {"uint8_out_of_range",
         One(R"({"name": "a", "shape": [1], "datatype": "UINT8", "data": [256]})"),
         "is not a valid UINT8 value"},
        {"negative_unsigned",
         One(R"({"name": "a", "shape": [1], "datatype": "UINT64", "data": [-1]})"),
         "is not a valid UINT64 value"},
        {"int8_out_of_range",
         One(R"({"name": "a", "shape": [1], "datatype": "INT8", "data": [-129]})"),
         "is not a valid INT8 value"},
        {"float_for_int",
         One(R"({"name": "a", "shape": [1], "datatype": "INT64", "data": [1.5]})"),
         "is not a valid INT64 value"},
        {"bytes_need_strings",
         One(R"({"name": "a", "shape": [1], "datatype": "BYTES", "data": [7]})"),
         "is not a valid BYTES value"},
        {"bool_needs_bools",
         One(R"({"name": "a", "shape": [1], "datatype": "BOOL", "data": [1]})"),
         "is not a valid BOOL value"},
        {"binary_extension",
         One(R"({"name": "a", "shape": [1], "datatype": "FP32",
                 "parameters": {"binary_data_size": 4}})"),
         "binary tensor data extension is not supported"},
        {"input_parameters_not_object",
         One(R"({"name": "a", "shape": [1], "datatype": "FP32", "data": [1],
                 "parameters": 3})"),
         "inputs[0] (a): parameters must be an object"},
        {"rank_bound",
         One(R"({"name": "a", "shape": [1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1],
                 "datatype": "FP32", "data": [1]})"),
         "at most 16"},
        {"element_bound",
         One(R"({"name": "a", "shape": [65536, 65536, 2], "datatype": "FP32", "data": []})"),
         "more than 4294967296 elements"},
        {"outputs_not_array",
         R"({"inputs": [{"name": "a", "shape": [1], "datatype": "FP32", "data": [1]}],
             "outputs": {}})",
         "outputs must be an array"},
        {"output_twice",
         R"({"inputs": [{"name": "a", "shape": [1], "datatype": "FP32", "data": [1]}],
             "outputs": [{"name": "o"}, {"name": "o"}]})",
         "outputs[1]: output 'o' is requested twice"},
        {"output_unnamed",
         R"({"inputs": [{"name": "a", "shape": [1], "datatype": "FP32", "data": [1]}],
             "outputs": [{}]})",
         "outputs[0]: must be an object with a non-empty name"},
    }),
    [](const auto& info) { return info.param.name; });

TEST(KServeTest, DeepNestingIsCountedWithoutRecursion) {
  // 100,000 levels of nesting around one element: counted iteratively.
  std::string data(100000, '[');
  data += "1";
  data += std::string(100000, ']');
  const json body = json::parse(
      One(R"({"name": "a", "shape": [1], "datatype": "FP32", "data": )" + data +
          "}"));
  EXPECT_TRUE(ValidateInferRequest(body).ok());
}

TEST(KServeTest, ServerMetadataHasTheSpecsFields) {
  const json m = ServerMetadata("1.2.3");
  EXPECT_EQ(m["name"], "gpusched");
  EXPECT_EQ(m["version"], "1.2.3");
  EXPECT_TRUE(m["extensions"].is_array());
}

}  // namespace
}  // namespace gpusched::gateway
