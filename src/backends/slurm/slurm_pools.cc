#include "backends/slurm/slurm_pools.h"

#include <algorithm>
#include <map>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace gpusched::backends {
namespace {

constexpr absl::string_view kPoolFeature = "pool=";

bool HasFeature(const SlurmNode& n, absl::string_view f) {
  return std::find(n.features.begin(), n.features.end(), f) != n.features.end();
}

// The value of the node's `pool=` feature; nullopt when it has none.
std::optional<std::string> PoolFeature(const SlurmNode& n) {
  for (const std::string& f : n.features) {
    absl::string_view v = f;
    if (absl::ConsumePrefix(&v, kPoolFeature)) return std::string(v);
  }
  return std::nullopt;
}

bool ValidPoolName(absl::string_view s) {
  if (s.empty() || s.size() > kMaxSlurmPoolName) return false;
  for (char c : s) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' &&
        c != '_' && c != '-') {
      return false;
    }
  }
  return true;
}

}  // namespace

bool SlurmPoolNode(const SlurmNode& node) {
  for (absl::string_view w : absl::StrSplit(node.state, '+')) {
    if (w == "CLOUD") return true;
  }
  return PoolFeature(node).has_value();
}

SlurmPoolNodeState SlurmPoolState(absl::string_view state,
                                  absl::string_view reason) {
  absl::flat_hash_set<absl::string_view> flags;
  absl::string_view base;
  for (absl::string_view w : absl::StrSplit(state, '+')) {
    // sinfo's "*" (not responding) may end the base word.
    absl::ConsumeSuffix(&w, "*");
    if (base.empty()) {
      base = w;
    } else {
      flags.insert(w);
    }
  }
  SlurmPoolNodeState out;
  if (!reason.empty() && reason != "(null)") out.reason = std::string(reason);
  const bool powering_up =
      flags.contains("POWER_UP") || flags.contains("POWERING_UP");
  if ((base == "DOWN" || base == "FAIL" || flags.contains("FAIL")) &&
      !powering_up) {
    out.state = PoolNodeState::kFailed;
    if (out.reason.empty()) out.reason = absl::StrCat("Slurm says ", state);
  } else if (flags.contains("POWER_DOWN") || flags.contains("POWERING_DOWN")) {
    out.state = PoolNodeState::kPoweringDown;
  } else if (powering_up) {
    out.state = PoolNodeState::kPoweringUp;
  } else if (flags.contains("POWERED_DOWN")) {
    out.state = PoolNodeState::kPoweredDown;
  } else {
    out.state = PoolNodeState::kUp;
  }
  return out;
}

absl::StatusOr<std::vector<PoolReport>> SlurmPools(
    const std::vector<SlurmNode>& nodes) {
  // Partitions that hold pool nodes only.
  absl::flat_hash_map<std::string, bool> pool_only;
  for (const SlurmNode& n : nodes) {
    const bool pool = SlurmPoolNode(n);
    for (const std::string& p : n.partitions) {
      auto [it, added] = pool_only.emplace(p, pool);
      if (!added) it->second = it->second && pool;
    }
  }
  std::map<std::string, PoolReport> pools;
  absl::flat_hash_map<std::string, std::string> first_node;
  for (const SlurmNode& n : nodes) {
    if (!SlurmPoolNode(n)) continue;
    const std::optional<std::string> feature = PoolFeature(n);
    std::string name = feature.value_or("");
    if (!feature.has_value()) {
      for (const std::string& p : n.partitions) {
        if (pool_only[p]) {
          name = p;
          break;
        }
      }
    }
    if (!feature.has_value() && name.empty() && !n.partitions.empty()) {
      name = n.partitions[0];
    }
    if (!ValidPoolName(name)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Slurm node '", n.name, "': pool name '", name.substr(0, 80),
          "' (its pool= feature or partition) is not 1-", kMaxSlurmPoolName,
          " letters, digits and ._-"));
    }
    const bool spot = HasFeature(n, "spot");
    auto it = pools.find(name);
    if (it == pools.end()) {
      if (pools.size() >= static_cast<size_t>(kMaxSlurmPools)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "more than ", kMaxSlurmPools, " Slurm node pools (the bound)"));
      }
      PoolReport p;
      p.pool = name;
      p.gpu_model = n.gpu_type;
      p.gpus_per_node = n.gpus;
      p.cpu_milli = n.cpus * 1000;
      p.memory_mib = n.memory_mib;
      p.spot = spot;
      it = pools.emplace(name, std::move(p)).first;
      first_node[name] = n.name;
    } else {
      const PoolReport& p = it->second;
      std::string differs;
      if (p.gpu_model != n.gpu_type || p.gpus_per_node != n.gpus) {
        differs =
            absl::StrCat("GPUs gpu:", n.gpu_type, ":", n.gpus,
                         " against gpu:", p.gpu_model, ":", p.gpus_per_node);
      } else if (p.cpu_milli != n.cpus * 1000 || p.memory_mib != n.memory_mib) {
        differs =
            absl::StrCat(n.cpus, " CPUs and ", n.memory_mib, " MiB against ",
                         p.cpu_milli / 1000, " and ", p.memory_mib);
      } else if (p.spot != spot) {
        differs = spot ? "a spot feature that" : "no spot feature, which";
        absl::StrAppend(&differs, " node '", first_node[name], "' has",
                        spot ? " not" : "");
      }
      if (!differs.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("Slurm pool '", name, "': node '", n.name, "' has ",
                         differs, " (node '", first_node[name],
                         "'); the nodes of a pool must be alike"));
      }
    }
    it->second.nodes.push_back(n.name);
    it->second.max_nodes = static_cast<int>(it->second.nodes.size());
  }
  std::vector<PoolReport> out;
  out.reserve(pools.size());
  for (auto& [name, p] : pools) out.push_back(std::move(p));
  return out;
}

}  // namespace gpusched::backends
