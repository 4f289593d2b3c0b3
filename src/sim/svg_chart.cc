#include "sim/svg_chart.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace gpusched::sim {

std::string HtmlEscape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '\'':
        out += "&#39;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string LineChartSvg(const ChartSpec& spec) {
  static const char* kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                  "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                                  "#bcbd22", "#17becf"};
  const double w = 720, h = 440, left = 60, right = 170, top = 20, bottom = 50;
  const double pw = w - left - right, ph = h - top - bottom;
  auto tx = [&](double v) {
    if (spec.log_x) {
      const double lo = std::log10(std::max(spec.x_min, 1e-12));
      const double hi = std::log10(std::max(spec.x_max, spec.x_min * 10));
      return (std::log10(std::max(v, 1e-12)) - lo) / (hi - lo);
    }
    return (v - spec.x_min) / std::max(1e-12, spec.x_max - spec.x_min);
  };
  auto x = [&](double v) { return left + pw * std::clamp(tx(v), 0.0, 1.0); };
  auto y = [&](double v) {
    const double f =
        (v - spec.y_min) / std::max(1e-12, spec.y_max - spec.y_min);
    return top + ph * (1 - std::clamp(f, 0.0, 1.0));
  };
  std::string svg = absl::StrFormat(
      "<svg xmlns='http://www.w3.org/2000/svg' width='%.0f' height='%.0f' "
      "font-family='sans-serif' font-size='12'>",
      w, h);
  for (int i = 0; i <= spec.y_ticks; ++i) {
    const double v =
        spec.y_min + (spec.y_max - spec.y_min) * i / std::max(1, spec.y_ticks);
    absl::StrAppendFormat(&svg,
                          "<line x1='%.1f' x2='%.1f' y1='%.1f' y2='%.1f' "
                          "stroke='#ddd'/><text x='%.1f' y='%.1f' "
                          "text-anchor='end'>%g%s</text>",
                          left, left + pw, y(v), y(v), left - 6, y(v) + 4, v,
                          HtmlEscape(spec.y_tick_suffix));
  }
  std::vector<double> xt;
  if (spec.log_x) {
    for (double v =
             std::pow(10, std::floor(std::log10(std::max(spec.x_min, 1e-12))));
         v <= spec.x_max * 1.0001; v *= 10) {
      if (v >= spec.x_min * 0.9999) xt.push_back(v);
    }
  } else {
    for (int i = 0; i <= spec.x_ticks; ++i) {
      xt.push_back(spec.x_min +
                   (spec.x_max - spec.x_min) * i / std::max(1, spec.x_ticks));
    }
  }
  for (double v : xt) {
    absl::StrAppendFormat(&svg,
                          "<line x1='%.1f' x2='%.1f' y1='%.1f' y2='%.1f' "
                          "stroke='#eee'/><text x='%.1f' y='%.1f' "
                          "text-anchor='middle'>%g%s</text>",
                          x(v), x(v), top, top + ph, x(v), top + ph + 16, v,
                          HtmlEscape(spec.x_tick_suffix));
  }
  absl::StrAppendFormat(
      &svg,
      "<text x='%.1f' y='%.1f' text-anchor='middle'>%s</text><text "
      "transform='translate(14,%.1f) rotate(-90)' "
      "text-anchor='middle'>%s</text>",
      left + pw / 2, h - 8, HtmlEscape(spec.x_label), top + ph / 2,
      HtmlEscape(spec.y_label));
  for (size_t s = 0; s < spec.series.size(); ++s) {
    const ChartSeries& series = spec.series[s];
    const std::string color =
        series.color.empty() ? kColors[s % 10] : series.color;
    std::string points;
    for (const auto& [px, py] : series.points) {
      absl::StrAppendFormat(&points, "%.1f,%.1f ", x(px), y(py));
    }
    absl::StrAppendFormat(
        &svg,
        "<polyline fill='none' stroke='%s' stroke-width='1.6'%s "
        "points='%s'/><rect x='%.1f' y='%.1f' width='12' height='3' "
        "fill='%s'/><text x='%.1f' y='%.1f'>%s</text>",
        color, series.dashed ? " stroke-dasharray='4 4'" : "", points,
        left + pw + 12, top + 14 + 18.0 * s, color, left + pw + 30,
        top + 18 + 18.0 * s, HtmlEscape(series.name));
  }
  svg += "</svg>";
  return svg;
}

}  // namespace gpusched::sim
