// `gpusched engine`: runs the built-in reference engine as a process.
#ifndef GPUSCHED_MAIN_ENGINE_CMD_H_
#define GPUSCHED_MAIN_ENGINE_CMD_H_

#include "CLI/CLI.hpp"

namespace gpusched {

void AddEngineCommand(CLI::App& app);

}  // namespace gpusched

#endif  // GPUSCHED_MAIN_ENGINE_CMD_H_
