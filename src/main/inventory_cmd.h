// `gpusched inventory`: shows the nodes and GPUs gpusched would schedule
// onto. It asks NVML first (this machine's GPUs); when NVML is not there it
// says so in one line on stderr and shows the declared inventory instead
// (--config FILE, default examples/inventory.yaml). Flag parsing and output
// only; the work lives in inventory/ and config/.
#ifndef GPUSCHED_MAIN_INVENTORY_CMD_H_
#define GPUSCHED_MAIN_INVENTORY_CMD_H_

namespace CLI {
class App;
}  // namespace CLI

namespace gpusched {

// Registers the `inventory` subcommand on `app`. A failure (bad file, NVML
// required but missing) prints "error: ..." on stderr and makes the program
// exit with status 1 (through CLI::RuntimeError, CLI11's exit-code path).
void AddInventoryCommand(CLI::App& app);

}  // namespace gpusched

#endif  // GPUSCHED_MAIN_INVENTORY_CMD_H_
