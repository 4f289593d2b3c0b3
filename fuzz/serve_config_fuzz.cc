// The YAML configs gpusched reads at start: the serve config (first byte
// even), the inventory and the serving simulator's config.
#include <cstdint>

#include "config/inventory_config.h"
#include "config/serve_config.h"
#include "config/serve_sim_config.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const absl::string_view text = gpusched::fuzz::AsText(data + 1, size - 1);
  switch (data[0] % 4) {
    case 0:
    case 1:
      (void)gpusched::config::ParseServeYaml(text, "serve.yaml");
      break;
    case 2:
      (void)gpusched::config::ParseInventoryYaml(text, "inventory.yaml");
      break;
    default:
      (void)gpusched::config::ParseServeSimYaml(text, "sim.yaml", "");
      break;
  }
  return 0;
}
