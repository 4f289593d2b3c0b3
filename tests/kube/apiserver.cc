// kube_test_apiserver: the stand-in Kubernetes API server for gpusched's
// Kubernetes launcher tests (what it is and is not: apiserver.h).
//
//   kube_test_apiserver --nodes NODES.json --port-file FILE
//       [--cert C --key K] [--token T] [--record-dir DIR] [--log-dir DIR]
//       [--bookmark-ms 1000] [--history 1000] [--autoscaler POOLS.json]
//       [--nodepools NODEPOOLLIST.json]
//
// Listens on 127.0.0.1, any free port, written to --port-file (atomically)
// once listening; HTTPS only with --cert/--key. With --token every request
// but /testing/* needs `Authorization: Bearer T` (else 401). Runs until
// SIGTERM or SIGINT, then ends every watch, stops the HTTP server, SIGKILLs
// every process group its kubelet started, reaps them and exits 0.
//
// API (JSON only; paths as the real server's):
//   GET /api, /api/v1, /version, /healthz, /livez, /readyz
//   GET /api/v1/nodes[?watch=true], GET /api/v1/nodes/{name}
//   GET /api/v1/pods, /api/v1/namespaces/{ns}/pods (list or ?watch=true;
//       labelSelector, fieldSelector, limit, continue, resourceVersion,
//       resourceVersionMatch, allowWatchBookmarks, timeoutSeconds,
//       sendInitialEvents)
//   POST /api/v1/namespaces/{ns}/pods
//   GET|PUT|PATCH|DELETE /api/v1/namespaces/{ns}/pods/{name}
//   POST /api/v1/namespaces/{ns}/pods/{name}/binding
//   PATCH /api/v1/namespaces/{ns}/pods/{name}/status (merge or strategic
//       merge; status only)
//   GET|POST /api/v1/namespaces/{ns}/podtemplates, GET|DELETE .../{name}
//   GET|POST
//   /apis/autoscaling.x-k8s.io/v1/namespaces/{ns}/provisioningrequests,
//       GET|DELETE .../{name} (the autoscaler writes their status)
//   GET /apis/karpenter.sh/v1/nodepools (the --nodepools file; 404 without)
// With --autoscaler POOLS.json a minimal cluster autoscaler adds and removes
// nodes (apiserver.h, Autoscaler).
// Test controls (no auth, never faulted, counted or recorded):
//   POST /testing/nodes/{name}/ready?status=True|False|Unknown
//   POST /testing/nodes/{name}/taints        (body: a JSON array of taints)
//   POST /testing/nodes/{name}/unschedulable?value=true|false
//   POST /testing/expire-watches
//   POST /testing/faults {"status":429|500|503,"count":N,"retryAfterSeconds":S}
//   GET  /testing/stats, GET /testing/pods
//   POST /testing/pods/{ns}/{name}/probes?fail=true|false  (the kubelet's
//        readiness probes of the Pod fail, or run again)
//   POST /testing/pods/{ns}/{name}/evict     (node-pressure eviction: the
//        process is killed, the Pod Failed with reason Evicted)
//   GET  /testing/autoscaler                 (pools, nodes coming, decisions)
// With --record-dir every non-empty POST/PUT/PATCH/DELETE body of the API is
// written as DIR/<6-digit seq>-<resource>-<METHOD>.json, byte for byte
// (resource: pods, binding, pods-status, podtemplates, provisioningrequests,
// nodes, other); a PATCH body (not an object) as .patch, followed by the
// object it made, as <seq>-<resource>-PATCHED.json.
#include "tests/kube/apiserver.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace gpusched::kubetest {
namespace {

namespace http = net::http;

struct Flags {
  std::string nodes, port_file, cert, key, token, record_dir, log_dir;
  std::string autoscaler, nodepools;
  int64_t bookmark_ms = 1000;
  int64_t history = 1000;
};

constexpr char kUsage[] =
    "usage: kube_test_apiserver --nodes NODES.json --port-file FILE "
    "[--cert C --key K] [--token T] [--record-dir DIR] [--log-dir DIR] "
    "[--bookmark-ms 1000] [--history 1000] [--autoscaler POOLS.json] "
    "[--nodepools NODEPOOLLIST.json]\n";

absl::StatusOr<Flags> ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (!a.starts_with("--")) {
      return absl::InvalidArgumentError(absl::StrCat("unexpected '", a, "'"));
    }
    a = a.substr(2);
    std::string value;
    if (const size_t eq = a.find('='); eq != std::string::npos) {
      value = a.substr(eq + 1);
      a = a.substr(0, eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--", a, " needs a value"));
    }
    std::string* s = a == "nodes"        ? &f.nodes
                     : a == "port-file"  ? &f.port_file
                     : a == "cert"       ? &f.cert
                     : a == "key"        ? &f.key
                     : a == "token"      ? &f.token
                     : a == "record-dir" ? &f.record_dir
                     : a == "log-dir"    ? &f.log_dir
                     : a == "autoscaler" ? &f.autoscaler
                     : a == "nodepools"  ? &f.nodepools
                                         : nullptr;
    if (s != nullptr) {
      *s = value;
    } else if (a == "bookmark-ms" || a == "history") {
      int64_t* n = a == "history" ? &f.history : &f.bookmark_ms;
      if (!absl::SimpleAtoi(value, n) || *n < (a == "history" ? 0 : 1)) {
        return absl::InvalidArgumentError(
            absl::StrCat("--", a, ": not a valid number: '", value, "'"));
      }
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", a));
    }
  }
  if (f.nodes.empty() || f.port_file.empty()) {
    return absl::InvalidArgumentError("--nodes and --port-file are required");
  }
  if (f.cert.empty() != f.key.empty()) {
    return absl::InvalidArgumentError("give both --cert and --key, or neither");
  }
  return f;
}

std::string PercentDecode(absl::string_view s, bool plus_is_space) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    int hi = 0, lo = 0;
    auto hex = [](char c) {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      return -1;
    };
    if (s[i] == '%' && i + 2 < s.size() + 0 && (hi = hex(s[i + 1])) >= 0 &&
        (lo = hex(s[i + 2])) >= 0) {
      out += static_cast<char>(hi * 16 + lo);
      i += 2;
    } else if (s[i] == '+' && plus_is_space) {
      out += ' ';
    } else {
      out += s[i];
    }
  }
  return out;
}

Query ParseQuery(absl::string_view q) {
  Query out;
  for (absl::string_view kv : absl::StrSplit(q, '&', absl::SkipEmpty())) {
    const size_t eq = kv.find('=');
    out[PercentDecode(kv.substr(0, eq), true)] =
        eq == absl::string_view::npos ? ""
                                      : PercentDecode(kv.substr(eq + 1), true);
  }
  return out;
}

std::string Get(const Query& q, const char* key) {
  auto it = q.find(key);
  return it == q.end() ? std::string() : it->second;
}

bool Truthy(const std::string& v) { return v == "true" || v == "1"; }

void SendReply(net::Responder& out, const Reply& r) {
  net::HttpResponse res{static_cast<http::status>(r.code), 11};
  res.set(http::field::content_type, "application/json");
  for (const auto& [k, v] : r.headers) res.set(k, v);
  res.body() = r.body.dump() + "\n";
  out.Send(std::move(res));
}

Reply Json(int code, json body) {
  Reply r;
  r.code = code;
  r.body = std::move(body);
  return r;
}

Reply Invalid422(const std::string& kind, const std::string& field,
                 const std::string& message) {
  return StatusReply(422, "Invalid",
                     absl::StrCat(kind, " is invalid: ", field, ": ", message),
                     {{"kind", kind},
                      {"causes",
                       {{{"reason", "FieldValueForbidden"},
                         {"field", field},
                         {"message", message}}}}});
}

// The HTTP front: routing, auth, injected faults, records and stats.
class Front {
 public:
  Front(const Flags& flags, Store* store, Kubelet* kubelet,
        Autoscaler* autoscaler, json nodepools)
      : flags_(flags),
        store_(store),
        kubelet_(kubelet),
        autoscaler_(autoscaler),
        nodepools_(std::move(nodepools)) {}

  void set_port(uint16_t port) { port_ = port; }

  void Handle(net::HttpRequest req, std::shared_ptr<net::Responder> out) {
    const std::string target(req.target());
    const size_t qm = target.find('?');
    const absl::string_view path = absl::string_view(target).substr(0, qm);
    const Query query = ParseQuery(
        qm == std::string::npos ? ""
                                : absl::string_view(target).substr(qm + 1));
    std::vector<std::string> seg;
    for (absl::string_view s : absl::StrSplit(path, '/', absl::SkipEmpty())) {
      seg.push_back(PercentDecode(s, false));
    }
    const std::string method(req.method_string());
    // nlohmann::json throws on a type it did not expect (a body of an odd
    // shape): answered here as the real server answers what it cannot
    // decode.
    try {
      if (!seg.empty() && seg[0] == "testing") {
        SendReply(*out, Testing(method, seg, query, req.body()));
        return;
      }
      Serve(req, seg, query, out);
    } catch (const json::exception& e) {
      SendReply(*out, StatusReply(400, "BadRequest",
                                  absl::StrCat("the object provided could not "
                                               "be decoded: ",
                                               e.what())));
    }
  }

 private:
  void Serve(const net::HttpRequest& req, const std::vector<std::string>& seg,
             const Query& query, const std::shared_ptr<net::Responder>& out) {
    const std::string method(req.method_string());
    // What it is, for the stats and the record.
    std::string verb = method, resource = "other";
    const bool api = seg.size() >= 3 && seg[0] == "api" && seg[1] == "v1";
    const bool watch = Truthy(Get(query, "watch"));
    if (api && seg[2] == "nodes" && seg.size() <= 4) {
      resource = "nodes";
    } else if (api && ((seg[2] == "pods" && seg.size() == 3) ||
                       (seg[2] == "namespaces" && seg.size() >= 5 &&
                        seg[4] == "pods" && seg.size() <= 6))) {
      resource = "pods";
    } else if (api && seg.size() == 7 && seg[2] == "namespaces" &&
               seg[4] == "pods" && seg[6] == "binding") {
      resource = "pods/binding";
    } else if (api && seg.size() == 7 && seg[2] == "namespaces" &&
               seg[4] == "pods" && seg[6] == "status") {
      resource = "pods/status";
    } else if (api && seg.size() >= 5 && seg.size() <= 6 &&
               seg[2] == "namespaces" && seg[4] == "podtemplates") {
      resource = "podtemplates";
    } else if (seg.size() >= 6 && seg.size() <= 7 && seg[0] == "apis" &&
               seg[1] == "autoscaling.x-k8s.io" && seg[2] == "v1" &&
               seg[3] == "namespaces" && seg[5] == "provisioningrequests") {
      resource = "provisioningrequests";
    } else if (seg.size() == 4 && seg[0] == "apis" &&
               seg[1] == "karpenter.sh" && seg[3] == "nodepools") {
      resource = "nodepools";
    }
    const bool collection =
        (resource == "nodes" && seg.size() == 3) ||
        (resource == "pods" && (seg.size() == 3 || seg.size() == 5));
    if (method == "GET" && collection) verb = watch ? "WATCH" : "LIST";
    const std::string& body = req.body();
    {
      absl::MutexLock l(&mu_);
      ++requests_[absl::StrCat(verb, " ", resource)];
      ++total_;
      if (!flags_.record_dir.empty() && !body.empty() &&
          (method == "POST" || method == "PUT" || method == "PATCH" ||
           method == "DELETE")) {
        Record(RecordName(resource), method, body,
               method == "PATCH" ? ".patch" : ".json");
      }
    }
    if (!flags_.token.empty() &&
        req[http::field::authorization] != "Bearer " + flags_.token) {
      {
        absl::MutexLock l(&mu_);
        ++unauthorized_;
      }
      SendReply(*out, StatusReply(401, "Unauthorized", "Unauthorized"));
      return;
    }
    if (std::optional<Reply> fault = TakeFault()) {
      SendReply(*out, *fault);
      return;
    }
    json parsed;  // null when there is no body
    if (!body.empty()) {
      const std::string type(req[http::field::content_type]);
      const bool patch = method == "PATCH";
      if (!patch && !type.starts_with("application/json")) {
        SendReply(*out,
                  StatusReply(415, "UnsupportedMediaType",
                              absl::StrCat("the body of the request was in an "
                                           "unknown format - accepted media "
                                           "types include: application/json "
                                           "(got \"",
                                           type, "\")")));
        return;
      }
      parsed = json::parse(body, nullptr, /*allow_exceptions=*/false);
      if (parsed.is_discarded()) {
        SendReply(*out, StatusReply(400, "BadRequest",
                                    "the object provided is unrecognized: "
                                    "couldn't get version/kind; json parse "
                                    "error: the body is not valid JSON"));
        return;
      }
    }
    if (!Get(query, "dryRun").empty()) {
      SendReply(*out, StatusReply(400, "BadRequest",
                                  "dryRun is not supported by this stand-in"));
      return;
    }
    Api(method, seg, query, parsed, std::string(req[http::field::content_type]),
        out, resource);
  }

  static std::string RecordName(const std::string& resource) {
    if (resource == "pods/binding") return "binding";
    if (resource == "pods/status") return "pods-status";
    return resource;
  }

  // Sends `r`; the object a PATCH made is recorded after its patch.
  void Answer(net::Responder& out, const Reply& r, const std::string& method,
              const std::string& resource) {
    if (method == "PATCH" && r.code == 200 && !flags_.record_dir.empty()) {
      absl::MutexLock l(&mu_);
      Record(RecordName(resource), "PATCHED", r.body.dump(), ".json");
    }
    SendReply(out, r);
  }

  void Api(const std::string& method, const std::vector<std::string>& seg,
           const Query& q, const json& body, const std::string& type,
           const std::shared_ptr<net::Responder>& out,
           const std::string& resource) {
    const size_t n = seg.size();
    auto only = [&](std::initializer_list<const char*> methods) {
      for (const char* m : methods) {
        if (method == m) return true;
      }
      SendReply(*out, StatusReply(405, "MethodNotAllowed",
                                  "the server does not allow this method on "
                                  "the requested resource"));
      return false;
    };
    if (n == 1 && seg[0] == "api") {
      if (only({"GET"})) {
        SendReply(*out, Json(200, {{"kind", "APIVersions"},
                                   {"versions", {"v1"}},
                                   {"serverAddressByClientCIDRs",
                                    {{{"clientCIDR", "0.0.0.0/0"},
                                      {"serverAddress",
                                       absl::StrCat("127.0.0.1:", port_)}}}}}));
      }
      return;
    }
    if (n == 2 && seg[0] == "api" && seg[1] == "v1") {
      if (only({"GET"})) SendReply(*out, Json(200, ResourceList()));
      return;
    }
    if (n == 1 && seg[0] == "version") {
      if (only({"GET"})) {
        SendReply(*out, Json(200, {{"major", "1"},
                                   {"minor", "30"},
                                   {"gitVersion", "v1.30.0-gpusched-standin"},
                                   {"platform", "linux/amd64"}}));
      }
      return;
    }
    if (n == 1 &&
        (seg[0] == "healthz" || seg[0] == "livez" || seg[0] == "readyz")) {
      net::HttpResponse res{http::status::ok, 11};
      res.set(http::field::content_type, "text/plain; charset=utf-8");
      res.body() = "ok";
      out->Send(std::move(res));
      return;
    }
    const bool api = n >= 3 && seg[0] == "api" && seg[1] == "v1";
    if (api && seg[2] == "nodes" && n == 3) {
      if (only({"GET"})) ListOrWatch(Kind::kNode, "", q, out);
      return;
    }
    if (api && seg[2] == "nodes" && n == 4) {
      if (only({"GET"})) SendReply(*out, store_->GetNode(seg[3]));
      return;
    }
    if (api && seg[2] == "pods" && n == 3) {
      if (only({"GET"})) ListOrWatch(Kind::kPod, "", q, out);
      return;
    }
    if (api && seg[2] == "namespaces" && n >= 5 && seg[4] == "pods") {
      const std::string& ns = seg[3];
      if (n == 5) {
        if (!only({"GET", "POST"})) return;
        if (method == "GET") {
          ListOrWatch(Kind::kPod, ns, q, out);
        } else {
          SendReply(*out, store_->CreatePod(ns, body));
        }
        return;
      }
      const std::string& name = seg[5];
      if (n == 6) {
        if (!only({"GET", "PUT", "PATCH", "DELETE"})) return;
        if (method == "GET") SendReply(*out, store_->GetPod(ns, name));
        if (method == "PUT")
          SendReply(*out, store_->ReplacePod(ns, name, body));
        if (method == "PATCH") {
          Answer(*out, store_->PatchPod(ns, name, type, body), method,
                 resource);
        }
        if (method == "DELETE") {
          std::optional<int64_t> grace;
          const std::string g = Get(q, "gracePeriodSeconds");
          int64_t v = 0;
          if (!g.empty()) {
            if (!absl::SimpleAtoi(g, &v)) {
              SendReply(*out,
                        StatusReply(400, "BadRequest",
                                    "gracePeriodSeconds: not an integer"));
              return;
            }
            grace = v;
          }
          SendReply(*out, store_->DeletePod(ns, name, grace, body));
        }
        return;
      }
      if (n == 7 && seg[6] == "binding") {
        if (only({"POST"})) SendReply(*out, store_->BindPod(ns, name, body));
        return;
      }
      if (n == 7 && seg[6] == "status") {
        if (only({"PATCH"})) {
          Answer(*out, store_->PatchPodStatus(ns, name, type, body), method,
                 resource);
        }
        return;
      }
    }
    // PodTemplates and ProvisioningRequests: create, get, list, delete.
    const bool templates = api && seg[2] == "namespaces" && n >= 5 && n <= 6 &&
                           seg[4] == "podtemplates";
    const bool provreqs = n >= 6 && n <= 7 && seg[0] == "apis" &&
                          seg[1] == "autoscaling.x-k8s.io" && seg[2] == "v1" &&
                          seg[3] == "namespaces" &&
                          seg[5] == "provisioningrequests";
    if (templates || provreqs) {
      const Kind kind =
          templates ? Kind::kPodTemplate : Kind::kProvisioningRequest;
      const std::string& ns = templates ? seg[3] : seg[4];
      const bool collection = n == (templates ? 5u : 6u);
      if (collection) {
        if (!only({"GET", "POST"})) return;
        SendReply(*out, method == "GET" ? store_->ListObjects(kind, ns)
                                        : store_->CreateObject(kind, ns, body));
        return;
      }
      const std::string& name = seg[n - 1];
      if (!only({"GET", "DELETE"})) return;
      SendReply(*out, method == "GET" ? store_->GetObject(kind, ns, name)
                                      : store_->DeleteObject(kind, ns, name));
      return;
    }
    if (n == 4 && seg[0] == "apis" && seg[1] == "karpenter.sh" &&
        seg[2] == "v1" && seg[3] == "nodepools" && nodepools_.is_object()) {
      if (only({"GET"})) SendReply(*out, Json(200, nodepools_));
      return;
    }
    SendReply(*out, StatusReply(404, "NotFound",
                                "the server could not find the requested "
                                "resource",
                                json::object()));
  }

  void ListOrWatch(Kind kind, const std::string& ns, const Query& q,
                   const std::shared_ptr<net::Responder>& out) {
    absl::StatusOr<LabelSelector> labels =
        LabelSelector::Parse(Get(q, "labelSelector"));
    absl::StatusOr<FieldSelector> fields =
        FieldSelector::Parse(Get(q, "fieldSelector"), kind);
    for (const absl::Status& st : {labels.status(), fields.status()}) {
      if (!st.ok()) {
        SendReply(*out,
                  StatusReply(400, "BadRequest", std::string(st.message())));
        return;
      }
    }
    Filter filter{ns, *std::move(labels), *std::move(fields)};
    if (!Truthy(Get(q, "watch"))) {
      SendReply(*out, store_->List(kind, filter, q));
      return;
    }
    WatchRequest w;
    w.kind = kind;
    w.filter = std::move(filter);
    w.resource_version = Get(q, "resourceVersion");
    w.bookmarks = Truthy(Get(q, "allowWatchBookmarks"));
    w.send_initial_events = Truthy(Get(q, "sendInitialEvents"));
    const std::string match = Get(q, "resourceVersionMatch");
    const char* list_kind = kind == Kind::kPod ? "ListOptions" : "ListOptions";
    if (w.send_initial_events && match != "NotOlderThan") {
      SendReply(*out, Invalid422(list_kind, "resourceVersionMatch",
                                 "Forbidden: sendInitialEvents requires "
                                 "setting resourceVersionMatch to "
                                 "NotOlderThan"));
      return;
    }
    if (w.send_initial_events && !w.bookmarks) {
      SendReply(*out, Invalid422(list_kind, "allowWatchBookmarks",
                                 "Forbidden: sendInitialEvents requires "
                                 "allowWatchBookmarks=true"));
      return;
    }
    if (!w.send_initial_events && !match.empty()) {
      SendReply(*out, Invalid422(list_kind, "resourceVersionMatch",
                                 "Forbidden: resourceVersionMatch is "
                                 "forbidden for watch unless "
                                 "sendInitialEvents is provided"));
      return;
    }
    int64_t timeout = 0;
    if (absl::SimpleAtoi(Get(q, "timeoutSeconds"), &timeout) && timeout > 0) {
      w.timeout = std::chrono::seconds(timeout);
    }
    if (std::optional<Reply> r = store_->Watch(std::move(w), out)) {
      SendReply(*out, *r);
    }
  }

  static json ResourceList() {
    return {
        {"kind", "APIResourceList"},
        {"groupVersion", "v1"},
        {"resources",
         {{{"name", "pods"},
           {"singularName", "pod"},
           {"namespaced", true},
           {"kind", "Pod"},
           {"verbs",
            {"create", "delete", "get", "list", "patch", "update", "watch"}},
           {"shortNames", {"po"}}},
          {{"name", "pods/binding"},
           {"singularName", ""},
           {"namespaced", true},
           {"kind", "Binding"},
           {"verbs", {"create"}}},
          {{"name", "nodes"},
           {"singularName", "node"},
           {"namespaced", false},
           {"kind", "Node"},
           {"verbs", {"get", "list", "watch"}},
           {"shortNames", {"no"}}}}}};
  }

  // The next injected fault, if one is armed.
  std::optional<Reply> TakeFault() {
    absl::MutexLock l(&mu_);
    if (fault_count_ <= 0) return std::nullopt;
    --fault_count_;
    ++faults_served_;
    Reply r;
    if (fault_status_ == 429) {
      r = StatusReply(429, "TooManyRequests",
                      "Too many requests, please try again later.",
                      {{"retryAfterSeconds", fault_retry_after_}});
    } else if (fault_status_ == 503) {
      r = StatusReply(503, "ServiceUnavailable",
                      "The server is currently unable to handle the request "
                      "(a fault injected by the test)");
    } else {
      r = StatusReply(
          500, "InternalError",
          "Internal error occurred: a fault injected by the test",
          {{"causes", {{{"message", "a fault injected by the test"}}}}});
    }
    if (fault_status_ == 429 ||
        (fault_status_ == 503 && fault_retry_after_ > 0)) {
      r.headers.emplace_back("Retry-After", absl::StrCat(fault_retry_after_));
    }
    return r;
  }

  void Record(const std::string& resource, const std::string& method,
              const std::string& body, const std::string& extension)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const std::string name = absl::StrFormat("%06d-%s-%s%s", ++record_seq_,
                                             resource, method, extension);
    const std::string tmp = absl::StrCat(flags_.record_dir, "/.", name, ".tmp");
    {
      std::ofstream f(tmp, std::ios::binary);
      f.write(body.data(), static_cast<std::streamsize>(body.size()));
    }
    std::rename(tmp.c_str(),
                absl::StrCat(flags_.record_dir, "/", name).c_str());
  }

  Reply Testing(const std::string& method, const std::vector<std::string>& seg,
                const Query& q, const std::string& body) {
    const size_t n = seg.size();
    const json parsed = json::parse(body.empty() ? "null" : body, nullptr,
                                    /*allow_exceptions=*/false);
    if (parsed.is_discarded()) {
      return StatusReply(400, "BadRequest", "the body is not valid JSON");
    }
    if (method == "POST" && n == 4 && seg[1] == "nodes") {
      if (seg[3] == "ready")
        return store_->SetNodeReady(seg[2], Get(q, "status"));
      if (seg[3] == "taints") return store_->SetNodeTaints(seg[2], parsed);
      if (seg[3] == "unschedulable") {
        const std::string v = Get(q, "value");
        if (v != "true" && v != "false") {
          return StatusReply(400, "BadRequest", "value: want true or false");
        }
        return store_->SetNodeUnschedulable(seg[2], v == "true");
      }
    }
    if (method == "POST" && n == 2 && seg[1] == "expire-watches") {
      store_->ExpireWatches();
      return Json(200, {{"expired", true}});
    }
    if (method == "POST" && n == 2 && seg[1] == "faults") {
      const json st =
          parsed.is_object() ? parsed.value("status", json()) : json();
      const json count =
          parsed.is_object() ? parsed.value("count", json()) : json();
      const json after = parsed.is_object()
                             ? parsed.value("retryAfterSeconds", json(1))
                             : json();
      if (!st.is_number_integer() || !count.is_number_integer() ||
          !after.is_number_integer() || count.get<int64_t>() < 0 ||
          (st != 429 && st != 500 && st != 503)) {
        return StatusReply(400, "BadRequest",
                           "want {\"status\":429|500|503,\"count\":N>=0,"
                           "\"retryAfterSeconds\":S}");
      }
      absl::MutexLock l(&mu_);
      fault_status_ = st.get<int>();
      fault_count_ = count.get<int64_t>();
      fault_retry_after_ = after.get<int64_t>();
      return Json(200, parsed);
    }
    if (method == "GET" && n == 2 && seg[1] == "stats") {
      absl::MutexLock l(&mu_);
      return Json(200,
                  {{"requests", requests_},
                   {"total", total_},
                   {"unauthorized", unauthorized_},
                   {"watch_events_sent", store_->watch_events_sent()},
                   {"watch_bookmarks_sent", store_->watch_bookmarks_sent()},
                   {"open_watches", store_->open_watches()},
                   {"faults_served", faults_served_},
                   {"faults_armed", fault_count_}});
    }
    if (method == "GET" && n == 2 && seg[1] == "pods") {
      return Json(200, kubelet_->Describe());
    }
    if (method == "GET" && n == 2 && seg[1] == "autoscaler") {
      if (autoscaler_ == nullptr) {
        return StatusReply(404, "NotFound", "no --autoscaler was given");
      }
      return Json(200, autoscaler_->Describe());
    }
    if (method == "POST" && n == 5 && seg[1] == "pods" && seg[4] == "probes") {
      const std::string v = Get(q, "fail");
      if (v != "true" && v != "false") {
        return StatusReply(400, "BadRequest", "fail: want true or false");
      }
      const bool fail = v == "true";
      if (!kubelet_->FailProbes(seg[2], seg[3], fail)) {
        return StatusReply(404, "NotFound",
                           absl::StrCat("no running Pod ", seg[2], "/", seg[3],
                                        " with a readiness probe"));
      }
      return Json(200, {{"probesFail", fail}});
    }
    if (method == "POST" && n == 5 && seg[1] == "pods" && seg[4] == "evict") {
      if (!kubelet_->Evict(seg[2], seg[3])) {
        return StatusReply(
            404, "NotFound",
            absl::StrCat("no running Pod ", seg[2], "/", seg[3]));
      }
      return Json(200, {{"evicted", absl::StrCat(seg[2], "/", seg[3])}});
    }
    return StatusReply(404, "NotFound", "no such test endpoint");
  }

  const Flags flags_;
  Store* const store_;
  Kubelet* const kubelet_;
  Autoscaler* const autoscaler_;  // null without --autoscaler
  const json nodepools_;          // a NodePoolList; null without --nodepools
  uint16_t port_ = 0;
  absl::Mutex mu_;
  std::map<std::string, int64_t> requests_ ABSL_GUARDED_BY(mu_);
  int64_t total_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t unauthorized_ ABSL_GUARDED_BY(mu_) = 0;
  int fault_status_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t fault_count_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t fault_retry_after_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t faults_served_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t record_seq_ ABSL_GUARDED_BY(mu_) = 0;
};

absl::Status WriteAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << text;
    if (!f.flush()) {
      return absl::UnavailableError(absl::StrCat("cannot write ", tmp));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot rename to ", path));
  }
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  absl::StatusOr<Flags> flags = ParseFlags(argc, argv);
  if (!flags.ok()) {
    std::fprintf(stderr, "kube_test_apiserver: %s\n%s",
                 std::string(flags.status().message()).c_str(), kUsage);
    return 2;
  }
  std::ifstream in(flags->nodes);
  std::stringstream text;
  text << in.rdbuf();
  const json nodes =
      json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (!in || nodes.is_discarded()) {
    std::fprintf(stderr,
                 "kube_test_apiserver: cannot read a JSON NodeList from %s\n",
                 flags->nodes.c_str());
    return 2;
  }
  // SIGTERM and SIGINT are blocked in every thread (all started below) and
  // taken by sigwait here; the kubelet unblocks them in its children.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  // The autoscaler's pools and Karpenter's NodePools, when given.
  auto read_json = [](const std::string& path, json* out) {
    if (path.empty()) return true;
    std::ifstream f(path);
    std::stringstream t;
    t << f.rdbuf();
    *out = json::parse(t.str(), nullptr, /*allow_exceptions=*/false);
    return f && !out->is_discarded();
  };
  json autoscaler_config, nodepools;
  if (!read_json(flags->autoscaler, &autoscaler_config) ||
      !read_json(flags->nodepools, &nodepools)) {
    std::fprintf(stderr, "kube_test_apiserver: cannot read JSON from %s\n",
                 (flags->autoscaler + " " + flags->nodepools).c_str());
    return 2;
  }
  std::vector<AutoscalerPool> pools;
  if (!flags->autoscaler.empty()) {
    absl::StatusOr<std::vector<AutoscalerPool>> parsed =
        ParseAutoscalerPools(autoscaler_config);
    if (!parsed.ok()) {
      std::fprintf(stderr, "kube_test_apiserver: %s\n",
                   std::string(parsed.status().message()).c_str());
      return 2;
    }
    pools = *std::move(parsed);
  }
  std::unique_ptr<Kubelet> kubelet;
  std::unique_ptr<Autoscaler> autoscaler;
  Store::Options so;
  so.history = static_cast<size_t>(flags->history);
  so.bookmark_every = std::chrono::milliseconds(flags->bookmark_ms);
  so.seed = static_cast<uint64_t>(getpid()) * 0x9e3779b97f4a7c15ULL ^
            static_cast<uint64_t>(
                std::chrono::system_clock::now().time_since_epoch().count());
  // `kubelet` and `autoscaler` are set before any thread starts and never
  // change after.
  Store store(so, [&kubelet, &autoscaler] {
    if (kubelet) kubelet->Wake();
    if (autoscaler) autoscaler->Wake();
  });
  if (absl::Status st = store.LoadNodes(nodes); !st.ok()) {
    std::fprintf(stderr, "kube_test_apiserver: %s\n",
                 std::string(st.message()).c_str());
    return 2;
  }
  kubelet = std::make_unique<Kubelet>(&store, Kubelet::Options{flags->log_dir});
  if (!pools.empty()) {
    autoscaler = std::make_unique<Autoscaler>(&store, std::move(pools));
  }
  kubelet->Start();
  if (autoscaler) autoscaler->Start();
  Front front(*flags, &store, kubelet.get(), autoscaler.get(), nodepools);
  net::HttpServerOptions ho;
  ho.address = "127.0.0.1";
  ho.port = 0;
  ho.max_body_bytes = 1 << 20;
  ho.threads = 2;
  ho.tls_cert_file = flags->cert;
  ho.tls_key_file = flags->key;
  auto server = net::HttpServer::Start(
      ho, [&front](net::HttpRequest req, std::shared_ptr<net::Responder> out) {
        front.Handle(std::move(req), std::move(out));
      });
  if (!server.ok()) {
    std::fprintf(stderr, "kube_test_apiserver: %s\n",
                 std::string(server.status().message()).c_str());
    if (autoscaler) autoscaler->Stop();
    kubelet->Stop();
    return 1;
  }
  front.set_port((*server)->port());
  if (absl::Status st = WriteAtomically(flags->port_file,
                                        absl::StrCat((*server)->port(), "\n"));
      !st.ok()) {
    std::fprintf(stderr, "kube_test_apiserver: %s\n",
                 std::string(st.message()).c_str());
    (*server)->Shutdown(std::chrono::milliseconds(0));
    if (autoscaler) autoscaler->Stop();
    kubelet->Stop();
    return 1;
  }
  std::fprintf(stderr, "kube_test_apiserver: serving %s://127.0.0.1:%d\n",
               (*server)->tls() ? "https" : "http", (*server)->port());

  // Bookmarks and watch timeouts.
  absl::Mutex tick_mu;
  bool tick_stop = false;
  std::thread ticker([&] {
    while (true) {
      const SteadyTime now = std::chrono::steady_clock::now();
      const SteadyTime next = store.TickWatches(now);
      absl::MutexLock l(&tick_mu);
      tick_mu.AwaitWithTimeout(
          absl::Condition(&tick_stop),
          absl::FromChrono(std::max(
              next - now, SteadyTime::duration(std::chrono::milliseconds(5)))));
      if (tick_stop) return;
    }
  });

  int sig = 0;
  while (sigwait(&stop_signals, &sig) != 0) {
  }
  std::fprintf(stderr, "kube_test_apiserver: signal %d, shutting down\n", sig);
  store.CloseWatches();
  (*server)->Shutdown(std::chrono::seconds(2));
  {
    absl::MutexLock l(&tick_mu);
    tick_stop = true;
  }
  ticker.join();
  if (autoscaler) autoscaler->Stop();
  kubelet->Stop();
  return 0;
}

}  // namespace
}  // namespace gpusched::kubetest

int main(int argc, char** argv) { return gpusched::kubetest::Main(argc, argv); }
