#include "main/sim_cmd.h"

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status.h"
#include "config/serve_sim_config.h"
#include "inventory/alibaba_nodes.h"
#include "placement/registry.h"
#include "sim/placement_report.h"
#include "sim/placement_sim.h"
#include "sim/serve_report.h"
#include "sim/serve_sim.h"

namespace gpusched {
namespace {

struct PlacementFlags {
  std::string nodes;
  std::string pods;
  std::string policies = "fgd";
  std::string seeds = "42";
  double inflate = 1.3;
  bool online_workload = false;
  int threads = 0;
  std::string out;
  std::string html;
};

int Fail(const std::string& msg) {
  std::fprintf(stderr, "gpusched sim placement: %s\n", msg.c_str());
  return 2;
}

bool WriteFile(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
  return static_cast<bool>(f);
}

int RunPlacement(const PlacementFlags& flags) {
  sim::PlacementSimConfig config;
  auto nodes = inventory::ReadAlibabaNodes(flags.nodes);
  if (!nodes.ok()) return Fail(std::string(nodes.status().message()));
  auto pods = sim::ReadAlibabaPods(flags.pods);
  if (!pods.ok()) return Fail(std::string(pods.status().message()));
  auto seeds = sim::ParseSeeds(flags.seeds);
  if (!seeds.ok()) return Fail(std::string(seeds.status().message()));
  config.nodes = *std::move(nodes);
  config.pods = *std::move(pods);
  config.seeds = *std::move(seeds);
  config.inflate = flags.inflate;
  config.online_workload = flags.online_workload;
  config.threads = flags.threads;
  if (flags.policies == "all") {
    config.policies = placement::PolicyNames();
  } else {
    config.policies = absl::StrSplit(flags.policies, ',', absl::SkipEmpty());
  }
  auto exp = sim::RunPlacementExperiment(config);
  if (!exp.ok()) return Fail(std::string(exp.status().message()));
  const sim::ReportInputs inputs{flags.nodes, flags.pods};
  const std::string json =
      sim::PlacementReportJson(*exp, inputs)
          .dump(2, ' ', false, nlohmann::json::error_handler_t::replace) +
      "\n";
  if (flags.out.empty() || flags.out == "-") {
    std::fputs(json.c_str(), stdout);
  } else if (!WriteFile(flags.out, json)) {
    return Fail("cannot write " + flags.out);
  }
  if (!flags.html.empty() &&
      !WriteFile(flags.html, sim::PlacementReportHtml(*exp, inputs))) {
    return Fail("cannot write " + flags.html);
  }
  // A short table on stderr for people; the JSON is the record.
  std::fprintf(stderr, "%-16s %18s %18s\n", "policy", "unalloc%@100",
               "unalloc%@130");
  for (const sim::PlacementSummary& s : exp->summary) {
    auto cell = [&](int k) {
      auto it = s.unallocated_pct.find(k);
      char buf[64] = "-";
      if (it != s.unallocated_pct.end()) {
        std::snprintf(buf, sizeof buf, "%.2f +- %.2f", it->second.first,
                      it->second.second);
      }
      return std::string(buf);
    };
    std::fprintf(stderr, "%-16s %18s %18s\n", s.policy.c_str(),
                 cell(100).c_str(), cell(130).c_str());
  }
  std::fprintf(stderr, "%zu runs in %.2f s wall\n", exp->results.size(),
               exp->wall_seconds);
  return 0;
}

struct ServeFlags {
  std::string config;
  std::string out;
  std::string html;
  std::string requests;
  std::string events;
  bool omit_wall_time = false;
  bool compare_static = false;
};

// The same run with every deployment at one fixed replica on an unbounded
// cluster: the static baseline autoscaling is measured against.
absl::StatusOr<nlohmann::json> StaticBaseline(config::ServeSimConfig cfg,
                                              const nlohmann::json& elastic) {
  cfg.cluster_gpus = 0;
  for (config::SimDeploymentSpec& d : cfg.deployments) {
    d.autoscaling = false;
    d.replicas = 1;
  }
  ASSIGN_OR_RETURN(sim::ServeSimRun run, sim::RunServeSim(cfg));
  const nlohmann::json r = sim::ServeReportJson(run, false);
  const nlohmann::json& o = r["overall"];
  // Its GPUs are held over the span the elastic run covers (the trace and
  // the elastic run's tail); a static run that falls behind holds them
  // longer still (its own span is reported too).
  int gpus = 0;
  for (const config::SimDeploymentSpec& d : cfg.deployments) {
    gpus += d.tensor_parallel;
  }
  const double span =
      elastic["overall"].contains("capacity")
          ? elastic["overall"]["capacity"]["span_s"].get<double>()
          : elastic["simulated_seconds"].get<double>();
  const double static_hours = gpus * span / 3600;
  const double hours = elastic["overall"]["gpu_seconds"].get<double>() / 3600;
  nlohmann::json j{
      {"replicas_per_deployment", 1},
      {"gpus", gpus},
      {"gpu_hours", static_hours},
      {"gpu_hours_over_its_own_span", o["gpu_seconds"].get<double>() / 3600},
      {"simulated_seconds", r["simulated_seconds"]},
      {"slo_attainment", o["slo_attainment"]},
      {"completed", o["completed"]},
      {"rejected", o["rejected"]},
      {"timed_out", o["timed_out"]},
      {"ttft_s", o["ttft_s"]},
      {"e2e_s", o["e2e_s"]},
      {"gpu_hours_ratio", static_hours > 0 ? hours / static_hours : 0},
  };
  return j;
}

int RunServe(const ServeFlags& flags) {
  auto fail = [](const std::string& msg) {
    std::fprintf(stderr, "gpusched sim serve: %s\n", msg.c_str());
    return 2;
  };
  auto cfg = config::LoadServeSimFile(flags.config);
  if (!cfg.ok()) return fail(std::string(cfg.status().message()));
  auto run = sim::RunServeSim(*cfg);
  if (!run.ok()) return fail(std::string(run.status().message()));
  nlohmann::json report = sim::ServeReportJson(*run, !flags.omit_wall_time);
  if (flags.compare_static) {
    auto baseline = StaticBaseline(*cfg, report);
    if (!baseline.ok()) return fail(std::string(baseline.status().message()));
    report["static_baseline"] = *std::move(baseline);
  }
  const std::string json =
      report.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) +
      "\n";
  if (flags.out.empty() || flags.out == "-") {
    std::fputs(json.c_str(), stdout);
  } else if (!WriteFile(flags.out, json)) {
    return fail("cannot write " + flags.out);
  }
  if (!flags.html.empty() &&
      !WriteFile(flags.html, sim::ServeReportHtml(*run, report))) {
    return fail("cannot write " + flags.html);
  }
  if (!flags.requests.empty() &&
      !WriteFile(flags.requests, sim::ServeRequestsCsv(*run))) {
    return fail("cannot write " + flags.requests);
  }
  if (!flags.events.empty() &&
      !WriteFile(flags.events, sim::ServeEventsCsv(*run))) {
    return fail("cannot write " + flags.events);
  }
  const nlohmann::json& o = report["overall"];
  std::fprintf(stderr,
               "%lld requests: %lld completed, %lld rejected, %lld timed out; "
               "TTFT p50 %.3f s p99 %.3f s; E2E p50 %.3f s p99 %.3f s; SLO "
               "met %.1f%%; prefix hits %.1f%%; %.0f s simulated in %.2f s "
               "wall\n",
               static_cast<long long>(o["requests"].get<int64_t>()),
               static_cast<long long>(o["completed"].get<int64_t>()),
               static_cast<long long>(o["rejected"].get<int64_t>()),
               static_cast<long long>(o["timed_out"].get<int64_t>()),
               o["ttft_s"]["p50"].get<double>(),
               o["ttft_s"]["p99"].get<double>(),
               o["e2e_s"]["p50"].get<double>(), o["e2e_s"]["p99"].get<double>(),
               100 * o["slo_attainment"].get<double>(),
               100 * o["prefix_cache_hit_rate"].get<double>(),
               report["simulated_seconds"].get<double>(), run->wall_seconds);
  if (run->elastic) {
    const nlohmann::json& c = o["capacity"];
    std::fprintf(
        stderr,
        "capacity: %.2f GPU-hours; replicas mean %.1f; %lld cold starts; "
        "%lld held requests (hold p50 %.2f s p99 %.2f s); %lld evictions, "
        "%lld preemptions\n",
        c["gpu_hours"].get<double>(), c["replicas_mean"].get<double>(),
        static_cast<long long>(c["cold_starts"].get<int64_t>()),
        static_cast<long long>(c["held_requests"].get<int64_t>()),
        c["hold_s"]["p50"].get<double>(), c["hold_s"]["p99"].get<double>(),
        static_cast<long long>(c["evictions"].get<int64_t>()),
        static_cast<long long>(c["preemptions"].get<int64_t>()));
  }
  if (report.contains("static_baseline")) {
    const nlohmann::json& b = report["static_baseline"];
    std::fprintf(stderr,
                 "static one replica per deployment: %.2f GPU-hours, SLO met "
                 "%.1f%%; this run uses %.1f%% of its GPU-hours\n",
                 b["gpu_hours"].get<double>(),
                 100 * b["slo_attainment"].get<double>(),
                 100 * b["gpu_hours_ratio"].get<double>());
  }
  return 0;
}

}  // namespace

void AddSimCommand(CLI::App& app) {
  CLI::App* sim = app.add_subcommand("sim", "Run the simulators");
  sim->require_subcommand(1);
  auto flags = std::make_shared<PlacementFlags>();
  CLI::App* placement = sim->add_subcommand(
      "placement",
      "Cluster packing experiment (FGD method) on an Alibaba-format trace");
  placement->add_option("--nodes", flags->nodes, "node list CSV")
      ->required()
      ->check(CLI::ExistingFile);
  placement->add_option("--pods", flags->pods, "pod list CSV")
      ->required()
      ->check(CLI::ExistingFile);
  placement
      ->add_option("--policy", flags->policies,
                   "comma-separated policies, or 'all' (" +
                       absl::StrJoin(placement::PolicyNames(), ", ") + ")")
      ->capture_default_str();
  placement->add_option("--seeds", flags->seeds, "seeds, e.g. 42-51 or 1,5,7")
      ->capture_default_str();
  placement
      ->add_option("--inflate", flags->inflate,
                   "grow the pod list to this multiple of GPU capacity")
      ->capture_default_str();
  placement->add_flag(
      "--online-workload", flags->online_workload,
      "give policies no target workload; adaptive ones learn it as pods come");
  placement->add_option("--threads", flags->threads,
                        "worker threads (0 = one per core)");
  placement->add_option("--out", flags->out,
                        "report JSON path (default stdout)");
  placement->add_option("--html", flags->html, "HTML report path");
  placement->callback([flags] {
    const int rc = RunPlacement(*flags);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });

  auto serve_flags = std::make_shared<ServeFlags>();
  CLI::App* serve = sim->add_subcommand(
      "serve",
      "Request-layer simulation (admission, queues, routing, batching) on a "
      "trace or a synthetic workload");
  serve->add_option("--config", serve_flags->config, "simulation YAML")
      ->required()
      ->check(CLI::ExistingFile);
  serve->add_option("--out", serve_flags->out,
                    "report JSON path (default stdout)");
  serve->add_option("--html", serve_flags->html, "HTML report path");
  serve->add_option("--requests", serve_flags->requests,
                    "per-request outcomes CSV path");
  serve->add_flag("--omit-wall-time", serve_flags->omit_wall_time,
                  "leave wall_seconds out, so equal runs give equal files");
  serve->add_option("--events", serve_flags->events,
                    "capacity decisions CSV path (autoscaling, starts, "
                    "swaps, preemptions, with their reasons)");
  serve->add_flag("--compare-static", serve_flags->compare_static,
                  "also run every deployment at one fixed replica and report "
                  "it as static_baseline (GPU-hours ratio, SLO)");
  serve->callback([serve_flags] {
    const int rc = RunServe(*serve_flags);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace gpusched
