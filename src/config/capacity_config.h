// Capacity on demand in the configuration (control/capacity.h,
// docs/capacity.md): node pools and when to add and give back nodes. The
// same fields in `gpusched serve` (capacity:, where pools come from the
// cluster manager and `capacity.pools` overrides their price, delay and
// bounds by name) and `gpusched sim serve` (cluster.pools and capacity:).
// Thread-compatible.
#ifndef GPUSCHED_CONFIG_CAPACITY_CONFIG_H_
#define GPUSCHED_CONFIG_CAPACITY_CONFIG_H_

#include <string>
#include <vector>

#include "config/yaml_reader.h"
#include "yaml-cpp/yaml.h"

namespace gpusched::config {

// A pool of nodes that can be added (cluster.pools).
struct PoolSpec {
  std::string name;
  std::string gpu;
  int gpus_per_node = 8;
  double price_per_node_hour = -1;  // -1: from the price table
  bool spot = false;
  double provisioning_delay_s = 120;
  int min_nodes = 0;
  int max_nodes = 1;
  double preemptions_per_node_hour = 0;
  std::string preemption_trace;
  int line = 0;
};

// When to add and give back pool nodes (capacity:).
struct CapacitySpec {
  std::string policy = "gpusched";  // gpusched | reactive
  double scale_up_delay_s = 30;
  double scale_down_delay_s = 600;
  double consolidate_below = 0.5;
  int base_ondemand_fallback_replicas = 0;
  bool dynamic_ondemand_fallback = false;
  double spot_recovery_delay_s = 600;
  double failed_pool_backoff_s = 600;
  double interval_s = 5;
  std::string prices;  // "" = the shipped table
  // Live only: overrides of the cluster manager's pools, by name (price,
  // delay, bounds; gpu names the latency models' GPU).
  std::vector<PoolSpec> pools;
};

// Reads a pool at `n` (`where` names it: "cluster.pools[2]"); false when
// it lacks a name, or a GPU with `require_gpu` (the sim's pools need one;
// live pools take it from the cluster manager).
// Relative paths resolve against `base_dir` ("" = as given).
bool ParsePoolSpec(YamlReader& r, const YAML::Node& n, const std::string& where,
                   bool require_gpu, const std::string& base_dir, PoolSpec* p);
// Reads the capacity: map at `n` (pools: only with `with_pools`, live).
void ParseCapacitySpec(YamlReader& r, const YAML::Node& n, bool with_pools,
                       const std::string& base_dir, CapacitySpec* k);

}  // namespace gpusched::config

#endif  // GPUSCHED_CONFIG_CAPACITY_CONFIG_H_
