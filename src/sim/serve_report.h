// Report writers for `gpusched sim serve`: the JSON record (overall, per
// deployment, tenant and priority class; fairness; load over time) and a
// self-contained HTML page (latency CDFs, load over time; inline SVG).
#ifndef GPUSCHED_SIM_SERVE_REPORT_H_
#define GPUSCHED_SIM_SERVE_REPORT_H_

#include <string>

#include "nlohmann/json.hpp"
#include "sim/serve_sim.h"

namespace gpusched::sim {

// `with_wall_time`: include wall_seconds (the only field that differs
// between two runs of the same config).
nlohmann::json ServeReportJson(const ServeSimRun& run, bool with_wall_time);
std::string ServeReportHtml(const ServeSimRun& run,
                            const nlohmann::json& report);

// One CSV row per request: id, tenant, deployment, class, arrival_s,
// dispatched_s, first_token_s, finished_s (empty when not reached),
// input_tokens, output_tokens, cached_tokens, outcome (completed or the
// rejection reason).
std::string ServeRequestsCsv(const ServeSimRun& run);

// One CSV row per capacity event: t_s, kind, deployment, message.
std::string ServeEventsCsv(const ServeSimRun& run);

// Nearest-rank percentile of `v` (sorted ascending); 0 when empty.
double Percentile(const std::vector<double>& sorted, double p);

}  // namespace gpusched::sim

#endif  // GPUSCHED_SIM_SERVE_REPORT_H_
