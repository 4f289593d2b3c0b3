#include "main/inventory_source.h"

#include <unistd.h>

#include <cstdint>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "config/inventory_config.h"
#include "inventory/alibaba_nodes.h"
#include "inventory/declared.h"

namespace gpusched {
namespace {

using backends::DiscoveredGpu;
using inventory::NodeSpec;

// This machine as a node, from NVML.
absl::StatusOr<Inventory> Discover() {
  absl::StatusOr<std::vector<DiscoveredGpu>> gpus =
      backends::DiscoverLocalGpus();
  if (!gpus.ok()) return gpus.status();
  backends::LocalNodeOptions opt;
  char host[256] = {};
  opt.name = gethostname(host, sizeof(host) - 1) == 0 && host[0] != '\0'
                 ? host
                 : "localhost";
  opt.cpu_milli = int64_t{std::thread::hardware_concurrency()} * 1000;
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page_size > 0) {
    opt.memory_mib = int64_t{pages} * page_size / (1024 * 1024);
  }
  absl::StatusOr<NodeSpec> node = backends::LocalNodeSpec(*gpus, opt);
  if (!node.ok()) return node.status();
  Inventory inv;
  inv.source = "nvml";
  inv.nodes.push_back(*std::move(node));
  inv.gpus = *std::move(gpus);
  return inv;
}

absl::StatusOr<Inventory> Declared(const std::string& path, bool given) {
  Inventory inv;
  inv.source = "declared";
  inv.config = path;
  if (absl::EndsWith(inv.config, ".csv")) {
    // A node list in the Alibaba trace's format.
    absl::StatusOr<std::vector<NodeSpec>> nodes =
        inventory::ReadAlibabaNodes(inv.config);
    if (!nodes.ok()) return nodes.status();
    inv.nodes = *std::move(nodes);
    return inv;
  }
  absl::StatusOr<config::InventoryConfig> cfg =
      config::LoadInventoryFile(inv.config);
  if (!cfg.ok()) {
    if (!given && absl::IsNotFound(cfg.status())) {
      return absl::NotFoundError(absl::StrCat(
          cfg.status().message(), " (no --config given; pass --config FILE)"));
    }
    return cfg.status();
  }
  absl::StatusOr<std::vector<NodeSpec>> nodes = inventory::DeclaredNodes(*cfg);
  if (!nodes.ok()) return nodes.status();
  inv.nodes = *std::move(nodes);
  return inv;
}

}  // namespace

absl::StatusOr<Inventory> LoadInventory(
    const std::string& source, const std::string& declared, bool declared_given,
    const std::function<void(const std::string&)>& on_fallback) {
  if (source != "declared") {
    absl::StatusOr<Inventory> inv = Discover();
    if (inv.ok() || source == "nvml") return inv;
    if (on_fallback) on_fallback(std::string(inv.status().message()));
  }
  return Declared(declared, declared_given);
}

}  // namespace gpusched
