// The `gpusched sim serve` configuration: GPUs, deployments, tenants,
// priority classes and the workload of one simulated serving run.
// Every field, with its default (durations in seconds unless the name says
// otherwise; relative paths are relative to the config file):
//
//   seed: 42                       # every random choice derives from it
//   cluster:
//     gpus: 0                      # GPUs replicas may hold; 0: unbounded.
//                                  #   Bounded: a replica that does not fit
//                                  #   swaps out idle replicas or preempts
//                                  #   lower-priority ones (sim/serve_sim.h)
//     gpus_per_node: 8             # GPUs come in nodes of this many; a
//                                  #   replica's GPUs are on one node
//     swap_min_idle_s: 0           # an idle replica is swapped out only
//                                  #   after this long without a request
//     price_per_gpu_hour: 0        # the static GPUs' price (cost report)
//     pools:                       # nodes that can be added on demand
//       - name: a100               #   (control/capacity.h, docs/capacity.md)
//         gpu: A100-80GB           # its GPUs: a latency-model GPU name; a
//                                  #   replica there runs at that GPU's
//                                  #   latency (its deployment's model)
//         gpus_per_node: 8
//         price_per_node_hour: -1  # USD; -1: the price table's for (gpu,
//                                  #   spot) (data/gpu_prices.csv)
//         spot: false
//         provisioning_delay_s: 120  # ask -> the node registers
//         min_nodes: 0
//         max_nodes: 1             # 1..4096
//         preemptions_per_node_hour: 0  # spot: Poisson rate of node losses
//         preemption_trace: ""     # spot: a file of times (s, one per
//                                  #   line) when one of its nodes is lost
//   capacity:                      # with pools: when to add and give back
//     policy: gpusched             # gpusched (cost per token at the SLO,
//                                  #   consolidation, spot fallback) |
//                                  #   reactive (first pool that fits, idle
//                                  #   nodes go after scale_down_delay)
//     scale_up_delay_s: 30         # replicas wait this long before a node
//     scale_down_delay_s: 600      # a node without replicas this long goes
//     consolidate_below: 0.5       # a pool node this empty is emptied
//     base_ondemand_fallback_replicas: 0  # per deployment, on on-demand
//     dynamic_ondemand_fallback: false    # spot lost -> on-demand for
//     spot_recovery_delay_s: 600          #   this long
//     failed_pool_backoff_s: 600   # a pool whose node failed is skipped
//     interval_s: 5                # how often the planner runs
//     prices: ""                   # a price table replacing the shipped one
//   cold_start:                    # replica start -> ready (sim/cold_start.h)
//     profile: ""                  # model-load CSV (ServerlessLLM format)
//     format: safetensors          # its checkpoint_format rows to sample
//     engine_init_s: 0             # added to every load
//     default_s: 4.95              # per 6.7B parameters when no profile
//     local_load_factor: 1         # load time x this on a node where the
//                                  #   model was loaded before (replicas go
//                                  #   there first: control/place.h)
//   autoscaling_interval_s: 1      # how often autoscaled deployments are
//                                  #   observed (and at every held arrival)
//   fairness_window_s: 10          # window for the service-difference metric
//   load_sample_s: 10              # resolution of load-over-time series
//   priority_classes:              # optional; index order = importance.
//     - name: critical             #   default: critical, standard, batch,
//       timeout_s: 0               #   sheddable, no timeouts. timeout_s > 0:
//       order: ""                  #   queue timeout; order overrides the
//                                  #   deployment's queue order for the class
//       preemptible: true          #   false: never evicted nor preempted
//   routes:                        # optional: public names the workload's
//     - name: chat                 #   requests may use, split over
//       targets: [...]             #   deployments by weight, with a canary
//       rollout: {...}             #   rollout: a ModelRoute's spec fields
//                                  #   (config/model_route.h, camelCase)
//   deployments:                   # required, at least one
//     - name: chat                 # required, unique
//       count: 1                   # > 1 or set: that many copies; "{i}" in
//                                  #   the name becomes 0, 1, ... (else
//                                  #   "-<i>" is appended)
//       priority_class: standard   # its replicas' class (swap, preemption)
//       owner: ""                  # the tenant whose quota its GPUs count
//                                  #   against (a configured tenant)
//       spot: true                 # its replicas may run on spot nodes
//       kind: llm                  # llm (continuous batching) | tensor
//       model: llama-2-7b          # llm: latency profile (see
//                                  #   `gpusched profiles list`)
//       gpu: A100-80GB             # llm: GPU of the profile
//       tensor_parallel: 1         # GPUs per replica
//       gpu_fraction: 0            # 0 < f <= 1: a replica holds this share
//                                  #   of one GPU instead (placement only;
//                                  #   latency stays the profile's)
//       replicas: 1                # fixed replica count, >= 1 (with
//                                  #   autoscaling: initial, >= 0)
//       max_ongoing_requests: 64   # per-replica concurrency cap
//       latency_multiplier: 1      # 0.01..100: scales the engine's
//                                  #   latencies (llm: the profile's prefill
//                                  #   and decode times; tensor: base_s and
//                                  #   per_item_s), e.g. a slower canary
//       error_rate: 0              # 0..1: the share of its finished
//                                  #   requests that fail (a seeded draw per
//                                  #   request); route analyses see them as
//                                  #   errors, like an engine's 500
//       router:                    # serving/router.h RouterConfig
//         policy: least-outstanding
//         load_bound_epsilon: 0.25
//         affinity_blocks: 4
//         prefix_index_capacity: 1048576
//         session_fallback: least-outstanding
//       queue:
//         order: fair              # fair | edf | fcfs
//         max_queue_size: 0        # 0: unbounded
//         aging_s: 0               # 0: no aging
//         demote_late: false       # edf: late requests behind feasible ones
//         late_margin_s: 0.2         # slack under which a request is late
//         input_weight: 1          # VTC token weights
//         output_weight: 2
//         fair_share_headroom: 0.25 # slots kept for tenants below their
//                                  #   equal share (serving/dispatcher.h)
//         reject_infeasible: true  # reject at arrival when the predicted
//                                  #   first token misses the deadline
//       engine:                    # llm replicas
//         max_num_seqs: 256
//         max_num_batched_tokens: 8192
//         kv_capacity_tokens: 0    # 0: the latency profile's capacity
//         kv_budget_tokens: -1     # gateway KV budget per replica; -1: the
//                                  #   KV capacity, 0: none
//         block_tokens: 16         # KV/prefix block size (a trace with block
//                                  #   hashes sets its own, e.g. 512)
//         prefix_caching: true
//       batching:                  # tensor replicas (Triton's knobs)
//         max_batch_size: 8
//         max_queue_delay_microseconds: 1000
//         preferred_batch_size: []
//         instances: 1
//         base_s: 0.005            # batch latency = base_s + per_item_s * n
//         per_item_s: 0.001
//       autoscaling:               # optional; absent: a fixed replica count.
//         min_replicas: 1          #   Present: `replicas` is the initial count
//         max_replicas: 1          #   (default min_replicas, 0 allowed) and
//         policy: target-ongoing   #   autoscale/autoscaler.h moves it; every
//         target_ongoing_requests: 2   # knob and default is documented
//         look_back_period_s: 30   #   there. policy: target-ongoing | slo
//         upscale_delay_s: 30
//         downscale_delay_s: 600
//         max_concurrent_starts: 4
//         idle_timeout_s: 300      # min_replicas 0: idle this long -> 0
//         slo_ttft_s: 0            # slo policy: the TTFT SLO (> 0)
//         slo_percentile: 0.9
//         slo_window_s: 60
//         slo_headroom: 0.5
//         cold_start_s: -1         # start -> ready; -1: model-load profile
//   tenants:                       # optional; trace tenants not listed get
//     - name: team-a               #   tenant_defaults
//       weight: 1
//       priority: standard         # a priority class name
//       requests_per_minute: 0     # 0: unlimited
//       tokens_per_minute: 0
//       burst_minutes: 1
//       max_queued: 0
//       max_concurrency: 0         # waiting or running; 0: unbounded
//       slo: {ttft_s: 0, tpot_s: 0, e2e_s: 0}   # 0: no such SLO
//       quota: {gpus: 0, limit: 0, over_quota_weight: 1}  # the GPUs of the
//                                  #   deployments it owns: entitled to gpus
//                                  #   (preemption reclaims up to it), at
//                                  #   most limit (0: none)
//   tenant_defaults: {...}         # same fields as a tenant, without name
//   workload:                      # exactly one of trace and synthetic
//     trace:
//       format: azure              # azure | mooncake | vtc | aegaeon
//       path: trace.csv
//     synthetic:
//       duration_s: 60
//       tenants:
//         - name: a
//           model: ""              # deployment; "" = workload.deployment
//           arrival: poisson       # poisson | gamma | servegen
//           rate: 1                # requests/s
//           cv: 1                  # gamma
//           servegen_trace: ""     # servegen: chunk-<i>-trace.csv
//           servegen_offset_s: 0
//           servegen_rate_scale: 1 # multiplies every window's rate
//           servegen_dataset: ""   # optional length PMFs
//           input_tokens: 512      # fixed, or uniform up to input_max
//           input_max: 0
//           output_tokens: 128
//           output_max: 0
//           count: 1               # copies; "{i}" in name, model and the
//                                  #   servegen paths becomes 0, 1, ...
//     time_scale: 1                # > 1 compresses time: raises the load
//     max_requests: 0              # 0: all
//     max_seconds: 0               # 0: all
//     deployment: ""               # for requests without a model; default:
//                                  #   the first deployment
//     tenant: default              # for requests without a tenant
//
// Errors name the file and line; every problem is listed. Thread-compatible.
#ifndef GPUSCHED_CONFIG_SERVE_SIM_CONFIG_H_
#define GPUSCHED_CONFIG_SERVE_SIM_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "autoscale/autoscaler.h"
#include "config/capacity_config.h"
#include "config/model_route.h"
#include "serving/admission.h"
#include "serving/model_queue.h"
#include "serving/router.h"

namespace gpusched::config {

struct PriorityClassSpec {
  std::string name;
  double timeout_s = 0;  // 0: none
  std::string order;     // "" = the deployment's
  // False: replicas of deployments of this class are never evicted or
  // preempted.
  bool preemptible = true;
};

struct SimQueueSpec {
  std::string order = "fair";
  int64_t max_queue_size = 0;
  double aging_s = 0;
  bool demote_late = false;
  double late_margin_s = 0.2;
  double input_weight = 1;
  double output_weight = 2;
  double fair_share_headroom = 0.25;
  bool reject_infeasible = true;
};

struct SimEngineSpec {
  int max_num_seqs = 256;
  int64_t max_num_batched_tokens = 8192;
  int64_t kv_capacity_tokens = 0;
  int64_t kv_budget_tokens = -1;
  int block_tokens = 16;
  bool prefix_caching = true;
};

struct SimBatchingSpec {
  int max_batch_size = 8;
  int64_t max_queue_delay_microseconds = 1000;
  std::vector<int> preferred_batch_size;
  int instances = 1;
  double base_s = 0.005;
  double per_item_s = 0.001;
};

struct SimDeploymentSpec {
  std::string name;
  std::string kind = "llm";
  std::string model;
  std::string gpu;
  int tensor_parallel = 1;
  // > 0: a replica holds this share of one GPU (placed as a fraction: its
  // compute share), not tensor_parallel whole GPUs.
  double gpu_fraction = 0;
  int replicas = 1;
  int max_ongoing_requests = 64;
  // Its replicas' class for swapping and preemption (a priority class name;
  // default standard, or the first class when there is no standard).
  std::string priority_class = "standard";
  // The tenant whose quota its GPUs count against ("": none).
  std::string owner;
  bool spot = true;  // its replicas may run on spot pool nodes
  serving::RouterConfig router;
  SimQueueSpec queue;
  SimEngineSpec engine;
  SimBatchingSpec batching;
  // Present `autoscaling:` block: replicas become the initial count (default
  // min_replicas) and the Autoscaler moves it.
  bool autoscaling = false;
  autoscale::AutoscalingConfig autoscaling_config;
  // Seconds from a replica's start to ready; -1: from the model-load profile
  // (or the documented default, sim/cold_start.h).
  double cold_start_s = -1;
  double latency_multiplier = 1;
  double error_rate = 0;
  int line = 0;
};

struct SloSpec {
  double ttft_s = 0, tpot_s = 0, e2e_s = 0;  // 0: none
};

struct SimTenantSpec {
  std::string name;
  double weight = 1;
  std::string priority = "standard";
  serving::TenantLimits limits;
  SloSpec slo;
  // GPUs the deployments it owns are entitled to (preemption reclaims up
  // to it), at most `limit_gpus` in all (0: no limit), and its weight in
  // sharing what is over the quotas.
  double quota_gpus = 0, limit_gpus = 0, over_quota_weight = 1;
  int line = 0;
};

struct SyntheticTenant {
  std::string name;   // required
  std::string model;  // may be ""
  // poisson: exponential gaps at `rate` req/s. gamma: Gamma gaps with mean
  // 1/rate and coefficient of variation `cv` (cv = 0: evenly spaced).
  // servegen: the windows of `servegen_trace` (a chunk-<i>-trace.csv),
  // starting `servegen_offset_s` into it, each window's rate multiplied by
  // `servegen_rate_scale`; `rate` and `cv` are then unused. Within a window
  // the gaps follow its Gamma or Weibull law, rescaled (as ServeGen does) so
  // the window holds rate * length requests (rounded stochastically, so the
  // mean count is exact). No arrivals past the client trace's last window.
  std::string arrival = "poisson";
  double rate = 1;
  double cv = 1;
  std::string servegen_trace;
  double servegen_offset_s = 0;
  double servegen_rate_scale = 1;
  // Optional chunk-<i>-dataset.json: when set, input and output lengths are
  // drawn (independently) from the PMFs of the dataset window in force at
  // `servegen_offset_s` + arrival: the latest non-empty window starting at or
  // before it (the earliest non-empty one for times before that). The length
  // fields below are then unused. Usable with any `arrival`.
  std::string servegen_dataset;
  // Fixed lengths, or uniform in [x, x_max] when x_max > 0.
  int32_t input_tokens = 512;
  int32_t output_tokens = 128;
  int32_t input_max = 0;
  int32_t output_max = 0;
};

struct SimWorkloadSpec {
  std::string trace_format;  // empty when synthetic
  std::string trace_path;    // resolved against the config's directory
  bool synthetic = false;
  double duration_s = 60;
  std::vector<SyntheticTenant> synthetic_tenants;
  double time_scale = 1;
  int64_t max_requests = 0;
  double max_seconds = 0;
  std::string deployment;
  std::string tenant = "default";
};

// How long a replica takes from start to ready (sim/cold_start.h).
struct ColdStartSpec {
  std::string profile;                 // model-load CSV; "" = default_s
  std::string format = "safetensors";  // its checkpoint_format rows
  double engine_init_s = 0;            // added to every load
  double default_s = 4.95;             // per 6.7B parameters, without profile
  // The load on a node where the model's weights were loaded before
  // (cached there) takes this share of its time; 1: no faster.
  double local_load_factor = 1;
};

struct ServeSimConfig {
  std::string source;
  uint64_t seed = 42;
  // GPUs replicas may hold (each takes tensor_parallel); 0: unbounded.
  int cluster_gpus = 0;
  // The cluster's GPUs come in nodes of this many (a replica's GPUs are on
  // one node).
  int gpus_per_node = 8;
  // An idle replica is swapped out only after this long without a request.
  double swap_min_idle_s = 0;
  double price_per_gpu_hour = 0;  // the static GPUs'
  std::vector<PoolSpec> pools;
  CapacitySpec capacity;
  ColdStartSpec cold_start;
  double autoscaling_interval_s = 1;
  double fairness_window_s = 10;
  double load_sample_s = 10;
  std::vector<PriorityClassSpec> classes;
  std::vector<SimDeploymentSpec> deployments;
  // Public names over deployments, with optional canary rollouts
  // (config/model_route.h; the ModelRoute spec's fields plus `name`).
  std::vector<ModelRouteSpec> routes;
  std::vector<SimTenantSpec> tenants;
  SimTenantSpec tenant_defaults;
  SimWorkloadSpec workload;
};

// `base_dir` resolves relative paths ("" = as given).
absl::StatusOr<ServeSimConfig> ParseServeSimYaml(absl::string_view text,
                                                 std::string source,
                                                 const std::string& base_dir);
absl::StatusOr<ServeSimConfig> LoadServeSimFile(const std::string& path);

}  // namespace gpusched::config

#endif  // GPUSCHED_CONFIG_SERVE_SIM_CONFIG_H_
