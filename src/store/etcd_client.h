// EtcdClient: gpusched's client of etcd's v3 API through its JSON gateway
// (POST /v3/kv/range, /v3/kv/txn, /v3/lease/*, /v3/watch, ...), over
// net::HttpClient. Why the gateway and not gRPC: docs/ha.md ("Why the
// JSON gateway").
//
// Several endpoints (the members of a cluster): a call goes to the endpoint
// that answered last and, when that one cannot be reached or says it cannot
// serve (no leader, timeout), to each of the others in turn, once. With a
// user and password, a token is taken from /v3/auth/authenticate and taken
// again when etcd says it expired. TLS: a CA, and optionally a client
// certificate (etcd's --client-cert-auth).
//
// JSON conventions of the gateway: keys and values are base64, int64
// fields are strings, and fields at their zero value are left out; Field()
// and B64() below read them that way.
//
// Thread-safe. Cancel() ends every call in progress (a blocked watch) and
// refuses later ones: give a watch a client of its own.
#ifndef GPUSCHED_STORE_ETCD_CLIENT_H_
#define GPUSCHED_STORE_ETCD_CLIENT_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "net/http_client.h"
#include "nlohmann/json.hpp"

namespace gpusched::store {

struct EtcdOptions {
  // "http://host:port" or "https://host:port", at least one, at most 16.
  std::vector<std::string> endpoints;
  // Every key gpusched writes lives under it ("/gpusched/"); ends with '/'.
  std::string prefix = "/gpusched/";
  // etcd's user/password authentication (both or neither).
  std::string username;
  std::string password;
  // TLS (https endpoints): the CA that signed the members' certificates
  // (empty: the system's), and a client certificate and key for etcd's
  // --client-cert-auth. PEM text, read from files by the config.
  std::string ca_pem;
  std::string cert_pem;
  std::string key_pem;
  bool insecure_skip_verify = false;
  // Each step of a call (connect, write, first byte, each read).
  Micros request_timeout = 2 * kMicrosPerSecond;
  // A call that no member answered goes round the members again until it
  // has been trying this long (an etcd leader election takes a second or
  // two: a write waits through it rather than fail); 0: once round.
  Micros retry_for = 0;
};

// InvalidArgument naming what is wrong (an endpoint that is not a URL, a
// prefix without a leading '/', a user without a password, ...).
absl::Status ValidateEtcdOptions(const EtcdOptions& options);

class EtcdClient {
 public:
  static absl::StatusOr<std::unique_ptr<EtcdClient>> Create(
      EtcdOptions options);
  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  // POST /v3/`method` (e.g. "kv/txn") with `body`; the answer. An error
  // the gateway answers maps its gRPC code onto absl's (Unavailable,
  // DeadlineExceeded, FailedPrecondition, OutOfRange for a compacted
  // revision, NotFound for an unknown lease, ...), with etcd's message.
  // Unavailable when no endpoint answered (within retry_for), naming each
  // one's failure.
  absl::StatusOr<nlohmann::json> Call(std::string_view method,
                                      const nlohmann::json& body);

  // POST /v3/watch with {"create_request": `create_request`} and calls
  // `on_response` with each streamed "result" object until the stream
  // ends, `on_response` returns false, nothing came for `idle`
  // (DeadlineExceeded), or Cancel(). Tries each endpoint for the
  // connection like Call.
  absl::Status Watch(
      const nlohmann::json& create_request, Micros idle,
      const std::function<bool(const nlohmann::json&)>& on_response);

  // Ends the calls in progress and refuses later ones (Cancelled).
  void Cancel();

  const EtcdOptions& options() const { return options_; }
  // The endpoint calls go to first (the last that answered).
  std::string endpoint() const;

 private:
  EtcdClient(EtcdOptions options,
             std::vector<std::unique_ptr<net::HttpClient>> http);
  // The Authorization header, authenticating first when there is no token.
  absl::StatusOr<net::HttpClient::Headers> Auth(size_t endpoint, bool renew);
  // One call to one endpoint.
  absl::StatusOr<nlohmann::json> CallOne(size_t endpoint,
                                         std::string_view method,
                                         const std::string& body);

  const EtcdOptions options_;
  std::vector<std::unique_ptr<net::HttpClient>> http_;  // per endpoint
  std::atomic<size_t> current_{0};
  mutable absl::Mutex mu_;
  std::string token_ ABSL_GUARDED_BY(mu_);
};

// --- Reading the gateway's JSON --------------------------------------------
// An int64 field (a string or a number; 0 when absent or malformed).
int64_t EtcdInt(const nlohmann::json& j, const char* key);
// A bool field (false when absent).
bool EtcdBool(const nlohmann::json& j, const char* key);
// base64 of `raw`, and back ("" when absent or malformed).
std::string B64(std::string_view raw);
std::string UnB64(const nlohmann::json& j, const char* key);
// The end of the range of every key that starts with `prefix`.
std::string PrefixEnd(const std::string& prefix);

}  // namespace gpusched::store

#endif  // GPUSCHED_STORE_ETCD_CLIENT_H_
