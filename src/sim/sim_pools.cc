#include "sim/sim_pools.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "control/prices.h"

namespace gpusched::sim {
namespace {

constexpr size_t kMaxPreemptions = 1000000;

absl::Status ReadTrace(const std::string& path, const std::string& where,
                       std::vector<Micros>* out) {
  std::ifstream in(path);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "cannot read preemption_trace ", path));
  }
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty() || line[0] == '#') continue;
    double t = 0;
    if (!absl::SimpleAtod(line, &t) || t < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ":", n, ": a time in seconds >= 0, not '", line, "'"));
    }
    if (out->size() >= kMaxPreemptions) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": more than ", kMaxPreemptions, " preemptions"));
    }
    out->push_back(FromSeconds(t));
  }
  std::sort(out->begin(), out->end());
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<FleetPool>> FleetPoolsFor(
    const config::ServeSimConfig& cfg) {
  std::vector<control::GpuPrice> table = control::BuiltinGpuPrices();
  if (!cfg.capacity.prices.empty()) {
    ASSIGN_OR_RETURN(table, control::LoadGpuPrices(cfg.capacity.prices));
  }
  std::vector<FleetPool> pools;
  for (const config::PoolSpec& p : cfg.pools) {
    const std::string where =
        absl::StrCat(cfg.source, ":", p.line, ": pool '", p.name, "': ");
    FleetPool fp;
    fp.pool.name = p.name;
    fp.pool.gpu = p.gpu;
    fp.pool.gpus_per_node = p.gpus_per_node;
    fp.pool.spot = p.spot;
    fp.pool.provisioning_delay = FromSeconds(p.provisioning_delay_s);
    fp.pool.min_nodes = p.min_nodes;
    fp.pool.max_nodes = p.max_nodes;
    fp.pool.price_per_node_hour = p.price_per_node_hour;
    if (p.price_per_node_hour < 0) {
      auto price = control::FindGpuPrice(table, p.gpu, p.spot);
      if (!price.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, price.status().message()));
      }
      // The table's node may differ in size: its price per GPU counts.
      fp.pool.price_per_node_hour = price->usd_per_gpu_hour() * p.gpus_per_node;
    }
    fp.preemptions_per_node_hour = p.preemptions_per_node_hour;
    if (!p.preemption_trace.empty()) {
      RETURN_IF_ERROR(
          ReadTrace(p.preemption_trace, where, &fp.preemption_times));
    }
    pools.push_back(std::move(fp));
  }
  return pools;
}

control::SloTarget SloTargetFor(const config::ServeSimConfig& cfg,
                                const config::SimDeploymentSpec& d) {
  control::SloTarget slo;
  auto tighten = [](double& target, double v) {
    if (v > 0 && (target <= 0 || v < target)) target = v;
  };
  tighten(slo.ttft_s, cfg.tenant_defaults.slo.ttft_s);
  tighten(slo.tpot_s, cfg.tenant_defaults.slo.tpot_s);
  for (const config::SimTenantSpec& t : cfg.tenants) {
    tighten(slo.ttft_s, t.slo.ttft_s);
    tighten(slo.tpot_s, t.slo.tpot_s);
  }
  for (const config::SyntheticTenant& t : cfg.workload.synthetic_tenants) {
    if (t.model == d.name) {
      slo.input_tokens = std::max(t.input_tokens, t.input_max / 2);
      slo.output_tokens = std::max(t.output_tokens, t.output_max / 2);
      break;
    }
  }
  // A replica runs at the concurrency its deployment keeps it at (the
  // autoscaler's target, else its cap), whatever the GPU: a faster GPU
  // gives more tokens per second only through faster steps there.
  slo.max_batch = std::min<int>(
      d.engine.max_num_seqs,
      d.autoscaling ? static_cast<int>(std::ceil(
                          d.autoscaling_config.target_ongoing_requests))
                    : d.max_ongoing_requests);
  return slo;
}

}  // namespace gpusched::sim
