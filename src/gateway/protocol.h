// The protocol pieces the gateway's two halves share (gateway.cc: the proxy;
// gateway_http.cc: the routes): the OpenAI request scanner, the usage
// counts of an OpenAI answer, JSON responses, the steady clock. Outside input
// reaches ScanOpenAi and UsageTokens as it came off the wire: both are
// bounded by the body's size, never throw and build no document.
// Thread-safety: stateless functions.
#ifndef GPUSCHED_GATEWAY_PROTOCOL_H_
#define GPUSCHED_GATEWAY_PROTOCOL_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/clock.h"
#include "net/http_server.h"
#include "nlohmann/json.hpp"
#include "serving/admission.h"

namespace gpusched::gateway {

// A request is tried on at most this many replicas (retries before the
// first byte).
inline constexpr int kMaxAttempts = 3;

// The steady clock, in microseconds (the gateway is a driver: it reads it).
Micros NowMicros();

// A count in an OpenAI response's usage (`key` is "\"completion_tokens\":"
// or "\"prompt_tokens\":", spaces after it allowed), or -1 (also for a
// count beyond int32).
int32_t UsageTokens(std::string_view body, std::string_view key);

// The top-level fields of an OpenAI request the gateway needs, read with
// nlohmann's SAX interface: the body is checked to be JSON but no document
// is built.
struct OpenAiFields {
  bool object = false;
  std::optional<std::string> model;
  bool model_wrong_type = false;
  std::optional<bool> stream;
  bool stream_wrong_type = false;
  // The end user (OpenAI `user`), when a string: a sticky key for routes.
  std::optional<std::string> user;
  // max_tokens, max_completion_tokens: value, or -1 when of a wrong type.
  std::optional<int64_t> max_tokens[2];
  // The prompt's text for prefix routing: every string and number under
  // `prompt`, `messages` (roles and contents) and `input`, in order, each
  // followed by a separator byte, cut at kMaxPromptText bytes.
  std::string prompt;
};
inline constexpr size_t kMaxPromptText = 64 << 10;

// Scans `body` into `out`; false when it is not one JSON value.
bool ScanOpenAi(const std::string& body, OpenAiFields* out);

net::HttpResponse JsonResponse(boost::beast::http::status status,
                               const nlohmann::json& body);

// Rejections that are limits (429 with Retry-After), not failures.
bool IsLimit(serving::RejectReason reason);

}  // namespace gpusched::gateway

#endif  // GPUSCHED_GATEWAY_PROTOCOL_H_
