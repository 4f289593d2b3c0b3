#include "config/capacity_config.h"

#include <filesystem>
#include <limits>

#include "absl/strings/str_cat.h"

namespace gpusched::config {
namespace {

constexpr double kBig = 1e12;

std::string Resolve(const std::string& path, const std::string& base_dir) {
  if (path.empty() || base_dir.empty() || path[0] == '/') return path;
  return (std::filesystem::path(base_dir) / path).string();
}

}  // namespace

bool ParsePoolSpec(YamlReader& r, const YAML::Node& n, const std::string& where,
                   bool require_gpu, const std::string& base_dir, PoolSpec* p) {
  if (!n.IsMap()) {
    r.Error(n, absl::StrCat(where, " must be a map"));
    return false;
  }
  r.CheckKeys(n, where,
              {"name", "gpu", "gpus_per_node", "price_per_node_hour", "spot",
               "provisioning_delay_s", "min_nodes", "max_nodes",
               "preemptions_per_node_hour", "preemption_trace"});
  p->line = r.Line(n);
  r.OptString(n, "name", &p->name);
  r.OptString(n, "gpu", &p->gpu);
  if (p->name.empty()) r.Error(n, absl::StrCat(where, ".name: required"));
  if (require_gpu && p->gpu.empty()) {
    r.Error(n, absl::StrCat(where, ".gpu: required (a latency-model GPU)"));
  }
  r.OptInt(n, "gpus_per_node", 1, 16, &p->gpus_per_node);
  if (n["price_per_node_hour"]) {
    r.OptDouble(n, "price_per_node_hour", 0, kBig, &p->price_per_node_hour);
  }
  r.OptBool(n, "spot", &p->spot);
  r.OptDouble(n, "provisioning_delay_s", 0, kBig, &p->provisioning_delay_s);
  r.OptInt(n, "max_nodes", 1, 4096, &p->max_nodes);
  r.OptInt(n, "min_nodes", 0, 4096, &p->min_nodes);
  if (p->min_nodes > p->max_nodes) {
    r.Error(n["min_nodes"],
            absl::StrCat(where, ".min_nodes: at most max_nodes (", p->max_nodes,
                         "), not ", p->min_nodes));
  }
  r.OptDouble(n, "preemptions_per_node_hour", 0, 3600,
              &p->preemptions_per_node_hour);
  r.OptString(n, "preemption_trace", &p->preemption_trace);
  p->preemption_trace = Resolve(p->preemption_trace, base_dir);
  if (!p->spot &&
      (p->preemptions_per_node_hour > 0 || !p->preemption_trace.empty())) {
    r.Error(n, absl::StrCat(where,
                            ": preemptions apply to spot pools only (spot: "
                            "true)"));
  }
  return !p->name.empty() && (!require_gpu || !p->gpu.empty());
}

void ParseCapacitySpec(YamlReader& r, const YAML::Node& c, bool with_pools,
                       const std::string& base_dir, CapacitySpec* k) {
  if (!c.IsMap()) {
    r.Error(c, "capacity must be a map");
    return;
  }
  std::vector<absl::string_view> keys = {"policy",
                                         "scale_up_delay_s",
                                         "scale_down_delay_s",
                                         "consolidate_below",
                                         "base_ondemand_fallback_replicas",
                                         "dynamic_ondemand_fallback",
                                         "spot_recovery_delay_s",
                                         "failed_pool_backoff_s",
                                         "interval_s",
                                         "prices"};
  if (with_pools) keys.push_back("pools");
  r.CheckKeys(c, "capacity", keys);
  r.OptString(c, "policy", &k->policy);
  if (k->policy != "gpusched" && k->policy != "reactive") {
    r.Error(c["policy"],
            absl::StrCat("capacity.policy: gpusched or reactive, not '",
                         k->policy, "'"));
  }
  r.OptDouble(c, "scale_up_delay_s", 0, kBig, &k->scale_up_delay_s);
  r.OptDouble(c, "scale_down_delay_s", 0, kBig, &k->scale_down_delay_s);
  r.OptDouble(c, "consolidate_below", 0, 1, &k->consolidate_below);
  r.OptInt(c, "base_ondemand_fallback_replicas", 0, 1000,
           &k->base_ondemand_fallback_replicas);
  r.OptBool(c, "dynamic_ondemand_fallback", &k->dynamic_ondemand_fallback);
  r.OptDouble(c, "spot_recovery_delay_s", 0, kBig, &k->spot_recovery_delay_s);
  r.OptDouble(c, "failed_pool_backoff_s", 0, kBig, &k->failed_pool_backoff_s);
  r.OptDouble(c, "interval_s", 0.01, 3600, &k->interval_s);
  r.OptString(c, "prices", &k->prices);
  k->prices = Resolve(k->prices, base_dir);
  if (const YAML::Node ps = c["pools"]; with_pools && ps) {
    if (!ps.IsSequence()) {
      r.Error(ps, "capacity.pools must be a list");
      return;
    }
    if (ps.size() > 64) r.Error(ps, "capacity.pools: at most 64 pools");
    for (size_t i = 0; i < ps.size() && i < 64; ++i) {
      PoolSpec p;
      p.max_nodes = 4096;  // live: the manager's count unless set
      if (ParsePoolSpec(r, ps[i], absl::StrCat("capacity.pools[", i, "]"),
                        /*require_gpu=*/false, base_dir, &p)) {
        k->pools.push_back(std::move(p));
      }
    }
  }
}

}  // namespace gpusched::config
