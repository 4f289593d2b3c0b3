// Line charts for the simulators' HTML reports drawn with uPlot, the
// dashboard's chart library, inlined from the binary's embedded assets
// (web/assets.h) so a report is one self-contained file that needs no
// network. Takes the same ChartSpec as the SVG charts (sim/svg_chart.h).
// Thread-compatible.
#ifndef GPUSCHED_SIM_UPLOT_CHART_H_
#define GPUSCHED_SIM_UPLOT_CHART_H_

#include <string>

#include "sim/svg_chart.h"

namespace gpusched::sim {

// For the report's <head>: uPlot's script and stylesheet and the
// dashboard's stylesheet (web/style.css), inline.
std::string UPlotHead();

// A card holding the chart `title` over `spec`, drawn by an inline script;
// `id` must be unique in the page. Series with different x values are
// drawn on the union of their x (gaps spanned).
std::string LineChartUPlot(const ChartSpec& spec, const std::string& id,
                           const std::string& title);

}  // namespace gpusched::sim

#endif  // GPUSCHED_SIM_UPLOT_CHART_H_
