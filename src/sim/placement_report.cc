#include "sim/placement_report.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace gpusched::sim {

using nlohmann::json;

namespace {

json KeyedPct(const std::map<int, double>& m) {
  json j = json::object();
  for (const auto& [k, v] : m) j[std::to_string(k)] = v;
  return j;
}

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
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

// Mean allocated % per arrived key over a policy's seeds.
std::map<int, double> MeanCurve(const PlacementExperiment& exp,
                                const std::string& policy) {
  std::map<int, std::pair<double, int>> acc;
  for (const PlacementRun& r : exp.results) {
    if (r.policy != policy) continue;
    for (const auto& [k, v] : r.allocated_pct) {
      acc[k].first += v;
      ++acc[k].second;
    }
  }
  std::map<int, double> out;
  for (const auto& [k, sc] : acc) out[k] = sc.first / sc.second;
  return out;
}

}  // namespace

json PlacementReportJson(const PlacementExperiment& exp,
                         const ReportInputs& inputs) {
  json j;
  j["nodes"] = inputs.nodes_path;
  j["pods"] = inputs.pods_path;
  j["nodes_total"] = exp.nodes_total;
  j["gpus_total"] = exp.gpus_total;
  j["inflate"] = exp.inflate;
  j["target_workload"] = exp.online_workload ? "online" : "trace";
  j["wall_seconds"] = exp.wall_seconds;
  json results = json::array();
  for (const PlacementRun& r : exp.results) {
    json jr;
    jr["policy"] = r.policy;
    jr["seed"] = r.seed;
    jr["pods_total"] = r.pods_total;
    jr["pods_failed"] = r.pods_failed;
    jr["failed_by_reason"] = r.failed_by_reason;
    jr["unallocated_pct"] = KeyedPct(r.unallocated_pct);
    jr["allocated_pct_by_arrived_pct"] = KeyedPct(r.allocated_pct);
    jr["wall_seconds"] = r.wall_seconds;
    results.push_back(std::move(jr));
  }
  j["results"] = std::move(results);
  json summary = json::array();
  for (const PlacementSummary& s : exp.summary) {
    json js;
    js["policy"] = s.policy;
    for (const auto& [k, ms] : s.unallocated_pct) {
      js[absl::StrCat("unallocated_pct_", k)] = {{"mean", ms.first},
                                                 {"sd", ms.second}};
    }
    summary.push_back(std::move(js));
  }
  j["summary"] = std::move(summary);
  return j;
}

std::string PlacementReportHtml(const PlacementExperiment& exp,
                                const ReportInputs& inputs) {
  static const char* kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                  "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                                  "#bcbd22", "#17becf"};
  const double w = 720, h = 440, left = 60, right = 170, top = 20, bottom = 50;
  const double pw = w - left - right, ph = h - top - bottom;
  int max_key = 100;
  for (const PlacementRun& r : exp.results) {
    if (!r.allocated_pct.empty()) {
      max_key = std::max(max_key, r.allocated_pct.rbegin()->first);
    }
  }
  auto x = [&](double k) { return left + pw * k / max_key; };
  auto y = [&](double pct) { return top + ph * (1 - pct / 100.0); };

  std::string svg = absl::StrFormat(
      "<svg xmlns='http://www.w3.org/2000/svg' width='%.0f' height='%.0f' "
      "font-family='sans-serif' font-size='12'>",
      w, h);
  for (int t = 0; t <= 100; t += 20) {
    absl::StrAppendFormat(&svg,
                          "<line x1='%.1f' x2='%.1f' y1='%.1f' y2='%.1f' "
                          "stroke='#ddd'/><text x='%.1f' y='%.1f' "
                          "text-anchor='end'>%d%%</text>",
                          left, left + pw, y(t), y(t), left - 6, y(t) + 4, t);
  }
  for (int t = 0; t <= max_key; t += 10) {
    absl::StrAppendFormat(&svg,
                          "<line x1='%.1f' x2='%.1f' y1='%.1f' y2='%.1f' "
                          "stroke='#eee'/><text x='%.1f' y='%.1f' "
                          "text-anchor='middle'>%d%%</text>",
                          x(t), x(t), top, top + ph, x(t), top + ph + 16, t);
  }
  absl::StrAppendFormat(
      &svg,
      "<text x='%.1f' y='%.1f' text-anchor='middle'>GPU requested (arrived), "
      "%% of capacity</text><text transform='translate(14,%.1f) "
      "rotate(-90)' text-anchor='middle'>GPU allocated, %% of "
      "capacity</text>",
      left + pw / 2, h - 8, top + ph / 2);
  // The ideal: everything that arrives is allocated.
  absl::StrAppendFormat(&svg,
                        "<polyline fill='none' stroke='#999' "
                        "stroke-dasharray='4 4' points='%.1f,%.1f %.1f,%.1f "
                        "%.1f,%.1f'/>",
                        x(0), y(0), x(100), y(100), x(max_key), y(100));
  for (size_t p = 0; p < exp.summary.size(); ++p) {
    const std::string& policy = exp.summary[p].policy;
    const char* color = kColors[p % 10];
    std::string points;
    for (const auto& [k, v] : MeanCurve(exp, policy)) {
      absl::StrAppendFormat(&points, "%.1f,%.1f ", x(k), y(v));
    }
    absl::StrAppendFormat(&svg,
                          "<polyline fill='none' stroke='%s' "
                          "stroke-width='1.6' points='%s'/>",
                          color, points);
    absl::StrAppendFormat(&svg,
                          "<rect x='%.1f' y='%.1f' width='12' height='3' "
                          "fill='%s'/><text x='%.1f' y='%.1f'>%s</text>",
                          left + pw + 12, top + 14 + 18.0 * p, color,
                          left + pw + 30, top + 18 + 18.0 * p, Escape(policy));
  }
  svg += "</svg>";

  std::string rows;
  for (const PlacementSummary& s : exp.summary) {
    auto cell = [&](int k) -> std::string {
      auto it = s.unallocated_pct.find(k);
      if (it == s.unallocated_pct.end()) return "<td>-</td>";
      return absl::StrFormat("<td>%.2f &plusmn; %.2f</td>", it->second.first,
                             it->second.second);
    };
    int runs = 0, failed = 0;
    for (const PlacementRun& r : exp.results) {
      if (r.policy == s.policy) {
        ++runs;
        failed += r.pods_failed;
      }
    }
    absl::StrAppendFormat(&rows, "<tr><td>%s</td>%s%s<td>%.1f</td></tr>",
                          Escape(s.policy), cell(100), cell(130),
                          runs ? static_cast<double>(failed) / runs : 0.0);
  }
  return absl::StrCat(
      "<!doctype html><html><head><meta charset='utf-8'><title>gpusched "
      "placement experiment</title><style>body{font-family:sans-serif;"
      "margin:2em;color:#222}table{border-collapse:collapse}td,th{border:1px "
      "solid #ccc;padding:4px 10px;text-align:right}td:first-child{text-"
      "align:left}</style></head><body><h1>Placement experiment</h1><p>",
      Escape(inputs.nodes_path), " &middot; ", Escape(inputs.pods_path),
      " &middot; ", exp.nodes_total, " nodes, ", exp.gpus_total,
      " GPUs, inflated to ", exp.inflate, "x capacity, ", exp.results.size(),
      " runs in ", absl::StrFormat("%.1f", exp.wall_seconds),
      " s</p><h2>Unallocated GPU % (lower is better), mean &plusmn; sd over "
      "seeds</h2><table><tr><th>policy</th><th>at arrived 100%</th><th>at "
      "arrived 130%</th><th>failed pods / run</th></tr>",
      rows, "</table><h2>Allocated vs arrived GPU (mean over seeds)</h2>", svg,
      "</body></html>\n");
}

}  // namespace gpusched::sim
