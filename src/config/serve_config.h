// The `gpusched serve` configuration: the platform started from one file.
// Deployments and tenants are written exactly as the spec of a Deployment or
// Tenant manifest (config/manifest.h, camelCase keys) plus a `name`, and are
// read by the same code. Every field, with its default:
//
//   listen: 127.0.0.1:8080        # host:port of the gateway (port 0: any)
//   state: gpusched-state.db      # SQLite state (":memory:" for none); not
//                                 #   with store.etcd
//   store:                        # default: the SQLite file `state`
//     etcd:                       # present: the state lives in etcd and
//                                 #   several instances share it, one
//                                 #   leading (docs/ha.md)
//       endpoints: [http://127.0.0.1:2379]  # the members, 1..16
//       prefix: /gpusched/        # every key under it; one per installation
//       username: ""              # etcd's user authentication, with
//       password_file: ""         #   the password in this file (mode 0600)
//       ca: ""                    # PEM CA of the members' certificates
//       cert: ""                  # client certificate and key
//       key: ""                   #   (etcd --client-cert-auth)
//       request_timeout_ms: 2000  # one request step, 100..60000
//       connect_timeout_ms: 10000 # the first read at start, 100..600000
//       max_events: 10000         # the event log's bound, 100..1000000
//       max_event_age_h: 168      # events older go, 1..8760
//   ha:                           # this instance among several (etcd)
//     instance_id: ""             # unique per instance; "": <hostname>-<port>
//     advertise: ""               # the URL other instances reach this one
//                                 #   at; "": from listen (and the hostname
//                                 #   when listening on every address)
//     lease_ttl_s: 2              # the leader's lease, 1..3600 (etcd grants
//                                 #   at least 2 s at its default election
//                                 #   timeout); docs/ha.md says why 2
//     renew_interval_ms: 0        # 0: 5/8 of the TTL; less than 2/3 of it
//                                 #   (each renewal waits at most half of
//                                 #   this for a member)
//   audit:                        # the audit log (docs/access.md)
//     export_path: ""             # append each record as a JSON line here
//                                 #   ("": none); rotated to .1 at 256 MiB
//     max_records: 100000         # kept in the store, 1..10000000
//     max_age_days: 90            # older records go, 1..3650
//   oidc:                         # single sign-on tokens (docs/access.md);
//                                 #   absent: API keys only
//     issuer: https://idp.example.com     # required: the tokens' iss
//     audience: gpusched                  # required: one of their aud
//     jwks_file: ""               # the provider's keys: a file, or
//     jwks_url: ""                #   http(s)://host[:port]/path
//     jwks_refresh_s: 300         # re-read this often, 1..86400
//     leeway_s: 30                # clock skew allowed on exp/nbf, 0..300
//     subject_claim: sub          # the token's subject ("User" subjects)
//     groups_claim: groups        # its groups ("Group" subjects)
//     tenant_claim: ""            # the tenant it acts for ("": none)
//     claim_roles:                # at most 256: a claim value -> a role
//     - {claim: groups, value: sre, role: operator, tenant: ""}
//   admin_key: ""                 # optional admin API key (gs-...)
//   admin_key_file: ""            # or read it from this file (a Secret
//                                 #   mounted in every instance's Pod)
//   key_dir: ""                   # keep keys in files here (mode 0600):
//                                 #   admin.key and <tenant>.key, created
//                                 #   when missing, reused on restarts.
//                                 #   "": a new key per tenant each start,
//                                 #   printed only
//   log_dir: gpusched-logs        # engine stdout/stderr, one pair per replica
//   inventory: ""                 # an Inventory manifest
//                                 #   (config/inventory_config.h); "": none
//   gpu_discovery: auto           # auto | nvml | declared
//   placement_policy: fillfrag    # how replicas are placed on GPUs
//   tls: {cert: PATH, key: PATH}  # both or neither; default none (plain HTTP)
//   health_check_period_ms: 5000  # engine readiness probes, > 0
//   drain_grace_s: 30             # on SIGTERM, wait this long for requests
//   drain_delay_s: 0              # on SIGTERM, fail /readyz but keep
//                                 #   accepting this long first (a load
//                                 #   balancer's or Kubernetes' time to see
//                                 #   it), then drain
//   capacity: {...}               # capacity on demand, when the cluster
//                                 #   manager can add nodes (Slurm CLOUD
//                                 #   nodes, Kubernetes autoscalers): the
//                                 #   fields of config/capacity_config.h;
//                                 #   pools: [{name, gpu, price_per_node_hour,
//                                 #   provisioning_delay_s, min_nodes,
//                                 #   max_nodes}] override the manager's by
//                                 #   name (docs/capacity.md)
//   swap_min_idle_s: 0            # an idle replica is swapped out for
//                                 #   another model only after this long
//                                 #   without a request (docs/autoscaling.md)
//   stop_replicas_on_exit: false  # SIGTERM ends Slurm jobs and Pods too
//                                 #   (by default they keep running and the
//                                 #   next leader adopts them; local engines
//                                 #   always end with gpusched)
//   max_launches_per_pass: 2      # placements and engine starts per
//                                 #   controller pass, 1..100000: a backlog
//                                 #   drains over passes (docs/reliability.md)
//   launch_interval_ms: 0         # after a pass that started engines, the
//                                 #   next starts wait this long, 0..60000:
//                                 #   a burst of starts cannot take every
//                                 #   core at once (0: no wait)
//   alerts:                       # firing alerts in the dashboard and
//                                 #   `gpusched get alerts` (docs/runbooks.md)
//     prometheus_url: ""          # http://host:port[/prefix] of the
//                                 #   Prometheus that runs deploy/prometheus/
//                                 #   rules; "": no alerts shown
//     runbook_base_url: ""        # prefixed to relative runbook_url's
//                                 #   (docs/runbooks.md#...), e.g. a
//                                 #   repository's https://.../blob/main/
//     timeout_ms: 2000            # each step of one query, 100..30000
//     max_alerts: 500             # listed at most, 1..10000
//   gpu_prices: {}                # price per GPU-hour by GPU model (catalog
//                                 #   names), e.g. {H100-SXM-80GB: 4.0}, for
//                                 #   the cost metrics; a model not listed
//                                 #   costs 0 (docs/metrics.md)
//   slurm:                        # present: nodes come from Slurm and every
//                                 #   replica runs as a Slurm job on the node
//                                 #   placement chose (docs/slurm.md); not
//                                 #   with `inventory`
//     partition: ""               # "": the cluster's default partition
//     account: ""                 # sbatch --account ("": none)
//     qos: ""                     # sbatch --qos ("": none)
//     job_prefix: gpusched        # job names <prefix>.<replica>: one prefix
//                                 #   per gpusched on a cluster; 1..32 of
//                                 #   letters, digits, '_' and '-'
//     bin_dir: ""                 # where sbatch, scontrol and scancel are
//                                 #   ("": PATH)
//     poll_interval_ms: 1000      # how often jobs and nodes are read,
//                                 #   100..60000
//     command_timeout_ms: 10000   # one Slurm command, 100..600000
//     default_memory_mib: 1024    # --mem for a replica that declares no
//                                 #   memory, 1..16777216
//     gres_map: {}                # GRES GPU type -> GPU model (catalog name
//                                 #   or alias), e.g. {a100: A100-SXM4-80GB};
//                                 #   a type not here must be a catalog
//                                 #   name itself ("h100"); at most 256
//   kubernetes:                   # present: nodes come from the Kubernetes
//                                 #   API and every replica runs as a Pod
//                                 #   bound to the node placement chose
//                                 #   (docs/kubernetes.md); not with
//                                 #   `inventory` or `slurm`
//     api_server: ""              # https://host:port; "": the credentials'
//     kubeconfig: ""              # a kubeconfig file (its current context);
//                                 #   "": in-cluster when in a Pod, else
//                                 #   $KUBECONFIG, else ~/.kube/config
//     namespace: gpusched         # where replica Pods are created
//     instance: gpusched          # label gpusched.io/instance: one per
//                                 #   gpusched on a cluster; 1..20 of a-z0-9-
//     node_selector: {}           # labels a node must carry to be used,
//                                 #   e.g. {gpusched.io/managed: "true"};
//                                 #   at most 256
//     tolerations: [nvidia.com/gpu, gpusched.io/dedicated]
//                                 # taint keys its Pods tolerate (operator
//                                 #   Exists); at most 64
//     image: ghcr.io/gpusched/gpusched:<version>
//                                 # container image of engines whose
//                                 #   template is not in `images`
//     images: {}                  # engine template -> image, e.g.
//                                 #   {vllm: vllm/vllm-openai:v0.6.3}
//     engine_path: /usr/local/bin/gpusched
//                                 # {self} in a Pod: gpusched in the image
//     scheduler_name: gpusched    # spec.schedulerName of its Pods
//     service_account: ""         # of its Pods ("": the namespace default)
//     product_map: {}             # GFD nvidia.com/gpu.product -> GPU model
//                                 #   (catalog name or alias); at most 256
//     request_timeout_ms: 10000   # one API request step, 100..600000
//     default_memory_mib: 1024    # memory request of a replica declaring
//                                 #   none, 1..16777216
//   deployments:                  # optional: more come by `gpusched apply`
//     - name: chat                # required, unique; as metadata.name
//       engine: {template: reference, args: [], env: {}}
//       model: chat               # default: name
//       replicas: 1               # or {min: 1, max: 4}
//       endpoints: []             # or attach to running engines: host:port
//       resources: {fraction: {milli: 250, memory: 10Gi}}
//       priorityClass: standard
//       slo: {ttftMs: 0, tpotMs: 0}
//       maxOngoingRequests: 32
//       router: {policy: least-outstanding}   # serving/router.h knobs
//       queue: {order: fair, maxQueueSize: 0}
//       kvBudgetTokens: 0
//       autoscaling: {minReplicas: 0, maxReplicas: 4}  # config/manifest.h
//   tenants:                      # optional
//     - name: demo                # required, unique
//       models: []                # deployments it may use; empty = all
//       weight: 1
//       priorityClass: standard
//       limits: {requestsPerMinute: 0, tokensPerMinute: 0, burstMinutes: 1,
//                maxQueued: 0}
//       quota: {gpus: 0, limit: 0, overQuotaWeight: 1}
//
// Relative input paths (inventory, tls, store.etcd's files) are resolved
// against the directory of the config file; the places gpusched writes
// (state, key_dir, log_dir) are relative to the working directory. A
// deployment launched here needs replicas >= 1, endpoints, or autoscaling
// (which may start it at 0: autoscaling: {minReplicas: 0, ...}). The store
// is the one source of truth: the deployments and tenants here only seed
// what it lacks (at each start, like `gpusched apply` of the missing ones);
// to change one, apply it. Errors name the file and line; every problem is
// listed.
#ifndef GPUSCHED_CONFIG_SERVE_CONFIG_H_
#define GPUSCHED_CONFIG_SERVE_CONFIG_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "config/capacity_config.h"
#include "config/manifest.h"

namespace gpusched::config {

struct TlsFiles {
  std::string cert;  // PEM certificate chain; empty: no TLS
  std::string key;   // PEM private key
};

struct SlurmConfig {
  bool enabled = false;  // a `slurm:` block was given
  std::string partition;
  std::string account;
  std::string qos;
  std::string job_prefix = "gpusched";
  std::string bin_dir;
  int64_t poll_interval_ms = 1000;
  int64_t command_timeout_ms = 10000;
  int64_t default_memory_mib = 1024;
  std::map<std::string, std::string> gres_map;
};

// A node pool an autoscaler can grow (capacity on demand,
// docs/kubernetes.md): `kubernetes.pools[]`. Needed for a pool scaled to
// zero (no node shows it) and for a maximum, which the API does not hold
// for Cluster Autoscaler's node groups; Karpenter NodePools and the nodes'
// pool labels fill in the rest (backends/kubernetes/kube_pools.h).
struct KubernetesPoolConfig {
  std::string name;  // DNS-1123, 1..63
  // Node labels that select it; {}: {karpenter.sh/nodepool: name}. GKE:
  // {cloud.google.com/gke-nodepool: name}; EKS: {eks.amazonaws.com/nodegroup:
  // name}.
  std::map<std::string, std::string> labels;
  std::string gpu_product;    // nvidia.com/gpu.product of its nodes
  int64_t gpus_per_node = 0;  // 0..1024; 0: from its nodes
  int64_t cpu_milli = 0;      // `cpu: 95500m`; 0: from its nodes
  int64_t memory_mib = 0;     // `memory: 1000Gi`; 0: from its nodes
  bool spot = false;
  int64_t max_nodes = 0;  // 0..10000; 0: a NodePool's limit, else its nodes
};

struct KubernetesConfig {
  bool enabled = false;  // a `kubernetes:` block was given
  std::string api_server;
  std::string kubeconfig;
  std::string namespace_name = "gpusched";
  std::string instance = "gpusched";
  std::map<std::string, std::string> node_selector;
  std::vector<std::string> tolerations = {"nvidia.com/gpu",
                                          "gpusched.io/dedicated"};
  std::string image;  // empty: ghcr.io/gpusched/gpusched:<version>
  std::map<std::string, std::string> images;
  std::string engine_path = "/usr/local/bin/gpusched";
  std::string scheduler_name = "gpusched";
  std::string service_account;
  std::map<std::string, std::string> product_map;
  int64_t request_timeout_ms = 10000;
  int64_t default_memory_mib = 1024;
  std::vector<KubernetesPoolConfig> pools;  // at most 256
  // Labels that name a node's pool; empty: karpenter.sh/nodepool,
  // cloud.google.com/gke-nodepool, eks.amazonaws.com/nodegroup,
  // kubernetes.azure.com/agentpool.
  std::vector<std::string> pool_labels;
  bool karpenter_nodepools = true;  // read karpenter.sh/v1 NodePools
};

struct EtcdConfig {
  bool enabled = false;  // a `store: {etcd: ...}` block was given
  std::vector<std::string> endpoints = {"http://127.0.0.1:2379"};
  std::string prefix = "/gpusched/";
  std::string username;
  std::string password_file;  // resolved path
  std::string ca;             // resolved paths
  std::string cert;
  std::string key;
  int64_t request_timeout_ms = 2000;
  int64_t connect_timeout_ms = 10000;
  int64_t max_events = 10000;
  int64_t max_event_age_h = 168;
};

struct HaConfig {
  std::string instance_id;  // empty: <hostname>-<port>
  std::string advertise;    // empty: from listen
  int64_t lease_ttl_s = 2;
  int64_t renew_interval_ms = 0;
};

struct AlertsConfig {
  std::string prometheus_url;  // empty: none
  std::string runbook_base_url;
  int64_t timeout_ms = 2000;
  int64_t max_alerts = 500;
};

struct AuditConfig {
  std::string export_path;  // resolved path; empty: none
  int64_t max_records = 100000;
  int64_t max_age_days = 90;
};

struct OidcClaimRole {
  std::string claim, value, role, tenant;
};

struct OidcConfig {
  bool enabled = false;  // the oidc: block is present
  std::string issuer, audience, jwks_file, jwks_url;
  int64_t jwks_refresh_s = 300;
  int64_t leeway_s = 30;
  std::string subject_claim = "sub";
  std::string groups_claim = "groups";
  std::string tenant_claim;
  std::vector<OidcClaimRole> claim_roles;
};

struct ServeConfig {
  std::string source;
  HostPort listen{"127.0.0.1", 8080};
  std::string state = "gpusched-state.db";
  AuditConfig audit;
  OidcConfig oidc;
  std::string admin_key;
  std::string admin_key_file;  // resolved path; empty: none
  std::string key_dir;         // empty: keys printed, not kept
  std::string log_dir = "gpusched-logs";
  std::string inventory;  // resolved path; empty: none
  std::string gpu_discovery = "auto";
  std::string placement_policy = "fillfrag";
  TlsFiles tls;
  int64_t health_check_period_ms = 5000;
  double drain_grace_s = 30;
  double drain_delay_s = 0;
  double swap_min_idle_s = 0;
  CapacitySpec capacity;  // capacity on demand (config/capacity_config.h)
  int64_t max_launches_per_pass = 2;
  int64_t launch_interval_ms = 0;
  std::map<std::string, double> gpu_prices;  // per GPU-hour; absent: 0
  AlertsConfig alerts;
  EtcdConfig etcd;
  HaConfig ha;
  bool stop_replicas_on_exit = false;
  SlurmConfig slurm;
  KubernetesConfig kubernetes;
  std::vector<DeploymentSpec> deployments;
  std::vector<TenantSpec> tenants;
};

// `source` names the text in messages; relative paths are resolved against
// `base_dir` (kept relative when it is empty).
absl::StatusOr<ServeConfig> ParseServeYaml(absl::string_view text,
                                           std::string source,
                                           const std::string& base_dir = "");
// Reads `path`; relative paths in it are resolved against its directory.
absl::StatusOr<ServeConfig> LoadServeFile(const std::string& path);

}  // namespace gpusched::config

#endif  // GPUSCHED_CONFIG_SERVE_CONFIG_H_
