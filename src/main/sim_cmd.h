// `gpusched sim ...` subcommands.
#ifndef GPUSCHED_MAIN_SIM_CMD_H_
#define GPUSCHED_MAIN_SIM_CMD_H_

#include "CLI/CLI.hpp"

namespace gpusched {

void AddSimCommand(CLI::App& app);

}  // namespace gpusched

#endif  // GPUSCHED_MAIN_SIM_CMD_H_
