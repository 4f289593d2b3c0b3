// gpusched: one binary, subcommands. Flag parsing and wiring only; the work
// lives in the modules.
#include <cstdio>
#include <string>

#include "CLI/CLI.hpp"
#include "main/engine_cmd.h"
#include "main/inventory_cmd.h"
#include "main/profiles_cmd.h"
#include "main/serve_cmd.h"
#include "main/sim_cmd.h"

namespace {

int Run(int argc, char** argv) {
  CLI::App app{"gpusched — a GPU scheduler for inference platforms"};
  app.require_subcommand(1);

  CLI::App* version = app.add_subcommand("version", "Print the version");
  version->callback([] { std::printf("gpusched %s\n", GPUSCHED_VERSION); });
  gpusched::AddEngineCommand(app);
  gpusched::AddInventoryCommand(app);
  gpusched::AddProfilesCommand(app);
  gpusched::AddServeCommand(app);
  gpusched::AddSimCommand(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return Run(argc, argv); }
