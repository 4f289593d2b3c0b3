// Controller: the live driver of `gpusched serve`'s control plane. It owns
// the desired state (deployments and tenants, persisted in the Store) and
// carries out what the policy cores decide: the life of each deployment's
// replicas is a control::ReplicaSet (control/lifecycle.h: desired count,
// rolling replacement, readiness and health probes, restart backoff,
// drain), placement is the placement scheduler's (the policy the simulator
// measures), making room is control::PlanRoom. The controller places each
// replica, launches its engine through a backends::Launcher with those GPUs
// (CUDA_VISIBLE_DEVICES, the engine's memory flag, MPS limits when MPS
// runs), sends the probes, and keeps the Gateway's view of ready replicas
// and tenants current. Every decision is an event in the Store's log.
//
// After a restart (even `kill -9`), Start() brings back every stored
// deployment and tenant, kills engines the previous run left behind (their
// pid files under log_dir) and starts replicas again.
//
// High availability (docs/ha.md): several instances may share one store
// (etcd); the Election says which one leads. Every instance keeps the
// desired state (deployments, tenants, routes) from the store, validates
// and writes what its control API is given, and serves views; only the
// leader acts (places, launches, probes, autoscales, drives rollouts) and
// publishes what it sees (status documents) for the others' views. It
// becomes the leader (Promote: a launcher for its term, the jobs of the
// cluster manager adopted, rollouts and desired counts resumed from the
// store) and stops being it (Demote: it forgets its replicas without
// stopping them) as the election says; while it cannot prove its lease it
// pauses (acts on nothing) and every write of its own decisions carries
// the election's fence.
//
// Deployments with spec.autoscaling get their replica count from
// control::Scaling (control/scaling.h, the autoscaler's actuation the
// simulator runs too): each loop pass observes the gateway's load and the
// ReplicaSet, evaluates, and sets the steps' counts as desired counts.
// The first request held at zero replicas wakes the loop at once (the
// gateway's demand sink). After a restart an autoscaled deployment starts
// from its manifest's replicas (default minReplicas) and the rules take
// over (docs/autoscaling.md, live section).
//
// Threads: a loop thread reconciles every `tick` (and at once after a
// change, sooner when a deadline such as a starting replica's next
// readiness probe or an autoscaling delay is due); the API calls come from
// HTTP threads. One absl::Mutex guards the controller's state (annotated,
// checked by clang's -Wthread-safety: tests/thread_safety_test.sh); the
// Store has its own (lock order: state, store).
#ifndef GPUSCHED_RUNTIME_CONTROLLER_H_
#define GPUSCHED_RUNTIME_CONTROLLER_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "backends/launcher.h"
#include "backends/local/nvml.h"
#include "config/capacity_config.h"
#include "config/manifest.h"
#include "control/capacity.h"
#include "control/lifecycle.h"
#include "control/place.h"
#include "control/prices.h"
#include "control/rollout.h"
#include "control/scaling.h"
#include "inventory/cluster_state.h"
#include "net/upstream.h"
#include "nlohmann/json.hpp"
#include "placement/scheduler.h"
#include "runtime/data_plane.h"
#include "runtime/driver_metrics.h"
#include "runtime/engine_launch.h"
#include "runtime/engine_metrics.h"
#include "runtime/engine_template.h"
#include "runtime/instance_load.h"
#include "runtime/real_clock.h"
#include "store/election.h"
#include "store/store.h"

namespace gpusched::runtime {

struct ControllerOptions {
  std::string log_dir = "gpusched-logs";
  std::string self_path;  // this binary, for the reference engine template
  // Where engines bind and are reached; empty: their node's address
  // (EngineLaunchInput::host).
  std::string engine_host;
  std::string placement_policy = "fillfrag";
  std::vector<std::string> classes = {"critical", "standard", "batch",
                                      "sheddable"};
  Micros tick = 50 * kMicrosPerMilli;
  Micros health_period = 5 * kMicrosPerSecond;
  // How often NVML GPUs are read again (memory, utilization, health) when
  // the cluster came from NVML (0: never).
  Micros gpu_read_period = 5 * kMicrosPerSecond;
  // How often engine metrics are read for the routers (0: never).
  Micros metrics_period = 500 * kMicrosPerMilli;
  // How long a draining replica's in-flight requests may take, and then
  // how long its engine has between SIGTERM and SIGKILL.
  Micros drain_grace = 30 * kMicrosPerSecond;
  Micros stop_grace = 10 * kMicrosPerSecond;
  // An idle replica is swapped out for another model only after this long
  // without a request in flight (0: at once).
  Micros swap_min_idle = 0;
  control::RestartBackoff::Options backoff;
  // Capacity on demand (docs/capacity.md): used when the launcher has a
  // CapacityManager (Slurm CLOUD nodes, Kubernetes autoscalers).
  config::CapacitySpec capacity;
  // The static nodes' price per GPU-hour for the cost metrics (0: free).
  double static_usd_per_gpu_hour = 0;
  // Launches (placement and engine start) per loop pass: a backlog drains
  // over passes, and the control API and the gateway get the lock between
  // them.
  int max_launches_per_pass = 2;
  // After a pass that launched, the next launches wait this long (0: none),
  // so that a burst of engine starts cannot take every core at once.
  Micros launch_interval = 0;
  bool mps = false;  // an MPS control daemon runs: set MPS limits
  // The steady clock (deadlines; the data plane's timeline too) and the
  // wall clock (event and object times); null: the real ones
  // (runtime/real_clock.h). Outlive the controller.
  const Clock* clock = nullptr;
  const Clock* wall_clock = nullptr;
  // Control-plane metrics (docs/metrics.md); optional, outlives the
  // controller, which becomes its snapshot source.
  runtime::DriverMetrics* metrics = nullptr;
  // Which instance leads (store/election.h); null: this one, from Start (a
  // single instance). Outlives the controller.
  store::Election* election = nullptr;
  // A launcher for each term this instance leads after its first (the
  // first gets the one given to Create); null: local processes.
  std::function<absl::StatusOr<std::unique_ptr<backends::Launcher>>()>
      launcher_factory;
  // Stop() ends every replica even where they outlive gpusched (Slurm jobs,
  // Pods): `gpusched serve --stop-replicas-on-exit`.
  bool stop_replicas_on_exit = false;
  // With a shared store: how often the leader publishes what changed of
  // its views for the other instances.
  Micros status_period = 250 * kMicrosPerMilli;
  // With a shared store: how often each instance publishes its data
  // plane's load and tenants' demand (runtime/instance_load.h).
  Micros load_period = 500 * kMicrosPerMilli;
  // The event log's bounds, applied by the leader once a minute: at most
  // this many events, none older than this (0: no age bound).
  int64_t max_events = 100000;
  Micros max_event_age = 0;
};

// The cluster the controller places onto.
struct ControllerCluster {
  std::vector<inventory::NodeSpec> nodes;
  std::vector<backends::DiscoveredGpu> gpus;  // NVML GPUs of node 0, if any
  std::string source;                         // "nvml" or "declared"
};

// "2026-11-29T23:10:00.123456Z" for microseconds since the Unix epoch.
std::string IsoTime(Micros wall);

struct ApplyResult {
  std::string kind;  // "Deployment" | "Tenant"
  std::string name;
  std::string action;  // created | configured | unchanged | deleted
};

class Controller {
 public:
  // `launcher` runs the engines (null: a backends::LocalLauncher, processes
  // on this machine).
  static absl::StatusOr<std::unique_ptr<Controller>> Create(
      ControllerOptions options, ControllerCluster cluster, store::Store* store,
      runtime::DataPlane* data_plane,
      std::unique_ptr<backends::Launcher> launcher = nullptr);
  ~Controller();  // Stop() if not stopped

  // Loads the stored state and starts the loop thread; the loop leads
  // (cleaning up after a previous run, adopting what runs) once the
  // election says so.
  absl::Status Start();
  // Stops the loop. A leader drains every replica (up to drain_grace) and
  // stops the engines of a launcher whose processes die with gpusched
  // (local); replicas that outlive it (Slurm jobs, Pods) keep running for
  // the next leader to adopt, unless stop_replicas_on_exit.
  void Stop();

  // This instance leads and acts (the election's word as of the last pass).
  bool Leading();
  // The store changed (another instance wrote): the loop looks soon. Never
  // blocks (the store's watch calls it).
  void OnStoreChange();
  // The election's standing changed: the loop looks at once.
  void OnElectionChange();
  // Applies what other instances wrote to the store since the last call
  // (the loop does it every pass; a view may want it at once).
  void SyncFromStore();

  // Validates every manifest against what only the runtime knows (engine
  // templates, GPU models, MIG profiles) and applies them all, or none:
  // InvalidArgument lists every problem, one per line.
  absl::StatusOr<std::vector<ApplyResult>> Apply(
      const std::vector<config::Manifest>& manifests);
  absl::StatusOr<ApplyResult> Delete(config::Manifest::Kind kind,
                                     const std::string& name);
  absl::Status Scale(const std::string& deployment, int replicas);

  // Blocks until every replica of every deployment is ready or `timeout`
  // passes; DeadlineExceeded names the ones that are not.
  absl::Status WaitReady(Micros timeout);

  // --- Views for the control API (JSON per docs/control-api.md) ---------
  nlohmann::json DeploymentsJson(const std::string& only = "");
  nlohmann::json TenantsJson(const std::string& only = "");
  nlohmann::json ReplicasJson();
  nlohmann::json GpusJson();
  nlohmann::json NodesJson();
  // Node pools (capacity on demand): each with its nodes by state, price
  // and the cost accrued (GET /api/v1/pools, `gpusched get pools`).
  nlohmann::json PoolsJson();
  nlohmann::json QueuesJson();
  // ModelRoutes with their weights and rollouts (controller_routes.cc).
  nlohmann::json RoutesJson(const std::string& only = "");
  // A manual action on route `name`'s rollout: promote (the next step),
  // promote-full (100 now), pause, resume, abort (`why` in the event),
  // retry. Returns the route (RoutesJson's item). NotFound, or
  // FailedPrecondition when the route has no rollout or its phase does not
  // allow the action.
  absl::StatusOr<nlohmann::json> RolloutAction(const std::string& name,
                                               const std::string& action,
                                               const std::string& why = "");
  // For the metrics collector (one lock per scrape).
  runtime::DriverMetrics::Snapshot MetricsSnapshot();
  bool HasDeployment(const std::string& name);
  // The desired replica count of a live deployment (as scaled), if any.
  std::optional<int> DesiredReplicas(const std::string& name);
  bool HasTenant(const std::string& name);
  // Models (deployments) a tenant may use.
  std::vector<std::string> TenantModels(const std::string& tenant);
  // The last `lines` lines of a replica's engine log.
  absl::StatusOr<std::string> Logs(const std::string& deployment,
                                   const std::string& replica,
                                   const std::string& stream, int lines);

  // --- Keys and events (the Store, which is thread-safe) ------------------
  // The data plane checks keys itself (gateway::KeyCache over the Store).
  absl::StatusOr<store::NewApiKey> CreateKey(const std::string& tenant,
                                             const std::string& name,
                                             bool admin);
  // Registers `secret` (from a key file or the config) for `tenant` (admin
  // when empty and `admin`), idempotently.
  absl::Status EnsureKey(std::string_view secret, const std::string& tenant,
                         bool admin);
  absl::Status RevokeKey(const std::string& key_id);
  absl::StatusOr<std::vector<store::KeyInfo>> ListKeys(
      const std::string& tenant);
  absl::StatusOr<std::vector<store::Event>> Events(
      const store::EventFilter& filter);
  void RecordEvent(store::Event e);

 private:
  // What the driver keeps of a replica whose life the core
  // (control::ReplicaSet) runs, by its name: the engine process, endpoint
  // and GPUs. Attached endpoints (spec.endpoints) have one too, probed
  // here, never launched.
  struct Replica {
    std::string name;
    backends::ProcessId pid = 0;
    net::Endpoint endpoint;
    bool placed = false;
    inventory::Allocation allocation;
    Micros started_wall = 0;
    bool scraping = false;
    Micros next_scrape = 0;
    uint16_t metrics_port = 0;       // 0: the engine's port
    runtime::EngineSignals signals;  // the last scrape
    // Replicas draining to make room for this one (swap or preemption).
    std::vector<std::string> awaiting;
    // Capacity on demand where the manager names no node in advance
    // (Kubernetes): the Pod that waits, unbound and Unschedulable, for a
    // node of `ask_pool` (the autoscaler's ask), and its engine launch
    // (port, argv); placed, it is bound there (Launcher::Bind) rather than
    // started. 0: none.
    backends::ProcessId ask_pid = 0;
    std::string ask_pool;
    runtime::EngineLaunch ask_launch;
    // The cluster manager's readiness (a Pod's Ready condition), for a
    // launcher that reports it (Launcher::ReportsReadiness); true else.
    bool manager_ready = true;
    bool manager_lost = false;  // it said not ready after a start
    // Attached endpoints only: the last health check, the next one.
    bool external_ok = false;
    bool probing = false;
    Micros next_probe = 0;
  };
  // An engine start planned in a pass (placed, argv and env ready), run by
  // the loop once it has let go of mu_, reported back by FinishStart.
  struct StartJob {
    std::string deployment, replica;
    runtime::EngineLaunch launch;
    absl::StatusOr<backends::ProcessId> pid = absl::UnknownError("not started");
    // A Pod that waited for a node (Replica::ask_pid): bound, not started.
    backends::ProcessId bind = 0;
  };
  // One replica for the views: the core's record (null for an attached
  // endpoint) and the driver's (null until first launched).
  struct Row {
    const control::Replica* core = nullptr;
    const Replica* io = nullptr;
    std::string name() const { return core ? core->name : io->name; }
    const char* state() const;
    bool ready() const;
  };
  // One scale from zero in progress, for the replica.cold_start event
  // (steady clock; 0: not yet).
  struct ColdStart {
    std::string replica;  // the replica started for it, once launched
    Micros arrival = 0;   // the first held request
    Micros decided = 0;   // the autoscaler's decision
    Micros placed = 0;    // placement done
    Micros launched = 0;  // engine process started
    Micros ready = 0;     // readiness probe answered
  };
  struct Deployment {
    config::DeploymentSpec spec;
    nlohmann::json manifest;  // canonical
    int64_t generation = 0;
    Micros created = 0, updated = 0;  // wall
    runtime::EngineTemplate engine;
    bool deleting = false;
    Micros delete_deadline = kNever;
    // The replicas' life (the policy core) and the driver's records of
    // them, by name; attached endpoints apart.
    control::ReplicaSet life;
    std::map<std::string, Replica> procs;
    std::vector<Replica> external;
    // A follower's: the leader's ready replicas, whose engines it scrapes
    // for its own routers (named by endpoint).
    std::vector<Replica> followed;
    std::vector<std::string> pushed;  // ready endpoints the gateway has
    std::optional<ColdStart> cold;
    Micros ttft_seen = 0;  // slo policy: TTFT samples taken up to here
    // The route whose promoted rollout holds it at 0 replicas
    // (spec.rollout.scaleDownStable), "" when none.
    std::string parked_by;
  };
  struct Route {
    config::ModelRouteSpec spec;
    nlohmann::json manifest;  // canonical
    int64_t generation = 0;
    Micros created = 0, updated = 0;  // wall
    std::optional<control::Rollout> rollout;
    std::vector<int> weights;  // what the gateway splits by now
  };
  struct Tenant {
    config::TenantSpec spec;
    nlohmann::json manifest;
    int64_t generation = 0;
    Micros created = 0, updated = 0;
  };

  // --- Routes (controller_routes.cc) ---
  // Problems of a route that only the runtime sees: unknown target
  // deployments, targets that are routes, a name a deployment has.
  void CheckRoute(const config::ModelRouteSpec& r,
                  const std::vector<config::Manifest>& batch,
                  std::vector<std::string>* problems)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CheckShadow(const config::ModelRouteSpec& r,
                   const std::vector<config::Manifest>& batch,
                   std::vector<std::string>* problems)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `state`: a stored rollout state to resume (restart), else none.
  absl::Status ApplyRoute(const config::ModelRouteSpec& spec,
                          ApplyResult* result, bool persist,
                          const nlohmann::json* state = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status DeleteRoute(const std::string& name, bool persist)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status RestoreRoutes() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The weights per target: the spec's, or the rollout's.
  std::vector<int> Weights(const Route& r) const;
  // Sends changed weights to the gateway.
  absl::Status PushRoute(const std::string& name, Route& r)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Parks the stable of a promoted rollout (scaleDownStable), unparks
  // what the route no longer holds.
  void SyncParking(const std::string& name, Route& r)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A rollout change: weights to the gateway, the event, the stored state.
  void NoteRollout(const std::string& name, Route& r,
                   const control::RolloutChange& c)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Every running rollout evaluated on the gateway's samples.
  void ProgressRollouts(Micros now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The first route that targets (or shadows) `deployment`, or "".
  std::string RouteOf(const std::string& deployment) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  nlohmann::json RouteWeightsJson(const Route& r) const;
  nlohmann::json RouteJson(const std::string& name, const Route& r) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Controller() = default;
  Micros Now() const { return options_.clock->Now(); }
  Micros Wall() const { return options_.wall_clock->Now(); }
  void Loop();
  void Reconcile(Micros now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReconcileDeployment(Deployment& d, Micros now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // the attached endpoints of `d`, probed.
  void ReconcileExternal(Deployment& d, Micros now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(
          mu_);  // records the core's events, then carries out its actions.
  void Carry(Deployment& d, control::LifecycleOutput& out, Micros now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(
          mu_);  // places `r` if it is not, and starts its engine; reports the
  // outcome to the core (into `out`).
  void Launch(Deployment& d, Replica& r, Micros now,
              control::LifecycleOutput* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records a started engine (or its failure) for the core.
  void FinishStart(StartJob& job, Micros now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Probe(Deployment& d, Replica& r, Micros now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Scrape(Deployment& d, Replica& r, Micros now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnProbe(const std::string& deployment, const std::string& replica,
               backends::ProcessId pid, bool ok);
  std::vector<Row> Rows(const Deployment& d) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Options of the core for a deployment launched from `engine`.
  control::LifecycleOptions LifecycleOptionsFor(
      const runtime::EngineTemplate& engine) const;
  void HandleExits(Micros now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What a cluster manager's launcher reported (controller_cluster.cc): the
  // GPUs it assigned (the allocation follows them) and nodes that changed
  // (GPUs of other users' work and unusable nodes take no new replica; the
  // replicas on an unusable node are drained and replaced elsewhere).
  void HandleClusterReports(Micros now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FollowAssignments(const std::vector<backends::GpuAssignment>& assigned)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ApplyNodeReport(const backends::NodeReport& n, Micros now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // --- Capacity on demand (controller_capacity.cc) ---
  // A pool node that was up is gone or failed without gpusched giving it
  // back: a spot node taken back (the planner's SpotLost), or a node lost
  // (an event; the pool is not skipped, since the node did come up).
  void PoolNodeLost(const backends::PoolNodeReport& n, Micros now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What the launcher's CapacityManager said (pools, their nodes' states),
  // and the planner's pass: nodes asked for, moved off and given back.
  void ApplyPoolReports(std::vector<backends::PoolReport> pools,
                        const std::vector<backends::PoolNodeReport>& nodes,
                        Micros now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PlanCapacity(Micros now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A pool node the controller has not seen (an autoscaler named it just
  // now): added to the cluster state from the report's NodeSpec, bounded by
  // its pool's max_nodes. False (with a capacity.failed event) when it
  // cannot be.
  bool LearnPoolNode(const backends::PoolNodeReport& n, Micros now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The ask where the manager names no node (Kubernetes): the replica's
  // Pod is created unbound for `pool` (Launcher::Start with
  // placement.pool), to be bound once placed.
  void AskForPoolNode(const std::string& replica, const std::string& pool,
                      Micros now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The loop's start of `job` outside mu_: Launcher::Start, or Bind for a
  // Pod that waited for a node (the ask is deleted if the bind fails).
  absl::StatusOr<backends::ProcessId> RunStart(const StartJob& job)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(launcher_mu_);
  // Whether `id` was `r`'s waiting Pod (Replica::ask_pid), which is then
  // forgotten: its exit is not the replica's.
  bool EndedAsk(Replica& r, backends::ProcessId id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The pools' price table: capacity.prices, else the shipped one.
  absl::Status LoadGpuPrices();
  std::vector<control::NodePool> NodePools() const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What each of `pools` costs a replica of `d` holding `gpus` GPUs: USD per
  // million tokens at its SLO and demand (control::CostPerToken, its demand
  // measured on the GPU most of its replicas run on), or, where the latency
  // models do not know its model on every pool's GPU, USD per hour of its
  // GPUs (*per_hour set). A pool absent cannot serve it.
  std::map<std::string, double> PoolCosts(
      const Deployment& d, int gpus,
      const std::vector<control::NodePool>& pools, bool* per_hour) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Costs accrued since the last call (pool nodes and priced static GPUs):
  // each node's price split over the replicas by their GPUs, the rest idle.
  void AccrueCost(Micros now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether placement must keep off `node` (being emptied, or a pool node
  // that is not up).
  bool Cordoned(const std::string& node) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // At start: the processes a previous run left (a cluster manager's jobs)
  // that still serve a deployment at its current version, up to its
  // replica count, wait to be adopted by its next launches; the others are
  // ended. Those not adopted by `adopt_deadline_` are ended too.
  void PlanLeftovers(Micros now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Replica `r` takes over a leftover of its deployment instead of a new
  // engine; false when there is none to take.
  bool AdoptLeftover(Deployment& d, Replica& r, Micros now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EndLeftover(const backends::Leftover& l, const std::string& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EndStaleLeftovers(Micros now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What a replica's engine is started with, for adopting it after a
  // restart: "<port>.<metrics_port>.<version hash>".
  static std::string LaunchTag(int port, int metrics_port,
                               const std::string& version);
  void RefreshGpus(std::vector<backends::DiscoveredGpu> gpus)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PushReady(Deployment& d) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The replicas of the current version that should run: the autoscaler's
  // target, else spec.replicas.
  int ReplicaTarget(const Deployment& d) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Observes every autoscaled deployment, evaluates, carries out and
  // records the decisions.
  void Autoscale(Micros now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The gateway's demand sink: a request is held at zero replicas.
  void OnDemand(const std::string& deployment, Micros arrival);
  void Release(Replica& r)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);  // its GPUs go back
  // takes no new request; in-flight ones finish (up to
  // drain_grace), then the engine stops and the replica is forgotten.
  void DrainReplica(Deployment& d, const std::string& replica,
                    const std::string& why, Micros now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(
          mu_);  // `r` (of `d`) does not fit. Swaps out idle replicas of
  // autoscaled deployments of a lower or equal class (lowest class, then
  // least recently used, first), else preempts by the cluster layer's rules
  // (placement/preemption.h); victims drain. True when victims are
  // draining for it (it is placed once they are gone).
  bool MakeRoom(Deployment& d, Replica& r, const placement::PodRequest& pod,
                Micros now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The deployment's weights path expanded ("" when none is declared).
  std::string WeightsPath(const Deployment& d) const;
  // Index of the class in options_.classes (0 = most important).
  int ClassRank(const std::string& priority_class) const;
  // Scheduling metadata of the deployment's replicas: its owner's queue,
  // its class's priority, whether it may be preempted.
  inventory::PodInfo PodInfoOf(const Deployment& d) const;
  // Adds the GPU time held since the last call to the metrics (about once
  // a second).
  void AccrueGpuTime(Micros now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Event(const std::string& kind, const std::string& deployment,
             const std::string& message, nlohmann::json details = {});
  absl::Status ApplyDeployment(const config::DeploymentSpec& spec,
                               ApplyResult* result, bool persist)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status ApplyTenant(const config::TenantSpec& spec, ApplyResult* result,
                           bool persist) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Delete's work; `persist` false: another instance deleted it already
  // (the store says so), only ours goes.
  absl::StatusOr<ApplyResult> DeleteLocked(config::Manifest::Kind kind,
                                           const std::string& name,
                                           bool persist)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CheckRuntime(const config::DeploymentSpec& d, const std::string& where,
                    std::vector<std::string>* problems)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void KillOrphans();
  std::string PidFile(const std::string& replica) const;

  // --- Leadership (controller_ha.cc) ---
  // The election's word, acted on: Promote, Demote, or a pause.
  void FollowElection(const store::Leadership& lead)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Becomes the leader of `lead`'s term with `launcher`: desired counts
  // and rollouts from the store, the cluster manager's jobs adopted.
  void Promote(const store::Leadership& lead,
               std::unique_ptr<backends::Launcher> launcher, Micros now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stops leading: forgets every replica (their processes are the next
  // leader's to adopt), keeps the desired state. The old launcher is
  // handed back to be destroyed outside the lock.
  std::unique_ptr<backends::Launcher> Demote(const std::string& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Absorbs the store's desired state where it differs from ours (another
  // instance wrote it): applies, configures and deletes without writing.
  void SyncDesiredLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The store's document `doc` of `kind` taken as ours.
  absl::Status Absorb(config::Manifest::Kind kind, const store::Document& doc)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What a follower does in a pass: forget deleted deployments.
  void FollowerPass() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The leader's views, for the others (status documents); called by the
  // loop without mu_.
  void PublishStatus(Micros now) ABSL_LOCKS_EXCLUDED(mu_);
  // The leader's bound on the event log, once a minute (without mu_).
  void PruneEvents(Micros now) ABSL_LOCKS_EXCLUDED(mu_);

  // --- Every instance's load (controller_load.cc) ---
  // Publishes this instance's load and demand (every load_period, or at
  // once after a request was held at zero replicas), then takes its
  // shares of the tenants' limits from every instance's; by the loop,
  // without mu_.
  void PublishLoad(Micros now) ABSL_LOCKS_EXCLUDED(mu_);
  // The instances' documents again if the store changed since the last
  // read.
  void RefreshLoads(Micros now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(loads_mu_);
  // The other instances' load of `deployment`, from documents renewed in
  // the last few seconds; `consume`: with the TTFT samples not taken yet
  // (the leader's autoscaler takes each once).
  DeploymentLoadDoc OthersLoad(const std::string& deployment, Micros now,
                               bool consume) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_)
      ABSL_LOCKS_EXCLUDED(loads_mu_);
  // The fence of this instance's own writes while it leads (null else).
  const store::Fence* FenceLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return leading_ ? &fence_ : nullptr;
  }
  // A published status document of the leader (parsed), if any.
  std::optional<nlohmann::json> Published(const std::string& name);
  // A follower's view of deployment `j` (its own desired state): the
  // leader's published status of it, with this instance's queues.
  void FollowerStatus(nlohmann::json& j);
  // A follower's replicas: the leader's, as published.
  nlohmann::json FollowerReplicas();
  // A follower's WaitReady: what the leader published is ready.
  std::vector<std::string> FollowerNotReady();
  // The views copy what they show under the lock (ViewOf, cheap: no JSON
  // built) and build their JSON after letting it go, so that a list of
  // 1000 replicas does not hold up the controller's loop or other calls.
  struct ReplicaView;
  struct DeploymentView;
  ReplicaView ViewOf(const Deployment& d, const Row& r) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  DeploymentView ViewOf(const Deployment& d) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static nlohmann::json ReplicaJson(const ReplicaView& v);
  nlohmann::json DeploymentJson(DeploymentView v) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // GPU `g` of node `n`: allocation, and NVML readings where there are.
  runtime::DriverMetrics::Snapshot::Gpu GpuView(int n, int g) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Wake() ABSL_LOCKS_EXCLUDED(mu_);
  // The loop's wait ends: a change, or Stop().
  bool WakeDue() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return dirty_ || stopping_ || store_changed_.load();
  }

  ControllerOptions options_;
  std::unique_ptr<store::Election> own_election_;  // when none was given
  store::Election* election_ = nullptr;
  ControllerCluster cluster_;
  store::Store* store_ = nullptr;
  runtime::DataPlane* gateway_ = nullptr;  // the data plane

  // The controller's state. cluster_ (its NVML readings) is written by the
  // loop thread only, under mu_; the loop reads it without.
  absl::Mutex mu_;
  bool dirty_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::map<std::string, Deployment> deployments_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Tenant> tenants_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Route> routes_ ABSL_GUARDED_BY(mu_);
  inventory::ClusterState cluster_state_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<placement::Scheduler> scheduler_ ABSL_GUARDED_BY(mu_);
  // Where weights are local (a replica loaded them there, or they exist on
  // this machine's disk).
  control::WeightsLocality weights_ ABSL_GUARDED_BY(mu_);
  // The scheduler's filters, for preemption plans.
  std::vector<std::unique_ptr<placement::FilterPlugin>> preemption_filters_ =
      placement::DefaultFilters();
  std::vector<StartJob> starts_ ABSL_GUARDED_BY(mu_);
  // The launcher has its own lock so that engines start without mu_: only
  // the loop thread uses it (and Stop, after the loop), so it is never
  // contended. Lock order: mu_, then launcher_mu_.
  absl::Mutex launcher_mu_ ABSL_ACQUIRED_AFTER(mu_);
  // launcher_->ReportsReadiness(), read once at Create.
  bool manager_readiness_ = false;
  std::unique_ptr<backends::Launcher> launcher_ ABSL_GUARDED_BY(launcher_mu_);
  // Leftovers waiting to be adopted, per deployment, until the deadline.
  absl::flat_hash_map<std::string, std::vector<backends::Leftover>> leftovers_
      ABSL_GUARDED_BY(mu_);
  Micros adopt_deadline_ ABSL_GUARDED_BY(mu_) = 0;
  // The last report per node from a cluster manager's launcher.
  absl::flat_hash_map<std::string, backends::NodeReport> node_reports_
      ABSL_GUARDED_BY(mu_);
  std::unique_ptr<net::UpstreamClient> probe_;
  std::thread loop_;
  Micros last_accrue_ ABSL_GUARDED_BY(mu_) = 0;
  // The autoscaled deployments (spec.autoscaling: its target is the
  // desired count, spec.replicas only the initial one), its steps
  // (scratch), and when the loop must run next at the latest.
  control::Scaling scaling_ ABSL_GUARDED_BY(mu_);
  // Capacity on demand (controller_capacity.cc).
  struct PoolNodeInfo {
    std::string pool;
    backends::PoolNodeState state = backends::PoolNodeState::kPoweredDown;
    Micros since = 0;
    std::string reason;
    std::string request;   // the ask that powered it up
    bool learned = false;  // added to the cluster state at run time
  };
  struct PoolInfo {
    backends::PoolReport report;
    control::NodePool pool;        // with price and delay
    std::vector<double> delays_s;  // measured ask -> up, the last 16
    double usd = 0;                // accrued
  };
  control::CapacityPlanner planner_ ABSL_GUARDED_BY(mu_);
  // The pools' price table: set in Create, read-only after.
  std::vector<control::GpuPrice> gpu_prices_;
  std::map<std::string, PoolInfo> pools_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, PoolNodeInfo> pool_nodes_ ABSL_GUARDED_BY(mu_);
  // Replicas that fit on no node, since when (the planner's backlog).
  std::map<std::string, Micros> waiting_since_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Micros> asked_at_ ABSL_GUARDED_BY(mu_);  // node
  // Asks of a manager that names no node (Kubernetes), by request: nodes
  // coming to the planner until their replicas are bound or gone.
  struct PoolAsk {
    std::string pool;
    int count = 0;
    int matched = 0;  // nodes of the pool that came up since
    Micros since = 0;
    std::vector<std::string> replicas;
  };
  std::map<std::string, PoolAsk> pool_asks_ ABSL_GUARDED_BY(mu_);
  // Pool nodes first seen after the first report (learned at run time).
  bool pool_nodes_seen_ ABSL_GUARDED_BY(mu_) = false;
  Micros next_capacity_ ABSL_GUARDED_BY(mu_) = 0;
  Micros last_capacity_ ABSL_GUARDED_BY(mu_) = -1;  // the last planner pass
  int64_t capacity_requests_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, double> cost_usd_ ABSL_GUARDED_BY(mu_);  // deploym.
  std::map<std::string, double> tenant_cost_usd_ ABSL_GUARDED_BY(mu_);
  double idle_usd_ ABSL_GUARDED_BY(mu_) = 0;
  Micros cost_at_ ABSL_GUARDED_BY(mu_) = -1;
  std::vector<control::ScaleStep> steps_ ABSL_GUARDED_BY(mu_);
  Micros next_wake_ ABSL_GUARDED_BY(mu_) = 0;
  int launch_budget_ ABSL_GUARDED_BY(mu_) = 0;  // left in this pass
  // Launches wait until then (options_.launch_interval after the last pass
  // that launched).
  Micros next_launch_at_ ABSL_GUARDED_BY(mu_) = 0;

  // Leadership: this instance acts as the leader of `fence_`'s term.
  bool leading_ ABSL_GUARDED_BY(mu_) = false;
  bool paused_ ABSL_GUARDED_BY(mu_) = false;  // leads, cannot prove it now
  bool ever_led_ ABSL_GUARDED_BY(mu_) = false;
  // A term just begun, until its first pass completes (leader.ready).
  struct FirstPass {
    Micros elected = 0;   // the election said acting (steady)
    Micros promoted = 0;  // taken over: launcher read, jobs to adopt known
    int64_t term = 0;
  };
  std::optional<FirstPass> first_pass_ ABSL_GUARDED_BY(mu_);
  store::Fence fence_ ABSL_GUARDED_BY(mu_);
  // The store's desired revision last absorbed (shared stores), and
  // whether an object had to wait (a deployment still draining).
  int64_t synced_revision_ ABSL_GUARDED_BY(mu_) = -1;
  // The store's revision a follower's gateway last took the leader's
  // replicas and weights at.
  int64_t follower_revision_ ABSL_GUARDED_BY(mu_) = -1;
  bool resync_ ABSL_GUARDED_BY(mu_) = false;
  // The fence events of this instance carry (set while it leads), under a
  // lock of its own: the gateway's events come without mu_.
  absl::Mutex fence_mu_ ABSL_ACQUIRED_AFTER(mu_);
  std::optional<store::Fence> event_fence_ ABSL_GUARDED_BY(fence_mu_);
  // The store changed (its callback: no lock taken there).
  std::atomic<bool> store_changed_{false};
  // The loop thread's: what it published last, and when it may again.
  std::map<std::string, std::string> published_;
  Micros next_publish_ = 0;
  Micros next_prune_ = 0;

  // Every live instance's load document (this one's too), as read from the
  // store: parsed, when its seq last changed here (steady), and up to
  // which seq the leader took its TTFT samples.
  struct PeerLoad {
    std::string raw;
    InstanceLoad load;
    Micros renewed = 0;
    std::map<std::string, int64_t> ttft_taken;  // by deployment
  };
  absl::Mutex loads_mu_ ABSL_ACQUIRED_AFTER(mu_);
  std::map<std::string, PeerLoad> loads_ ABSL_GUARDED_BY(loads_mu_);
  int64_t loads_revision_ ABSL_GUARDED_BY(loads_mu_) = -1;
  // A request was held at zero replicas: publish now.
  std::atomic<bool> load_urgent_{false};
  // The loop thread's: the next document's seq and time, TTFTs published
  // up to (per deployment), the tenants' usage counters at the last
  // document and their smoothed rates.
  int64_t load_seq_ = 0;
  Micros next_load_ = 0;
  std::map<std::string, Micros> ttft_published_;
  std::map<std::string, TenantUsage> usage_last_;
  Micros usage_at_ = 0;
  std::map<std::string, TenantDemand> demand_;
};

}  // namespace gpusched::runtime

#endif  // GPUSCHED_RUNTIME_CONTROLLER_H_
