#include "runtime/instance_load.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace gpusched::runtime {

using nlohmann::json;

namespace {

absl::Status Bad(const std::string& field, const std::string& why) {
  return absl::InvalidArgumentError(
      absl::StrCat("instance load: ", field, ": ", why));
}

// A count >= 0 at j[key] (absent: 0).
absl::Status Count(const json& j, const char* key, const std::string& where,
                   int64_t* out) {
  if (!j.contains(key)) return absl::OkStatus();
  const json& v = j[key];
  if (!v.is_number_integer() || v.get<int64_t>() < 0) {
    return Bad(absl::StrCat(where, ".", key), "must be an integer >= 0");
  }
  *out = v.get<int64_t>();
  return absl::OkStatus();
}

absl::Status Rate(const json& j, const char* key, const std::string& where,
                  double* out) {
  if (!j.contains(key)) return absl::OkStatus();
  const json& v = j[key];
  if (!v.is_number() || !std::isfinite(v.get<double>()) ||
      v.get<double>() < 0) {
    return Bad(absl::StrCat(where, ".", key), "must be a number >= 0");
  }
  *out = v.get<double>();
  return absl::OkStatus();
}

}  // namespace

std::string LoadToJson(const InstanceLoad& load) {
  json deployments = json::object();
  for (const auto& [name, d] : load.deployments) {
    json ttft = json::array();
    for (size_t i = 0; i < d.ttft_s.size() && i < kMaxTtftSamples; ++i) {
      ttft.push_back(d.ttft_s[i]);
    }
    deployments[name] = {{"queued", d.queued},
                         {"inFlight", d.in_flight},
                         {"held", d.held},
                         {"heldMs", d.held_ms},
                         {"ttft", std::move(ttft)}};
  }
  json tenants = json::object();
  for (const auto& [name, t] : load.tenants) {
    tenants[name] = {{"rpm", t.requests_per_minute},
                     {"tpm", t.tokens_per_minute}};
  }
  return json{{"seq", load.seq},
              {"deployments", std::move(deployments)},
              {"tenants", std::move(tenants)}}
      .dump(-1, ' ', false, json::error_handler_t::replace);
}

absl::StatusOr<InstanceLoad> LoadFromJson(const std::string& text) {
  const json j = json::parse(text, nullptr, false);
  if (!j.is_object()) return Bad("document", "not a JSON object");
  InstanceLoad out;
  if (absl::Status st = Count(j, "seq", "", &out.seq); !st.ok()) return st;
  if (j.contains("deployments")) {
    const json& ds = j["deployments"];
    if (!ds.is_object()) return Bad("deployments", "must be an object");
    if (ds.size() > kMaxLoadDeployments) {
      return Bad("deployments",
                 absl::StrCat("more than ", kMaxLoadDeployments));
    }
    for (const auto& [name, d] : ds.items()) {
      const std::string where = absl::StrCat("deployments.", name);
      if (!d.is_object()) return Bad(where, "must be an object");
      DeploymentLoadDoc doc;
      for (auto [key, field] : {std::pair{"queued", &doc.queued},
                                {"inFlight", &doc.in_flight},
                                {"held", &doc.held},
                                {"heldMs", &doc.held_ms}}) {
        if (absl::Status st = Count(d, key, where, field); !st.ok()) return st;
      }
      if (d.contains("ttft")) {
        const json& t = d["ttft"];
        if (!t.is_array() || t.size() > kMaxTtftSamples) {
          return Bad(absl::StrCat(where, ".ttft"),
                     absl::StrCat("must be an array of at most ",
                                  kMaxTtftSamples, " numbers"));
        }
        for (const json& v : t) {
          if (!v.is_number() || !std::isfinite(v.get<double>()) ||
              v.get<double>() < 0) {
            return Bad(absl::StrCat(where, ".ttft"),
                       "samples must be numbers >= 0");
          }
          doc.ttft_s.push_back(v.get<double>());
        }
      }
      out.deployments[name] = std::move(doc);
    }
  }
  if (j.contains("tenants")) {
    const json& ts = j["tenants"];
    if (!ts.is_object()) return Bad("tenants", "must be an object");
    if (ts.size() > kMaxLoadTenants) {
      return Bad("tenants", absl::StrCat("more than ", kMaxLoadTenants));
    }
    for (const auto& [name, t] : ts.items()) {
      const std::string where = absl::StrCat("tenants.", name);
      if (!t.is_object()) return Bad(where, "must be an object");
      TenantDemand demand;
      if (absl::Status st = Rate(t, "rpm", where, &demand.requests_per_minute);
          !st.ok()) {
        return st;
      }
      if (absl::Status st = Rate(t, "tpm", where, &demand.tokens_per_minute);
          !st.ok()) {
        return st;
      }
      out.tenants[name] = demand;
    }
  }
  return out;
}

std::vector<int64_t> Apportion(int64_t total,
                               const std::vector<double>& weights) {
  const size_t n = weights.size();
  std::vector<int64_t> out(n, 0);
  if (n == 0 || total <= 0) return out;
  double sum = 0;
  for (double w : weights) sum += std::max(0.0, w);
  std::vector<double> exact(n);
  for (size_t i = 0; i < n; ++i) {
    exact[i] =
        sum > 0 ? static_cast<double>(total) * std::max(0.0, weights[i]) / sum
                : static_cast<double>(total) / static_cast<double>(n);
    out[i] = static_cast<int64_t>(std::floor(exact[i] + 1e-9));
  }
  int64_t left = total - std::accumulate(out.begin(), out.end(), int64_t{0});
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return exact[a] - static_cast<double>(out[a]) >
           exact[b] - static_cast<double>(out[b]) + 1e-12;
  });
  for (size_t k = 0; left > 0; k = (k + 1) % n, --left) ++out[order[k]];
  // Rounding may have given one too many (floor + epsilon): take back from
  // the end of the order.
  for (size_t k = n; left < 0; ++left) {
    k = (k + n - 1) % n;
    if (out[order[k]] > 0) --out[order[k]];
  }
  return out;
}

std::map<std::string, serving::TenantShare> TenantShares(
    const std::string& self, const std::map<std::string, InstanceLoad>& loads,
    const std::map<std::string, serving::TenantLimits>& limits) {
  std::map<std::string, serving::TenantShare> out;
  if (loads.size() <= 1) return out;
  size_t me = 0;
  std::vector<const InstanceLoad*> ordered;
  for (const auto& [id, load] : loads) {
    if (id == self) me = ordered.size();
    ordered.push_back(&load);
  }
  if (!loads.contains(self)) return out;
  const size_t n = ordered.size();
  std::vector<double> weights(n);
  for (const auto& [tenant, l] : limits) {
    if (l.requests_per_minute <= 0 && l.tokens_per_minute <= 0 &&
        l.max_concurrency <= 0 && l.max_queued <= 0) {
      continue;
    }
    double total = 0;
    for (size_t i = 0; i < n; ++i) {
      auto it = ordered[i]->tenants.find(tenant);
      weights[i] =
          it == ordered[i]->tenants.end() ? 0 : it->second.requests_per_minute;
      total += weights[i];
    }
    for (size_t i = 0; i < n; ++i) {
      weights[i] = total > 0 ? (1 - kShareReserve) * weights[i] / total +
                                   kShareReserve / static_cast<double>(n)
                             : 1.0 / static_cast<double>(n);
    }
    serving::TenantShare share;
    share.rate = weights[me];
    // Slots go in equal parts: slots that follow demand moved between
    // instances every document, and an instance keeps what it admitted
    // until it ends, so the slots in use added up over the moves (2x the
    // limit measured, docs/ha.md).
    const std::vector<double> equal(n, 1.0 / static_cast<double>(n));
    if (l.max_concurrency > 0) {
      share.max_concurrency = Apportion(l.max_concurrency, equal)[me];
    }
    if (l.max_queued > 0) {
      share.max_queued = Apportion(l.max_queued, equal)[me];
    }
    out[tenant] = share;
  }
  return out;
}

}  // namespace gpusched::runtime
