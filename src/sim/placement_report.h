// Report writers for the placement experiment: JSON (the figures) and a
// self-contained HTML page (inline SVG, no network).
#ifndef GPUSCHED_SIM_PLACEMENT_REPORT_H_
#define GPUSCHED_SIM_PLACEMENT_REPORT_H_

#include <string>

#include "nlohmann/json.hpp"
#include "sim/placement_sim.h"

namespace gpusched::sim {

struct ReportInputs {
  std::string nodes_path;
  std::string pods_path;
};

nlohmann::json PlacementReportJson(const PlacementExperiment& exp,
                                   const ReportInputs& inputs);
std::string PlacementReportHtml(const PlacementExperiment& exp,
                                const ReportInputs& inputs);

}  // namespace gpusched::sim

#endif  // GPUSCHED_SIM_PLACEMENT_REPORT_H_
