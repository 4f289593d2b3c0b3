// gpusched: one binary, subcommands. Flag parsing and wiring only; the work
// lives in the modules.
#include <cstdio>
#include <string>

#include "CLI/CLI.hpp"
#include "cli/ctl.h"
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
  gpusched::cli::AddCtlCommands(app);
  gpusched::AddEngineCommand(app);
  gpusched::AddInventoryCommand(app);
  gpusched::AddProfilesCommand(app);
  gpusched::AddServeCommand(app);
  gpusched::AddSimCommand(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::RuntimeError& e) {
    return e.get_exit_code();  // a command's own status; it said why
  } catch (const CLI::ParseError& e) {
    // Bad flags: CLI11 says why, and a near flag is suggested; the status
    // is 2 (docs/control-api.md).
    const int rc = app.exit(e) == 0 ? 0 : 2;
    if (rc != 0) {
      std::fputs(gpusched::cli::FlagSuggestions(app, argc, argv).c_str(),
                 stderr);
    }
    return rc;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return Run(argc, argv); }
