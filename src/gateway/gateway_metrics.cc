#include "gateway/gateway_metrics.h"

namespace gpusched::gateway {

namespace {

// Seconds; TTFT and end to end span a cached token to a long generation.
const std::vector<double> kLatencyBuckets = {
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300};
const std::vector<double> kTpotBuckets = {0.001, 0.0025, 0.005, 0.01, 0.02,
                                          0.035, 0.05,   0.075, 0.1,  0.15,
                                          0.25,  0.5,    1};

}  // namespace

GatewayMetrics::GatewayMetrics(metrics::Registry* r) {
  requests_ = r->AddCounter(
      "gpusched_requests_total",
      "Inference requests for a deployment, by tenant, priority class and "
      "outcome (ok: answered 2xx; error: the engine failed or answered an "
      "error; rejected: admission or queue timeout).",
      {"deployment", "tenant", "class", "outcome"});
  rejections_ =
      r->AddCounter("gpusched_request_rejections_total",
                    "Requests rejected by admission or the queue, by reason "
                    "(serving::RejectReasonName).",
                    {"deployment", "reason"});
  throttled_ = r->AddCounter(
      "gpusched_tenant_throttled_requests_total",
      "Requests refused by the tenant's rate limits (requests or tokens per "
      "minute).",
      {"tenant"});
  invalid_ = r->AddCounter(
      "gpusched_invalid_requests_total",
      "Requests refused before reaching a deployment's queue (bad key, "
      "unknown model or priority class, bad deadline).",
      {"reason"});
  input_tokens_ = r->AddCounter(
      "gpusched_input_tokens_total",
      "Prompt tokens of finished requests (the engine's usage; else body "
      "bytes / 4).",
      {"deployment", "tenant"});
  output_tokens_ = r->AddCounter(
      "gpusched_output_tokens_total",
      "Generated tokens of finished requests (the engine's usage; else "
      "streamed chunks).",
      {"deployment", "tenant"});
  slo_requests_ = r->AddCounter(
      "gpusched_slo_requests_total",
      "Finished requests of deployments with an SLO (spec.slo), by tenant.",
      {"deployment", "tenant"});
  slo_met_ = r->AddCounter(
      "gpusched_slo_met_requests_total",
      "Finished requests that succeeded within both the TTFT and the TPOT "
      "SLO of their deployment, by tenant.",
      {"deployment", "tenant"});
  ttft_ = r->AddHistogram(
      "gpusched_time_to_first_token_seconds",
      "From arrival at the gateway to the first SSE chunk (streamed) or the "
      "response head (not streamed).",
      {"deployment"}, kLatencyBuckets);
  tpot_ = r->AddHistogram(
      "gpusched_time_per_output_token_seconds",
      "Streamed requests: (end - first chunk) / (output tokens - 1).",
      {"deployment"}, kTpotBuckets);
  e2e_ = r->AddHistogram("gpusched_request_duration_seconds",
                         "From arrival at the gateway to the end of the "
                         "answer (proxied requests).",
                         {"deployment"}, kLatencyBuckets);
  held_ = r->AddCounter(
      "gpusched_held_requests_total",
      "Requests that arrived while their deployment had no ready replica "
      "and were held in its queue (scale from zero).",
      {"deployment"});
  hold_ = r->AddHistogram(
      "gpusched_request_hold_seconds",
      "Held requests: from arrival to dispatch to the first ready replica "
      "(the cold start as a request sees it).",
      {"deployment"}, kLatencyBuckets);
  migrations_ = r->AddCounter(
      "gpusched_stream_migrations_total",
      "Streamed requests whose replica failed mid-stream: continued on "
      "another replica (outcome=migrated) or ended with an error event "
      "(outcome=failed).",
      {"deployment", "outcome"});
  routed_ = r->AddCounter(
      "gpusched_route_requests_total",
      "Requests for a ModelRoute's public name, by the version (target "
      "deployment) the split sent them to.",
      {"route", "version"});
}

metrics::Counter* GatewayMetrics::RouteCell(const std::string& route,
                                            const std::string& version) {
  return routed_->With({route, version});
}

GatewayMetrics::DeploymentCells* GatewayMetrics::Deployment(
    const std::string& name) {
  auto& d = deployments_[name];
  if (d) return d.get();
  d = std::make_unique<DeploymentCells>();
  d->ttft = ttft_->With({name});
  d->tpot = tpot_->With({name});
  d->e2e = e2e_->With({name});
  d->held = held_->With({name});
  d->hold = hold_->With({name});
  // Every reason shows from the start, at 0.
  for (int i = 1; i < serving::kNumRejectReasons; ++i) {
    d->rejections[i] = rejections_->With(
        {name,
         serving::RejectReasonName(static_cast<serving::RejectReason>(i))});
  }
  return d.get();
}

GatewayMetrics::RequestCells* GatewayMetrics::Cells(
    const std::string& deployment, const std::string& tenant,
    const std::string& priority_class) {
  absl::MutexLock lock(&mu_);
  auto& c = cells_[{deployment, tenant, priority_class}];
  if (c) return c.get();
  c = std::make_unique<RequestCells>();
  c->deployment = Deployment(deployment);
  c->ok = requests_->With({deployment, tenant, priority_class, "ok"});
  c->error = requests_->With({deployment, tenant, priority_class, "error"});
  c->rejected =
      requests_->With({deployment, tenant, priority_class, "rejected"});
  c->input_tokens = input_tokens_->With({deployment, tenant});
  c->output_tokens = output_tokens_->With({deployment, tenant});
  c->throttled = throttled_->With({tenant});
  if (c->deployment->has_slo) SetSloCells(deployment, tenant, c.get());
  return c.get();
}

void GatewayMetrics::SetSloCells(const std::string& deployment,
                                 const std::string& tenant, RequestCells* c) {
  c->slo_met = slo_met_->With({deployment, tenant});
  c->slo_requests = slo_requests_->With({deployment, tenant});
}

void GatewayMetrics::Rejected(RequestCells* c, serving::RejectReason reason) {
  if (c == nullptr) return;
  c->rejected->Add();
  const int i = static_cast<int>(reason);
  if (i > 0 && i < serving::kNumRejectReasons) {
    c->deployment->rejections[i]->Add();
  }
  if (reason == serving::RejectReason::kRateLimitedRequests ||
      reason == serving::RejectReason::kRateLimitedTokens) {
    c->throttled->Add();
  }
}

void GatewayMetrics::Held(RequestCells* c) {
  if (c != nullptr) c->deployment->held->Add();
}

void GatewayMetrics::Released(RequestCells* c, double seconds) {
  if (c != nullptr) c->deployment->hold->Observe(seconds);
}

void GatewayMetrics::Finished(RequestCells* c, bool ok, bool stream,
                              Micros arrival, Micros first_byte, Micros end,
                              int64_t input_tokens, int64_t output_tokens) {
  if (c == nullptr) return;
  DeploymentCells* d = c->deployment;
  (ok ? c->ok : c->error)->Add();
  if (input_tokens > 0) c->input_tokens->Add(static_cast<double>(input_tokens));
  if (output_tokens > 0) {
    c->output_tokens->Add(static_cast<double>(output_tokens));
  }
  d->e2e->Observe(ToSeconds(end - arrival));
  Micros tpot = -1;
  if (first_byte > 0) {
    d->ttft->Observe(ToSeconds(first_byte - arrival));
    if (stream && output_tokens > 1) {
      tpot = (end - first_byte) / (output_tokens - 1);
      d->tpot->Observe(ToSeconds(tpot));
    }
  }
  const Micros ttft_slo = d->ttft_slo.load(std::memory_order_relaxed);
  const Micros tpot_slo = d->tpot_slo.load(std::memory_order_relaxed);
  metrics::Counter* slo_requests = c->slo_requests.load();
  if (slo_requests == nullptr || (ttft_slo <= 0 && tpot_slo <= 0)) return;
  slo_requests->Add();
  const bool met = ok && first_byte > 0 &&
                   (ttft_slo <= 0 || first_byte - arrival <= ttft_slo) &&
                   (tpot_slo <= 0 || tpot < 0 || tpot <= tpot_slo);
  if (met) c->slo_met.load()->Add();
}

void GatewayMetrics::Invalid(const char* reason) {
  invalid_->With({reason})->Add();
}

void GatewayMetrics::Migration(const std::string& deployment, bool migrated) {
  migrations_->With({deployment, migrated ? "migrated" : "failed"})->Add();
}

void GatewayMetrics::SetSlo(const std::string& deployment, double ttft_ms,
                            double tpot_ms) {
  absl::MutexLock lock(&mu_);
  DeploymentCells* d = Deployment(deployment);
  if (ttft_ms <= 0 && tpot_ms <= 0 && !d->has_slo) {
    return;  // no SLO: no series
  }
  if (!d->has_slo) {
    d->has_slo = true;
    for (auto& [key, c] : cells_) {
      if (std::get<0>(key) == deployment) {
        SetSloCells(deployment, std::get<1>(key), c.get());
      }
    }
  }
  d->ttft_slo = static_cast<Micros>(ttft_ms * kMicrosPerMilli);
  d->tpot_slo = static_cast<Micros>(tpot_ms * kMicrosPerMilli);
}

std::vector<std::pair<std::string, double>> GatewayMetrics::TokensByTenant(
    const std::string& deployment) {
  std::map<std::string, double> by;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [key, c] : cells_) {
      if (std::get<0>(key) != deployment) continue;
      // Classes share the (deployment, tenant) token cells: count once.
      by[std::get<1>(key)] =
          c->input_tokens->value() + c->output_tokens->value();
    }
  }
  return {by.begin(), by.end()};
}

}  // namespace gpusched::gateway
