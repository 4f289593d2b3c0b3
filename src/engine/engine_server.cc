#include "engine/engine_server.h"

#include <bit>
#include <condition_variable>
#include <deque>
#include <limits>
#include <mutex>
#include <optional>
#include <thread>
#include <type_traits>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"

namespace gpusched::engine {

using net::HttpRequest;
using net::HttpResponse;
using net::Responder;
using nlohmann::json;

struct EngineServer::State {
  explicit State(EngineOptions o) : core(std::move(o)) {}
  EngineCore core;  // owned by the engine thread after start
  std::mutex mu;
  std::condition_variable cv;
  std::deque<SequenceRequest> inbox;  // guarded by mu
  bool stopping = false;              // guarded by mu
  EngineStats published;              // guarded by mu
  std::thread loop;
  uint64_t next_completion = 1;  // guarded by mu
  // Tokens and ends of the current iteration (loop thread only): sent once
  // it is over, so in profile mode a token leaves when its modeled
  // iteration ends, as on the GPU.
  std::vector<std::function<void()>> deferred;

  void Flush() {
    for (auto& f : deferred) f();
    deferred.clear();
  }

  void Run() {
    for (;;) {
      std::deque<SequenceRequest> incoming;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock,
                [&] { return stopping || !inbox.empty() || core.has_work(); });
        if (stopping) {
          // Whatever the drain did not finish is answered as aborted.
          for (SequenceRequest& r : inbox) {
            if (r.on_finish) r.on_finish(FinishReason::kCancelled, 0);
          }
          inbox.clear();
          core.CancelAll();
          Flush();
          return;
        }
        incoming.swap(inbox);
      }
      for (SequenceRequest& r : incoming) {
        auto on_finish = r.on_finish;
        if (auto tok = std::move(r.on_token)) {
          r.on_token = [this, tok](int32_t t) {
            deferred.push_back([tok, t] { tok(t); });
          };
        }
        if (on_finish) {
          r.on_finish = [this, on_finish](FinishReason why, int64_t cached) {
            deferred.push_back(
                [on_finish, why, cached] { on_finish(why, cached); });
          };
        }
        auto id = core.Add(std::move(r));
        // Validated before queuing; a failure here still gets an answer.
        if (!id.ok() && on_finish) on_finish(FinishReason::kCancelled, 0);
      }
      const auto start = std::chrono::steady_clock::now();
      const StepResult step = core.Step();
      {
        std::lock_guard<std::mutex> lock(mu);
        published = core.stats();
      }
      if (step.seconds > 0) {
        // Profile mode: the iteration takes as long as on the profiled GPU.
        std::this_thread::sleep_until(
            start + std::chrono::duration_cast<std::chrono::nanoseconds>(
                        std::chrono::duration<double>(step.seconds)));
      }
      Flush();
    }
  }
};

namespace {

net::HttpResponse Json(const json& body,
                       http::status status = http::status::ok) {
  net::HttpResponse res{status, 11};
  res.set(http::field::content_type, "application/json");
  res.body() = body.dump();
  return res;
}

void Error(const std::shared_ptr<net::Responder>& r, http::status status,
           const std::string& message, const std::string& type) {
  r->Send(net::JsonError(status, message, type));
}

int64_t NowSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// j[key] when present with T's JSON type, `fallback` when absent or null,
// nullopt when of another type (nlohmann's value() would throw).
template <typename T>
std::optional<T> Field(const json& j, const char* key, T fallback) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if constexpr (std::is_same_v<T, bool>) {
    if (!it->is_boolean()) return std::nullopt;
  } else {
    if (!it->is_string()) return std::nullopt;
  }
  return it->get<T>();
}

// The prompt of a completions or chat request.
bool PromptOf(const json& body, bool chat, std::string* prompt,
              std::string* error) {
  if (chat) {
    const auto it = body.find("messages");
    if (it == body.end() || !it->is_array() || it->empty()) {
      *error = "'messages' must be a non-empty array";
      return false;
    }
    for (const json& m : *it) {
      if (!m.is_object() || !m.contains("role") || !m["role"].is_string() ||
          !m.contains("content") || !m["content"].is_string()) {
        *error = "each message needs a 'role' and a string 'content'";
        return false;
      }
      absl::StrAppend(prompt, m["role"].get<std::string>(), ": ",
                      m["content"].get<std::string>(), "\n");
    }
    return true;
  }
  const auto it = body.find("prompt");
  if (it == body.end() || !(it->is_string() || it->is_array())) {
    *error = "'prompt' must be a string";
    return false;
  }
  if (it->is_string()) {
    *prompt = it->get<std::string>();
  } else {
    for (const json& p : *it) {
      if (!p.is_string()) {
        *error = "'prompt' must be a string or an array of strings";
        return false;
      }
      absl::StrAppend(prompt, p.get<std::string>(), "\n");
    }
  }
  return true;
}

void HandleGenerate(EngineServer::State& st, net::HttpRequest& req,
                    std::shared_ptr<net::Responder> r, bool chat) {
  json body = json::parse(req.body(), nullptr, false);
  if (body.is_discarded() || !body.is_object()) {
    Error(r, http::status::bad_request, "the request body is not valid JSON",
          "invalid_request_error");
    return;
  }
  const std::optional<std::string> model_field =
      Field<std::string>(body, "model", st.core.options().model);
  const std::optional<bool> stream_field = Field<bool>(body, "stream", false);
  if (!model_field || !stream_field) {
    Error(r, http::status::bad_request,
          "'model' must be a string and 'stream' true or false",
          "invalid_request_error");
    return;
  }
  const std::string model = *model_field;
  if (model != st.core.options().model) {
    Error(r, http::status::not_found,
          absl::StrCat("model '", model,
                       "' is not served here (this engine "
                       "serves '",
                       st.core.options().model, "')"),
          "not_found_error");
    return;
  }
  std::string prompt, error;
  if (!PromptOf(body, chat, &prompt, &error)) {
    Error(r, http::status::bad_request, error, "invalid_request_error");
    return;
  }
  const json max_tokens_j =
      body.value(chat ? "max_completion_tokens" : "max_tokens",
                 body.value("max_tokens", json(16)));
  if (!max_tokens_j.is_number_integer() || max_tokens_j.get<int64_t>() < 1) {
    Error(r, http::status::bad_request,
          "'max_tokens' must be a positive integer", "invalid_request_error");
    return;
  }
  const bool stream = *stream_field;
  const bool include_usage =
      body.contains("stream_options") && body["stream_options"].is_object() &&
      Field<bool>(body["stream_options"], "include_usage", false)
          .value_or(false);
  SequenceRequest seq;
  seq.prompt = st.core.Tokenize(prompt);
  if (seq.prompt.empty()) seq.prompt.push_back(0);
  seq.max_tokens = static_cast<int>(std::min<int64_t>(
      max_tokens_j.get<int64_t>(), st.core.options().max_model_len));
  {
    // Reject what can never fit now, with the reason, not later.
    const int64_t total =
        static_cast<int64_t>(seq.prompt.size()) + seq.max_tokens;
    if (total > st.core.options().max_model_len) {
      Error(
          r, http::status::bad_request,
          absl::StrCat("prompt (", seq.prompt.size(), " tokens) + max_tokens (",
                       seq.max_tokens, ") exceeds the model's context of ",
                       st.core.options().max_model_len, " tokens"),
          "invalid_request_error");
      return;
    }
  }
  uint64_t n;
  {
    std::lock_guard<std::mutex> lock(st.mu);
    n = st.next_completion++;
  }
  const std::string id = absl::StrCat(chat ? "chatcmpl-" : "cmpl-", n);
  const std::string object = chat ? "chat.completion" : "text_completion";
  const int64_t created = NowSeconds();
  const int64_t prompt_tokens = static_cast<int64_t>(seq.prompt.size());
  auto text = std::make_shared<std::string>();
  auto count = std::make_shared<int64_t>(0);
  const EngineCore* core = &st.core;
  auto usage = [prompt_tokens, count] {
    return json{{"prompt_tokens", prompt_tokens},
                {"completion_tokens", *count},
                {"total_tokens", prompt_tokens + *count}};
  };
  auto chunk = [=](const json& choice) {
    json c = {{"id", id},
              {"object", chat ? "chat.completion.chunk" : "text_completion"},
              {"created", created},
              {"model", model},
              {"choices", json::array({choice})}};
    return "data: " + c.dump() + "\n\n";
  };
  if (stream) {
    net::HttpResponse head{http::status::ok, 11};
    head.set(http::field::content_type, "text/event-stream");
    head.set(http::field::cache_control, "no-cache");
    r->StartStream(std::move(head));
    if (chat) {
      r->SendChunk(chunk({{"index", 0},
                          {"delta", {{"role", "assistant"}, {"content", ""}}},
                          {"finish_reason", nullptr}}));
    }
  }
  seq.on_token = [=](int32_t token) {
    const std::string piece = core->Detokenize(token);
    ++*count;
    if (!stream) {
      *text += piece;
      return;
    }
    json choice = {{"index", 0}, {"finish_reason", nullptr}};
    if (chat) {
      choice["delta"] = {{"content", piece}};
    } else {
      choice["text"] = piece;
      choice["logprobs"] = nullptr;
    }
    r->SendChunk(chunk(choice));
  };
  seq.on_finish = [=](FinishReason reason, int64_t cached) {
    const char* why =
        reason == FinishReason::kCancelled ? "abort" : FinishReasonName(reason);
    if (stream) {
      json choice = {{"index", 0}, {"finish_reason", why}};
      if (chat) {
        choice["delta"] = json::object();
      } else {
        choice["text"] = "";
        choice["logprobs"] = nullptr;
      }
      r->SendChunk(chunk(choice));
      if (include_usage) {
        json u = {
            {"id", id},
            {"object", chat ? "chat.completion.chunk" : "text_completion"},
            {"created", created},
            {"model", model},
            {"choices", json::array()},
            {"usage", usage()}};
        r->SendChunk("data: " + u.dump() + "\n\n");
      }
      r->SendChunk("data: [DONE]\n\n");
      r->EndStream();
      return;
    }
    // OpenAI's schema: `logprobs` and the message's `refusal` are required
    // and nullable (none are computed here).
    json choice = {{"index", 0}, {"finish_reason", why}, {"logprobs", nullptr}};
    if (chat) {
      choice["message"] = {
          {"role", "assistant"}, {"content", *text}, {"refusal", nullptr}};
    } else {
      choice["text"] = *text;
    }
    json u = usage();
    u["prompt_tokens_details"] = {{"cached_tokens", cached}};
    r->Send(Json({{"id", id},
                  {"object", object},
                  {"created", created},
                  {"model", model},
                  {"choices", json::array({choice})},
                  {"usage", u}}));
  };
  {
    std::lock_guard<std::mutex> lock(st.mu);
    st.inbox.push_back(std::move(seq));
  }
  st.cv.notify_one();
}

// Inputs of /v1/embeddings or a KServe v2 BYTES tensor.
bool TextsOf(const json& input, std::vector<std::string>* texts) {
  if (input.is_string()) {
    texts->push_back(input.get<std::string>());
    return true;
  }
  if (!input.is_array() || input.empty()) return false;
  for (const json& t : input) {
    if (!t.is_string()) return false;
    texts->push_back(t.get<std::string>());
  }
  return true;
}

// The vector's float32 values, little-endian, in base64.
std::string Base64Floats(const std::vector<float>& values) {
  static_assert(std::numeric_limits<float>::is_iec559 && sizeof(float) == 4);
  std::string bytes;
  bytes.reserve(values.size() * 4);
  for (float v : values) {
    const uint32_t bits = std::bit_cast<uint32_t>(v);
    for (int shift = 0; shift < 32; shift += 8) {
      bytes.push_back(static_cast<char>((bits >> shift) & 0xff));
    }
  }
  return absl::Base64Escape(bytes);
}

void HandleEmbeddings(EngineServer::State& st, net::HttpRequest& req,
                      const std::shared_ptr<net::Responder>& r) {
  json body = json::parse(req.body(), nullptr, false);
  std::vector<std::string> texts;
  if (body.is_discarded() || !body.is_object() || !body.contains("input") ||
      !TextsOf(body["input"], &texts)) {
    Error(r, http::status::bad_request,
          "'input' must be a string or a non-empty array of strings",
          "invalid_request_error");
    return;
  }
  // OpenAI's clients ask for base64 (little-endian float32) by default and
  // decode it themselves.
  const std::optional<std::string> format =
      Field<std::string>(body, "encoding_format", "float");
  if (!format || (*format != "float" && *format != "base64")) {
    Error(r, http::status::bad_request,
          "'encoding_format' must be \"float\" or \"base64\"",
          "invalid_request_error");
    return;
  }
  json data = json::array();
  int64_t tokens = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    std::vector<int32_t> t = st.core.Tokenize(texts[i]);
    tokens += static_cast<int64_t>(t.size());
    std::vector<float> vector = st.core.Embed(t);
    json embedding;
    if (*format == "base64") {
      embedding = Base64Floats(vector);
    } else {
      embedding = std::move(vector);
    }
    data.push_back({{"object", "embedding"},
                    {"index", i},
                    {"embedding", std::move(embedding)}});
  }
  r->Send(
      Json({{"object", "list"},
            {"data", data},
            {"model", st.core.options().model},
            {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}}));
}

void HandleInfer(EngineServer::State& st, net::HttpRequest& req,
                 const std::shared_ptr<net::Responder>& r) {
  json body = json::parse(req.body(), nullptr, false);
  if (body.is_discarded() || !body.is_object() || !body.contains("inputs") ||
      !body["inputs"].is_array() || body["inputs"].empty()) {
    r->Send(Json({{"error", "the body needs an 'inputs' array"}},
                 http::status::bad_request));
    return;
  }
  const json& in = body["inputs"][0];
  std::vector<std::string> texts;
  if (!in.is_object() ||
      Field<std::string>(in, "datatype", "").value_or("") != "BYTES" ||
      !in.contains("data") || !TextsOf(in["data"], &texts)) {
    r->Send(Json({{"error",
                   "input 0 must be a BYTES tensor with string 'data' (the "
                   "texts to embed)"}},
                 http::status::bad_request));
    return;
  }
  std::vector<float> flat;
  for (const std::string& t : texts) {
    std::vector<float> e = st.core.Embed(st.core.Tokenize(t));
    flat.insert(flat.end(), e.begin(), e.end());
  }
  r->Send(
      Json({{"model_name", st.core.options().model},
            {"model_version", "1"},
            {"id", Field<std::string>(body, "id", "").value_or("")},
            {"outputs",
             json::array({{{"name", "embedding"},
                           {"datatype", "FP32"},
                           {"shape", {texts.size(), st.core.options().hidden}},
                           {"data", flat}}})}}));
}

std::string Metrics(EngineServer::State& st) {
  EngineStats s;
  {
    std::lock_guard<std::mutex> lock(st.mu);
    s = st.published;
  }
  const std::string m = st.core.options().model;
  std::string out;
  auto gauge = [&](const char* name, const char* help, double v) {
    absl::StrAppendFormat(
        &out, "# HELP %s %s\n# TYPE %s gauge\n%s{model_name=\"%s\"} %g\n", name,
        help, name, name, m, v);
  };
  auto counter = [&](const char* name, const char* help, int64_t v) {
    absl::StrAppendFormat(
        &out, "# HELP %s %s\n# TYPE %s counter\n%s{model_name=\"%s\"} %d\n",
        name, help, name, name, m, v);
  };
  gauge("vllm:num_requests_running", "Requests in the running batch.",
        s.running);
  gauge("vllm:num_requests_waiting", "Requests waiting to be admitted.",
        s.waiting);
  gauge("vllm:gpu_cache_usage_perc", "KV-cache usage (1 = full).", s.kv_usage);
  counter("vllm:prefix_cache_queries_total",
          "Prompt tokens looked up in the prefix cache.", s.prefix_queries);
  counter("vllm:prefix_cache_hits_total",
          "Prompt tokens found in the prefix cache.", s.prefix_hits);
  counter("vllm:prompt_tokens_total", "Prompt tokens processed.",
          s.prompt_tokens);
  counter("vllm:generation_tokens_total", "Tokens generated.",
          s.generation_tokens);
  return out;
}

void Handle(EngineServer::State& st, net::HttpRequest req,
            std::shared_ptr<net::Responder> r) {
  const std::string target(req.target().substr(0, req.target().find('?')));
  const bool post = req.method() == http::verb::post;
  const std::string& model = st.core.options().model;
  if (target == "/health" || target == "/v2/health/live" ||
      target == "/v2/health/ready") {
    r->Send(Json(json::object()));
  } else if (target == "/metrics") {
    net::HttpResponse res{http::status::ok, 11};
    res.set(http::field::content_type, "text/plain; version=0.0.4");
    res.body() = Metrics(st);
    r->Send(std::move(res));
  } else if (target == "/v1/models") {
    r->Send(Json({{"object", "list"},
                  {"data", json::array({{{"id", model},
                                         {"object", "model"},
                                         {"created", 0},
                                         {"owned_by", "gpusched"}}})}}));
  } else if (post && target == "/v1/completions") {
    HandleGenerate(st, req, std::move(r), /*chat=*/false);
  } else if (post && target == "/v1/chat/completions") {
    HandleGenerate(st, req, std::move(r), /*chat=*/true);
  } else if (post && target == "/v1/embeddings") {
    HandleEmbeddings(st, req, r);
  } else if (absl::StartsWith(target, "/v2/models/")) {
    // /v2/models/{name}[/versions/{v}][/ready|/infer]
    std::vector<std::string> parts =
        absl::StrSplit(target.substr(11), '/', absl::SkipEmpty());
    if (parts.empty() || parts[0] != model) {
      r->Send(Json(
          {{"error", absl::StrCat("model '", parts.empty() ? "" : parts[0],
                                  "' is not served here (this engine serves '",
                                  model, "')")}},
          http::status::not_found));
      return;
    }
    size_t i = 1;
    if (parts.size() >= 3 && parts[1] == "versions") i = 3;
    const std::string rest = i < parts.size() ? parts[i] : "";
    if (rest.empty()) {
      r->Send(
          Json({{"name", model},
                {"versions", {"1"}},
                {"platform", "gpusched-reference"},
                {"inputs",
                 {{{"name", "text"}, {"datatype", "BYTES"}, {"shape", {-1}}}}},
                {"outputs",
                 {{{"name", "embedding"},
                   {"datatype", "FP32"},
                   {"shape", {-1, st.core.options().hidden}}}}}}));
    } else if (rest == "ready") {
      r->Send(Json(json::object()));
    } else if (rest == "infer" && post) {
      HandleInfer(st, req, r);
    } else {
      r->Send(
          Json({{"error", "unknown path " + target}}, http::status::not_found));
    }
  } else {
    Error(r, http::status::not_found, "unknown path " + target,
          "not_found_error");
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<EngineServer>> EngineServer::Start(
    const EngineOptions& engine, const net::HttpServerOptions& http) {
  if (absl::Status st = ValidateEngineOptions(engine); !st.ok()) return st;
  std::unique_ptr<EngineServer> server(new EngineServer());
  server->state_ = std::make_shared<State>(engine);
  State* state = server->state_.get();
  state->loop = std::thread([state] { state->Run(); });
  auto http_server = net::HttpServer::Start(
      http, [state](net::HttpRequest req, std::shared_ptr<net::Responder> r) {
        Handle(*state, std::move(req), std::move(r));
      });
  if (!http_server.ok()) {
    server->Shutdown(std::chrono::milliseconds(0));
    return http_server.status();
  }
  server->http_ = *std::move(http_server);
  return server;
}

EngineServer::~EngineServer() { Shutdown(std::chrono::milliseconds(0)); }

uint16_t EngineServer::port() const { return http_ ? http_->port() : 0; }

void EngineServer::Shutdown(std::chrono::milliseconds drain) {
  if (!state_) return;
  // Stop accepting and let in-flight requests finish (the engine thread
  // keeps running them), then stop the engine thread, which answers what is
  // left as aborted, then release the server.
  if (http_) http_->Shutdown(drain);
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->stopping = true;
  }
  state_->cv.notify_all();
  if (state_->loop.joinable()) state_->loop.join();
  state_.reset();
  http_.reset();
}

}  // namespace gpusched::engine
