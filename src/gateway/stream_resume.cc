#include "gateway/stream_resume.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace gpusched::gateway {

using json = nlohmann::json;

namespace {

// The text of a content event's first choice; "" when it has none.
std::string ChoiceText(const json& j, bool chat) {
  if (!j.contains("choices") || !j["choices"].is_array() ||
      j["choices"].empty()) {
    return "";
  }
  const json& c = j["choices"][0];
  const json* t = nullptr;
  if (chat) {
    if (c.contains("delta") && c["delta"].is_object() &&
        c["delta"].contains("content")) {
      t = &c["delta"]["content"];
    }
  } else if (c.contains("text")) {
    t = &c["text"];
  }
  return t != nullptr && t->is_string() ? t->get<std::string>() : "";
}

}  // namespace

std::string StreamResume::Relay(std::string_view data) {
  buffer_.append(data);
  std::string out;
  size_t start = 0;
  for (;;) {
    const size_t end = buffer_.find("\n\n", start);
    if (end == std::string::npos) break;
    const std::string_view event(buffer_.data() + start, end - start);
    std::string send = Event(event);
    if (!send.empty()) {
      out += send;
      out += "\n\n";
    }
    start = end + 2;
  }
  buffer_.erase(0, start);
  return out;
}

std::string StreamResume::Event(std::string_view event) {
  constexpr std::string_view kData = "data: ";
  if (event.substr(0, kData.size()) != kData) return std::string(event);
  const std::string_view payload = event.substr(kData.size());
  if (payload == "[DONE]") {
    done_ = true;
    return std::string(event);
  }
  json j = json::parse(payload, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::string(event);
  if (id_.empty() && j.contains("id") && j["id"].is_string()) {
    id_ = j["id"].get<std::string>();
    created_ = j.value("created", json());
  }
  const std::string text = ChoiceText(j, chat_);
  if (!text.empty()) {
    if (text_.size() < kMaxResumeText) text_ += text;
    ++tokens_;
  }
  if (!continuing_) return std::string(event);
  // A continuation: one stream, one id; its preamble (a chat role delta
  // with no content) was sent by the first attempt already.
  if (chat_ && text.empty() && !j.contains("usage") && j.contains("choices") &&
      j["choices"].is_array() && !j["choices"].empty() &&
      j["choices"][0].value("finish_reason", json()).is_null()) {
    return "";
  }
  j["id"] = id_;
  if (!created_.is_null()) j["created"] = created_;
  if (j.contains("usage") && j["usage"].is_object()) {
    json& u = j["usage"];
    const int64_t completion = u.value("completion_tokens", int64_t{0});
    const int64_t prompt = u.value("prompt_tokens", int64_t{0});
    u["completion_tokens"] = completion + tokens_before_;
    u["prompt_tokens"] = std::max<int64_t>(0, prompt - tokens_before_);
    u["total_tokens"] = u["completion_tokens"].get<int64_t>() +
                        u["prompt_tokens"].get<int64_t>();
  }
  return "data: " + j.dump();
}

absl::StatusOr<std::string> StreamResume::ContinuationBody(
    const std::string& original) const {
  if (text_.size() >= kMaxResumeText) {
    return absl::FailedPreconditionError(
        absl::StrCat("more than ", kMaxResumeText, " bytes sent"));
  }
  json body = json::parse(original, nullptr, /*allow_exceptions=*/false);
  if (!body.is_object()) {
    return absl::FailedPreconditionError("the request body is not an object");
  }
  if (body.value("n", 1) != 1) {
    return absl::FailedPreconditionError("several choices (n > 1)");
  }
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    if (!body.contains(key) || !body[key].is_number_integer()) continue;
    const int64_t left = body[key].get<int64_t>() - tokens_;
    if (left <= 0) {
      return absl::FailedPreconditionError("no tokens left to generate");
    }
    body[key] = left;
  }
  if (chat_) {
    if (!body.contains("messages") || !body["messages"].is_array()) {
      return absl::FailedPreconditionError("no messages");
    }
    // The partial answer as the final assistant message, continued rather
    // than answered (vLLM's and SGLang's continue_final_message).
    body["messages"].push_back({{"role", "assistant"}, {"content", text_}});
    body["continue_final_message"] = true;
    body["add_generation_prompt"] = false;
  } else {
    json& p = body["prompt"];
    if (p.is_array() && p.size() == 1 && p[0].is_string()) p = p[0];
    if (!p.is_string()) {
      return absl::FailedPreconditionError("the prompt is not one text");
    }
    p = p.get<std::string>() + text_;
  }
  return body.dump();
}

void StreamResume::BeginContinuation() {
  ++migrations_;
  continuing_ = true;
  tokens_before_ = tokens_;
  buffer_.clear();  // a partial event of the dead attempt is lost
}

std::string StreamResume::ErrorEvent(std::string_view message) {
  const json e = {{"error",
                   {{"message", message},
                    {"type", "server_error"},
                    {"param", nullptr},
                    {"code", "replica_failed"}}}};
  return absl::StrCat("data: ", e.dump(), "\n\n");
}

}  // namespace gpusched::gateway
