// kube_test_apiserver: a stand-in Kubernetes API server with a simulated
// kubelet, the only thing gpusched's Kubernetes launcher is tested against
// (no real cluster runs in tests). It speaks the real core/v1 contract for
// the subset the launcher uses: Nodes (list, get, watch), Pods (list with
// label and field selectors, paged with limit/continue, watch with
// resourceVersion, bookmarks and 410 Expired, create, get, replace, patch of
// labels and annotations, binding, graceful delete, the status subresource's
// patch), PodTemplates and ProvisioningRequests (autoscaling.x-k8s.io/v1:
// create, get, list, delete), Karpenter NodePools (read from a file), errors
// as Status objects; and a minimal cluster autoscaler (Autoscaler, below).
// Test-only control endpoints live under /testing/ (apiserver.cc).
//
// Pieces, all in one process:
//   Store (apiserver_store.cc, Pod writes in apiserver_pods.cc): the
//     objects, one global resourceVersion, a bounded event history, and the
//     open watches. Thread-safe (one mutex); it answers API calls as
//     Replies (HTTP status + JSON body).
//   apiserver_objects.cc: Status objects, selectors, Pod decoding,
//     validation and defaults.
//   Kubelet (apiserver_kubelet.cc, processes and probes in
//     apiserver_process.cc): for every Pod bound to a known Node, runs the
//     first container's command as a local process and reports its status,
//     readiness (httpGet/tcpSocket/exec probes) and exit. Owns its threads
//     (joined in Stop) and the process groups it started (killed in Stop).
//   apiserver.cc: the command line, routing over net::HttpServer, auth,
//     injected faults, request recording, stats, and main.
//
// Where it knowingly differs from the real server (beyond being a subset):
//   - Binding to a Node that does not exist is 404 (the real server accepts
//     it and the Pod never runs): a launcher bug shows at once.
//   - Only labels and annotations change through PUT and PATCH; other
//     changes in the body are ignored (the real server refuses most spec
//     changes with 422).
//   - JSON only (no YAML, protobuf or server-side apply); no dryRun (400).
//   - A body over 1 MiB gets net::HttpServer's own 413 answer, not a Status.
//   - A list or watch at a resourceVersion newer than the current one is
//     504 at once (the real server first waits up to 3 s).
//   - The node lifecycle controller is reduced to what a Ready change does
//     at once: taints node.kubernetes.io/not-ready or unreachable (NoSchedule
//     and NoExecute) and marks the node's Pods not ready; no eviction after
//     tolerationSeconds. spec.unschedulable adds the unschedulable taint.
//
//   - PodTemplates and ProvisioningRequests are not watched, and their
//     schemas are checked by the test afterwards (validate.mjs), not here;
//     here only the fields the CRD requires are.
//
// Not a real cluster: images are ignored (the first container's command
// runs on this machine), there is no scheduler, no controllers beyond what
// is written here and in apiserver_kubelet.cc, and every namespace exists.
#ifndef GPUSCHED_TESTS_KUBE_APISERVER_H_
#define GPUSCHED_TESTS_KUBE_APISERVER_H_

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <ctime>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/random.h"
#include "net/http_server.h"
#include "nlohmann/json.hpp"

namespace gpusched::kubetest {

using json = nlohmann::json;
using SteadyTime = std::chrono::steady_clock::time_point;
using Query = std::map<std::string, std::string>;

// Pods and Nodes are listed and watched; PodTemplates and
// ProvisioningRequests (autoscaling.x-k8s.io/v1, served for capacity on
// demand) are created, read and deleted, and only the autoscaler
// (apiserver_autoscaler.cc) writes a ProvisioningRequest's status.
enum class Kind {
  kPod = 0,
  kNode = 1,
  kPodTemplate = 2,
  kProvisioningRequest = 3
};
inline constexpr int kKinds = 4;
inline const char* KindName(Kind k) {
  static constexpr const char* kNames[] = {"Pod", "Node", "PodTemplate",
                                           "ProvisioningRequest"};
  return kNames[static_cast<int>(k)];
}
inline const char* ResourceName(Kind k) {
  static constexpr const char* kNames[] = {"pods", "nodes", "podtemplates",
                                           "provisioningrequests"};
  return kNames[static_cast<int>(k)];
}

// An answer to an API call: HTTP status, JSON body, extra headers.
struct Reply {
  int code = 200;
  json body;
  std::vector<std::pair<std::string, std::string>> headers;
};

// A failure Status object, as the real server writes it.
Reply StatusReply(int code, const std::string& reason,
                  const std::string& message, json details = nullptr);
Reply NotFound(Kind kind, const std::string& name);
Reply BadRequest(const std::string& message);
// 422 Invalid naming each cause ("field: message"), as the real server.
Reply InvalidReply(const std::string& kind, const std::string& name,
                   const std::vector<json>& causes);
// 409 Conflict: "Operation cannot be fulfilled on RESOURCE "NAME": WHY".
Reply ConflictReply(const std::string& resource, const std::string& name,
                    const std::string& why);
Reply OkReply(int code, json body);
// The store's key of a Pod.
std::string PodKey(const std::string& ns, const std::string& name);
// A Node's Ready condition status; "" when it has none.
std::string NodeReadyStatus(const json& node);

// RFC 3339 in UTC, seconds precision (metav1.Time): "2024-05-01T12:00:00Z".
std::string NowRfc3339();
std::string Rfc3339(std::time_t t);
std::optional<std::time_t> ParseRfc3339(const std::string& s);
// Sets the condition `type` in status.conditions; lastTransitionTime moves
// only when its status changes.
void SetCondition(json& status, const std::string& type,
                  const std::string& value, const std::string& reason = "",
                  const std::string& message = "");
std::string RandomUid(Rng& rng);

// ---- selectors (apiserver_store.cc) ----

// labelSelector: comma-separated requirements, all must hold: `k=v`,
// `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k`, `!k`.
class LabelSelector {
 public:
  static absl::StatusOr<LabelSelector> Parse(absl::string_view text);
  bool Matches(const json& labels) const;  // labels: object or null
  bool empty() const { return reqs_.empty(); }

 private:
  enum class Op { kEq, kNe, kIn, kNotIn, kExists, kNotExists };
  struct Requirement {
    std::string key;
    Op op;
    std::set<std::string> values;
  };
  std::vector<Requirement> reqs_;
};

// fieldSelector: comma-separated `field=v`, `field==v`, `field!=v` over the
// field labels the real server supports for the kind (pods: metadata.name,
// metadata.namespace, spec.nodeName, spec.restartPolicy, spec.schedulerName,
// spec.serviceAccountName, status.phase, status.podIP; nodes:
// metadata.name, spec.unschedulable). Others: BadRequest, as for real.
class FieldSelector {
 public:
  static absl::StatusOr<FieldSelector> Parse(absl::string_view text, Kind kind);
  bool Matches(const json& object) const;
  bool empty() const { return terms_.empty(); }

 private:
  struct Term {
    std::string field;
    bool equal;
    std::string value;
  };
  std::vector<Term> terms_;
};

// What a list or watch is over: a namespace ("" for all) and selectors.
struct Filter {
  std::string ns;
  LabelSelector labels;
  FieldSelector fields;
  bool Matches(const json& object) const;
};

// A Pod's validation errors as Status causes ({reason, message, field});
// empty: valid. `decode_error` is set instead for a body the real server
// could not decode into a Pod (a wrong JSON type): 400, not 422.
std::vector<json> ValidatePod(const json& pod, std::string* decode_error);
std::vector<json> ValidateLabelsAndAnnotations(const json& metadata);
// The defaults the real API server (and its admission plugins) fill in.
void DefaultPod(json& pod);

// ---- Store (apiserver_store.cc) ----

struct WatchRequest {
  Kind kind = Kind::kPod;
  Filter filter;
  std::string resource_version;  // "" or "0": start with the current state
  bool bookmarks = false;
  bool send_initial_events = false;
  std::chrono::seconds timeout{1800};
};

// What the Kubelet needs of a Pod on each pass (copied out under the lock).
struct PodBrief {
  std::string uid, ns, name, node, phase;
  bool deleting = false;
  int64_t grace_seconds = 0;  // metadata.deletionGracePeriodSeconds
};

class Store {
 public:
  struct Options {
    size_t history = 1000;
    std::chrono::milliseconds bookmark_every{1000};
    size_t max_objects = 10000;
    uint64_t seed = 1;
  };
  // `on_change` is called (under the store's lock, so it must not call
  // back) after every committed change: the Kubelet's wake-up.
  Store(Options options, std::function<void()> on_change);

  // Loads a NodeList at startup. InvalidArgument when malformed.
  absl::Status LoadNodes(const json& list);

  Reply List(Kind kind, const Filter& filter, const Query& query);
  // Validation failures are answered as a Reply (not streamed); nullopt
  // when the watch was started on `out`.
  std::optional<Reply> Watch(WatchRequest request,
                             std::shared_ptr<net::Responder> out);
  Reply GetNode(const std::string& name);
  Reply GetPod(const std::string& ns, const std::string& name);
  Reply CreatePod(const std::string& ns, const json& body);
  Reply ReplacePod(const std::string& ns, const std::string& name,
                   const json& body);
  // `type`: the Content-Type (merge, strategic merge or JSON patch).
  Reply PatchPod(const std::string& ns, const std::string& name,
                 const std::string& type, const json& patch);
  Reply BindPod(const std::string& ns, const std::string& name,
                const json& body);
  // PATCH pods/{name}/status: only status changes (a scheduler's
  // PodScheduled condition); a strategic merge patch merges conditions by
  // type, as the real server does.
  Reply PatchPodStatus(const std::string& ns, const std::string& name,
                       const std::string& type, const json& patch);
  // PodTemplates and ProvisioningRequests (apiserver_autoscaler.cc):
  // create (422 naming the field for what the CRD or core/v1 requires),
  // get, delete at once.
  Reply CreateObject(Kind kind, const std::string& ns, const json& body);
  Reply GetObject(Kind kind, const std::string& ns, const std::string& name);
  Reply DeleteObject(Kind kind, const std::string& ns, const std::string& name);
  Reply ListObjects(Kind kind, const std::string& ns);
  // `grace`: from the query; `options`: the DeleteOptions body or null.
  Reply DeletePod(const std::string& ns, const std::string& name,
                  std::optional<int64_t> grace, const json& options);

  // /testing/nodes/...: "status" True|False|Unknown.
  Reply SetNodeReady(const std::string& name, const std::string& status);
  Reply SetNodeTaints(const std::string& name, const json& taints);
  Reply SetNodeUnschedulable(const std::string& name, bool value);
  // Every watch gets 410 Expired and ends; history is cleared (its floor
  // set to the current resourceVersion), as is every continue token.
  void ExpireWatches();

  // Bookmarks and timeouts of open watches; returns when next to call.
  SteadyTime TickWatches(SteadyTime now);
  // Ends every watch (before the HTTP server shuts down).
  void CloseWatches();
  // Lines sent on watches: events (ADDED, MODIFIED, DELETED, ERROR), and
  // BOOKMARKs apart.
  int64_t watch_events_sent() const;
  int64_t watch_bookmarks_sent() const;
  int open_watches() const;

  // ---- for the autoscaler ----
  // Every object of `kind`, copied.
  std::vector<json> Snapshot(Kind kind) const;
  // Adds a Node (ADDED); AlreadyExists, or ResourceExhausted past 254
  // nodes (each has a 127.0.N.0/24 block of Pod IPs).
  absl::Status AddNode(json node);
  // Removes Node `name` (DELETED); false when it is not there.
  bool DeleteNode(const std::string& name);
  // Applies `fn` to Node `name` (then keeps the lifecycle taints true).
  Reply UpdateNode(const std::string& name,
                   const std::function<void(json&)>& fn);
  // Applies `fn` to the object `kind` ns/name; false when it is gone.
  bool UpdateObject(Kind kind, const std::string& ns, const std::string& name,
                    const std::function<void(json&)>& fn);

  // ---- for the Kubelet ----
  std::vector<PodBrief> PodBriefs() const;
  std::optional<json> PodByUid(const std::string& uid) const;
  std::optional<json> NodeByName(const std::string& name) const;
  // The node's position in the NodeList (its Pod IP block); -1: unknown.
  int NodeIndex(const std::string& name) const;
  // Each node's Ready condition status: "True", "False", "Unknown", or ""
  // when it has none.
  std::map<std::string, std::string> NodeReadiness() const;
  // Applies `fn` to the Pod; commits MODIFIED when it changed it. false
  // when the Pod is gone.
  bool UpdatePod(const std::string& uid, const std::function<void(json&)>& fn);
  // Removes the Pod (DELETED): the kubelet's final delete.
  void RemovePod(const std::string& uid);

 private:
  struct Event {
    int64_t rv;
    Kind kind;
    const char* type;                    // ADDED, MODIFIED, DELETED
    std::shared_ptr<const json> object;  // as of the event (rv = event's)
    std::shared_ptr<const json> prev;    // before; null for ADDED
  };
  struct Watcher {
    WatchRequest req;
    std::shared_ptr<net::Responder> out;
    SteadyTime deadline;
    SteadyTime next_bookmark;
    int64_t last_rv = 0;  // the newest version it has been told of
  };
  using Objects = std::map<std::string, std::shared_ptr<const json>>;

  void Commit(Kind kind, const std::string& key, json object, const char* type)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Reply CommitMetadata(const std::string& key, const json& cur,
                       const json& meta) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Send(Watcher& w, const Event& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SendLine(Watcher& w, const json& event)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  json Bookmark(Kind kind, bool initial_end) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  json Expired(int64_t requested) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The objects of `kind` as they were at `rv` (>= floor_), undoing the
  // retained history.
  Objects StateAt(Kind kind, int64_t rv) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Reply ModifyNode(const std::string& name,
                   const std::function<void(json&)>& fn)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Keeps the taints the node lifecycle controller manages true.
  static void ReconcileNodeTaints(json& node);
  void RemovePodLocked(const std::string& key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  size_t object_count() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  const std::function<void()> on_change_;
  mutable absl::Mutex mu_;
  int64_t rv_ ABSL_GUARDED_BY(mu_) = 0;
  // Events after floor_ are all in history_; older ones are compacted.
  int64_t floor_ ABSL_GUARDED_BY(mu_) = 0;
  // Continue tokens minted before this are refused (410).
  int64_t token_floor_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<Event> history_ ABSL_GUARDED_BY(mu_);
  Objects objects_[kKinds] ABSL_GUARDED_BY(mu_);  // by Kind; key "ns/name",
                                                  // "name" for Nodes
  std::map<std::string, std::string> pod_key_by_uid_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> node_order_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, Watcher> watchers_ ABSL_GUARDED_BY(mu_);
  int64_t next_watcher_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t events_sent_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t bookmarks_sent_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;  // CloseWatches was called
  Rng rng_ ABSL_GUARDED_BY(mu_);
};

// ---- processes and probes (apiserver_process.cc) ----

// Kubernetes' $(VAR) expansion of command, args and env values: `$(X)`
// becomes X's value when `lookup` knows it, else stays as written; `$$`
// becomes `$`.
std::string ExpandVars(
    absl::string_view in,
    const std::function<std::optional<std::string>(const std::string&)>&
        lookup);

// A resource quantity ("500m", "2", "1Gi", "1e3") in thousandths of the
// unit, saturating; nullopt when malformed.
std::optional<int64_t> ParseQuantityMilli(const json& q);

// Sends `sig` to the process group led by `pid` (or to it alone, should it
// not have called setsid yet).
void SignalGroup(pid_t pid, int sig);

struct Spawned {
  pid_t pid = 0;
  std::string error;  // set: nothing runs
};
// fork + execve of argv (argv[0] looked up in env's PATH) with `env` over
// this program's environment, in a new session, stdin /dev/null, stdout and
// stderr appended to `log_path` ("" for /dev/null). The caller reaps pid.
Spawned Spawn(const std::vector<std::string>& argv,
              const std::vector<std::pair<std::string, std::string>>& env,
              const std::string& workdir, const std::string& log_path);

// A TCP connection to host:port (an IPv4 literal or "localhost") within
// `timeout`; the socket, or -1.
int ConnectWithin(const std::string& host, int port,
                  std::chrono::milliseconds timeout);
// A probe's GET: true for a 2xx or 3xx status within `timeout`.
bool HttpGet(const std::string& host, int port, const std::string& path,
             const std::vector<std::string>& headers,
             std::chrono::milliseconds timeout);

// ---- Kubelet (apiserver_kubelet.cc) ----

class Kubelet {
 public:
  struct Options {
    std::string log_dir;  // empty: container output to /dev/null
  };
  Kubelet(Store* store, Options options);
  ~Kubelet();  // Stop()

  void Start();
  // Joins the threads, then SIGKILLs every process group it started and
  // reaps them. Idempotent.
  void Stop();
  // Something changed in the store: look again now.
  void Wake();
  // The Pods it runs, for GET /testing/pods.
  json Describe() const;
  // Evicts Pod ns/name as a kubelet under node pressure does: its processes
  // are killed and it ends Failed, reason Evicted. False when it does not
  // run here.
  bool Evict(const std::string& ns, const std::string& name);
  // Makes the readiness probes of Pod ns/name fail (true) or run again
  // (false), as when the kubelet cannot reach the container: the Pod turns
  // not Ready after its failure threshold. False when it does not run here
  // or has no readiness probe.
  bool FailProbes(const std::string& ns, const std::string& name, bool fail);

 private:
  struct Probe {
    std::string type;  // "httpGet", "tcpSocket", "exec"; "": no handler
    std::string host, path;
    int port = 0;
    std::vector<std::string> headers;                      // "Name: value"
    std::vector<std::string> command;                      // exec
    std::vector<std::pair<std::string, std::string>> env;  // exec
    std::chrono::milliseconds period{500}, timeout{1000};
    int success_threshold = 1, failure_threshold = 3;
  };
  struct Proc {
    std::string uid, ns, name, node, container, ip;
    int octet = 0;  // the last byte of ip, reserved on its node
    pid_t pid = 0;  // the process group leader; 0: none
    std::map<std::string, int64_t> requests;  // admitted, in milli-units
    bool exited = false, posted_exit = false;
    bool evicted = false;
    int wait_status = 0;
    std::string started_at, finished_at;
    // Graceful termination: SIGTERM sent, SIGKILL due at kill_at.
    bool term_sent = false, kill_sent = false;
    SteadyTime kill_at{};
    // Readiness: the probe's verdict, and what was last posted.
    std::optional<Probe> probe;
    bool ready = false;
    std::optional<bool> posted_ready;
    int successes = 0, failures = 0;
    SteadyTime next_probe{};
    bool probes_fail = false;  // FailProbes
  };

  void Loop();
  void ProbeLoop();
  // One pass: start, reap, terminate, clean up. Called without mu_.
  void Pass();
  void StartPod(const PodBrief& brief);
  // Records the exit of processes that ended (waitpid on our pids only).
  void Reap();
  void PostExit(const std::string& uid);
  void SyncReady(const std::string& uid, bool ready);
  static bool RunProbe(const Probe& probe);
  int AllocateIp(const std::string& node) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Store* const store_;
  const Options options_;
  std::thread loop_, prober_;
  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool wake_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  std::map<std::string, Proc> procs_ ABSL_GUARDED_BY(mu_);  // by Pod uid
  // Pods whose start failed for good (StartError, admission): never retried.
  std::set<std::string> given_up_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::set<int>> ips_ ABSL_GUARDED_BY(mu_);  // by node
};

// ---- Autoscaler (apiserver_autoscaler.cc) ----

// A minimal cluster autoscaler with Cluster Autoscaler's contract, for the
// capacity-on-demand drills: node pools of a fixed shape; a Pod that is
// unbound and whose PodScheduled condition is False/Unschedulable, that
// fits a pool (its nodeSelector, its GPU request, tolerations of the
// pool's NoSchedule taints) and no node that is up or coming, makes it add
// a node after the pool's delay; a ProvisioningRequest of class
// best-effort-atomic-scale-up.autoscaling.x-k8s.io gets all its nodes or
// none (Accepted, then Provisioned or Failed); Pods that consume one are
// left to it. A node it added that has had no Pod (and fits no pending Pod)
// for scale_down_after is tainted ToBeDeletedByClusterAutoscaler, then
// deleted after delete_after, unless a Pod came (the taint is then taken
// off). It removes only empty nodes: no eviction, so safe-to-evict and
// do-not-disrupt change nothing here. Owns its thread (joined in Stop).
struct AutoscalerPool {
  std::string name;
  json labels = json::object();  // the nodes' labels
  json taints = json::array();   // the nodes' taints
  std::string gpu_product;       // nvidia.com/gpu.product
  int gpus_per_node = 0;
  std::string cpu = "32", memory = "256Gi";
  int max_nodes = 0;
  std::chrono::milliseconds provision_delay{1000};
  std::chrono::milliseconds scale_down_after{3000};
  std::chrono::milliseconds delete_after{1000};
};
// {"pools": [{"name", "labels", "taints", "gpuProduct", "gpusPerNode",
// "cpu", "memory", "maxNodes", "provisionDelayMs", "scaleDownAfterMs",
// "deleteAfterMs"}]}; InvalidArgument naming the field.
absl::StatusOr<std::vector<AutoscalerPool>> ParseAutoscalerPools(
    const json& config);

class Autoscaler {
 public:
  Autoscaler(Store* store, std::vector<AutoscalerPool> pools);
  ~Autoscaler();  // Stop()
  void Start();
  void Stop();  // idempotent
  void Wake();
  // Pools, nodes coming, nodes it added, its decisions: GET
  // /testing/autoscaler.
  json Describe() const;

 private:
  struct Planned {
    std::string node, pool, provisioning_request;
    SteadyTime ready_at;
    int64_t free_gpus = 0;
  };
  void Loop();
  SteadyTime Pass(SteadyTime now);
  json NodeObject(const AutoscalerPool& pool, const std::string& name,
                  int index) const;
  void Note(const std::string& what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Store* const store_;
  const std::vector<AutoscalerPool> pools_;
  std::thread loop_;
  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool wake_ ABSL_GUARDED_BY(mu_) = false;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<Planned> planned_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> planned_for_
      ABSL_GUARDED_BY(mu_);  // Pod uid -> node
  std::map<std::string, std::string> added_
      ABSL_GUARDED_BY(mu_);  // node -> pool
  std::map<std::string, SteadyTime> empty_since_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, SteadyTime> tainted_at_ ABSL_GUARDED_BY(mu_);
  // ProvisioningRequests (ns/name) taken in hand, with their nodes.
  std::map<std::string, std::vector<std::string>> requests_
      ABSL_GUARDED_BY(mu_);
  std::deque<std::string> notes_ ABSL_GUARDED_BY(mu_);  // the last decisions
  int next_node_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace gpusched::kubetest

#endif  // GPUSCHED_TESTS_KUBE_APISERVER_H_
