// StreamResume: what a streamed OpenAI response (completions or chat
// completions) has sent so far, so that it can continue on another replica
// when its engine dies mid-stream (request migration, as Dynamo does):
// the client keeps one SSE stream with one id; the new replica gets the
// prompt plus the text already sent and max_tokens less the tokens sent.
//
// Relay() is the relay of every upstream chunk of such a stream: it splits
// the bytes into SSE events (an event may span chunks), records the text
// of each content event, and after a migration rewrites the continuation's
// events to the first attempt's `id` and `created`, drops its role-only
// preamble (chat) and counts the earlier attempts' tokens in its usage.
// Before any migration, events pass through byte for byte.
//
// Not thread-safe: one request's upstream callbacks run one at a time.
#ifndef GPUSCHED_GATEWAY_STREAM_RESUME_H_
#define GPUSCHED_GATEWAY_STREAM_RESUME_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "nlohmann/json.hpp"

namespace gpusched::gateway {

// Bound on the text a stream may have sent and still migrate (larger: the
// stream ends with an error event instead).
inline constexpr size_t kMaxResumeText = 1 << 20;

class StreamResume {
 public:
  explicit StreamResume(bool chat) : chat_(chat) {}

  // The bytes to send to the client for upstream bytes `data`.
  std::string Relay(std::string_view data);
  // The request body that continues the generation, from the original
  // body. FailedPrecondition (with why) when it cannot: several choices
  // (n > 1), a prompt that is not text, nothing left to generate, too much
  // text sent.
  absl::StatusOr<std::string> ContinuationBody(
      const std::string& original) const;
  // A continuation attempt starts (after ContinuationBody succeeded).
  void BeginContinuation();

  int migrations() const { return migrations_; }
  // Content events sent to the client (about one token each).
  int64_t tokens_sent() const { return tokens_; }
  bool saw_done() const { return done_; }
  const std::string& id() const { return id_; }
  // When the client got its first chunk (steady clock; 0: not yet), kept
  // across attempts for the TTFT.
  Micros first_byte() const { return first_byte_; }
  void set_first_byte(Micros t) { first_byte_ = t; }

  // The event that ends a stream that cannot go on, in the OpenAI shape:
  // data: {"error":{"message":...,"type":"server_error","param":null,
  // "code":"replica_failed"}}, followed by the blank line.
  static std::string ErrorEvent(std::string_view message);

 private:
  // One complete event (without its blank line): what to send ("" drops
  // it).
  std::string Event(std::string_view event);

  bool chat_;
  std::string buffer_;  // an incomplete event
  std::string id_;
  nlohmann::json created_;
  std::string text_;
  int64_t tokens_ = 0;
  int64_t tokens_before_ = 0;  // sent by attempts before this one
  int migrations_ = 0;
  bool continuing_ = false;
  bool done_ = false;
  Micros first_byte_ = 0;
};

}  // namespace gpusched::gateway

#endif  // GPUSCHED_GATEWAY_STREAM_RESUME_H_
