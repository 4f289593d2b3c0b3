#include "main/inventory_cmd.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "backends/local/nvml.h"
#include "cli/table.h"
#include "config/inventory_config.h"
#include "inventory/alibaba_nodes.h"
#include "inventory/cluster_state.h"
#include "inventory/declared.h"
#include "inventory/gpu_catalog.h"
#include "main/inventory_source.h"
#include "nlohmann/json.hpp"

namespace gpusched {
namespace {

using backends::DiscoveredGpu;
using inventory::NodeSpec;
using Json = nlohmann::ordered_json;

constexpr char kDefaultConfig[] = "examples/inventory.yaml";

struct Flags {
  std::string config;
  std::string source = "auto";
  bool json = false;
};

// GPU indexes per NVLink domain, domains in id order.
std::vector<std::vector<int>> Domains(const std::vector<int>& group) {
  std::vector<std::vector<int>> domains;
  for (size_t i = 0; i < group.size(); ++i) {
    if (group[i] >= static_cast<int>(domains.size())) {
      domains.resize(group[i] + 1);
    }
    domains[group[i]].push_back(static_cast<int>(i));
  }
  domains.erase(std::remove_if(domains.begin(), domains.end(),
                               [](const auto& d) { return d.empty(); }),
                domains.end());
  return domains;
}

// "[0-3] [4-7]", "[0,2]", "none".
std::string FormatDomains(const std::vector<int>& group) {
  if (group.empty()) return "none";
  std::vector<std::string> parts;
  for (const std::vector<int>& d : Domains(group)) {
    const bool contiguous =
        d.back() - d.front() + 1 == static_cast<int>(d.size());
    if (d.size() > 2 && contiguous) {
      parts.push_back(absl::StrCat("[", d.front(), "-", d.back(), "]"));
    } else {
      parts.push_back(absl::StrCat("[", absl::StrJoin(d, ","), "]"));
    }
  }
  return absl::StrJoin(parts, " ");
}

std::string FormatMig(const NodeSpec& n,
                      const std::vector<DiscoveredGpu>& gpus) {
  if (!gpus.empty()) {
    int on = 0;
    size_t instances = 0;
    for (const DiscoveredGpu& g : gpus) {
      on += g.mig_enabled;
      instances += g.mig_instances.size();
    }
    if (on == 0) return "off";
    return absl::StrCat("on ", on, "/", gpus.size(), " (", instances,
                        " instances)");
  }
  return n.mig_slots > 0 ? absl::StrCat(n.mig_slots, " slots") : "-";
}

// "512 GiB" when whole GiB, else "81559 MiB".
std::string FormatMib(int64_t mib) {
  if (mib > 0 && mib % 1024 == 0) return absl::StrCat(mib / 1024, " GiB");
  return absl::StrCat(mib, " MiB");
}

void PrintText(const Inventory& inv) {
  if (inv.source == "declared") {
    std::printf("Declared inventory from %s\n\n", inv.config.c_str());
  } else {
    std::printf("Discovered with NVML\n\n");
  }
  std::vector<std::vector<std::string>> rows = {{"NODE", "MODEL", "GPUS",
                                                 "GPU MEMORY", "MIG", "NVLINK",
                                                 "CPU", "MEMORY", "SOURCE"}};
  for (const NodeSpec& n : inv.nodes) {
    rows.push_back({n.name, n.gpu_model.empty() ? "-" : n.gpu_model,
                    absl::StrCat(n.gpu_count),
                    n.gpu_count > 0 ? FormatMib(n.gpu_memory_mib) : "-",
                    FormatMig(n, inv.gpus), FormatDomains(n.nvlink_group),
                    absl::StrCat(n.cpu_milli / 1000.0), FormatMib(n.memory_mib),
                    n.simulated ? "simulated" : "real"});
  }
  PrintTable(rows);
  if (inv.gpus.empty()) return;
  std::printf("\n");
  rows = {{"GPU", "NAME", "UUID", "MEMORY USED", "UTIL", "MIG", "NVLINK PEERS",
           "HEALTH"}};
  for (const DiscoveredGpu& g : inv.gpus) {
    std::vector<std::string> mig;
    for (const auto& m : g.mig_instances) {
      mig.push_back(m.start >= 0 ? absl::StrCat(m.profile, "@", m.start)
                                 : m.profile);
    }
    rows.push_back(
        {absl::StrCat(g.index), g.name, g.uuid,
         absl::StrCat(g.memory_used_mib, "/", g.memory_total_mib, " MiB"),
         g.utilization_gpu_pct < 0 ? "-"
                                   : absl::StrCat(g.utilization_gpu_pct, "%"),
         g.mig_enabled ? (mig.empty() ? "on" : absl::StrJoin(mig, " ")) : "off",
         g.nvswitch
             ? "nvswitch"
             : (g.nvlink_peers.empty() ? "-"
                                       : absl::StrJoin(g.nvlink_peers, ",")),
         g.healthy ? "ok" : absl::StrJoin(g.health_notes, "; ")});
  }
  PrintTable(rows);
}

Json NodeJson(const NodeSpec& n) {
  Json labels = Json::object();
  for (const auto& [k, v] : n.labels) labels[k] = v;
  Json mig_profiles = Json::array();
  if (const inventory::GpuModelSpec* m =
          inventory::GpuCatalog::Builtin().Find(n.gpu_model);
      m != nullptr && n.mig_slots > 0) {
    for (const inventory::MigProfile& p : m->mig_profiles) {
      mig_profiles.push_back(p.name);
    }
  }
  Json domains = Json::array();
  for (const std::vector<int>& d : Domains(n.nvlink_group))
    domains.push_back(d);
  Json j;
  j["name"] = n.name;
  j["simulated"] = n.simulated;
  j["cpu_milli"] = n.cpu_milli;
  j["memory_mib"] = n.memory_mib;
  j["labels"] = labels;
  j["gpu_model"] = n.gpu_model;
  j["gpu_count"] = n.gpu_count;
  j["gpu_memory_mib"] = n.gpu_memory_mib;
  j["mig_slots"] = n.mig_slots;
  j["mig_profiles"] = mig_profiles;
  j["nvlink_domains"] = domains;
  return j;
}

Json GpuJson(const DiscoveredGpu& g) {
  Json mig = Json::array();
  for (const auto& m : g.mig_instances) {
    mig.push_back({{"index", m.index},
                   {"uuid", m.uuid},
                   {"profile", m.profile},
                   {"profile_id", m.profile_id},
                   {"gpu_instance_id", m.gpu_instance_id},
                   {"start", m.start},
                   {"size", m.size},
                   {"memory_total_mib", m.memory_total_mib},
                   {"memory_used_mib", m.memory_used_mib}});
  }
  Json j;
  j["index"] = g.index;
  j["uuid"] = g.uuid;
  j["name"] = g.name;
  j["model"] = g.model;
  j["pci_bus_id"] = g.pci_bus_id;
  j["memory_total_mib"] = g.memory_total_mib;
  j["memory_used_mib"] = g.memory_used_mib;
  j["utilization_gpu_pct"] = g.utilization_gpu_pct;
  j["utilization_memory_pct"] = g.utilization_memory_pct;
  j["mig_enabled"] = g.mig_enabled;
  j["mig_pending"] = g.mig_pending;
  j["mig_instances"] = mig;
  j["nvlink_active_links"] = g.nvlink_active_links;
  j["nvlink_peers"] = g.nvlink_peers;
  j["nvswitch"] = g.nvswitch;
  j["ecc_uncorrected_volatile"] = g.ecc_uncorrected_volatile;
  j["retired_pages_pending"] = g.retired_pages_pending;
  j["healthy"] = g.healthy;
  j["health_notes"] = g.health_notes;
  return j;
}

void PrintJson(const Inventory& inv) {
  Json j;
  j["source"] = inv.source;
  if (!inv.config.empty()) j["config"] = inv.config;
  j["nodes"] = Json::array();
  for (const NodeSpec& n : inv.nodes) j["nodes"].push_back(NodeJson(n));
  if (inv.source == "nvml") {
    j["gpus"] = Json::array();
    for (const DiscoveredGpu& g : inv.gpus) j["gpus"].push_back(GpuJson(g));
  }
  std::printf("%s\n", j.dump(2).c_str());
}

int Run(const Flags& flags) {
  absl::StatusOr<Inventory> inv = LoadInventory(
      flags.source, flags.config.empty() ? kDefaultConfig : flags.config,
      /*config_given=*/!flags.config.empty(), [](const std::string& why) {
        std::fprintf(stderr, "%s; using the declared inventory\n", why.c_str());
      });
  if (!inv.ok()) {
    std::fprintf(stderr, "error: %s\n",
                 std::string(inv.status().message()).c_str());
    return 1;
  }
  if (flags.json) {
    PrintJson(*inv);
  } else {
    PrintText(*inv);
  }
  return 0;
}

}  // namespace

void AddInventoryCommand(CLI::App& app) {
  auto flags = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand(
      "inventory",
      "Show the nodes and GPUs gpusched schedules onto: this machine's GPUs "
      "(NVML), else a declared inventory");
  cmd->add_option("--config", flags->config,
                  "Inventory manifest for the declared inventory, or a node "
                  "list in the Alibaba trace's CSV format (default: "
                  "examples/inventory.yaml)");
  cmd->add_option("--source", flags->source,
                  "auto: NVML, else the declared inventory; nvml: NVML only; "
                  "declared: the manifest only")
      ->check(CLI::IsMember({"auto", "nvml", "declared"}))
      ->capture_default_str();
  cmd->add_flag("--json", flags->json, "Print JSON instead of a table");
  cmd->callback([flags] {
    const int rc = Run(*flags);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace gpusched
