// The Controller's part in an HA installation's data plane (docs/ha.md,
// "Every instance serves"): each instance publishes its load and tenants'
// demand under its lease; the leader's autoscaler adds the others' loads
// to its own; every instance takes its share of each tenant's limits.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/controller.h"
#include "runtime/controller_internal.h"

namespace gpusched::runtime {

namespace {

// A document not renewed for this long is an instance that is gone (its
// lease goes soon after) or cut off: its load no longer counts for the
// autoscaler (its share of the limits stays until its document goes).
constexpr Micros kLoadStale = 5 * kMicrosPerSecond;
// Demand rates are smoothed over about this long.
constexpr double kDemandTauSeconds = 5.0;

}  // namespace

void Controller::PublishLoad(Micros now) {
  if (!store_->shared()) return;
  const bool urgent = load_urgent_.exchange(false);
  if (!urgent && now < next_load_) return;
  next_load_ = now + options_.load_period;

  std::vector<std::string> names;
  std::map<std::string, serving::TenantLimits> limits;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [name, d] : deployments_) names.push_back(name);
    for (const auto& [name, t] : tenants_) {
      limits[name] = config::ServingTenant(t.spec).limits;
    }
  }
  InstanceLoad mine;
  mine.seq = ++load_seq_;
  for (const std::string& name : names) {
    const ServingLoad l = gateway_->Load(name);
    DeploymentLoadDoc d;
    d.queued = l.queued;
    d.in_flight = l.in_flight;
    d.held = l.held;
    d.held_ms = l.held > 0
                    ? std::max<Micros>(0, now - l.held_since) / kMicrosPerMilli
                    : 0;
    auto [cursor, fresh] = ttft_published_.try_emplace(name, now);
    if (!fresh) {
      d.ttft_s = gateway_->TtftSince(name, cursor->second);
      if (d.ttft_s.size() > kMaxTtftSamples) {
        // The most recent ones.
        d.ttft_s.erase(d.ttft_s.begin(), d.ttft_s.end() - kMaxTtftSamples);
      }
      cursor->second = now;
    }
    if (d.queued > 0 || d.in_flight > 0 || !d.ttft_s.empty()) {
      mine.deployments[name] = std::move(d);
    }
  }
  std::erase_if(ttft_published_, [&](const auto& kv) {
    return std::find(names.begin(), names.end(), kv.first) == names.end();
  });
  // Demand: the usage counters' growth since the last document, smoothed.
  const std::map<std::string, TenantUsage> usage = gateway_->TenantUsages();
  const double dt = usage_at_ > 0 ? ToSeconds(now - usage_at_) : 0;
  if (dt > 0) {
    const double keep = std::exp(-dt / kDemandTauSeconds);
    for (const auto& [name, u] : usage) {
      auto last = usage_last_.find(name);
      const TenantUsage before =
          last == usage_last_.end() ? TenantUsage{} : last->second;
      TenantDemand& d = demand_[name];
      const double rpm = (u.requests - before.requests) * 60.0 / dt;
      const double tpm = (u.tokens - before.tokens) * 60.0 / dt;
      d.requests_per_minute = keep * d.requests_per_minute + (1 - keep) * rpm;
      d.tokens_per_minute = keep * d.tokens_per_minute + (1 - keep) * tpm;
    }
    for (auto& [name, d] : demand_) {
      if (!usage.contains(name)) {
        d.requests_per_minute *= keep;
        d.tokens_per_minute *= keep;
      }
    }
  }
  usage_last_ = usage;
  usage_at_ = now;
  std::erase_if(demand_, [&](const auto& kv) {
    return !limits.contains(kv.first) ||
           (kv.second.requests_per_minute < 1e-3 &&
            kv.second.tokens_per_minute < 1e-3);
  });
  mine.tenants = demand_;
  const std::string text = LoadToJson(mine);
  (void)election_->Publish("load", text);  // tried again next period

  // Shares, from every instance's document as the store has them, with
  // ours as just written (the others will see that one too).
  std::map<std::string, InstanceLoad> all;
  {
    absl::MutexLock l(&loads_mu_);
    RefreshLoads(now);
    for (const auto& [id, p] : loads_) all[id] = p.load;
  }
  all[election_->self().id] = std::move(mine);
  gateway_->SetTenantShares(TenantShares(election_->self().id, all, limits));
}

void Controller::RefreshLoads(Micros now) {
  const int64_t rev = store_->revision();
  if (rev == loads_revision_) return;
  loads_revision_ = rev;
  const std::map<std::string, std::string> docs = election_->Collect("load");
  std::erase_if(loads_,
                [&](const auto& kv) { return !docs.contains(kv.first); });
  for (const auto& [id, text] : docs) {
    PeerLoad& p = loads_[id];
    if (p.raw == text) continue;
    absl::StatusOr<InstanceLoad> parsed = LoadFromJson(text);
    if (!parsed.ok()) {
      loads_.erase(id);  // a document we cannot read counts for nothing
      continue;
    }
    p.raw = text;
    if (parsed->seq != p.load.seq || p.renewed == 0) p.renewed = now;
    p.load = *std::move(parsed);
  }
}

DeploymentLoadDoc Controller::OthersLoad(const std::string& deployment,
                                         Micros now, bool consume) {
  DeploymentLoadDoc sum;
  if (!store_->shared()) return sum;
  absl::MutexLock l(&loads_mu_);
  RefreshLoads(now);
  for (auto& [id, p] : loads_) {
    if (id == election_->self().id || now - p.renewed > kLoadStale) continue;
    auto it = p.load.deployments.find(deployment);
    if (it == p.load.deployments.end()) continue;
    const DeploymentLoadDoc& d = it->second;
    sum.queued += d.queued;
    sum.in_flight += d.in_flight;
    sum.held += d.held;
    // Its age as of now: what it was when written plus since.
    if (d.held > 0) {
      sum.held_ms = std::max(sum.held_ms,
                             d.held_ms + (now - p.renewed) / kMicrosPerMilli);
    }
    int64_t& taken = p.ttft_taken[deployment];
    if (consume && p.load.seq > taken) {
      sum.ttft_s.insert(sum.ttft_s.end(), d.ttft_s.begin(), d.ttft_s.end());
      taken = p.load.seq;
    }
  }
  return sum;
}

}  // namespace gpusched::runtime
