// KServe v2 inference request validation: the body as the gateway reads it
// (nlohmann's parser without exceptions), then ValidateInferRequest.
#include <cstdint>

#include "fuzz/fuzz_input.h"
#include "gateway/kserve.h"
#include "nlohmann/json.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto body = nlohmann::json::parse(data, data + size, nullptr, false);
  const absl::Status st = gpusched::gateway::ValidateInferRequest(body);
  gpusched::fuzz::Require(st.ok() || !st.message().empty(),
                          "a refusal without a message");
  if (st.ok()) {
    gpusched::fuzz::Require(body.is_object() && body.contains("inputs"),
                            "accepted a body without inputs");
  }
  return 0;
}
