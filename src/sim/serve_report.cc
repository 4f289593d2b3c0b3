#include "sim/serve_report.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "sim/svg_chart.h"
#include "sim/uplot_chart.h"

namespace gpusched::sim {
namespace {

using json = nlohmann::json;
using serving::RejectReason;

// Rounds to 1e-6 so reports stay readable and stable across printers.
double R6(double v) { return std::round(v * 1e6) / 1e6; }

struct Accumulator {
  int64_t requests = 0, completed = 0, timed_out = 0, slo_met = 0;
  std::map<std::string, int64_t> rejected;
  std::vector<double> ttft, tpot, e2e;
  int64_t input_tokens = 0, output_tokens = 0, cached_tokens = 0;
  int64_t prompt_tokens_served = 0;
};

bool MeetsSlo(const RequestOutcome& o, const config::SloSpec& slo) {
  if (!o.completed()) return false;
  const double ttft = ToSeconds(o.first_token - o.arrival);
  const double e2e = ToSeconds(o.finished - o.arrival);
  if (slo.ttft_s > 0 && ttft > slo.ttft_s) return false;
  if (slo.e2e_s > 0 && e2e > slo.e2e_s) return false;
  if (slo.tpot_s > 0 && o.output_tokens > 1) {
    const double tpot =
        ToSeconds(o.finished - o.first_token) / (o.output_tokens - 1);
    if (tpot > slo.tpot_s) return false;
  }
  return true;
}

json Dist(std::vector<double>& v) {
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  return json{{"p50", R6(Percentile(v, 50))},
              {"p90", R6(Percentile(v, 90))},
              {"p99", R6(Percentile(v, 99))},
              {"mean", R6(v.empty() ? 0 : sum / v.size())},
              {"max", R6(v.empty() ? 0 : v.back())}};
}

json Finish(Accumulator& a, double seconds) {
  json rejected = json::object();
  int64_t rejected_total = 0;
  for (const auto& [k, n] : a.rejected) {
    rejected[k] = n;
    rejected_total += n;
  }
  return json{
      {"requests", a.requests},
      {"completed", a.completed},
      {"rejected", rejected_total},
      {"rejected_by_reason", rejected},
      {"timed_out", a.timed_out},
      {"ttft_s", Dist(a.ttft)},
      {"tpot_s", Dist(a.tpot)},
      {"e2e_s", Dist(a.e2e)},
      {"slo_attainment",
       R6(a.requests ? static_cast<double>(a.slo_met) / a.requests : 0)},
      {"goodput_rps", R6(seconds > 0 ? a.slo_met / seconds : 0)},
      {"prefix_cache_hit_rate",
       R6(a.prompt_tokens_served
              ? static_cast<double>(a.cached_tokens) / a.prompt_tokens_served
              : 0)},
      {"input_tokens", a.input_tokens},
      {"output_tokens", a.output_tokens},
  };
}

void Add(Accumulator& a, const RequestOutcome& o, bool met) {
  ++a.requests;
  if (o.completed()) {
    ++a.completed;
    a.ttft.push_back(ToSeconds(o.first_token - o.arrival));
    a.e2e.push_back(ToSeconds(o.finished - o.arrival));
    if (o.output_tokens > 1) {
      a.tpot.push_back(ToSeconds(o.finished - o.first_token) /
                       (o.output_tokens - 1));
    }
    a.input_tokens += o.input_tokens;
    a.output_tokens += o.output_tokens;
    a.cached_tokens += o.cached_tokens;
    a.prompt_tokens_served += o.input_tokens;
  } else if (o.reason == RejectReason::kQueueTimeout) {
    ++a.timed_out;
  } else {
    ++a.rejected[serving::RejectReasonName(o.reason)];
  }
  if (met) ++a.slo_met;
}

// Service (weighted tokens / tenant weight) per tenant per window, and the
// largest gap between tenants backlogged through a whole window.
json Fairness(const ServeSimRun& run, std::vector<double>* service_total) {
  const auto& cfg = run.config;
  const Micros window = std::max<Micros>(1, FromSeconds(cfg.fairness_window_s));
  const size_t windows = static_cast<size_t>(run.simulated_end / window) + 1;
  const size_t tenants = run.tenant_names.size();
  const std::vector<double>& weight = run.tenant_weights;
  double w_in = 1, w_out = 2;
  if (!cfg.deployments.empty()) {
    w_in = cfg.deployments[0].queue.input_weight;
    w_out = cfg.deployments[0].queue.output_weight;
  }
  std::vector<std::vector<double>> service(tenants,
                                           std::vector<double>(windows, 0));
  service_total->assign(tenants, 0);
  for (const RequestOutcome& o : run.requests) {
    if (!o.completed()) continue;
    auto& s = service[o.tenant];
    const double in = w_in * o.input_tokens / weight[o.tenant];
    s[std::min(windows - 1, static_cast<size_t>(o.first_token / window))] += in;
    // Output tokens are spread evenly between first token and completion.
    const double out = w_out * o.output_tokens / weight[o.tenant];
    (*service_total)[o.tenant] += in + out;
    const Micros a = o.first_token, b = std::max(o.finished, a + 1);
    for (size_t k = static_cast<size_t>(a / window);
         k < windows && static_cast<Micros>(k) * window < b; ++k) {
      const Micros lo = std::max<Micros>(a, k * window);
      const Micros hi = std::min<Micros>(b, (k + 1) * window);
      if (hi > lo) s[k] += out * static_cast<double>(hi - lo) / (b - a);
    }
  }
  double max_diff = 0, sum_diff = 0;
  int64_t counted = 0;
  for (size_t k = 0; k < windows; ++k) {
    const Micros lo = k * window, hi = (k + 1) * window;
    if (hi > run.simulated_end) break;
    double mn = 1e300, mx = -1e300;
    int backlogged = 0;
    for (size_t t = 0; t < tenants; ++t) {
      bool covered = false;
      for (const auto& [s, e] : run.backlog[t]) {
        if (s <= lo && e >= hi) {
          covered = true;
          break;
        }
        if (s > lo) break;
      }
      if (!covered) continue;
      ++backlogged;
      mn = std::min(mn, service[t][k]);
      mx = std::max(mx, service[t][k]);
    }
    if (backlogged >= 2) {
      max_diff = std::max(max_diff, mx - mn);
      sum_diff += mx - mn;
      ++counted;
    }
  }
  return json{{"window_s", cfg.fairness_window_s},
              {"windows_with_two_or_more_backlogged", counted},
              {"max_service_difference", R6(max_diff)},
              {"mean_service_difference", R6(counted ? sum_diff / counted : 0)},
              {"service_unit",
               absl::StrFormat("(%g x input + %g x output tokens) / tenant "
                               "weight, per window",
                               w_in, w_out)}};
}

// Capacity figures of one deployment, or of all (`d` < 0).
json Capacity(const ServeSimRun& run, int d) {
  DeploymentCapacity sum;
  std::vector<double> cold;
  for (size_t i = 0; i < run.capacity.size(); ++i) {
    if (d >= 0 && static_cast<int>(i) != d) continue;
    const DeploymentCapacity& c = run.capacity[i];
    sum.gpu_seconds += c.gpu_seconds;
    sum.replica_seconds += c.replica_seconds;
    sum.replicas_max += c.replicas_max;
    sum.starts += c.starts;
    sum.evictions += c.evictions;
    sum.preemptions += c.preemptions;
    for (const auto& [k, n] : c.decisions) sum.decisions[k] += n;
    cold.insert(cold.end(), c.cold_start_s.begin(), c.cold_start_s.end());
  }
  int64_t held = 0;
  std::vector<double> hold;
  for (const RequestOutcome& o : run.requests) {
    if (!o.held || (d >= 0 && static_cast<int>(o.deployment) != d)) continue;
    ++held;
    if (o.dispatched >= 0) hold.push_back(ToSeconds(o.dispatched - o.arrival));
  }
  const double span = ToSeconds(run.capacity_end);
  json decisions = json::object();
  for (const auto& [k, n] : sum.decisions) decisions[k] = n;
  json j{{"gpu_hours", R6(sum.gpu_seconds / 3600)},
         {"replicas_mean", R6(span > 0 ? sum.replica_seconds / span : 0)},
         {"replicas_max", sum.replicas_max},
         {"cold_starts", sum.starts},
         {"cold_start_s", Dist(cold)},
         {"held_requests", held},
         {"hold_s", Dist(hold)},
         {"evictions", sum.evictions},
         {"preemptions", sum.preemptions},
         {"scale_decisions", decisions}};
  if (d >= 0) {
    j["autoscaling"] = run.capacity[d].autoscaling;
    j["priority_class"] = run.capacity[d].priority_class;
  } else {
    j["cluster_gpus"] = run.config.cluster_gpus;
    j["span_s"] = R6(span);
  }
  return j;
}

}  // namespace

double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const size_t rank = static_cast<size_t>(
      std::ceil(p / 100.0 * static_cast<double>(sorted.size())));
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

std::string ServeRequestsCsv(const ServeSimRun& run) {
  std::string csv =
      "id,tenant,deployment,class,arrival_s,dispatched_s,first_token_s,"
      "finished_s,input_tokens,output_tokens,cached_tokens,outcome\n";
  auto t = [](Micros v) {
    return v < 0 ? std::string() : absl::StrFormat("%.6f", ToSeconds(v));
  };
  for (size_t i = 0; i < run.requests.size(); ++i) {
    const RequestOutcome& o = run.requests[i];
    absl::StrAppend(
        &csv, i, ",", run.tenant_names[o.tenant], ",",
        run.deployment_names[o.deployment], ",", run.class_names[o.cls], ",",
        t(o.arrival), ",", t(o.dispatched), ",", t(o.first_token), ",",
        t(o.finished), ",", o.input_tokens, ",", o.output_tokens, ",",
        o.cached_tokens, ",",
        o.completed() ? "completed" : serving::RejectReasonName(o.reason),
        "\n");
  }
  return csv;
}

std::string ServeEventsCsv(const ServeSimRun& run) {
  std::string csv = "t_s,kind,deployment,message\n";
  for (const CapacityEvent& e : run.events) {
    std::string message = e.message;
    absl::StrReplaceAll({{"\"", "\"\""}}, &message);
    absl::StrAppend(&csv, absl::StrFormat("%.6f", ToSeconds(e.t)), ",", e.kind,
                    ",", e.deployment, ",\"", message, "\"\n");
  }
  return csv;
}

json ServeReportJson(const ServeSimRun& run, bool with_wall_time) {
  const auto& cfg = run.config;
  const double seconds = ToSeconds(run.simulated_end);
  const std::vector<config::SloSpec>& slo = run.tenant_slos;
  Accumulator overall;
  std::vector<Accumulator> per_dep(run.deployment_names.size());
  std::vector<Accumulator> per_tenant(run.tenant_names.size());
  std::vector<Accumulator> per_class(run.class_names.size());
  for (const RequestOutcome& o : run.requests) {
    const bool met = MeetsSlo(o, slo[o.tenant]);
    Add(overall, o, met);
    Add(per_dep[o.deployment], o, met);
    Add(per_tenant[o.tenant], o, met);
    Add(per_class[o.cls], o, met);
  }
  std::vector<double> service_total;
  json fairness = Fairness(run, &service_total);

  double gpu_seconds = 0, busy_gpu_seconds = 0;
  json deployments = json::object();
  for (size_t d = 0; d < run.deployment_names.size(); ++d) {
    json j = Finish(per_dep[d], seconds);
    const config::SimDeploymentSpec& spec = cfg.deployments[d];
    double busy = 0;
    int64_t preemptions = 0, iterations = 0;
    for (const ReplicaStats& r : run.replicas) {
      if (r.deployment != spec.name) continue;
      busy += r.busy_seconds;
      preemptions += r.preemptions;
      iterations += r.iterations;
    }
    const double gs = run.elastic ? run.capacity[d].gpu_seconds
                                  : seconds * run.deployment_gpus[d];
    j["replicas"] = spec.replicas;
    j["router"] = spec.router.policy;
    j["queue_order"] = spec.queue.order;
    j["model"] = spec.model;
    j["gpu"] = spec.gpu;
    j["latency_model"] = run.latency_sources[d];
    j["gpu_seconds"] = R6(gs);
    j["busy_gpu_seconds"] = R6(busy * spec.tensor_parallel);
    j["engine_iterations"] = iterations;
    j["kv_preemptions"] = preemptions;
    if (run.elastic) j["capacity"] = Capacity(run, static_cast<int>(d));
    gpu_seconds += gs;
    busy_gpu_seconds += busy * spec.tensor_parallel;
    deployments[run.deployment_names[d]] = j;
  }
  json tenants = json::object();
  for (size_t t = 0; t < run.tenant_names.size(); ++t) {
    json j = Finish(per_tenant[t], seconds);
    j["weighted_service"] = R6(service_total[t]);
    tenants[run.tenant_names[t]] = j;
  }
  json classes = json::object();
  for (size_t c = 0; c < run.class_names.size(); ++c) {
    if (per_class[c].requests == 0) continue;
    classes[run.class_names[c]] = Finish(per_class[c], seconds);
  }
  json load = json::array();
  for (const LoadSample& s : run.load) {
    load.push_back({{"t_s", R6(ToSeconds(s.t))},
                    {"queued", s.queued},
                    {"outstanding", s.outstanding},
                    {"arrivals", s.arrivals},
                    {"completions", s.completions}});
    if (run.elastic) load.back()["replicas"] = s.replicas;
  }
  json overall_j = Finish(overall, seconds);
  overall_j["gpu_seconds"] = R6(gpu_seconds);
  overall_j["busy_gpu_seconds"] = R6(busy_gpu_seconds);
  if (run.elastic) overall_j["capacity"] = Capacity(run, -1);
  // Paths as the config names them (file name; trace relative to it), so a
  // report does not depend on where the repository is checked out.
  const std::filesystem::path config_path(cfg.source);
  std::string trace_source = run.trace_source;
  if (!cfg.workload.synthetic && !config_path.parent_path().empty()) {
    trace_source = std::filesystem::path(run.trace_source)
                       .lexically_relative(config_path.parent_path())
                       .string();
  }
  json report{
      {"config", config_path.filename().string()},
      {"seed", cfg.seed},
      {"workload",
       {{"format", run.trace_format},
        {"source", trace_source},
        {"requests", run.trace_requests},
        {"time_scale", cfg.workload.time_scale}}},
      {"simulated_seconds", R6(seconds)},
      {"overall", overall_j},
      {"deployments", deployments},
      {"tenants", tenants},
      {"priority_classes", classes},
      {"fairness", fairness},
      {"load_over_time",
       {{"interval_s", cfg.load_sample_s},
        {"deployments", run.deployment_names},
        {"samples", load}}},
  };
  if (run.has_cost) {
    // What the nodes cost (sim/sim_fleet.h FleetCost): static GPUs at
    // cluster.price_per_gpu_hour, pool nodes from ask to give-back.
    const FleetCost& c = run.cost;
    json pools = json::array();
    for (const PoolUsage& u : c.pools) {
      pools.push_back({{"pool", u.pool},
                       {"gpu", u.gpu},
                       {"spot", u.spot},
                       {"usd_per_node_hour", R6(u.usd_per_node_hour)},
                       {"node_hours", R6(u.node_seconds / 3600)},
                       {"usd", R6(u.usd)},
                       {"peak_nodes", u.peak_nodes},
                       {"requested", u.requested},
                       {"provisioned", u.provisioned},
                       {"released", u.released},
                       {"spot_preempted", u.preempted}});
    }
    json per_dep = json::object();
    for (size_t d = 0; d < c.deployment_usd.size(); ++d) {
      per_dep[run.deployment_names[d]] = R6(c.deployment_usd[d]);
    }
    std::map<std::string, int64_t> kinds;
    for (const CapacityEvent& e : run.events) {
      if (e.deployment.empty()) ++kinds[e.kind];
    }
    report["cost"] = {{"usd", R6(c.total_usd)},
                      {"static_usd", R6(c.static_usd)},
                      {"pools_usd", R6(c.pools_usd)},
                      {"idle_usd", R6(c.idle_usd)},
                      {"deployments_usd", per_dep},
                      {"pools", pools},
                      {"consolidations", c.consolidations},
                      {"notice_in_flight", c.notice_in_flight},
                      {"events", kinds},
                      {"slo_attainment", overall_j["slo_attainment"]}};
  }
  if (!run.routes.empty()) {
    json routes = json::object();
    for (const RouteRun& r : run.routes) {
      json versions = json::array();
      for (size_t i = 0; i < r.versions.size(); ++i) {
        versions.push_back({{"version", r.versions[i]},
                            {"deployment", r.deployments[i]},
                            {"weight", r.weights[i]},
                            {"requests", r.requests[i]}});
      }
      routes[r.name] = {{"versions", versions}};
      if (!r.phase.empty()) routes[r.name]["rollout_phase"] = r.phase;
    }
    json events = json::array();
    for (const RouteEvent& e : run.route_events) {
      events.push_back({{"t", R6(ToSeconds(e.t))},
                        {"route", e.route},
                        {"kind", e.kind},
                        {"canary_weight", e.canary_weight},
                        {"message", e.message},
                        {"analysis", e.details.value("analysis", json())}});
    }
    report["routes"] = routes;
    report["route_events"] = events;
  }
  if (with_wall_time) report["wall_seconds"] = R6(run.wall_seconds);
  return report;
}

std::string ServeReportHtml(const ServeSimRun& run, const json& report) {
  // Latency CDFs per deployment (TTFT and end-to-end), log-scaled seconds.
  auto cdf_chart = [&](const char* what, const char* id, auto value) {
    ChartSpec c;
    c.x_label = "seconds (log scale)";
    c.y_label = "fraction of completed requests";
    c.log_x = true;
    c.y_max = 1;
    double lo = 1e300, hi = 0;
    for (size_t d = 0; d < run.deployment_names.size(); ++d) {
      std::vector<double> v;
      for (const RequestOutcome& o : run.requests) {
        if (o.deployment == d && o.completed()) {
          v.push_back(std::max(1e-4, value(o)));
        }
      }
      std::sort(v.begin(), v.end());
      ChartSeries s{run.deployment_names[d], {}, false, ""};
      // At most ~400 points per curve.
      const size_t step = std::max<size_t>(1, v.size() / 400);
      for (size_t i = 0; i < v.size(); i += step) {
        s.points.emplace_back(v[i], static_cast<double>(i + 1) / v.size());
      }
      if (!v.empty()) {
        s.points.emplace_back(v.back(), 1.0);
        lo = std::min(lo, v.front());
        hi = std::max(hi, v.back());
      }
      c.series.push_back(std::move(s));
    }
    c.x_min = lo > hi ? 1e-3 : std::pow(10, std::floor(std::log10(lo)));
    c.x_max = lo > hi ? 1 : std::pow(10, std::ceil(std::log10(hi)));
    return LineChartUPlot(c, id, absl::StrCat(what, " (CDF)"));
  };
  const std::string ttft = cdf_chart(
      "Time to first token", "ttft",
      [](const auto& o) { return ToSeconds(o.first_token - o.arrival); });
  const std::string e2e = cdf_chart(
      "End-to-end latency", "e2e",
      [](const auto& o) { return ToSeconds(o.finished - o.arrival); });
  ChartSpec load;
  load.x_label = "simulated time (s)";
  load.y_label = "requests";
  load.x_max = std::max(1.0, ToSeconds(run.simulated_end));
  double ymax = 1;
  for (size_t d = 0; d < run.deployment_names.size(); ++d) {
    ChartSeries q{run.deployment_names[d] + " queued", {}, false, ""};
    ChartSeries o{run.deployment_names[d] + " on replicas", {}, true, ""};
    for (const LoadSample& s : run.load) {
      q.points.emplace_back(ToSeconds(s.t), s.queued[d]);
      o.points.emplace_back(ToSeconds(s.t), s.outstanding[d]);
      ymax = std::max<double>(ymax, std::max(s.queued[d], s.outstanding[d]));
    }
    load.series.push_back(std::move(q));
    load.series.push_back(std::move(o));
  }
  load.y_max = ymax;
  // Replicas over time per deployment (starting or ready).
  std::string replicas_chart;
  if (run.elastic) {
    ChartSpec rc;
    rc.x_label = "simulated time (s)";
    rc.y_label = "replicas";
    rc.x_max = load.x_max;
    double rmax = 1;
    for (size_t d = 0; d < run.deployment_names.size(); ++d) {
      ChartSeries r{run.deployment_names[d], {}, false, ""};
      for (const LoadSample& s : run.load) {
        r.points.emplace_back(ToSeconds(s.t), s.replicas[d]);
        rmax = std::max<double>(rmax, s.replicas[d]);
      }
      rc.series.push_back(std::move(r));
    }
    rc.y_max = rmax;
    replicas_chart = LineChartUPlot(rc, "replicas", "Replicas over time");
  }

  std::string rows;
  auto row = [&](const std::string& name, const json& j) {
    absl::StrAppendFormat(
        &rows,
        "<tr><td>%s</td><td>%d</td><td>%d</td><td>%d</td><td>%.3f</td>"
        "<td>%.3f</td><td>%.4f</td><td>%.3f</td><td>%.3f</td><td>%.1f%%"
        "</td><td>%.1f%%</td></tr>",
        HtmlEscape(name), j["requests"].get<int64_t>(),
        j["completed"].get<int64_t>(),
        j["rejected"].get<int64_t>() + j["timed_out"].get<int64_t>(),
        j["ttft_s"]["p50"].get<double>(), j["ttft_s"]["p99"].get<double>(),
        j["tpot_s"]["p50"].get<double>(), j["e2e_s"]["p50"].get<double>(),
        j["e2e_s"]["p99"].get<double>(),
        100 * j["slo_attainment"].get<double>(),
        100 * j["prefix_cache_hit_rate"].get<double>());
  };
  row("overall", report["overall"]);
  for (const auto& [name, j] : report["deployments"].items()) {
    row("deployment " + name, j);
  }
  for (const auto& [name, j] : report["priority_classes"].items()) {
    row("class " + name, j);
  }
  int shown = 0;
  for (const auto& [name, j] : report["tenants"].items()) {
    if (++shown > 30) break;
    row("tenant " + name, j);
  }
  // The dashboard's look: its stylesheet, cards and chart library.
  return absl::StrCat(
      "<!doctype html><html><head><meta charset='utf-8'><title>gpusched "
      "serving simulation</title>",
      UPlotHead(),
      "<style>.report{max-width:1000px;margin:0 auto;padding:14px 20px;"
      "display:flex;flex-direction:column;gap:14px}.report .table td{text-"
      "align:right}.report .table "
      "td:first-child{text-align:left;white-space:nowrap}</style>"
      "</head><body><header class='topbar'><div class='brand'><span "
      "class='logo'>&#9638;</span> gpusched <span class='muted'>serving "
      "simulation</span></div></header><main class='report'><p "
      "class='muted'>",
      HtmlEscape(run.config.source), " &middot; ", HtmlEscape(run.trace_source),
      " (", HtmlEscape(run.trace_format), ", ", run.trace_requests,
      " requests, time scale ",
      absl::StrFormat("%g", run.config.workload.time_scale), ") &middot; ",
      absl::StrFormat("%.0f", ToSeconds(run.simulated_end)),
      " s simulated</p><section class='card'><table class='table'><tr><th>"
      "</th><th>requests</th><th>completed</th><th>rejected / timed out</th>"
      "<th>TTFT p50</th><th>TTFT p99</th><th>TPOT p50</th><th>E2E p50</th>"
      "<th>E2E p99</th><th>SLO met</th><th>prefix hits</th></tr>",
      rows, "</table></section>", ttft, e2e,
      LineChartUPlot(load, "load", "Load over time"), replicas_chart,
      "</main></body></html>\n");
}

}  // namespace gpusched::sim
