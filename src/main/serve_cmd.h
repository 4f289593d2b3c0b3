// `gpusched serve`: the platform from one config file.
#ifndef GPUSCHED_MAIN_SERVE_CMD_H_
#define GPUSCHED_MAIN_SERVE_CMD_H_

#include "CLI/CLI.hpp"

namespace gpusched {

void AddServeCommand(CLI::App& app);

}  // namespace gpusched

#endif  // GPUSCHED_MAIN_SERVE_CMD_H_
