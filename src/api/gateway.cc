#include "api/gateway.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"

namespace gpusched::api {

using nlohmann::json;
using serving::RejectReason;

namespace {

constexpr int kMaxAttempts = 3;

Micros NowMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void Fail(const std::shared_ptr<Responder>& r, http::status status,
          const std::string& message, const std::string& type,
          Micros retry_after = 0) {
  HttpResponse res = JsonError(status, message, type);
  if (retry_after > 0) {
    res.set(http::field::retry_after,
            std::to_string((retry_after + kMicrosPerSecond - 1) /
                           kMicrosPerSecond));
  }
  r->Send(std::move(res));
}

// Output tokens reported by an OpenAI response (usage), or -1.
int32_t CompletionTokens(const std::string& body) {
  const size_t at = body.rfind("\"completion_tokens\":");
  if (at == std::string::npos) return -1;
  size_t p = at + 20;
  int32_t n = 0;
  bool any = false;
  while (p < body.size() && body[p] >= '0' && body[p] <= '9') {
    n = n * 10 + (body[p++] - '0');
    any = true;
  }
  return any ? n : -1;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Gateway>> Gateway::Create(
    const GatewayConfig& config, runtime::Store* store,
    runtime::UpstreamOptions upstream) {
  std::unique_ptr<Gateway> g(new Gateway());
  g->store_ = store;
  g->config_ = config;
  g->upstream_ = std::make_unique<runtime::UpstreamClient>(upstream);
  g->dispatcher_ = std::make_unique<serving::Dispatcher>(config.seed);
  serving::ReplicaId next_replica = 0;
  for (const GatewayDeployment& d : g->config_.deployments) {
    serving::DeploymentSpec spec = d.spec;
    if (spec.queue.classes.empty()) {
      for (const std::string& c : config.classes) {
        spec.queue.classes.push_back({c, serving::QueueOrder::kFair, kNever});
      }
    }
    auto id = g->dispatcher_->AddDeployment(spec);
    if (!id.ok()) return id.status();
    Model m{*id, d.replicas, next_replica};
    for (const runtime::Endpoint& ep : d.replicas) {
      g->dispatcher_->AddReplica(*id, next_replica++, d.max_ongoing_requests,
                                 d.kv_budget_tokens);
      g->replica_endpoint_.push_back(ep);
    }
    g->models_[spec.name] = std::move(m);
  }
  for (const GatewayTenant& t : g->config_.tenants) {
    auto id = g->dispatcher_->AddTenant(t.spec, NowMicros());
    if (!id.ok()) return id.status();
    g->tenant_ids_[t.spec.name] = *id;
    g->tenants_.push_back(&t);
    for (const auto& [name, m] : g->models_) {
      if (t.models.empty() ||
          std::find(t.models.begin(), t.models.end(), name) != t.models.end()) {
        g->dispatcher_->DeclareTenant(m.id, *id);
      }
    }
  }
  return g;
}

Gateway::~Gateway() {
  // The upstream client's threads stop first: no callback runs after this.
  upstream_.reset();
}

void Gateway::Handle(HttpRequest req, std::shared_ptr<Responder> r) {
  const std::string target(req.target().substr(0, req.target().find('?')));
  if (target == "/healthz") {
    HttpResponse res{http::status::ok, 11};
    res.body() = "ok";
    r->Send(std::move(res));
    return;
  }
  // The tenant, from its API key.
  const std::string auth(req[http::field::authorization]);
  if (!absl::StartsWith(auth, "Bearer ")) {
    Fail(r, http::status::unauthorized,
         "missing API key: send 'Authorization: Bearer <key>'",
         "authentication_error");
    return;
  }
  auto key = store_->AuthenticateKey(auth.substr(7));
  if (!key.ok()) {
    Fail(r, http::status::unauthorized, std::string(key.status().message()),
         "authentication_error");
    return;
  }
  auto tenant_it = tenant_ids_.find(key->tenant);
  if (tenant_it == tenant_ids_.end()) {
    Fail(r, http::status::forbidden,
         "this key's tenant has no access to any model", "permission_error");
    return;
  }
  const serving::TenantId tenant = tenant_it->second;
  const GatewayTenant& tconf = *tenants_[tenant];
  std::vector<std::string> allowed;
  for (const auto& [name, m] : models_) {
    if (tconf.models.empty() ||
        std::find(tconf.models.begin(), tconf.models.end(), name) !=
            tconf.models.end()) {
      allowed.push_back(name);
    }
  }
  if (target == "/v1/models") {
    json data = json::array();
    for (const std::string& m : allowed) {
      data.push_back(
          {{"id", m}, {"object", "model"}, {"owned_by", "gpusched"}});
    }
    HttpResponse res{http::status::ok, 11};
    res.set(http::field::content_type, "application/json");
    res.body() = json{{"object", "list"}, {"data", data}}.dump();
    r->Send(std::move(res));
    return;
  }
  if (req.method() != http::verb::post ||
      (target != "/v1/chat/completions" && target != "/v1/completions" &&
       target != "/v1/embeddings")) {
    Fail(r, http::status::not_found, "unknown path " + target,
         "not_found_error");
    return;
  }
  json body = json::parse(req.body(), nullptr, false);
  if (body.is_discarded() || !body.is_object() || !body.contains("model") ||
      !body["model"].is_string()) {
    Fail(r, http::status::bad_request,
         "the body must be a JSON object with a 'model'",
         "invalid_request_error");
    return;
  }
  const std::string model = body["model"].get<std::string>();
  if (std::find(allowed.begin(), allowed.end(), model) == allowed.end()) {
    Fail(r, http::status::not_found,
         absl::StrCat("model '", model,
                      "' does not exist or is not yours; "
                      "your models: ",
                      absl::StrJoin(allowed, ", ")),
         "not_found_error");
    return;
  }
  const Micros now = NowMicros();
  serving::Request sr;
  sr.tenant = tenant;
  sr.model = models_.at(model).id;
  sr.arrival = now;
  // Class: the header, else the tenant's, else the second class.
  std::string cls_name = std::string(req["X-Gpusched-Priority"]);
  if (cls_name.empty()) cls_name = tconf.priority;
  sr.priority = config_.classes.size() > 1 ? 1 : 0;
  if (!cls_name.empty()) {
    auto it = std::find(config_.classes.begin(), config_.classes.end(),
                        absl::AsciiStrToLower(cls_name));
    if (it == config_.classes.end()) {
      Fail(r, http::status::bad_request,
           absl::StrCat("unknown priority class '", cls_name, "' (classes: ",
                        absl::StrJoin(config_.classes, ", "), ")"),
           "invalid_request_error");
      return;
    }
    sr.priority = static_cast<serving::ClassId>(it - config_.classes.begin());
  }
  const std::string deadline(req["X-Gpusched-Deadline-Ms"]);
  if (!deadline.empty()) {
    int64_t ms = 0;
    if (!absl::SimpleAtoi(deadline, &ms) || ms <= 0) {
      Fail(r, http::status::bad_request,
           "X-Gpusched-Deadline-Ms must be a positive integer (milliseconds)",
           "invalid_request_error");
      return;
    }
    sr.deadline = now + ms * kMicrosPerMilli;
  }
  // Token estimates until the engine reports usage: ~4 bytes per token.
  sr.input_tokens =
      static_cast<int32_t>(std::max<size_t>(1, req.body().size() / 4));
  int64_t max_tokens = 16;
  for (const char* k : {"max_tokens", "max_completion_tokens"}) {
    if (!body.contains(k)) continue;
    if (!body[k].is_number_integer() || body[k].get<int64_t>() < 1) {
      Fail(r, http::status::bad_request,
           absl::StrCat("'", k, "' must be a positive integer"),
           "invalid_request_error");
      return;
    }
    max_tokens = body[k].get<int64_t>();
  }
  if (body.contains("stream") && !body["stream"].is_boolean()) {
    Fail(r, http::status::bad_request, "'stream' must be true or false",
         "invalid_request_error");
    return;
  }
  sr.max_output_tokens =
      static_cast<int32_t>(std::min<int64_t>(max_tokens, 1 << 30));
  if (target == "/v1/embeddings") sr.max_output_tokens = 0;
  Pending p;
  p.target = target;
  p.body = std::move(req.body());
  p.stream = body.contains("stream") && body["stream"].get<bool>();
  p.responder = std::move(r);
  serving::Verdict v;
  {
    std::lock_guard<std::mutex> lock(mu_);
    sr.id = next_id_++;
    p.request = sr;
    v = dispatcher_->Submit(sr, now);
    if (v.admitted()) pending_.emplace(sr.id, std::move(p));
  }
  if (!v.admitted()) {
    const bool limit = v.reason == RejectReason::kRateLimitedRequests ||
                       v.reason == RejectReason::kRateLimitedTokens ||
                       v.reason == RejectReason::kModelQueueFull ||
                       v.reason == RejectReason::kTenantQueueFull;
    Fail(
        p.responder,
        limit ? http::status::too_many_requests
              : http::status::service_unavailable,
        absl::StrCat("request rejected: ", serving::RejectReasonName(v.reason),
                     v.retry_after > 0
                         ? absl::StrCat("; retry in ",
                                        (v.retry_after + kMicrosPerSecond - 1) /
                                            kMicrosPerSecond,
                                        " s")
                         : ""),
        limit ? "rate_limit_error" : "overloaded_error", v.retry_after);
    return;
  }
  Pump();
}

void Gateway::Pump() {
  std::vector<serving::Assignment> out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    dispatcher_->Dispatch(NowMicros(), &out);
  }
  for (serving::Assignment& a : out) Proxy(std::move(a));
}

void Gateway::Proxy(serving::Assignment a) {
  std::string target, body;
  bool stream;
  std::shared_ptr<Responder> responder;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Pending& p = pending_.at(a.request.id);
    p.request = a.request;  // as dispatched
    ++p.attempts;
    target = p.target;
    body = p.body;
    stream = p.stream;
    responder = p.responder;
  }
  HttpRequest up{http::verb::post, target, 11};
  up.set(http::field::content_type, "application/json");
  up.body() = std::move(body);
  struct Relay {
    unsigned status = 0;
    bool head = false;
    std::string text;  // non-streamed body, or the tail of a stream
    int32_t events = 0;
  };
  auto relay = std::make_shared<Relay>();
  runtime::UpstreamCallbacks cb;
  const serving::Request req = a.request;
  const serving::ReplicaId replica = a.replica;
  cb.on_head = [relay, stream, responder](const http::response_header<>& h) {
    relay->head = true;
    relay->status = h.result_int();
    if (stream && relay->status == 200) {
      HttpResponse head{http::status::ok, 11};
      head.set(http::field::content_type, "text/event-stream");
      head.set(http::field::cache_control, "no-cache");
      responder->StartStream(std::move(head));
    }
  };
  cb.on_data = [relay, stream, responder](std::string data) {
    if (stream && relay->status == 200) {
      relay->events +=
          static_cast<int32_t>(std::count(data.begin(), data.end(), '\n') / 2);
      // Keep the tail for the usage chunk, if the engine sends one.
      relay->text = data.size() > 4096 ? data.substr(data.size() - 4096) : data;
      responder->SendChunk(std::move(data));
    } else {
      relay->text += data;
    }
  };
  cb.on_done = [this, relay, stream, responder, req, replica](absl::Status st) {
    if (!st.ok() && !relay->head) {
      // Nothing reached the client: retry on another replica.
      bool retried = false;
      {
        std::lock_guard<std::mutex> lock(mu_);
        dispatcher_->OnFinished(req, replica, -1, NowMicros());
        if (pending_.at(req.id).attempts < kMaxAttempts) {
          serving::Request again = req;
          again.dispatched = kNever;
          retried = dispatcher_->Submit(again, NowMicros()).admitted();
        }
        if (!retried) pending_.erase(req.id);
      }
      if (!retried) {
        Fail(responder, http::status::bad_gateway,
             absl::StrCat("no replica could serve the request: ", st.message()),
             "server_error");
      }
      Pump();
      return;
    }
    int32_t output = CompletionTokens(relay->text);
    if (stream) {
      if (output < 0) output = std::max(0, relay->events - 1);
      if (relay->status == 200) {
        responder->EndStream();
      } else {
        HttpResponse res{static_cast<http::status>(relay->status), 11};
        res.set(http::field::content_type, "application/json");
        res.body() = relay->text;
        responder->Send(std::move(res));
      }
    } else {
      HttpResponse res{
          static_cast<http::status>(relay->status ? relay->status : 502), 11};
      res.set(http::field::content_type, "application/json");
      res.body() = st.ok()
                       ? relay->text
                       : JsonError(http::status::bad_gateway,
                                   std::string(st.message()), "server_error")
                             .body();
      responder->Send(std::move(res));
    }
    Finished(req, replica, std::max(0, output));
  };
  upstream_->Send(replica_endpoint_[replica], std::move(up), std::move(cb));
}

void Gateway::Finished(const serving::Request& r, serving::ReplicaId replica,
                       int32_t output_tokens) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    dispatcher_->OnFinished(r, replica, output_tokens, NowMicros());
    pending_.erase(r.id);
  }
  Pump();
}

}  // namespace gpusched::api
