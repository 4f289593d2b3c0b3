#include "backends/kubernetes/kube_client.h"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/status.h"
#include "nlohmann/json.hpp"
#include "yaml-cpp/yaml.h"

namespace gpusched::backends {
namespace {

constexpr size_t kMaxCredentialFile = 1 << 20;

absl::StatusOr<std::string> ReadSmallFile(const std::string& path,
                                          absl::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot read ", what, " ", path));
  }
  std::string out;
  char buf[4096];
  while (in.read(buf, sizeof(buf)) || in.gcount() > 0) {
    out.append(buf, static_cast<size_t>(in.gcount()));
    if (out.size() > kMaxCredentialFile) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " ", path, " is larger than 1 MiB"));
    }
  }
  return out;
}

}  // namespace

absl::Status ParseKubeServer(const std::string& server, KubeCredentials* c) {
  absl::string_view s = server;
  if (absl::ConsumePrefix(&s, "https://")) {
    c->tls = true;
    c->port = 443;
  } else if (absl::ConsumePrefix(&s, "http://")) {
    c->tls = false;
    c->port = 80;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "server \"", server, "\": expected https://host[:port] or http://"));
  }
  s = s.substr(0, s.find('/'));
  absl::string_view host = s, port;
  if (absl::ConsumePrefix(&host, "[")) {
    const size_t end = host.find(']');
    if (end == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("server \"", server, "\": unclosed [ in the host"));
    }
    absl::string_view rest = host.substr(end + 1);
    host = host.substr(0, end);
    if (absl::ConsumePrefix(&rest, ":")) port = rest;
  } else if (const size_t colon = s.rfind(':');
             colon != absl::string_view::npos) {
    host = s.substr(0, colon);
    port = s.substr(colon + 1);
  }
  if (host.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("server \"", server, "\": no host"));
  }
  if (!port.empty()) {
    int p = 0;
    if (!absl::SimpleAtoi(port, &p) || p <= 0 || p > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat("server \"", server, "\": bad port \"", port, "\""));
    }
    c->port = static_cast<uint16_t>(p);
  }
  c->host = std::string(host);
  c->server = server;
  return absl::OkStatus();
}

absl::StatusOr<KubeCredentials> InClusterKubeCredentials(
    const std::string& dir) {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (host == nullptr || *host == '\0') {
    return absl::FailedPreconditionError(
        "not in a Pod: KUBERNETES_SERVICE_HOST is not set");
  }
  KubeCredentials c;
  const std::string h(host);
  const std::string url = absl::StrCat(
      "https://", h.find(':') != std::string::npos ? "[" + h + "]" : h, ":",
      port != nullptr && *port != '\0' ? port : "443");
  if (absl::Status st = ParseKubeServer(url, &c); !st.ok()) return st;
  c.token_file = dir + "/token";
  ASSIGN_OR_RETURN(c.token, ReadSmallFile(c.token_file, "the token"));
  c.token = std::string(absl::StripAsciiWhitespace(c.token));
  ASSIGN_OR_RETURN(c.ca_pem, ReadSmallFile(dir + "/ca.crt", "the CA"));
  if (absl::StatusOr<std::string> ns = ReadSmallFile(dir + "/namespace", "");
      ns.ok()) {
    c.namespace_name = std::string(absl::StripAsciiWhitespace(*ns));
  }
  c.source = "in-cluster service account";
  return c;
}

namespace {

// A named entry ({name: N, <field>: {...}}) of a kubeconfig list.
absl::StatusOr<YAML::Node> Named(const YAML::Node& root, const char* list,
                                 const char* field, const std::string& name) {
  const YAML::Node items = root[list];
  if (items && !items.IsSequence()) {
    return absl::InvalidArgumentError(absl::StrCat(list, ": expected a list"));
  }
  if (items) {
    for (size_t i = 0; i < items.size() && i < 10000; ++i) {
      const YAML::Node it = items[i];
      if (it.IsMap() && it["name"] && it["name"].IsScalar() &&
          it["name"].as<std::string>() == name) {
        const YAML::Node body = it[field];
        if (!body || !body.IsMap()) {
          return absl::InvalidArgumentError(absl::StrCat(
              list, "[", i, "] (", name, "): ", field, " must be a map"));
        }
        return body;
      }
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat(list, ": no entry named \"", name, "\""));
}

std::string Str(const YAML::Node& map, const char* key) {
  const YAML::Node v = map[key];
  return v && v.IsScalar() ? v.as<std::string>() : std::string();
}

// `data` (base64) or the file `path` (relative to `dir`).
absl::StatusOr<std::string> DataOrFile(const YAML::Node& map,
                                       const char* data_key,
                                       const char* file_key,
                                       const std::filesystem::path& dir) {
  if (const std::string d = Str(map, data_key); !d.empty()) {
    std::string out;
    if (!absl::Base64Unescape(d, &out)) {
      return absl::InvalidArgumentError(absl::StrCat(data_key, ": not base64"));
    }
    return out;
  }
  if (std::string f = Str(map, file_key); !f.empty()) {
    std::filesystem::path p(f);
    if (p.is_relative()) p = dir / p;
    return ReadSmallFile(p.string(), file_key);
  }
  return std::string();
}

}  // namespace

absl::StatusOr<KubeCredentials> KubeconfigCredentials(
    const std::string& path, const std::string& context) {
  ASSIGN_OR_RETURN(const std::string text, ReadSmallFile(path, "kubeconfig"));
  return ParseKubeconfig(text, path, context);
}

namespace {

absl::StatusOr<KubeCredentials> FromKubeconfig(const YAML::Node& root,
                                               const std::string& path,
                                               const std::string& context) {
  auto fail = [&](const absl::Status& st) {
    return absl::Status(st.code(),
                        absl::StrCat("kubeconfig ", path, ": ", st.message()));
  };
  if (!root.IsMap()) return fail(absl::InvalidArgumentError("not a map"));
  const std::string ctx_name =
      context.empty() ? Str(root, "current-context") : context;
  if (ctx_name.empty()) {
    return fail(absl::InvalidArgumentError(
        "current-context is not set (name a context)"));
  }
  absl::StatusOr<YAML::Node> ctx = Named(root, "contexts", "context", ctx_name);
  if (!ctx.ok()) return fail(ctx.status());
  absl::StatusOr<YAML::Node> cluster =
      Named(root, "clusters", "cluster", Str(*ctx, "cluster"));
  if (!cluster.ok()) return fail(cluster.status());
  KubeCredentials c;
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (absl::Status st = ParseKubeServer(Str(*cluster, "server"), &c);
      !st.ok()) {
    return fail(absl::InvalidArgumentError(
        absl::StrCat("clusters[", Str(*ctx, "cluster"), "].", st.message())));
  }
  c.tls_server_name = Str(*cluster, "tls-server-name");
  c.insecure_skip_verify = Str(*cluster, "insecure-skip-tls-verify") == "true";
  absl::StatusOr<std::string> ca = DataOrFile(
      *cluster, "certificate-authority-data", "certificate-authority", dir);
  if (!ca.ok()) return fail(ca.status());
  c.ca_pem = *std::move(ca);
  if (const std::string user_name = Str(*ctx, "user"); !user_name.empty()) {
    absl::StatusOr<YAML::Node> user = Named(root, "users", "user", user_name);
    if (!user.ok()) return fail(user.status());
    if ((*user)["exec"] || (*user)["auth-provider"]) {
      return fail(absl::UnimplementedError(absl::StrCat(
          "users[", user_name,
          "]: exec and auth-provider credential plugins are not supported; "
          "use a token, a token file or a client certificate")));
    }
    c.token = Str(*user, "token");
    if (std::string f = Str(*user, "tokenFile"); !f.empty()) {
      std::filesystem::path p(f);
      if (p.is_relative()) p = dir / p;
      c.token_file = p.string();
    }
    absl::StatusOr<std::string> cert =
        DataOrFile(*user, "client-certificate-data", "client-certificate", dir);
    if (!cert.ok()) return fail(cert.status());
    absl::StatusOr<std::string> key =
        DataOrFile(*user, "client-key-data", "client-key", dir);
    if (!key.ok()) return fail(key.status());
    if (cert->empty() != key->empty()) {
      return fail(absl::InvalidArgumentError(absl::StrCat(
          "users[", user_name,
          "]: a client certificate needs its key, and a key its certificate")));
    }
    c.client_cert_pem = *std::move(cert);
    c.client_key_pem = *std::move(key);
  }
  c.namespace_name = Str(*ctx, "namespace");
  c.source = absl::StrCat("kubeconfig ", path, " (context ", ctx_name, ")");
  return c;
}

}  // namespace

absl::StatusOr<KubeCredentials> ParseKubeconfig(const std::string& text,
                                                const std::string& path,
                                                const std::string& context) {
  try {
    return FromKubeconfig(YAML::Load(text), path, context);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("kubeconfig ", path, ": ", e.what()));
  }
}

absl::StatusOr<KubeCredentials> ResolveKubeCredentials(
    const std::string& kubeconfig, const std::string& server) {
  absl::StatusOr<KubeCredentials> c;
  if (!kubeconfig.empty()) {
    c = KubeconfigCredentials(kubeconfig);
  } else if (const char* h = std::getenv("KUBERNETES_SERVICE_HOST");
             h != nullptr && *h != '\0') {
    c = InClusterKubeCredentials();
  } else if (const char* env = std::getenv("KUBECONFIG");
             env != nullptr && *env != '\0') {
    // The first file of the list (merging several is not supported).
    c = KubeconfigCredentials(
        std::string(env).substr(0, std::string(env).find(':')));
  } else if (const char* home = std::getenv("HOME"); home != nullptr) {
    c = KubeconfigCredentials(std::string(home) + "/.kube/config");
    if (!c.ok() && absl::IsNotFound(c.status())) {
      return absl::FailedPreconditionError(
          "no Kubernetes credentials: not in a Pod, no kubernetes.kubeconfig, "
          "no $KUBECONFIG and no ~/.kube/config");
    }
  } else {
    return absl::FailedPreconditionError("no Kubernetes credentials found");
  }
  if (!c.ok()) return c.status();
  if (!server.empty()) {
    if (absl::Status st = ParseKubeServer(server, &*c); !st.ok()) return st;
  }
  return c;
}

const nlohmann::json& KubeField(const nlohmann::json& j, const char* key) {
  static const nlohmann::json* const kNull = new nlohmann::json();
  if (!j.is_object()) return *kNull;
  auto it = j.find(key);
  return it == j.end() ? *kNull : *it;
}

std::string KubeStr(const nlohmann::json& j, const char* key) {
  const nlohmann::json& v = KubeField(j, key);
  return v.is_string() ? v.get<std::string>() : std::string();
}

int64_t KubeInt(const nlohmann::json& j, const char* key) {
  const nlohmann::json& v = KubeField(j, key);
  return v.is_number_integer() ? v.get<int64_t>() : 0;
}

std::string KubeQueryEscape(absl::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (const unsigned char ch : s) {
    if (absl::ascii_isalnum(ch) || ch == '-' || ch == '.' || ch == '_' ||
        ch == '~') {
      out.push_back(static_cast<char>(ch));
    } else {
      out.push_back('%');
      out.push_back(kHex[ch >> 4]);
      out.push_back(kHex[ch & 15]);
    }
  }
  return out;
}

absl::Status KubeStatusError(const KubeResponse& r, absl::string_view what) {
  if (r.status >= 200 && r.status < 300) return absl::OkStatus();
  std::string reason, message;
  const nlohmann::json j =
      nlohmann::json::parse(r.body, nullptr, /*allow_exceptions=*/false);
  if (KubeStr(j, "kind") == "Status") {
    reason = KubeStr(j, "reason");
    message = KubeStr(j, "message");
  }
  if (message.empty()) message = r.body.substr(0, 200);
  const std::string text = absl::StrCat(
      what, ": ", r.status, reason.empty() ? "" : " ", reason,
      message.empty() ? "" : ": ", message,
      r.retry_after > 0 ? absl::StrCat(" (retry after ",
                                       r.retry_after / kMicrosPerSecond, " s)")
                        : "");
  switch (r.status) {
    case 400:
    case 422:
      return absl::InvalidArgumentError(text);
    case 401:
      return absl::UnauthenticatedError(text);
    case 403:
      return absl::PermissionDeniedError(text);
    case 404:
      return absl::NotFoundError(text);
    case 409:
      return reason == "AlreadyExists" ? absl::AlreadyExistsError(text)
                                       : absl::AbortedError(text);
    case 410:
      return absl::OutOfRangeError(text);
    case 429:
      return absl::ResourceExhaustedError(text);
    default:
      return r.status >= 500 ? absl::UnavailableError(text)
                             : absl::UnknownError(text);
  }
}

KubeClient::KubeClient(KubeCredentials credentials, Options options,
                       std::unique_ptr<net::HttpClient> http)
    : creds_(std::move(credentials)),
      options_(options),
      http_(std::move(http)) {}

KubeClient::~KubeClient() = default;

absl::StatusOr<std::unique_ptr<KubeClient>> KubeClient::Create(
    KubeCredentials credentials, Options options) {
  net::HttpClientOptions o;
  o.host = credentials.host;
  o.port = credentials.port;
  o.tls = credentials.tls;
  o.tls_server_name = credentials.tls_server_name;
  o.ca_pem = credentials.ca_pem;
  o.insecure_skip_verify = credentials.insecure_skip_verify;
  o.client_cert_pem = credentials.client_cert_pem;
  o.client_key_pem = credentials.client_key_pem;
  o.timeout = options.timeout;
  o.peer = absl::StrCat("the API server ", credentials.server);
  auto http = net::HttpClient::Create(std::move(o));
  if (!http.ok()) {
    return absl::Status(
        http.status().code(),
        absl::StrCat(credentials.source, ": ", http.status().message()));
  }
  return std::unique_ptr<KubeClient>(
      new KubeClient(std::move(credentials), options, *std::move(http)));
}

void KubeClient::Cancel() { http_->Cancel(); }

net::HttpClient::Headers KubeClient::AuthHeaders() const {
  std::string token = creds_.token;
  if (!creds_.token_file.empty()) {
    if (absl::StatusOr<std::string> t =
            ReadSmallFile(creds_.token_file, "token");
        t.ok()) {
      token = std::string(absl::StripAsciiWhitespace(*t));
    }
  }
  if (token.empty()) return {};
  return {{"Authorization", absl::StrCat("Bearer ", token)}};
}

absl::StatusOr<KubeResponse> KubeClient::Request(
    absl::string_view method, absl::string_view target, absl::string_view body,
    absl::string_view content_type) {
  return http_->Request(method, target, AuthHeaders(), body, content_type);
}

absl::Status KubeClient::Stream(
    absl::string_view target, Micros idle,
    const std::function<bool(absl::string_view)>& on_line,
    KubeResponse* error_response) {
  return http_->Stream("GET", target, AuthHeaders(), {}, idle, on_line,
                       error_response);
}

}  // namespace gpusched::backends
