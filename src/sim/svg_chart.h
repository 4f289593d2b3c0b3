// A small self-contained SVG line chart for the simulators' HTML reports
// (no scripts, no network). Thread-compatible.
#ifndef GPUSCHED_SIM_SVG_CHART_H_
#define GPUSCHED_SIM_SVG_CHART_H_

#include <string>
#include <utility>
#include <vector>

namespace gpusched::sim {

struct ChartSeries {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y), x ascending
  bool dashed = false;
  std::string color;  // "" = from the palette
};

struct ChartSpec {
  std::string x_label, y_label;
  double x_min = 0, x_max = 1, y_min = 0, y_max = 1;
  int x_ticks = 10, y_ticks = 5;
  std::string x_tick_suffix, y_tick_suffix;  // e.g. "%"
  bool log_x = false;                        // ticks at powers of ten
  std::vector<ChartSeries> series;
};

std::string LineChartSvg(const ChartSpec& spec);
// Escapes &, <, >, ' and " for HTML text and attributes.
std::string HtmlEscape(const std::string& s);

}  // namespace gpusched::sim

#endif  // GPUSCHED_SIM_SVG_CHART_H_
