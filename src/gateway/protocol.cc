#include "gateway/protocol.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "runtime/real_clock.h"

namespace gpusched::gateway {

namespace http = boost::beast::http;
using nlohmann::json;
using serving::RejectReason;

namespace {

class OpenAiScan : public json::json_sax_t {
 public:
  explicit OpenAiScan(OpenAiFields* out) : out_(out) {}
  bool null() override { return Scalar(Kind::kNull, 0, nullptr); }
  bool boolean(bool v) override { return Scalar(Kind::kBool, v, nullptr); }
  bool number_integer(number_integer_t v) override {
    return Scalar(Kind::kInt, v, nullptr);
  }
  bool number_unsigned(number_unsigned_t v) override {
    return Scalar(Kind::kInt,
                  static_cast<int64_t>(std::min<number_unsigned_t>(
                      v, std::numeric_limits<int64_t>::max())),
                  nullptr);
  }
  bool number_float(number_float_t, const string_t&) override {
    return Scalar(Kind::kOther, 0, nullptr);
  }
  bool string(string_t& v) override { return Scalar(Kind::kString, 0, &v); }
  bool binary(binary_t&) override { return Scalar(Kind::kOther, 0, nullptr); }
  bool start_object(std::size_t) override {
    if (depth_ == 0) out_->object = true;
    if (depth_ == 1) {
      capture_ = PromptKey();
      Field(Kind::kOther, 0, nullptr);
    }
    ++depth_;
    return true;
  }
  bool end_object() override {
    if (--depth_ == 1) capture_ = false;
    return true;
  }
  bool start_array(std::size_t) override {
    if (depth_ == 1) {
      capture_ = PromptKey();
      Field(Kind::kOther, 0, nullptr);
    }
    ++depth_;
    return true;
  }
  bool end_array() override {
    if (--depth_ == 1) capture_ = false;
    return true;
  }
  bool key(string_t& k) override {
    if (depth_ == 1) key_ = std::move(k);
    return true;
  }
  bool parse_error(std::size_t, const std::string&,
                   const nlohmann::detail::exception&) override {
    out_->object = false;
    return false;
  }

 private:
  enum class Kind { kNull, kBool, kInt, kString, kOther };
  bool Scalar(Kind kind, int64_t v, string_t* s) {
    if (depth_ == 1) {
      if (kind == Kind::kString && PromptKey()) Capture(*s);
      Field(kind, v, s);
    } else if (capture_) {
      if (kind == Kind::kString) {
        Capture(*s);
      } else if (kind == Kind::kInt) {
        Capture(std::to_string(v));  // a prompt of token ids
      }
    }
    return true;
  }
  bool PromptKey() const {
    return key_ == "prompt" || key_ == "messages" || key_ == "input";
  }
  void Capture(const std::string& text) {
    std::string& p = out_->prompt;
    if (p.size() >= kMaxPromptText) return;
    p.append(text, 0, std::min(text.size(), kMaxPromptText - p.size()));
    if (p.size() < kMaxPromptText) p.push_back('\x1f');
  }
  void Field(Kind kind, int64_t v, string_t* s) {
    if (key_ == "model") {
      if (kind == Kind::kString) {
        out_->model = std::move(*s);
      } else {
        out_->model_wrong_type = true;
      }
    } else if (key_ == "stream") {
      if (kind == Kind::kBool) {
        out_->stream = v != 0;
      } else if (kind != Kind::kNull) {
        out_->stream_wrong_type = true;
      }
    } else if (key_ == "user") {
      if (kind == Kind::kString) out_->user = std::move(*s);
    } else if (key_ == "max_tokens" || key_ == "max_completion_tokens") {
      if (kind != Kind::kNull) {
        out_->max_tokens[key_ == "max_tokens" ? 0 : 1] =
            kind == Kind::kInt && v >= 1 ? v : -1;
      }
    }
    key_.clear();
  }
  OpenAiFields* out_;
  int depth_ = 0;
  bool capture_ = false;  // inside prompt, messages or input
  std::string key_;
};

}  // namespace

Micros NowMicros() { return runtime::SteadyClock::Get().Now(); }

int32_t UsageTokens(std::string_view body, std::string_view key) {
  const size_t at = body.rfind(key);
  if (at == std::string::npos) return -1;
  size_t p = at + key.size();
  while (p < body.size() && (body[p] == ' ' || body[p] == '\t')) ++p;
  int64_t n = 0;
  bool any = false;
  while (p < body.size() && body[p] >= '0' && body[p] <= '9') {
    n = n * 10 + (body[p++] - '0');
    // An engine's count beyond int32 is not a count (found by
    // fuzz_openai_body: it overflowed).
    if (n > std::numeric_limits<int32_t>::max()) return -1;
    any = true;
  }
  return any ? static_cast<int32_t>(n) : -1;
}

net::HttpResponse JsonResponse(http::status status, const json& body) {
  net::HttpResponse res{status, 11};
  res.set(http::field::content_type, "application/json");
  res.body() = body.dump();
  return res;
}

bool IsLimit(RejectReason reason) {
  return reason == RejectReason::kRateLimitedRequests ||
         reason == RejectReason::kRateLimitedTokens ||
         reason == RejectReason::kModelQueueFull ||
         reason == RejectReason::kTenantQueueFull ||
         reason == RejectReason::kTenantConcurrency;
}

bool ScanOpenAi(const std::string& body, OpenAiFields* out) {
  OpenAiScan scan(out);
  return json::sax_parse(body, &scan);
}

}  // namespace gpusched::gateway
