#include "serving/dispatcher.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/status.h"

namespace gpusched::serving {
namespace {

// Weight of the newest sample in the service-time average.
constexpr double kServiceSmoothing = 0.05;

}  // namespace

absl::StatusOr<ModelId> Dispatcher::AddDeployment(const DeploymentSpec& spec) {
  RETURN_IF_ERROR(ValidateModelQueueConfig(spec.queue));
  if (!(spec.fair_share_headroom >= 0 && spec.fair_share_headroom < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("deployment \"", spec.name,
                     "\": fair_share_headroom must be in [0, 1)"));
  }
  if (spec.max_queue_size < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "deployment \"", spec.name, "\": max_queue_size must be >= 0"));
  }
  Model m;
  m.spec = spec;
  m.queue = std::make_unique<ModelQueue>(spec.queue);
  for (TenantId t = 0; t < tenant_weights_.size(); ++t) {
    m.queue->SetTenantWeight(t, tenant_weights_[t]);
  }
  const LatencyModel* latency = m.spec.latency ? &*m.spec.latency : nullptr;
  auto router =
      MakeRouter(spec.router, latency,
                 seed_ ^ (0x9e3779b97f4a7c15ULL * (models_.size() + 1)));
  if (!router.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "deployment \"", spec.name, "\": ", router.status().message()));
  }
  m.router = *std::move(router);
  models_.push_back(std::move(m));
  return static_cast<ModelId>(models_.size() - 1);
}

namespace {

absl::Status ValidateTenant(const TenantSpec& spec) {
  if (!(spec.weight > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tenant \"", spec.name, "\": weight must be > 0"));
  }
  absl::Status st = ValidateTenantLimits(spec.limits);
  if (!st.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tenant \"", spec.name, "\": ", st.message()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TenantId> Dispatcher::AddTenant(const TenantSpec& spec,
                                               Micros now) {
  RETURN_IF_ERROR(ValidateTenant(spec));
  const TenantId t = static_cast<TenantId>(num_tenants_++);
  tenant_weights_.push_back(spec.weight);
  RETURN_IF_ERROR(UpdateTenant(t, spec, now));
  return t;
}

absl::Status Dispatcher::UpdateTenant(TenantId t, const TenantSpec& spec,
                                      Micros now) {
  RETURN_IF_ERROR(ValidateTenant(spec));
  tenant_weights_[t] = spec.weight;
  for (Model& m : models_) m.queue->SetTenantWeight(t, spec.weight);
  admission_.SetTenantLimits(t, spec.limits, now);
  return absl::OkStatus();
}

int Dispatcher::FindReplica(const Model& m, ReplicaId id) const {
  for (size_t i = 0; i < m.replicas.size(); ++i) {
    if (m.replicas[i].id == id) return static_cast<int>(i);
  }
  return -1;
}

void Dispatcher::MarkDirty(ModelId model) {
  Model& m = models_[model];
  if (!m.dirty && m.free_slots > 0 && !m.queue->empty()) {
    m.dirty = true;
    dirty_.push_back(model);
  }
}

void Dispatcher::AddReplica(ModelId model, ReplicaId replica,
                            int max_outstanding, int64_t kv_budget_tokens,
                            uint64_t key) {
  CHECK(model < models_.size());
  CHECK(max_outstanding >= 1);
  Model& m = models_[model];
  CHECK(FindReplica(m, replica) < 0);
  ReplicaLoad load;
  load.id = replica;
  load.key = key;
  load.max_outstanding = max_outstanding;
  load.kv_budget_tokens = std::max<int64_t>(0, kv_budget_tokens);
  m.replicas.push_back(load);
  m.free_slots += max_outstanding;
  m.total_slots += max_outstanding;
  MarkDirty(model);
}

void Dispatcher::RemoveReplica(ModelId model, ReplicaId replica) {
  Model& m = models_[model];
  const int i = FindReplica(m, replica);
  if (i < 0) return;
  const ReplicaLoad& r = m.replicas[i];
  m.free_slots -= std::max(0, r.max_outstanding - r.outstanding);
  m.total_slots -= r.max_outstanding;
  m.replicas.erase(m.replicas.begin() + i);
  m.router->OnReplicaRemoved(replica);
}

void Dispatcher::UpdateEngineLoad(ModelId model, ReplicaId replica,
                                  const EngineLoad& load) {
  Model& m = models_[model];
  const int i = FindReplica(m, replica);
  if (i < 0) return;
  ReplicaLoad& r = m.replicas[i];
  r.waiting = load.waiting;
  r.running = load.running;
  r.kv_used_fraction = load.kv_used_fraction;
  r.kv_tokens = load.kv_tokens;
}

QueueOutlook Dispatcher::Outlook(const Model& m, const Request& r,
                                 Micros now) const {
  QueueOutlook o;
  o.model_queued = m.queue->size();
  o.model_queue_limit = m.spec.max_queue_size;
  if (m.service_s > 0 && m.total_slots > 0) {
    // Once every slot is taken, one frees every (mean service time / slots)
    // (Little's law), so estimates follow the deployment's capacity, not its
    // arrival rate.
    const double per_slot = m.service_s / static_cast<double>(m.total_slots);
    o.predicted_drain = FromSeconds(per_slot);
    if (r.deadline != kNever && m.spec.reject_infeasible) {
      // Requests of this class or better (by fair turns) wait ahead.
      const double ahead = static_cast<double>(
          m.queue->AheadOf(r.priority, QueuedOf(m, r.tenant)));
      const bool slot_free = m.free_slots > 0 && ahead == 0;
      const Micros wait = slot_free ? 0 : FromSeconds((ahead + 1) * per_slot);
      const Micros prefill =
          m.spec.latency
              ? FromSeconds(m.spec.latency->PrefillSeconds(r.input_tokens))
              : 0;
      o.predicted_first_token = now + wait + prefill;
    }
  }
  return o;
}

Verdict Dispatcher::Submit(const Request& r, Micros now) {
  CHECK(r.model < models_.size());
  CHECK(r.tenant < static_cast<TenantId>(num_tenants_));
  Model& m = models_[r.model];
  // The tenant's queue record is needed below; start loading it now.
  m.queue->Prefetch(r.priority, r.tenant);
  if (r.tenant < m.tenants.size()) __builtin_prefetch(&m.tenants[r.tenant]);
  const Verdict v = admission_.Admit(r, Outlook(m, r, now), now);
  if (!v.admitted()) return v;
  if (m.spec.latency && r.prefill_estimate == 0 && r.deadline != kNever) {
    Request copy = r;
    copy.prefill_estimate =
        FromSeconds(m.spec.latency->PrefillSeconds(r.input_tokens));
    m.queue->Push(copy, now);
  } else {
    m.queue->Push(r, now);
  }
  AddWork(m, r.tenant, +1);
  MarkDirty(r.model);
  return v;
}

void Dispatcher::SizeTenants(Model& m) {
  if (m.tenants.size() < static_cast<size_t>(num_tenants_)) {
    m.tenants.resize(num_tenants_);
  }
}

void Dispatcher::DeclareTenant(ModelId model, TenantId tenant) {
  Model& m = models_[model];
  SizeTenants(m);
  if (!m.tenants[tenant].seen) {
    m.tenants[tenant].seen = true;
    ++m.tenants_seen;
  }
}

void Dispatcher::AddWork(Model& m, TenantId t, int delta) {
  SizeTenants(m);
  TenantUse& u = m.tenants[t];
  int32_t& w = u.work;
  if (w == 0 && delta > 0) {
    ++m.active_tenants;
    if (!u.seen) {
      u.seen = true;
      ++m.tenants_seen;
    }
  }
  w += delta;
  if (w == 0 && delta < 0) --m.active_tenants;
}

int64_t Dispatcher::QueuedOf(const Model& m, TenantId t) const {
  if (t >= m.tenants.size()) return 0;
  return m.tenants[t].work - m.tenants[t].outstanding;
}

bool Dispatcher::MayUseHeadroom(const Model& m, TenantId t) const {
  // Below its equal share of slots: total / sharing tenants, where the
  // sharing tenants are the active ones plus one more when some tenant that
  // used the deployment before is idle now (it may come back, and should
  // find room). A deployment only one tenant has ever used keeps nothing
  // back.
  const int64_t sharing = std::max<int64_t>(1, m.active_tenants) +
                          (m.tenants_seen > m.active_tenants ? 1 : 0);
  return static_cast<int64_t>(m.tenants[t].outstanding) * sharing <
         m.total_slots;
}

bool Dispatcher::FindCandidates(const Model& m, const Request& r,
                                bool restricted) {
  // A restricted request (its tenant is above its share of the deployment)
  // sees each replica's cap and KV budget less the fair-share headroom.
  const double keep = restricted ? 1 - m.spec.fair_share_headroom : 1;
  const int64_t tokens =
      static_cast<int64_t>(r.input_tokens) + std::max(0, r.max_output_tokens);
  candidates_.clear();
  candidate_index_.clear();
  for (size_t i = 0; i < m.replicas.size(); ++i) {
    const ReplicaLoad& l = m.replicas[i];
    const int cap =
        restricted ? std::max(1, static_cast<int>(l.max_outstanding * keep))
                   : l.max_outstanding;
    if (l.outstanding >= cap) continue;
    if (l.kv_budget_tokens > 0 && l.outstanding > 0 &&
        l.reserved_tokens + tokens >
            static_cast<int64_t>(static_cast<double>(l.kv_budget_tokens) *
                                 keep)) {
      continue;
    }
    candidates_.push_back(l);
    candidate_index_.push_back(static_cast<int>(i));
  }
  return !candidates_.empty();
}

void Dispatcher::Dispatch(Micros now, std::vector<Assignment>* out) {
  // Dispatching only consumes capacity, so no model re-enters dirty_ here.
  for (size_t k = 0; k < dirty_.size(); ++k) {
    const ModelId id = dirty_[k];
    Model& m = models_[id];
    m.dirty = false;
    const bool headroom = m.spec.fair_share_headroom > 0;
    while (m.free_slots > 0) {
      const Request* head = m.queue->Peek(now);
      if (head == nullptr) break;
      Request r;
      if (FindCandidates(m, *head,
                         headroom && !MayUseHeadroom(m, head->tenant))) {
        CHECK(m.queue->Pop(now, &r));
      } else {
        // The head must wait for capacity; a request of a tenant below its
        // share may still use the headroom (fair classes).
        if (!headroom || !m.queue->PopEligible(
                             now,
                             [&](const Request& x) {
                               return MayUseHeadroom(m, x.tenant) &&
                                      FindCandidates(m, x,
                                                     /*restricted=*/false);
                             },
                             &r)) {
          break;
        }
        CHECK(FindCandidates(m, r, /*restricted=*/false));
      }
      admission_.OnDequeued(r);
      const int pick = m.router->Pick(r, candidates_, now);
      CHECK(pick >= 0 && static_cast<size_t>(pick) < candidates_.size());
      ReplicaLoad& rep = m.replicas[candidate_index_[pick]];
      ++rep.outstanding;
      rep.pending_prefill_tokens += r.input_tokens;
      rep.reserved_tokens += static_cast<int64_t>(r.input_tokens) +
                             std::max(0, r.max_output_tokens);
      --m.free_slots;
      ++m.tenants[r.tenant].outstanding;
      r.dispatched = now;
      m.router->OnDispatched(r, rep.id);
      out->push_back(Assignment{r, rep.id});
    }
  }
  dirty_.clear();
}

int64_t Dispatcher::pending_prefill(ModelId model, ReplicaId replica) const {
  const Model& m = models_[model];
  const int i = FindReplica(m, replica);
  return i < 0 ? 0 : m.replicas[i].pending_prefill_tokens;
}

void Dispatcher::OnFirstToken(const Request& r, ReplicaId replica, Micros now) {
  Model& m = models_[r.model];
  const int i = FindReplica(m, replica);
  if (i < 0) return;
  ReplicaLoad& rep = m.replicas[i];
  rep.pending_prefill_tokens =
      std::max<int64_t>(0, rep.pending_prefill_tokens - r.input_tokens);
}

void Dispatcher::NoteCompletion(Model& m, const Request& r, Micros now) {
  if (r.dispatched == kNever || now < r.dispatched) return;
  const double sample = ToSeconds(now - r.dispatched);
  m.service_s = m.service_s == 0 ? sample
                                 : kServiceSmoothing * sample +
                                       (1 - kServiceSmoothing) * m.service_s;
}

void Dispatcher::OnFinished(const Request& r, ReplicaId replica,
                            int32_t output_tokens, Micros now, bool prefilled) {
  Model& m = models_[r.model];
  m.queue->Prefetch(r.priority, r.tenant);
  const int i = FindReplica(m, replica);
  if (i >= 0) {
    ReplicaLoad& rep = m.replicas[i];
    if (!prefilled) {
      rep.pending_prefill_tokens =
          std::max<int64_t>(0, rep.pending_prefill_tokens - r.input_tokens);
    }
    if (rep.outstanding > 0) {
      if (rep.outstanding <= rep.max_outstanding) ++m.free_slots;
      --rep.outstanding;
      rep.reserved_tokens =
          std::max<int64_t>(0, rep.reserved_tokens - r.input_tokens -
                                   std::max(0, r.max_output_tokens));
    }
  }
  if (m.tenants[r.tenant].outstanding > 0) --m.tenants[r.tenant].outstanding;
  AddWork(m, r.tenant, -1);
  if (output_tokens >= 0) {
    admission_.OnCompleted(r, output_tokens, now);
    m.queue->CorrectOutput(
        r.tenant, r.priority,
        static_cast<int64_t>(output_tokens) - std::max(0, r.max_output_tokens));
    NoteCompletion(m, r, now);
  } else {
    admission_.OnNotServed(r, now);
  }
  MarkDirty(r.model);
}

void Dispatcher::Expire(Micros now, std::vector<Request>* timed_out) {
  const size_t first = timed_out->size();
  for (Model& m : models_) m.queue->ExpireTimedOut(now, timed_out);
  NotServed(first, now, timed_out);
}

void Dispatcher::DrainQueue(ModelId model, Micros now,
                            std::vector<Request>* drained) {
  const size_t first = drained->size();
  Request r;
  while (models_[model].queue->Pop(now, &r)) drained->push_back(r);
  NotServed(first, now, drained);
}

void Dispatcher::NotServed(size_t first, Micros now,
                           std::vector<Request>* requests) {
  for (size_t i = first; i < requests->size(); ++i) {
    const Request& r = (*requests)[i];
    admission_.OnDequeued(r);
    admission_.OnNotServed(r, now);
    AddWork(models_[r.model], r.tenant, -1);
  }
}

Micros Dispatcher::NextTimeout() const {
  Micros next = kNever;
  for (const Model& m : models_) next = std::min(next, m.queue->NextTimeout());
  return next;
}

int64_t Dispatcher::outstanding(ModelId model) const {
  int64_t n = 0;
  for (const ReplicaLoad& r : models_[model].replicas) n += r.outstanding;
  return n;
}

}  // namespace gpusched::serving
