#include "gateway/gateway_stats.h"

#include <algorithm>

#include "runtime/real_clock.h"

namespace gpusched::gateway {

using nlohmann::json;

namespace {

// The q-quantile (nearest rank) of sorted `v`, in seconds.
json Quantile(const std::vector<Micros>& v, double q) {
  if (v.empty()) return nullptr;
  size_t rank = static_cast<size_t>(q * static_cast<double>(v.size()));
  return ToSeconds(v[std::min(rank, v.size() - 1)]);
}

json Percentiles(std::vector<Micros> v) {
  std::sort(v.begin(), v.end());
  return {{"p50", Quantile(v, 0.5)},
          {"p90", Quantile(v, 0.9)},
          {"p99", Quantile(v, 0.99)}};
}

}  // namespace

void GatewayStats::Rate::Add(Micros now, int64_t output_tokens) {
  const int64_t second = now / kMicrosPerSecond;
  Bucket& b = buckets[static_cast<size_t>(second) % buckets.size()];
  if (b.second != second) b = {second, 0, 0};
  ++b.requests;
  b.output_tokens += output_tokens;
}

std::pair<double, double> GatewayStats::Rate::PerSecond(Micros now) const {
  // The current second is still filling: count the kRateSeconds before it.
  const int64_t current = now / kMicrosPerSecond;
  int64_t requests = 0, tokens = 0;
  for (const Bucket& b : buckets) {
    if (b.second >= current - kRateSeconds && b.second < current) {
      requests += b.requests;
      tokens += b.output_tokens;
    }
  }
  return {static_cast<double>(requests) / kRateSeconds,
          static_cast<double>(tokens) / kRateSeconds};
}

std::vector<double> GatewayStats::TtftSince(const std::string& deployment,
                                            Micros since) const {
  absl::MutexLock lock(&mu_);
  std::vector<double> out;
  auto it = deployments_.find(deployment);
  if (it == deployments_.end()) return out;
  for (const Sample& s : it->second.ring) {
    if (s.ok && s.time > since) out.push_back(ToSeconds(s.ttft));
  }
  return out;
}

std::vector<control::VersionSample> GatewayStats::SamplesSince(
    const std::string& deployment, Micros since) const {
  absl::MutexLock lock(&mu_);
  std::vector<control::VersionSample> out;
  auto it = deployments_.find(deployment);
  if (it == deployments_.end()) return out;
  for (const Sample& s : it->second.ring) {
    if (s.time > since)
      out.push_back({ToSeconds(s.ttft), ToSeconds(s.e2e), s.ok});
  }
  return out;
}

void GatewayStats::Deployment::Keep(const Sample& s) {
  if (ring.size() < kSamples) {
    ring.push_back(s);
  } else {
    ring[next] = s;
    next = (next + 1) % kSamples;
  }
}

void GatewayStats::RecordFinished(const Finish& f) {
  absl::MutexLock lock(&mu_);
  Deployment& d = deployments_[f.deployment];
  Tenant& t = tenants_[f.tenant];
  ++t.requests;
  t.input_tokens += f.input_tokens;
  t.output_tokens += f.output_tokens;
  t.rate.Add(f.now, f.output_tokens);
  if (!f.ok) {
    ++d.errors;
    ++t.errors;
    d.Keep({f.now, 0, 0, false});
    return;
  }
  ++d.completed;
  d.input_tokens += f.input_tokens;
  d.output_tokens += f.output_tokens;
  d.rate.Add(f.now, f.output_tokens);
  d.Keep({f.now, f.ttft, f.e2e, true});
}

void GatewayStats::RecordRejected(const std::string& deployment,
                                  const std::string& tenant, Micros now) {
  absl::MutexLock lock(&mu_);
  ++deployments_[deployment].rejected;
  ++tenants_[tenant].rejected;
}

json GatewayStats::Json(Micros now) const {
  absl::MutexLock lock(&mu_);
  json deployments = json::array(), tenants = json::array();
  for (const auto& [name, d] : deployments_) {
    std::vector<Micros> ttft, e2e;
    for (const Sample& s : d.ring) {
      if (!s.ok || s.time < now - kWindow) continue;
      ttft.push_back(s.ttft);
      e2e.push_back(s.e2e);
    }
    const auto [rps, tps] = d.rate.PerSecond(now);
    deployments.push_back({{"deployment", name},
                           {"completed", d.completed},
                           {"errors", d.errors},
                           {"rejected", d.rejected},
                           {"inputTokens", d.input_tokens},
                           {"outputTokens", d.output_tokens},
                           {"requestsPerSecond", rps},
                           {"outputTokensPerSecond", tps},
                           {"samples", ttft.size()},
                           {"ttftSeconds", Percentiles(std::move(ttft))},
                           {"e2eSeconds", Percentiles(std::move(e2e))}});
  }
  for (const auto& [name, t] : tenants_) {
    tenants.push_back({{"tenant", name},
                       {"requests", t.requests},
                       {"errors", t.errors},
                       {"rejected", t.rejected},
                       {"inputTokens", t.input_tokens},
                       {"outputTokens", t.output_tokens},
                       {"requestsPerSecond", t.rate.PerSecond(now).first}});
  }
  return {{"windowSeconds", ToSeconds(kWindow)},
          {"rateSeconds", kRateSeconds},
          {"deployments", deployments},
          {"tenants", tenants}};
}

json GatewayStats::Json() const {
  return Json(runtime::SteadyClock::Get().Now());
}

}  // namespace gpusched::gateway
