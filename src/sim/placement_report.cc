#include "sim/placement_report.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "sim/svg_chart.h"

namespace gpusched::sim {

using nlohmann::json;

namespace {

json KeyedPct(const std::map<int, double>& m) {
  json j = json::object();
  for (const auto& [k, v] : m) j[std::to_string(k)] = v;
  return j;
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
  int max_key = 100;
  for (const PlacementRun& r : exp.results) {
    if (!r.allocated_pct.empty()) {
      max_key = std::max(max_key, r.allocated_pct.rbegin()->first);
    }
  }
  ChartSpec chart;
  chart.x_label = "GPU requested (arrived), % of capacity";
  chart.y_label = "GPU allocated, % of capacity";
  chart.x_max = max_key;
  chart.x_ticks = max_key / 10;
  chart.y_max = 100;
  chart.x_tick_suffix = chart.y_tick_suffix = "%";
  // The ideal: everything that arrives is allocated.
  chart.series.push_back(
      {"ideal", {{0, 0}, {100, 100}, {double(max_key), 100}}, true, "#999"});
  for (const PlacementSummary& s : exp.summary) {
    ChartSeries series{s.policy, {}, false, ""};
    for (const auto& [k, v] : MeanCurve(exp, s.policy)) {
      series.points.emplace_back(k, v);
    }
    chart.series.push_back(std::move(series));
  }
  const std::string svg = LineChartSvg(chart);

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
                          HtmlEscape(s.policy), cell(100), cell(130),
                          runs ? static_cast<double>(failed) / runs : 0.0);
  }
  return absl::StrCat(
      "<!doctype html><html><head><meta charset='utf-8'><title>gpusched "
      "placement experiment</title><style>body{font-family:sans-serif;"
      "margin:2em;color:#222}table{border-collapse:collapse}td,th{border:1px "
      "solid #ccc;padding:4px 10px;text-align:right}td:first-child{text-"
      "align:left}</style></head><body><h1>Placement experiment</h1><p>",
      HtmlEscape(inputs.nodes_path), " &middot; ", HtmlEscape(inputs.pods_path),
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
