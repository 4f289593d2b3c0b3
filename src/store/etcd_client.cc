#include "store/etcd_client.h"

#include <chrono>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/status.h"

namespace gpusched::store {
namespace {

using nlohmann::json;

constexpr size_t kMaxEndpoints = 16;
// Between two rounds of the members (EtcdOptions::retry_for).
constexpr Micros kRetryPause = 100 * kMicrosPerMilli;

struct Url {
  bool tls = false;
  std::string host;
  uint16_t port = 0;
};

absl::StatusOr<Url> ParseUrl(const std::string& url) {
  Url u;
  absl::string_view rest(url);
  if (absl::ConsumePrefix(&rest, "https://")) {
    u.tls = true;
  } else if (!absl::ConsumePrefix(&rest, "http://")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "endpoint '", url, "': must start with http:// or https://"));
  }
  if (absl::EndsWith(rest, "/")) rest.remove_suffix(1);
  absl::string_view host = rest, port;
  if (absl::StartsWith(rest, "[")) {
    const size_t close = rest.find(']');
    if (close == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("endpoint '", url, "': unclosed '['"));
    }
    host = rest.substr(1, close - 1);
    rest.remove_prefix(close + 1);
    if (!absl::ConsumePrefix(&rest, ":")) rest = "";
    port = rest;
  } else if (const size_t colon = rest.rfind(':');
             colon != absl::string_view::npos) {
    host = rest.substr(0, colon);
    port = rest.substr(colon + 1);
  }
  int p = 0;
  if (host.empty() || host.find('/') != absl::string_view::npos ||
      !absl::SimpleAtoi(port, &p) || p <= 0 || p > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("endpoint '", url,
                     "': expected scheme://host:port (e.g. "
                     "http://127.0.0.1:2379)"));
  }
  u.host = std::string(host);
  u.port = static_cast<uint16_t>(p);
  return u;
}

// gRPC status codes, as the gateway reports them.
absl::StatusCode FromGrpc(int64_t code) {
  switch (code) {
    case 1:
      return absl::StatusCode::kCancelled;
    case 3:
      return absl::StatusCode::kInvalidArgument;
    case 4:
      return absl::StatusCode::kDeadlineExceeded;
    case 5:
      return absl::StatusCode::kNotFound;
    case 6:
      return absl::StatusCode::kAlreadyExists;
    case 7:
      return absl::StatusCode::kPermissionDenied;
    case 8:
      return absl::StatusCode::kResourceExhausted;
    case 9:
      return absl::StatusCode::kFailedPrecondition;
    case 10:
      return absl::StatusCode::kAborted;
    case 11:
      return absl::StatusCode::kOutOfRange;
    case 12:
      return absl::StatusCode::kUnimplemented;
    case 14:
      return absl::StatusCode::kUnavailable;
    case 16:
      return absl::StatusCode::kUnauthenticated;
    default:
      return absl::StatusCode::kInternal;
  }
}

// Errors after which another member may do better.
bool TryAnother(const absl::Status& st) {
  return st.code() == absl::StatusCode::kUnavailable ||
         st.code() == absl::StatusCode::kDeadlineExceeded ||
         st.code() == absl::StatusCode::kResourceExhausted;
}

// The gateway's error object of a non-2xx answer (or a 200 with "error").
absl::Status GatewayError(const std::string& endpoint, unsigned http_status,
                          const json& j, const std::string& body) {
  std::string message;
  int64_t code = 0;
  if (j.is_object()) {
    if (j.contains("message") && j["message"].is_string()) {
      message = j["message"].get<std::string>();
    } else if (j.contains("error") && j["error"].is_string()) {
      message = j["error"].get<std::string>();
    }
    code = EtcdInt(j, "code");
  }
  if (message.empty()) message = body.substr(0, 200);
  absl::StatusCode c =
      code != 0 ? FromGrpc(code)
      : http_status == 503 || http_status == 502
          ? absl::StatusCode::kUnavailable
      : http_status == 504 ? absl::StatusCode::kDeadlineExceeded
      : http_status == 401 ? absl::StatusCode::kUnauthenticated
      : http_status == 403 ? absl::StatusCode::kPermissionDenied
      : http_status == 404 ? absl::StatusCode::kNotFound
                           : absl::StatusCode::kInternal;
  return absl::Status(c, absl::StrCat("etcd ", endpoint, ": ", message));
}

}  // namespace

int64_t EtcdInt(const json& j, const char* key) {
  if (!j.is_object()) return 0;
  auto it = j.find(key);
  if (it == j.end()) return 0;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_number_unsigned())
    return static_cast<int64_t>(it->get<uint64_t>());
  int64_t v = 0;
  if (it->is_string() && absl::SimpleAtoi(it->get<std::string>(), &v)) return v;
  return 0;
}

bool EtcdBool(const json& j, const char* key) {
  if (!j.is_object()) return false;
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() && it->get<bool>();
}

std::string B64(std::string_view raw) {
  return absl::Base64Escape(absl::string_view(raw.data(), raw.size()));
}

std::string UnB64(const json& j, const char* key) {
  if (!j.is_object()) return "";
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return "";
  std::string out;
  if (!absl::Base64Unescape(it->get<std::string>(), &out)) return "";
  return out;
}

std::string PrefixEnd(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    if (static_cast<unsigned char>(end.back()) < 0xff) {
      end.back() =
          static_cast<char>(static_cast<unsigned char>(end.back()) + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

absl::Status ValidateEtcdOptions(const EtcdOptions& o) {
  if (o.endpoints.empty()) {
    return absl::InvalidArgumentError("endpoints: at least one is needed");
  }
  if (o.endpoints.size() > kMaxEndpoints) {
    return absl::InvalidArgumentError(absl::StrCat(
        "endpoints: at most ", kMaxEndpoints, ", got ", o.endpoints.size()));
  }
  for (const std::string& e : o.endpoints) {
    absl::StatusOr<Url> u = ParseUrl(e);
    if (!u.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("endpoints: ", u.status().message()));
    }
  }
  if (o.prefix.size() < 2 || o.prefix.front() != '/' ||
      o.prefix.back() != '/' || o.prefix.size() > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("prefix: '", o.prefix,
                     "' must start and end with '/' and name something "
                     "(e.g. /gpusched/), at most 256 bytes"));
  }
  if (o.username.empty() != o.password.empty()) {
    return absl::InvalidArgumentError(
        "username and password: give both (etcd's user authentication) or "
        "neither");
  }
  if (o.cert_pem.empty() != o.key_pem.empty()) {
    return absl::InvalidArgumentError(
        "cert and key: a client certificate needs its key, and a key its "
        "certificate");
  }
  if (o.request_timeout <= 0) {
    return absl::InvalidArgumentError("request_timeout_ms: must be positive");
  }
  return absl::OkStatus();
}

EtcdClient::EtcdClient(EtcdOptions options,
                       std::vector<std::unique_ptr<net::HttpClient>> http)
    : options_(std::move(options)), http_(std::move(http)) {}

EtcdClient::~EtcdClient() = default;

absl::StatusOr<std::unique_ptr<EtcdClient>> EtcdClient::Create(
    EtcdOptions options) {
  RETURN_IF_ERROR(ValidateEtcdOptions(options));
  std::vector<std::unique_ptr<net::HttpClient>> http;
  for (const std::string& e : options.endpoints) {
    ASSIGN_OR_RETURN(Url u, ParseUrl(e));
    net::HttpClientOptions o;
    o.host = u.host;
    o.port = u.port;
    o.tls = u.tls;
    o.ca_pem = options.ca_pem;
    o.client_cert_pem = options.cert_pem;
    o.client_key_pem = options.key_pem;
    o.insecure_skip_verify = options.insecure_skip_verify;
    o.timeout = options.request_timeout;
    o.peer = absl::StrCat("etcd ", e);
    ASSIGN_OR_RETURN(std::unique_ptr<net::HttpClient> c,
                     net::HttpClient::Create(std::move(o)));
    http.push_back(std::move(c));
  }
  return std::unique_ptr<EtcdClient>(
      new EtcdClient(std::move(options), std::move(http)));
}

void EtcdClient::Cancel() {
  for (auto& h : http_) h->Cancel();
}

std::string EtcdClient::endpoint() const {
  return options_.endpoints[current_.load() % options_.endpoints.size()];
}

absl::StatusOr<net::HttpClient::Headers> EtcdClient::Auth(size_t endpoint,
                                                          bool renew) {
  if (options_.username.empty()) return net::HttpClient::Headers{};
  {
    absl::MutexLock l(&mu_);
    if (!renew && !token_.empty()) {
      return net::HttpClient::Headers{{"Authorization", token_}};
    }
  }
  const json body = {{"name", options_.username},
                     {"password", options_.password}};
  absl::StatusOr<net::HttpClientResponse> r = http_[endpoint]->Request(
      "POST", "/v3/auth/authenticate", {}, body.dump());
  if (!r.ok()) return r.status();
  const json j = json::parse(r->body, nullptr, false);
  if (r->status != 200 || !j.is_object() || !j.contains("token") ||
      !j["token"].is_string()) {
    absl::Status st =
        GatewayError(options_.endpoints[endpoint], r->status, j, r->body);
    return absl::Status(st.code() == absl::StatusCode::kInternal
                            ? absl::StatusCode::kUnauthenticated
                            : st.code(),
                        absl::StrCat("authenticating as ", options_.username,
                                     ": ", st.message()));
  }
  absl::MutexLock l(&mu_);
  token_ = j["token"].get<std::string>();
  return net::HttpClient::Headers{{"Authorization", token_}};
}

absl::StatusOr<json> EtcdClient::CallOne(size_t endpoint,
                                         std::string_view method,
                                         const std::string& body) {
  const std::string target =
      absl::StrCat("/v3/", absl::string_view(method.data(), method.size()));
  for (int attempt = 0; attempt < 2; ++attempt) {
    ASSIGN_OR_RETURN(net::HttpClient::Headers headers,
                     Auth(endpoint, /*renew=*/attempt > 0));
    ASSIGN_OR_RETURN(net::HttpClientResponse r,
                     http_[endpoint]->Request("POST", target, headers, body));
    json j = json::parse(r.body, nullptr, false);
    if (r.status == 200 && j.is_object() && !j.contains("error")) return j;
    absl::Status st =
        GatewayError(options_.endpoints[endpoint], r.status, j, r.body);
    // An expired token: take a new one, once.
    if (st.code() == absl::StatusCode::kUnauthenticated &&
        !options_.username.empty() && attempt == 0 &&
        absl::StrContains(st.message(), "token")) {
      continue;
    }
    return st;
  }
  return absl::UnauthenticatedError("etcd: the auth token was refused twice");
}

absl::StatusOr<json> EtcdClient::Call(std::string_view method,
                                      const json& body) {
  const std::string text = body.dump();
  const size_t n = http_.size();
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::string> failures;
  while (true) {
    failures.clear();
    const size_t first = current_.load() % n;
    for (size_t i = 0; i < n; ++i) {
      const size_t e = (first + i) % n;
      absl::StatusOr<json> r = CallOne(e, method, text);
      if (r.ok() || !TryAnother(r.status())) {
        if (r.ok() || r.status().code() != absl::StatusCode::kCancelled) {
          current_.store(e);
        }
        return r;
      }
      failures.push_back(std::string(r.status().message()));
    }
    const Micros spent = std::chrono::duration_cast<std::chrono::microseconds>(
                             std::chrono::steady_clock::now() - start)
                             .count();
    if (spent + kRetryPause >= options_.retry_for) break;
    std::this_thread::sleep_for(std::chrono::microseconds(kRetryPause));
  }
  return absl::UnavailableError(
      absl::StrCat("etcd unreachable (", absl::StrJoin(failures, "; "), ")"));
}

absl::Status EtcdClient::Watch(
    const json& create_request, Micros idle,
    const std::function<bool(const json&)>& on_response) {
  const std::string body = json{{"create_request", create_request}}.dump();
  const size_t n = http_.size();
  const size_t first = current_.load() % n;
  std::vector<std::string> failures;
  for (size_t i = 0; i < n; ++i) {
    const size_t e = (first + i) % n;
    absl::StatusOr<net::HttpClient::Headers> headers = Auth(e, false);
    if (!headers.ok()) {
      if (!TryAnother(headers.status())) return headers.status();
      failures.push_back(std::string(headers.status().message()));
      continue;
    }
    bool got_any = false;
    net::HttpClientResponse error_response;
    absl::Status st = http_[e]->Stream(
        "POST", "/v3/watch", *headers, body, idle,
        [&](absl::string_view line) {
          got_any = true;
          const json j = json::parse(line.begin(), line.end(), nullptr, false);
          if (!j.is_object()) return true;  // not ours to judge: skip it
          if (j.contains("error")) {
            return on_response(json{{"error", j}});
          }
          return on_response(j.contains("result") ? j["result"] : j);
        },
        &error_response);
    if (st.ok() && error_response.status != 0 && error_response.status != 200) {
      st = GatewayError(options_.endpoints[e], error_response.status,
                        json::parse(error_response.body, nullptr, false),
                        error_response.body);
    }
    if (st.ok() || got_any || !TryAnother(st)) {
      if (got_any) current_.store(e);
      return st;
    }
    failures.push_back(std::string(st.message()));
  }
  return absl::UnavailableError(absl::StrCat(
      "etcd unreachable for a watch (", absl::StrJoin(failures, "; "), ")"));
}

}  // namespace gpusched::store
