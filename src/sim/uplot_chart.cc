#include "sim/uplot_chart.h"

#include <algorithm>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"
#include "web/assets.h"

namespace gpusched::sim {

namespace {

using nlohmann::json;

// The dashboard's palette (web/app.js).
constexpr const char* kColors[] = {"#2f6fde", "#e8743b", "#19a979", "#945ecf",
                                   "#ed4a7b", "#13a4b4", "#bf8b00", "#6c8893",
                                   "#d6502f", "#4e7d2b", "#a05195", "#3b5bdb"};

absl::string_view AssetText(std::string_view name) {
  const web::Asset* a = web::FindAsset(name);
  return a == nullptr ? absl::string_view()
                      : absl::string_view(a->data.data(), a->data.size());
}

// Text safe inside <script>: no "</" can end the element early.
std::string ScriptSafe(absl::string_view s) {
  return absl::StrReplaceAll(s, {{"</", "<\\/"}});
}

}  // namespace

std::string UPlotHead() {
  return absl::StrCat("<style>", AssetText("uPlot.min.css"), "\n",
                      AssetText("style.css"), "</style><script>",
                      ScriptSafe(AssetText("uPlot.iife.min.js")), "</script>");
}

std::string LineChartUPlot(const ChartSpec& spec, const std::string& id,
                           const std::string& title) {
  // One x axis for all series: the union of their x values.
  std::vector<double> xs;
  for (const ChartSeries& s : spec.series) {
    for (const auto& [x, y] : s.points) xs.push_back(x);
  }
  std::sort(xs.begin(), xs.end());
  xs.erase(std::unique(xs.begin(), xs.end()), xs.end());
  json data = json::array({xs});
  json series = json::array({json::object()});
  for (size_t i = 0; i < spec.series.size(); ++i) {
    const ChartSeries& s = spec.series[i];
    std::map<double, double> at;  // the last y at each x
    for (const auto& [x, y] : s.points) at[x] = y;
    json ys = json::array();
    for (double x : xs) {
      auto it = at.find(x);
      ys.push_back(it == at.end() ? json(nullptr) : json(it->second));
    }
    data.push_back(std::move(ys));
    json o = {
        {"label", s.name},
        {"stroke", s.color.empty() ? kColors[i % std::size(kColors)] : s.color},
        {"width", 2},
        {"spanGaps", true}};
    if (s.dashed) o["dash"] = {6, 4};
    series.push_back(std::move(o));
  }
  const json opts = {
      {"width", 900},
      {"height", 380},
      {"series", series},
      {"scales",
       {{"x",
         {{"time", false},
          {"distr", spec.log_x ? 3 : 1},
          {"range", {spec.x_min, spec.x_max}}}},
        {"y", {{"range", {spec.y_min, spec.y_max}}}}}},
      {"axes",
       {{{"label", spec.x_label}, {"stroke", "#6b7685"}},
        {{"label", spec.y_label}, {"stroke", "#6b7685"}, {"size", 60}}}},
  };
  return absl::StrCat(
      "<section class='card report-chart'><div class='card-head'><h2>",
      HtmlEscape(title), "</h2></div><div class='chart' id='", HtmlEscape(id),
      "'></div><script>new uPlot(",
      ScriptSafe(opts.dump(-1, ' ', false, json::error_handler_t::replace)),
      ", ", ScriptSafe(data.dump()), ", document.getElementById('",
      HtmlEscape(id), "'));</script></section>");
}

}  // namespace gpusched::sim
