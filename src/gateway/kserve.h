// KServe v2 (Open Inference Protocol, HTTP/JSON) request checks and the
// server metadata the gateway answers itself. An inference request is
// checked before it is queued, so a malformed tensor costs no replica time
// and the client learns which field is wrong:
//   * the body is an object; `id` a string; `parameters` objects wherever
//     they appear;
//   * `inputs` a non-empty array (at most kMaxTensors) of tensors, each with
//     a non-empty `name` (unique), a `datatype` of the protocol's (BOOL,
//     UINT8..UINT64, INT8..INT64, FP16, FP32, FP64, BYTES), a `shape` of at
//     most kMaxRank non-negative dimensions, and `data` (flat or nested,
//     row-major) holding exactly the shape's element count, each element of
//     the datatype's JSON type and range;
//   * `outputs`, when present, an array of objects with unique names.
// The binary tensor data extension is not supported (the data must be JSON)
// and is refused as such.
// Stateless; thread-safe. Input is outside input: nothing here recurses on
// it or throws.
#ifndef GPUSCHED_GATEWAY_KSERVE_H_
#define GPUSCHED_GATEWAY_KSERVE_H_

#include <string>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"

namespace gpusched::gateway {

inline constexpr int kMaxTensors = 256;  // inputs, and outputs
inline constexpr int kMaxRank = 16;
inline constexpr int64_t kMaxElements = int64_t{1} << 32;  // per tensor

// OK, or InvalidArgument saying which field is wrong and how.
absl::Status ValidateInferRequest(const nlohmann::json& body);

// GET /v2: {"name", "version", "extensions"}.
nlohmann::json ServerMetadata(const std::string& version);

}  // namespace gpusched::gateway

#endif  // GPUSCHED_GATEWAY_KSERVE_H_
