// Dispatcher: the request layer's front door and traffic director.
//
// Owns, per deployment, a ModelQueue, a Router and the gateway's view of each
// replica (outstanding requests against its concurrency cap, engine-reported
// load); and one Admission for all tenants. Life of a request:
//   Submit -> Admission (rate limits, queue bounds, deadline feasibility)
//          -> ModelQueue (class, deadline, tenant fair share)
//   Dispatch -> pops while some replica is below its cap -> Router picks one
//   OnFirstToken / OnFinished -> frees the slot, corrects token estimates.
// Requests wait in gpusched's queue (not in engines) once every replica is at
// its cap, so queue order and fairness decide who runs next (Ray Serve's
// max_ongoing_requests model). A deployment with no replica holds requests
// until one is added or they time out.
//
// Clock-driven, deterministic for a seed, no I/O or threads; the live
// gateway and the simulator drive the same object. Not thread-safe.
#ifndef GPUSCHED_SERVING_DISPATCHER_H_
#define GPUSCHED_SERVING_DISPATCHER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "serving/admission.h"
#include "serving/latency_model.h"
#include "serving/model_queue.h"
#include "serving/request.h"
#include "serving/router.h"

namespace gpusched::serving {

struct DeploymentSpec {
  std::string name;
  ModelQueueConfig queue;
  int64_t max_queue_size = 0;  // Triton's max_queue_size; 0: unbounded
  RouterConfig router;
  // Used for deadline feasibility and the latency-predictive router.
  std::optional<LatencyModel> latency;
  // Share of each replica's capacity (concurrency cap and KV budget) kept
  // for tenants holding fewer than their equal share of the deployment's
  // slots (summed caps / tenants with work on the deployment): a flooding
  // tenant cannot fill it, so a light tenant's request starts at once
  // instead of waiting for a flood request to finish. While other tenants
  // that used the deployment are idle, one more tenant is counted in the
  // share, so the headroom stays free for them; a deployment only one tenant
  // has used keeps nothing back. The price is that a lone flood on a shared
  // deployment runs with that much less concurrency. 0 disables.
  double fair_share_headroom = 0.25;
  // Reject at arrival a request whose predicted first token falls after its
  // deadline (reason deadline_infeasible) instead of letting it wait.
  bool reject_infeasible = true;
};

struct TenantSpec {
  std::string name;
  double weight = 1.0;  // share in fair queuing
  TenantLimits limits;
};

struct Assignment {
  Request request;
  ReplicaId replica = 0;
};

// Engine-reported state of a replica (-1 where unknown).
struct EngineLoad {
  int waiting = -1;
  int running = -1;
  double kv_used_fraction = -1;
  int64_t kv_tokens = -1;
};

class Dispatcher {
 public:
  explicit Dispatcher(uint64_t seed) : seed_(seed) {}

  absl::StatusOr<ModelId> AddDeployment(const DeploymentSpec& spec);
  absl::StatusOr<TenantId> AddTenant(const TenantSpec& spec, Micros now = 0);
  // New weight and limits for an existing tenant (validated like AddTenant).
  absl::Status UpdateTenant(TenantId tenant, const TenantSpec& spec,
                            Micros now);
  // This gateway's share of the tenant's limits (Admission::SetTenantShare).
  void SetTenantShare(TenantId tenant, const TenantShare& share, Micros now) {
    admission_.SetTenantShare(tenant, share, now);
  }
  int num_deployments() const { return static_cast<int>(models_.size()); }
  int num_tenants() const { return num_tenants_; }

  // Declares that `tenant` may use the deployment, so the fair-share
  // headroom is kept for it from the start (tenants are otherwise known once
  // they first send work).
  void DeclareTenant(ModelId model, TenantId tenant);

  // Replicas join ready to serve; `max_outstanding` >= 1. A replica with a
  // KV budget (tokens, 0: none) takes a request only while the requests on
  // it could all grow to full length (input + max_output_tokens) within the
  // budget, or when it is empty; the others wait in the queue rather than
  // be preempted inside the engine. `key`: ReplicaLoad::key.
  void AddReplica(ModelId model, ReplicaId replica, int max_outstanding,
                  int64_t kv_budget_tokens = 0, uint64_t key = 0);
  // The replica leaves; requests still on it are the caller's to retry.
  void RemoveReplica(ModelId model, ReplicaId replica);
  void UpdateEngineLoad(ModelId model, ReplicaId replica,
                        const EngineLoad& load);

  // Admission + enqueue. The request's tenant, model and class must exist.
  Verdict Submit(const Request& r, Micros now);

  // Routes queued requests to replicas with free slots; appends them.
  void Dispatch(Micros now, std::vector<Assignment>* out);

  // The following take the request as dispatched (Assignment::request,
  // which carries its dispatch time).
  // The replica produced the request's first token (its prompt is prefilled).
  void OnFirstToken(const Request& r, ReplicaId replica, Micros now);
  // The request left the replica: finished (output_tokens generated) or
  // failed (output_tokens = -1: its estimate is refunded). `prefilled`:
  // OnFirstToken was called for it; otherwise its prompt leaves the
  // replica's pending prefill now (a response not streamed, a failure).
  void OnFinished(const Request& r, ReplicaId replica, int32_t output_tokens,
                  Micros now, bool prefilled = true);

  // Removes queued requests past their class timeout (reason queue_timeout).
  void Expire(Micros now, std::vector<Request>* timed_out);
  // Removes every request queued for `model` (its deployment is going
  // away), in queue order, accounted like a timeout.
  void DrainQueue(ModelId model, Micros now, std::vector<Request>* drained);
  // Earliest queue timeout (kNever if none).
  Micros NextTimeout() const;

  const ModelQueue& queue(ModelId model) const { return *models_[model].queue; }
  const Admission& admission() const { return admission_; }
  int64_t outstanding(ModelId model) const;
  // Prompt tokens dispatched to `replica` and not yet prefilled (0 for a
  // replica it does not know).
  int64_t pending_prefill(ModelId model, ReplicaId replica) const;
  const std::string& deployment_name(ModelId m) const {
    return models_[m].spec.name;
  }

 private:
  // One tenant on one deployment (one small record, one cache line touched).
  struct TenantUse {
    int32_t outstanding = 0;  // dispatched, not finished
    int32_t work = 0;         // queued + dispatched
    bool seen = false;        // ever had work here, or declared
  };
  struct Model {
    DeploymentSpec spec;
    std::unique_ptr<ModelQueue> queue;
    std::unique_ptr<Router> router;
    std::vector<ReplicaLoad> replicas;
    int64_t free_slots = 0;   // sum over replicas of cap - outstanding (>=0)
    int64_t total_slots = 0;  // sum of caps
    // Per tenant on this deployment: requests dispatched and not finished,
    // and queued + dispatched (work); tenants with work count as active.
    std::vector<TenantUse> tenants;
    int64_t active_tenants = 0;
    int64_t tenants_seen = 0;
    bool dirty = false;  // in dirty_ (queue and free slots may match)
    // Mean time from dispatch to completion (seconds, smoothed), for wait
    // predictions; 0 until a request has completed.
    double service_s = 0;
  };
  int FindReplica(const Model& m, ReplicaId id) const;
  void MarkDirty(ModelId model);
  // Admission accounting for requests[first..] leaving the queue unserved.
  void NotServed(size_t first, Micros now, std::vector<Request>* requests);
  QueueOutlook Outlook(const Model& m, const Request& r, Micros now) const;
  void NoteCompletion(Model& m, const Request& r, Micros now);
  void AddWork(Model& m, TenantId t, int delta);
  void SizeTenants(Model& m);
  // Requests of `t` waiting in the deployment's queue.
  int64_t QueuedOf(const Model& m, TenantId t) const;
  // Whether `t` may use the capacity held back for light tenants.
  bool MayUseHeadroom(const Model& m, TenantId t) const;
  // Fills candidates_ with the replicas that can take `r` now; false if none.
  bool FindCandidates(const Model& m, const Request& r, bool restricted);

  uint64_t seed_;
  std::vector<Model> models_;
  Admission admission_;
  int num_tenants_ = 0;
  std::vector<double> tenant_weights_;
  std::vector<ModelId> dirty_;
  std::vector<ReplicaLoad> candidates_;  // scratch
  std::vector<int> candidate_index_;     // scratch
};

}  // namespace gpusched::serving

#endif  // GPUSCHED_SERVING_DISPATCHER_H_
