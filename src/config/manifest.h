// Kubernetes-style manifests for `gpusched apply` and the control API:
// `kind: Deployment`, `kind: Tenant` and `kind: ModelRoute`
// (config/model_route.h), several per file separated by
// `---`. The same spec structs back the `deployments:` and `tenants:` lists
// of the serve config (config/serve_config.h), so a deployment is written the
// same way in both places. Every field, with its default:
//
//   apiVersion: gpusched.io/v1       # required, exactly this
//   kind: Deployment                 # required: Deployment | Tenant |
//                                    #   ModelRoute
//   metadata:
//     name: chat                     # required; [a-z0-9]([-a-z0-9.]*[a-z0-9])?
//                                    #   at most 63 characters
//     labels: {team: search}         # optional string map
//   spec:                            # Deployment
//     model: chat                    # the engine's model ({model}); default
//                                    #   metadata.name
//     engine:
//       template: reference          # reference | vllm | sglang | llama-cpp |
//                                    #   tgi | triton | command
//                                    #   (docs/engines.md)
//       args: []                     # extra engine arguments, verbatim
//       env: {}                      # extra environment for the engine
//       weightsPath: ""              # where the engine reads the weights
//                                    #   ({model}, {name}); "" = the
//                                    #   template's (vllm, sglang, llama-cpp,
//                                    #   tgi, triton: {model}). Placement
//                                    #   prefers nodes where they are local
//     endpoints: []                  # attach to running engines (host:port)
//                                    #   instead of launching: then replicas
//                                    #   and resources are not used
//     resources:                     # one of whole | fraction | mig, or none
//       whole: 1                     #   N whole GPUs on one node
//       fraction: {milli: 250, memory: 10Gi}   # share of one GPU
//       mig: 1g.10gb                 #   a MIG profile
//       gpuModels: [H100-SXM-80GB]   #   acceptable GPU models; default any
//       nvlink: any                  #   whole N>1: any | preferred | required
//       cpu: "1"                     #   CPU cores (Kubernetes quantity)
//       memory: 2Gi                  #   host memory
//     replicas: 1                    # desired replicas (engine processes);
//                                    #   or {min: 1, max: 4}: starts at min
//                                    #   ({min, max, desired}: at desired)
//     priorityClass: standard        # critical | standard | batch | sheddable
//     slo: {ttftMs: 0, tpotMs: 0}    # 0: none
//     maxOngoingRequests: 32         # in flight per replica
//     spread: node                   # its replicas on different nodes, else
//                                    #   different GPUs, where they fit
//                                    #   (gpu: different GPUs only; none)
//     router: {policy: least-outstanding}      # serving/router.h knobs:
//                                    #   policy, loadBoundEpsilon,
//                                    #   affinityBlocks, sessionFallback
//     queue: {order: fair, maxQueueSize: 0}    # fair | edf | fcfs;
//                                    #   maxQueueSize 0: unbounded
//     kvBudgetTokens: 0              # per replica; 0: unbounded
//     tenant: ""                     # owner: its replicas' GPUs count
//                                    #   against the tenant's quota.limit
//     preemptible: true              # false: its replicas are never
//                                    #   swapped out nor preempted (see
//                                    #   docs/autoscaling.md)
//     autoscaling:                   # optional (autoscale/autoscaler.h has
//       minReplicas: 1               #   every rule); replicas is then one
//       maxReplicas: 1               #   integer, the initial count (default
//       policy: target-ongoing       #   minReplicas; 0 allowed), not a range.
//       targetOngoingRequests: 2     #   policy: target-ongoing | slo (uses
//       lookBackPeriodS: 30          #   slo.ttftMs, which must be > 0)
//       upscaleDelayS: 30
//       downscaleDelayS: 600
//       maxConcurrentStarts: 4       # replicas starting at once
//       idleTimeoutS: 300            # minReplicas 0: idle this long -> 0
//       sloPercentile: 0.9
//       sloWindowS: 60
//       sloHeadroom: 0.5             # scale down under headroom * SLO
//       maxHeld: 100                 # requests held at zero ready replicas
//                                    #   (more: 503 + Retry-After); >= 1
//       holdTimeoutS: 60             # a queued request waits this long for
//                                    #   a replica (then 503 + Retry-After)
//                                    # The live controller runs the rules
//                                    #   (docs/autoscaling.md, live section).
//
//   spec:                            # Tenant
//     models: []                     # deployments it may use; empty = all
//     weight: 1                      # fair-share weight (> 0)
//     priorityClass: standard        # its requests' default class
//     limits:
//       requestsPerMinute: 0         # 0: unlimited
//       tokensPerMinute: 0           # input + output tokens
//       burstMinutes: 1
//       maxQueued: 0                 # requests waiting; 0: unbounded
//       maxConcurrency: 0            # requests waiting or running; 0:
//       unbounded
//     quota:                         # GPU share for placement (KAI-style)
//       gpus: 0                      # guaranteed GPUs (may be fractional)
//       limit: 0                     # at most this many GPUs; 0: no limit
//       overQuotaWeight: 1
//
// Parsing lists every problem, one per line, each with "file:line: "; an
// invalid document rejects the whole text (nothing is applied). This module
// parses YAML and throws nothing. Thread-compatible.
//
// The spec readers are shared with the serve config through
// config/spec_reader.h (internal to config/).
#ifndef GPUSCHED_CONFIG_MANIFEST_H_
#define GPUSCHED_CONFIG_MANIFEST_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "autoscale/autoscaler.h"
#include "config/model_route.h"
#include "nlohmann/json.hpp"
#include "serving/admission.h"
#include "serving/dispatcher.h"
#include "serving/router.h"

namespace gpusched::config {

inline constexpr char kApiVersion[] = "gpusched.io/v1";

struct HostPort {
  std::string host = "127.0.0.1";
  int port = 0;
  bool operator==(const HostPort&) const = default;
};

// "host:port" with port 0..65535.
bool ParseHostPort(absl::string_view text, HostPort* out);

// metadata.name (and the serve config's `name`): a DNS-1123 subdomain label
// with dots, [a-z0-9]([-a-z0-9.]*[a-z0-9])?, at most `max_size` characters
// (63 for gpusched's objects; a Kubernetes Node's name may have 253).
bool ValidObjectName(absl::string_view name, size_t max_size = 63);

// The priority classes the parser checks priorityClass against, most
// important first: critical, standard, batch, sheddable.
const std::vector<std::string>& DefaultPriorityClasses();

// What one replica asks of the cluster (converted to
// inventory::ResourceRequest by the runtime; config does not depend on
// inventory).
struct ResourceSpec {
  std::string kind = "none";   // none | whole | fraction | mig
  int gpus = 0;                // whole
  int milli = 0;               // fraction: 1..1000
  int64_t gpu_memory_mib = 0;  // fraction: GPU memory
  std::string mig_profile;     // mig
  std::vector<std::string> gpu_models;
  std::string nvlink = "any";  // any | preferred | required
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  bool operator==(const ResourceSpec&) const = default;
};

struct DeploymentSpec {
  std::string name;
  std::map<std::string, std::string> labels;
  std::string model;  // default: name
  std::string engine = "reference";
  std::vector<std::string> args;
  std::map<std::string, std::string> env;
  std::vector<HostPort> endpoints;
  ResourceSpec resources;
  int replicas = 1;      // desired now
  int min_replicas = 1;  // replicas: N sets min = max = N
  int max_replicas = 1;
  std::string priority_class = "standard";
  double ttft_slo_ms = 0;
  double tpot_slo_ms = 0;
  int max_ongoing_requests = 32;
  std::string spread = "node";  // node | gpu | none
  serving::RouterConfig router;
  std::string queue_order = "fair";
  int64_t max_queue_size = 0;
  int64_t kv_budget_tokens = 0;
  std::string tenant;  // owner whose GPU quota its replicas count against
  // False: its replicas are never swapped out nor preempted.
  bool preemptible = true;
  // engine.weightsPath: overrides the template's weights path ("" = the
  // template's).
  std::string weights_path;
  // spec.autoscaling; absent: the replica count only changes when the
  // manifest does. Its min/max_replicas equal min_replicas/max_replicas
  // above (the parser sets both), and slo_ttft_s is slo.ttftMs / 1000.
  std::optional<autoscale::AutoscalingConfig> autoscaling;
  // spec.autoscaling.maxHeld / holdTimeoutS (only with autoscaling): while
  // the deployment has no ready replica, at most max_held requests wait in
  // its queue (more get 503 with Retry-After), and a queued request waits at
  // most hold_timeout_s for a replica (the gateway's queue timeout).
  int64_t max_held = 100;
  double hold_timeout_s = 60;
  bool operator==(const DeploymentSpec&) const = default;
};

struct TenantQuotaSpec {
  double gpus = 0;
  double limit = 0;
  double over_quota_weight = 1;
  bool operator==(const TenantQuotaSpec&) const = default;
};

struct TenantSpec {
  std::string name;
  std::map<std::string, std::string> labels;
  std::vector<std::string> models;
  double weight = 1;
  std::string priority_class = "standard";
  serving::TenantLimits limits;
  TenantQuotaSpec quota;
  bool operator==(const TenantSpec&) const = default;
};

// What the request layer enforces of a tenant (name, weight, limits).
serving::TenantSpec ServingTenant(const TenantSpec& t);

struct Manifest {
  enum class Kind { kDeployment, kTenant, kModelRoute };
  Kind kind = Kind::kDeployment;
  DeploymentSpec deployment;  // when kind == kDeployment
  TenantSpec tenant;          // when kind == kTenant
  ModelRouteSpec route;       // when kind == kModelRoute
  int line = 0;               // 1-based line of the document's start
  const std::string& name() const {
    return kind == Kind::kDeployment ? deployment.name
           : kind == Kind::kTenant   ? tenant.name
                                     : route.name;
  }
  // What the manifest says; `line` is only where it was read from.
  bool operator==(const Manifest& o) const {
    return kind == o.kind && deployment == o.deployment && tenant == o.tenant &&
           route == o.route;
  }
};

// "Deployment", "Tenant" or "ModelRoute".
const char* KindName(Manifest::Kind kind);

// At most this many manifests in one text (one apply).
inline constexpr int kMaxManifests = 1000;

// Parses one or more `---`-separated documents (empty documents skipped),
// at most kMaxManifests.
// InvalidArgument listing every problem ("f.yaml:7: spec.replicas: must be
// an integer >= 0, got 'two'"), including two documents of the same kind and
// name. `source` names the text in messages.
absl::StatusOr<std::vector<Manifest>> ParseManifests(absl::string_view text,
                                                     std::string source);

// The manifest as the canonical JSON the store and the API keep and return:
// {"apiVersion","kind","metadata":{"name","labels"},"spec":{...}} with every
// field present (defaults filled in), camelCase keys as in YAML.
nlohmann::json ToJson(const Manifest& m);
// The inverse (JSON is YAML): ParseManifests over the dump of ToJson gives
// back an equal manifest.
absl::StatusOr<Manifest> ManifestFromJson(const nlohmann::json& j,
                                          std::string source);

// Cross-checks a deployment's fields that need no cluster and no runtime:
// known priority class (one of `classes`), known router policy and queue
// order, min <= replicas <= max, resources consistent with their kind.
// Appends one message per problem ("spec.router.policy: unknown policy
// 'rr'; known: ...") to `problems`. Used by the parser and by the serve
// config. The engine template and the GPU models are checked by the runtime
// (runtime/controller.h), which knows them.
void CheckDeployment(const DeploymentSpec& d,
                     const std::vector<std::string>& classes,
                     std::vector<std::string>* problems);
// The same for a tenant: known priority class, weight > 0, valid limits
// (serving::ValidateTenantLimits), quota limit 0 or >= gpus.
void CheckTenant(const TenantSpec& t, const std::vector<std::string>& classes,
                 std::vector<std::string>* problems);

}  // namespace gpusched::config

#endif  // GPUSCHED_CONFIG_MANIFEST_H_
