#include "backends/kubernetes/kube_client.h"

#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <utility>
#include <variant>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "boost/asio/connect.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/ssl.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"
#include "boost/beast/ssl.hpp"
#include "common/status.h"
#include "nlohmann/json.hpp"
#include "yaml-cpp/yaml.h"

namespace gpusched::backends {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;

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

bool IsIp(const std::string& host) {
  boost::system::error_code ec;
  (void)asio::ip::make_address(host, ec);
  return !ec;
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

// One connection: plain TCP or TLS over it.
using PlainStream = beast::tcp_stream;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;

struct KubeClient::Impl {
  std::optional<ssl::context> tls;
  absl::Mutex mu;
  bool cancelled ABSL_GUARDED_BY(mu) = false;
  absl::flat_hash_set<asio::io_context*> active ABSL_GUARDED_BY(mu);
};

KubeClient::KubeClient(KubeCredentials credentials, Options options,
                       std::unique_ptr<Impl> impl)
    : creds_(std::move(credentials)),
      options_(options),
      impl_(std::move(impl)) {}

KubeClient::~KubeClient() = default;

absl::StatusOr<std::unique_ptr<KubeClient>> KubeClient::Create(
    KubeCredentials credentials, Options options) {
  auto impl = std::make_unique<Impl>();
  if (credentials.tls) {
    impl->tls.emplace(ssl::context::tls_client);
    ssl::context& ctx = *impl->tls;
    boost::system::error_code ec;
    ctx.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                    ssl::context::no_sslv3 | ssl::context::no_tlsv1 |
                    ssl::context::no_tlsv1_1);
    if (credentials.ca_pem.empty()) {
      ctx.set_default_verify_paths(ec);
    } else {
      ctx.add_certificate_authority(
          asio::buffer(credentials.ca_pem.data(), credentials.ca_pem.size()),
          ec);
    }
    if (ec) {
      return absl::InvalidArgumentError(absl::StrCat(
          credentials.source, ": cannot load the CA: ", ec.message()));
    }
    if (!credentials.client_cert_pem.empty()) {
      ctx.use_certificate_chain(
          asio::buffer(credentials.client_cert_pem.data(),
                       credentials.client_cert_pem.size()),
          ec);
      if (!ec) {
        ctx.use_private_key(asio::buffer(credentials.client_key_pem.data(),
                                         credentials.client_key_pem.size()),
                            ssl::context::pem, ec);
      }
      if (ec) {
        return absl::InvalidArgumentError(absl::StrCat(
            credentials.source,
            ": cannot load the client certificate or key: ", ec.message()));
      }
    }
    ctx.set_verify_mode(credentials.insecure_skip_verify ? ssl::verify_none
                                                         : ssl::verify_peer);
  }
  return std::unique_ptr<KubeClient>(
      new KubeClient(std::move(credentials), options, std::move(impl)));
}

void KubeClient::Cancel() {
  absl::MutexLock l(&impl_->mu);
  impl_->cancelled = true;
  for (asio::io_context* io : impl_->active) io->stop();
}

namespace {

std::chrono::steady_clock::duration Dur(Micros us) {
  return std::chrono::microseconds(us);
}

beast::tcp_stream& Lowest(PlainStream& s) { return s; }
beast::tcp_stream& Lowest(TlsStream& s) { return beast::get_lowest_layer(s); }

absl::Status Failed(const KubeCredentials& c, absl::string_view step,
                    const beast::error_code& ec) {
  const std::string text =
      absl::StrCat("the API server ", c.server, ": ", step, ": ", ec.message());
  if (ec == beast::error::timeout) return absl::DeadlineExceededError(text);
  if (ec == asio::error::operation_aborted) return absl::CancelledError(text);
  return absl::UnavailableError(text);
}

}  // namespace

// One exchange on its own connection (and io_context, registered so that
// Cancel() can stop it).
class KubeExchange {
 public:
  KubeExchange(const KubeCredentials& c, KubeClient::Impl& impl, Micros timeout)
      : c_(c), impl_(impl), timeout_(timeout) {}
  ~KubeExchange() {
    absl::MutexLock l(&impl_.mu);
    impl_.active.erase(&io_);
  }

  // Runs the operation `start` begins to its end; the error it ended with
  // (operation_aborted when the client was cancelled). The cancelled flag is
  // read after restart(): a Cancel() that came before is seen here, and one
  // that comes after stops run().
  template <typename Start>
  beast::error_code Await(Start&& start) {
    beast::error_code out = asio::error::operation_aborted;
    bool done = false;
    start([&out, &done](beast::error_code ec, auto&&...) {
      out = ec;
      done = true;
    });
    io_.restart();
    {
      absl::MutexLock l(&impl_.mu);
      if (impl_.cancelled) return asio::error::operation_aborted;
    }
    io_.run();
    return done ? out : beast::error_code(asio::error::operation_aborted);
  }

  absl::Status Open() {
    {
      absl::MutexLock l(&impl_.mu);
      if (impl_.cancelled) {
        return absl::CancelledError("the Kubernetes client was stopped");
      }
      impl_.active.insert(&io_);
    }
    tcp::resolver resolver(io_);
    beast::error_code ec;
    const tcp::resolver::results_type addrs =
        resolver.resolve(c_.host, std::to_string(c_.port), ec);
    if (ec) return Failed(c_, "resolve", ec);
    if (c_.tls) {
      stream_.emplace<TlsStream>(io_, *impl_.tls);
    } else {
      stream_.emplace<PlainStream>(io_);
    }
    return std::visit(
        [&](auto& s) -> absl::Status {
          if constexpr (std::is_same_v<std::decay_t<decltype(s)>,
                                       std::monostate>) {
            return absl::InternalError("no stream");
          } else {
            Lowest(s).expires_after(Dur(timeout_));
            beast::error_code e = Await([&](auto h) {
              Lowest(s).async_connect(
                  addrs,
                  [h](beast::error_code ec2, const tcp::endpoint&) { h(ec2); });
            });
            if (e) return Failed(c_, "connect", e);
            if constexpr (std::is_same_v<std::decay_t<decltype(s)>,
                                         TlsStream>) {
              return Handshake(s);
            }
            return absl::OkStatus();
          }
        },
        stream_);
  }

  absl::Status Write(http::request<http::string_body>& req) {
    return Visit([&](auto& s) {
      Lowest(s).expires_after(Dur(timeout_));
      beast::error_code e =
          Await([&](auto h) { http::async_write(s, req, std::move(h)); });
      return e ? Failed(c_, "write", e) : absl::OkStatus();
    });
  }

  // The whole response.
  absl::StatusOr<KubeResponse> Read() {
    http::response_parser<http::string_body> parser;
    parser.body_limit(kMaxKubeBody);
    absl::Status st = Visit([&](auto& s) {
      Lowest(s).expires_after(Dur(timeout_));
      beast::error_code e = Await(
          [&](auto h) { http::async_read(s, buffer_, parser, std::move(h)); });
      return e ? Failed(c_, "read", e) : absl::OkStatus();
    });
    if (!st.ok()) return st;
    return Response(parser.get());
  }

  // The head, then each line of the body to `on_line`.
  absl::Status ReadLines(Micros idle,
                         const std::function<bool(absl::string_view)>& on_line,
                         KubeResponse* error_response) {
    http::response_parser<http::string_body> parser;
    parser.body_limit(boost::none);
    absl::Status st = Visit([&](auto& s) {
      Lowest(s).expires_after(Dur(timeout_));
      beast::error_code e = Await([&](auto h) {
        http::async_read_header(s, buffer_, parser, std::move(h));
      });
      return e ? Failed(c_, "read", e) : absl::OkStatus();
    });
    if (!st.ok()) return st;
    if (parser.get().result_int() != 200) {
      parser.body_limit(kMaxKubeBody);
      st = Visit([&](auto& s) {
        Lowest(s).expires_after(Dur(timeout_));
        beast::error_code e = Await([&](auto h) {
          http::async_read(s, buffer_, parser, std::move(h));
        });
        return e ? Failed(c_, "read", e) : absl::OkStatus();
      });
      if (!st.ok()) return st;
      *error_response = Response(parser.get());
      return absl::OkStatus();
    }
    size_t scanned = 0;
    while (true) {
      std::string& body = parser.get().body();
      size_t nl;
      while ((nl = body.find('\n', scanned)) != std::string::npos) {
        absl::string_view line(body.data(), nl);
        if (!absl::StripAsciiWhitespace(line).empty() && !on_line(line)) {
          return absl::OkStatus();
        }
        body.erase(0, nl + 1);
        scanned = 0;
      }
      scanned = body.size();
      if (body.size() > kMaxKubeLine) {
        return absl::ResourceExhaustedError(
            absl::StrCat("the API server ", c_.server, ": a watch event over ",
                         kMaxKubeLine >> 20, " MiB"));
      }
      if (parser.is_done()) {
        if (!absl::StripAsciiWhitespace(body).empty()) on_line(body);
        return absl::OkStatus();
      }
      st = Visit([&](auto& s) {
        Lowest(s).expires_after(Dur(idle));
        beast::error_code e = Await([&](auto h) {
          http::async_read_some(s, buffer_, parser, std::move(h));
        });
        return e ? Failed(c_, "watch", e) : absl::OkStatus();
      });
      if (!st.ok()) return st;
    }
  }

 private:
  absl::Status Handshake(TlsStream& s) {
    SSL* ssl = s.native_handle();
    const std::string& name =
        c_.tls_server_name.empty() ? c_.host : c_.tls_server_name;
    if (!IsIp(name)) SSL_set_tlsext_host_name(ssl, name.c_str());
    if (!c_.insecure_skip_verify) {
      X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
      const int ok = IsIp(name)
                         ? X509_VERIFY_PARAM_set1_ip_asc(param, name.c_str())
                         : X509_VERIFY_PARAM_set1_host(param, name.c_str(), 0);
      if (ok != 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("cannot verify the server name ", name));
      }
    }
    beast::error_code e = Await([&](auto h) {
      s.async_handshake(ssl::stream_base::client, std::move(h));
    });
    return e ? Failed(c_, "TLS handshake", e) : absl::OkStatus();
  }

  template <typename F>
  absl::Status Visit(F&& f) {
    if (auto* p = std::get_if<PlainStream>(&stream_)) return f(*p);
    if (auto* t = std::get_if<TlsStream>(&stream_)) return f(*t);
    return absl::InternalError("not connected");
  }

  static KubeResponse Response(http::response<http::string_body>& res) {
    KubeResponse out;
    out.status = res.result_int();
    out.body = std::move(res.body());
    if (auto it = res.find(http::field::retry_after); it != res.end()) {
      int s = 0;
      if (absl::SimpleAtoi(
              absl::string_view(it->value().data(), it->value().size()), &s) &&
          s > 0) {
        out.retry_after = std::min<Micros>(s, 3600) * kMicrosPerSecond;
      }
    }
    return out;
  }

  const KubeCredentials& c_;
  KubeClient::Impl& impl_;
  Micros timeout_;
  asio::io_context io_;
  beast::flat_buffer buffer_;
  std::variant<std::monostate, PlainStream, TlsStream> stream_;
};

namespace {

absl::StatusOr<http::request<http::string_body>> MakeRequest(
    const KubeCredentials& c, absl::string_view method,
    absl::string_view target, absl::string_view body) {
  http::request<http::string_body> req;
  const http::verb verb =
      http::string_to_verb(beast::string_view(method.data(), method.size()));
  if (verb == http::verb::unknown) {
    return absl::InvalidArgumentError(absl::StrCat("bad method ", method));
  }
  req.method(verb);
  req.target(beast::string_view(target.data(), target.size()));
  req.version(11);
  const bool v6 = c.host.find(':') != std::string::npos;
  req.set(http::field::host,
          absl::StrCat(v6 ? "[" : "", c.host, v6 ? "]" : "", ":", c.port));
  req.set(http::field::user_agent, "gpusched");
  req.set(http::field::accept, "application/json");
  std::string token = c.token;
  if (!c.token_file.empty()) {
    if (absl::StatusOr<std::string> t = ReadSmallFile(c.token_file, "token");
        t.ok()) {
      token = std::string(absl::StripAsciiWhitespace(*t));
    }
  }
  if (!token.empty()) {
    req.set(http::field::authorization, absl::StrCat("Bearer ", token));
  }
  if (!body.empty()) {
    req.set(http::field::content_type, "application/json");
    req.body() = std::string(body);
  }
  req.prepare_payload();
  return req;
}

}  // namespace

absl::StatusOr<KubeResponse> KubeClient::Request(absl::string_view method,
                                                 absl::string_view target,
                                                 absl::string_view body) {
  ASSIGN_OR_RETURN(auto req, MakeRequest(creds_, method, target, body));
  requests_.fetch_add(1);
  KubeExchange x(creds_, *impl_, options_.timeout);
  if (absl::Status st = x.Open(); !st.ok()) return st;
  if (absl::Status st = x.Write(req); !st.ok()) return st;
  return x.Read();
}

absl::Status KubeClient::Stream(
    absl::string_view target, Micros idle,
    const std::function<bool(absl::string_view)>& on_line,
    KubeResponse* error_response) {
  ASSIGN_OR_RETURN(auto req, MakeRequest(creds_, "GET", target, {}));
  requests_.fetch_add(1);
  KubeExchange x(creds_, *impl_, options_.timeout);
  if (absl::Status st = x.Open(); !st.ok()) return st;
  if (absl::Status st = x.Write(req); !st.ok()) return st;
  return x.ReadLines(idle, on_line, error_response);
}

}  // namespace gpusched::backends
