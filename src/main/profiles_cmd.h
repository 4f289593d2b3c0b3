// `gpusched profiles ...`: the engine latency models.
//
//   gpusched profiles fit --profiles DIR [--out FILE] [--keep-shadowed]
//     fits LatencyModels to the measured profiles in DIR (laid out as
//     ../shared/data/profiles) and writes the CSV that ships as
//     data/latency_models.csv (stdout without --out); what was read, skipped
//     and assumed goes to stderr.
//   gpusched profiles list [--models FILE | --profiles DIR [--keep-shadowed]]
//                          [--json]
//     prints the built-in table (or FILE, or a fit of DIR made now, with the
//     losing sources too for cross-checks): predicted prefill of 1k tokens,
//     decode of 32 sequences holding 32k tokens, KV capacity and fit quality.
//
// Flag parsing and output only; the work lives in serving/latency_fit.h and
// serving/latency_model.h. Errors print "gpusched profiles ...: error" on
// stderr and exit 1.
#ifndef GPUSCHED_MAIN_PROFILES_CMD_H_
#define GPUSCHED_MAIN_PROFILES_CMD_H_

namespace CLI {
class App;
}  // namespace CLI

namespace gpusched {

void AddProfilesCommand(CLI::App& app);

}  // namespace gpusched

#endif  // GPUSCHED_MAIN_PROFILES_CMD_H_
