// KubeClient: gpusched's client of the Kubernetes API server, for the
// Kubernetes launcher and inventory (docs/kubernetes.md).
//
// Credentials are found as Kubernetes clients find them: a kubeconfig file
// (its current context: server, certificate authority, bearer token or token
// file, or client certificate and key), or, inside a Pod, the service
// account's token and CA under /var/run/secrets/kubernetes.io/serviceaccount
// with KUBERNETES_SERVICE_HOST/PORT. TLS is always verified against the CA
// (the server's name or IP), unless the kubeconfig says
// insecure-skip-tls-verify; plain http:// is accepted only for a server URL
// that says so.
//
// Requests go through net::HttpClient: HTTP/1.1 on a connection of their own,
// each step (connect, TLS handshake, write, first byte, every piece of a body)
// bounded by the timeout; bodies are bounded (kMaxKubeBody, one watch line
// kMaxKubeLine). Errors come from the API's Status objects: KubeStatusError
// maps them onto absl codes with the API's reason and message, and Retry-After
// (429, 503) is kept for the caller's backoff.
//
// Thread-safe: calls on different threads run independently; Cancel() ends
// every call in progress (a blocked watch) from any thread, and every later
// one, so that a watcher's thread can be joined.
#ifndef GPUSCHED_BACKENDS_KUBERNETES_KUBE_CLIENT_H_
#define GPUSCHED_BACKENDS_KUBERNETES_KUBE_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/clock.h"
#include "net/http_client.h"
#include "nlohmann/json.hpp"

namespace gpusched::backends {

// Bounds on what is read from the API server.
inline constexpr size_t kMaxKubeBody = net::kMaxHttpClientBody;
inline constexpr size_t kMaxKubeLine = net::kMaxHttpClientLine;

struct KubeCredentials {
  std::string host;  // name or IP (no brackets)
  uint16_t port = 443;
  bool tls = true;
  std::string server;           // the URL, for messages
  std::string tls_server_name;  // verify this name instead of `host`
  std::string ca_pem;           // CA certificates; empty: the system's
  bool insecure_skip_verify = false;
  std::string token;       // bearer token
  std::string token_file;  // read at each request (projected tokens rotate)
  std::string client_cert_pem;
  std::string client_key_pem;
  std::string namespace_name;  // the context's or the Pod's; may be empty
  std::string source;          // "in-cluster" or "kubeconfig PATH (context C)"
};

// `server`: "https://host:port" or "http://host:port" (port optional).
absl::Status ParseKubeServer(const std::string& server, KubeCredentials* c);

// The service account's credentials; `dir` holds token, ca.crt and
// namespace. FailedPrecondition when KUBERNETES_SERVICE_HOST is not set.
absl::StatusOr<KubeCredentials> InClusterKubeCredentials(
    const std::string& dir = "/var/run/secrets/kubernetes.io/serviceaccount");

// A kubeconfig file's `context` (empty: current-context). Relative file paths
// in it are relative to the file's directory. InvalidArgument naming the
// field for what is malformed; Unimplemented for exec and auth-provider
// plugins.
absl::StatusOr<KubeCredentials> KubeconfigCredentials(
    const std::string& path, const std::string& context = "");
// The same from the file's text; `path` names it in errors and anchors its
// relative paths.
absl::StatusOr<KubeCredentials> ParseKubeconfig(const std::string& text,
                                                const std::string& path,
                                                const std::string& context);

// `kubeconfig` when set; else in-cluster when KUBERNETES_SERVICE_HOST is set;
// else $KUBECONFIG; else ~/.kube/config. `server`, when set, replaces the
// URL of the credentials found.
absl::StatusOr<KubeCredentials> ResolveKubeCredentials(
    const std::string& kubeconfig, const std::string& server);

using KubeResponse = net::HttpClientResponse;

// OK for 2xx; else an error from the body's Status object (reason, message)
// or the HTTP status, prefixed with `what` ("POST pods"): 400 and 422
// InvalidArgument, 401 Unauthenticated, 403 PermissionDenied, 404 NotFound,
// 409 AlreadyExists (reason AlreadyExists) or Aborted (Conflict), 410
// OutOfRange (Expired/Gone), 429 ResourceExhausted, 5xx Unavailable.
absl::Status KubeStatusError(const KubeResponse& r, absl::string_view what);

// Reads of what the API server sent that never throw, whatever its types:
// member `key` of `j` when `j` is an object and the member has the type;
// else null, "" or 0.
const nlohmann::json& KubeField(const nlohmann::json& j, const char* key);
std::string KubeStr(const nlohmann::json& j, const char* key);
int64_t KubeInt(const nlohmann::json& j, const char* key);

// `s` percent-encoded for a query string (all but A-Z a-z 0-9 -._~).
std::string KubeQueryEscape(absl::string_view s);

class KubeClient {
 public:
  struct Options {
    Micros timeout = 10 * kMicrosPerSecond;  // each step of a request
  };
  // InvalidArgument when the CA, certificate or key cannot be loaded.
  static absl::StatusOr<std::unique_ptr<KubeClient>> Create(
      KubeCredentials credentials, Options options);
  ~KubeClient();
  KubeClient(const KubeClient&) = delete;
  KubeClient& operator=(const KubeClient&) = delete;

  // `target` is the path and query ("/api/v1/nodes?limit=500"); `body` is
  // sent as `content_type` when not empty (a PATCH names its patch type:
  // application/merge-patch+json, application/strategic-merge-patch+json).
  // A transport failure is Unavailable (DeadlineExceeded for a timeout); an
  // HTTP error status is a response (see KubeStatusError).
  absl::StatusOr<KubeResponse> Request(
      absl::string_view method, absl::string_view target,
      absl::string_view body = {},
      absl::string_view content_type = "application/json");

  // GET `target` (a watch) and calls `on_line` with each line of the body
  // as it arrives, until the server ends it, `on_line` returns false, no
  // data came for `idle` (DeadlineExceeded), or Cancel(). A status other
  // than 200 is the response, its body read whole, in `*error_response`.
  absl::Status Stream(absl::string_view target, Micros idle,
                      const std::function<bool(absl::string_view)>& on_line,
                      KubeResponse* error_response);

  // Ends the calls in progress and refuses later ones (Cancelled).
  void Cancel();

  const KubeCredentials& credentials() const { return creds_; }
  // Requests sent since the client was made (watches included).
  int64_t requests() const { return http_->requests(); }

 private:
  KubeClient(KubeCredentials credentials, Options options,
             std::unique_ptr<net::HttpClient> http);
  // The bearer token (a token file is read at each request: projected
  // tokens rotate).
  net::HttpClient::Headers AuthHeaders() const;

  KubeCredentials creds_;
  Options options_;
  std::unique_ptr<net::HttpClient> http_;
};

}  // namespace gpusched::backends

#endif  // GPUSCHED_BACKENDS_KUBERNETES_KUBE_CLIENT_H_
