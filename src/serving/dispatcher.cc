#include "serving/dispatcher.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/status.h"

namespace gpusched::serving {
namespace {

// The service-rate estimate is refreshed once per window and smoothed.
constexpr Micros kRateWindow = 5 * kMicrosPerSecond;
constexpr double kRateSmoothing = 0.5;

}  // namespace

absl::StatusOr<ModelId> Dispatcher::AddDeployment(const DeploymentSpec& spec) {
  RETURN_IF_ERROR(ValidateModelQueueConfig(spec.queue));
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

absl::StatusOr<TenantId> Dispatcher::AddTenant(const TenantSpec& spec,
                                               Micros now) {
  if (!(spec.weight > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tenant \"", spec.name, "\": weight must be > 0"));
  }
  absl::Status st = ValidateTenantLimits(spec.limits);
  if (!st.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tenant \"", spec.name, "\": ", st.message()));
  }
  const TenantId t = static_cast<TenantId>(num_tenants_++);
  tenant_weights_.push_back(spec.weight);
  for (Model& m : models_) m.queue->SetTenantWeight(t, spec.weight);
  admission_.SetTenantLimits(t, spec.limits, now);
  return t;
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
                            int max_outstanding) {
  CHECK(model < models_.size());
  CHECK(max_outstanding >= 1);
  Model& m = models_[model];
  CHECK(FindReplica(m, replica) < 0);
  ReplicaLoad load;
  load.id = replica;
  load.max_outstanding = max_outstanding;
  m.replicas.push_back(load);
  m.free_slots += max_outstanding;
  MarkDirty(model);
}

void Dispatcher::RemoveReplica(ModelId model, ReplicaId replica) {
  Model& m = models_[model];
  const int i = FindReplica(m, replica);
  if (i < 0) return;
  const ReplicaLoad& r = m.replicas[i];
  m.free_slots -= std::max(0, r.max_outstanding - r.outstanding);
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
  if (m.rate > 0) {
    // Requests of this class or better wait ahead; each frees at the
    // measured completion rate once a slot is free.
    const double ahead = static_cast<double>(m.queue->AheadOf(r.priority, r.tenant));
    const bool slot_free = m.free_slots > 0 && ahead == 0;
    const Micros wait = slot_free ? 0 : FromSeconds((ahead + 1) / m.rate);
    o.predicted_drain = FromSeconds(1.0 / m.rate);
    const Micros prefill =
        m.spec.latency
            ? FromSeconds(m.spec.latency->PrefillSeconds(r.input_tokens))
            : 0;
    o.predicted_first_token = now + wait + prefill;
  }
  return o;
}

Verdict Dispatcher::Submit(const Request& r, Micros now) {
  CHECK(r.model < models_.size());
  CHECK(r.tenant < static_cast<TenantId>(num_tenants_));
  Model& m = models_[r.model];
  const Verdict v = admission_.Admit(r, Outlook(m, r, now), now);
  if (!v.admitted()) return v;
  m.queue->Push(r, now);
  MarkDirty(r.model);
  return v;
}

void Dispatcher::Dispatch(Micros now, std::vector<Assignment>* out) {
  // Dispatching only consumes slots, so no model re-enters dirty_ here.
  for (size_t k = 0; k < dirty_.size(); ++k) {
    const ModelId id = dirty_[k];
    Model& m = models_[id];
    m.dirty = false;
    Request r;
    while (m.free_slots > 0 && m.queue->Pop(now, &r)) {
      admission_.OnDequeued(r);
      // Candidates: replicas below their cap. The common case (all of them)
      // is passed without copying.
      std::span<const ReplicaLoad> span;
      const bool all_free = std::all_of(
          m.replicas.begin(), m.replicas.end(), [](const ReplicaLoad& l) {
            return l.outstanding < l.max_outstanding;
          });
      if (all_free) {
        span = m.replicas;
      } else {
        candidates_.clear();
        candidate_index_.clear();
        for (size_t i = 0; i < m.replicas.size(); ++i) {
          if (m.replicas[i].outstanding < m.replicas[i].max_outstanding) {
            candidates_.push_back(m.replicas[i]);
            candidate_index_.push_back(static_cast<int>(i));
          }
        }
        span = candidates_;
      }
      const int pick = m.router->Pick(r, span, now);
      CHECK(pick >= 0 && static_cast<size_t>(pick) < span.size());
      const int idx = all_free ? pick : candidate_index_[pick];
      ReplicaLoad& rep = m.replicas[idx];
      ++rep.outstanding;
      rep.pending_prefill_tokens += r.input_tokens;
      --m.free_slots;
      m.router->OnDispatched(r, rep.id);
      out->push_back(Assignment{r, rep.id});
    }
  }
  dirty_.clear();
}

void Dispatcher::OnFirstToken(const Request& r, ReplicaId replica, Micros now) {
  Model& m = models_[r.model];
  const int i = FindReplica(m, replica);
  if (i < 0) return;
  ReplicaLoad& rep = m.replicas[i];
  rep.pending_prefill_tokens =
      std::max<int64_t>(0, rep.pending_prefill_tokens - r.input_tokens);
}

void Dispatcher::NoteCompletion(Model& m, Micros now) {
  if (m.window_done == 0 && m.rate == 0 && m.window_start == 0) {
    m.window_start = now;
  }
  ++m.window_done;
  const Micros elapsed = now - m.window_start;
  if (elapsed >= kRateWindow) {
    const double measured = m.window_done / ToSeconds(elapsed);
    m.rate = m.rate == 0
                 ? measured
                 : kRateSmoothing * measured + (1 - kRateSmoothing) * m.rate;
    m.window_start = now;
    m.window_done = 0;
  }
}

void Dispatcher::OnFinished(const Request& r, ReplicaId replica,
                            int32_t output_tokens, Micros now) {
  Model& m = models_[r.model];
  const int i = FindReplica(m, replica);
  if (i >= 0) {
    ReplicaLoad& rep = m.replicas[i];
    if (rep.outstanding > 0) {
      if (rep.outstanding <= rep.max_outstanding) ++m.free_slots;
      --rep.outstanding;
    }
  }
  if (output_tokens >= 0) {
    admission_.OnCompleted(r, output_tokens, now);
    m.queue->CorrectOutput(
        r.tenant, r.priority,
        static_cast<int64_t>(output_tokens) - std::max(0, r.max_output_tokens));
    NoteCompletion(m, now);
  } else {
    admission_.OnNotServed(r, now);
  }
  MarkDirty(r.model);
}

void Dispatcher::Expire(Micros now, std::vector<Request>* timed_out) {
  const size_t first = timed_out->size();
  for (Model& m : models_) m.queue->ExpireTimedOut(now, timed_out);
  for (size_t i = first; i < timed_out->size(); ++i) {
    admission_.OnDequeued((*timed_out)[i]);
    admission_.OnNotServed((*timed_out)[i], now);
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
