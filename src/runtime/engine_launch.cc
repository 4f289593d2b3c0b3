#include "runtime/engine_launch.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "boost/asio.hpp"
#include "inventory/mig.h"

namespace gpusched::runtime {

absl::StatusOr<int> FreePort() {
  boost::asio::io_context ioc;
  boost::asio::ip::tcp::acceptor a(ioc);
  boost::system::error_code ec;
  a.open(boost::asio::ip::tcp::v4(), ec);
  if (!ec) a.bind({boost::asio::ip::make_address("127.0.0.1"), 0}, ec);
  if (ec) return absl::UnavailableError("no free port: " + ec.message());
  return a.local_endpoint().port();
}

absl::StatusOr<EngineLaunch> PlanEngineLaunch(const EngineLaunchInput& in) {
  EngineLaunch out;
  absl::StatusOr<int> port = FreePort();
  if (!port.ok()) return port.status();
  absl::StatusOr<int> metrics_port =
      in.engine->metrics_on_separate_port ? FreePort() : absl::StatusOr<int>(0);
  if (!metrics_port.ok()) return metrics_port.status();
  out.port = static_cast<uint16_t>(*port);
  if (!in.host.empty()) {
    out.host = in.host;
  } else if (in.node != nullptr && !in.node->address.empty()) {
    out.host = in.node->address;
  }
  out.metrics_port = static_cast<uint16_t>(*metrics_port);

  double memory_fraction = 0.9;
  int tensor_parallel = 1;
  std::optional<int> mps_threads;
  std::optional<int64_t> mps_memory;
  if (in.allocation.node >= 0 && in.node != nullptr) {
    for (const inventory::GpuShare& g : in.allocation.gpus) {
      std::string id = std::to_string(g.gpu);
      if (in.nvml_gpus != nullptr &&
          g.gpu < static_cast<int>(in.nvml_gpus->size())) {
        const backends::DiscoveredGpu& dg = (*in.nvml_gpus)[g.gpu];
        id = dg.uuid;
        if (!g.mig_profile.empty()) {
          id.clear();
          // The instance at the slice's slot; where NVML gives no slots,
          // the k-th instance of the profile on the GPU is the k-th of the
          // node's canonical layout there (backends::LocalNodeSpec).
          int k = 0;
          for (const auto& [gpu, start] :
               inventory::StaticMigSlices(*in.node, g.mig_profile)) {
            if (gpu == g.gpu && start < g.mig_start) ++k;
          }
          for (const auto& mi : dg.mig_instances) {
            if (mi.profile != g.mig_profile) continue;
            if (mi.start >= 0 ? mi.start == g.mig_start : k-- == 0) {
              id = mi.uuid;
              break;
            }
          }
          if (id.empty()) {
            return absl::FailedPreconditionError(absl::StrCat(
                "no MIG instance ", g.mig_profile, " at slot ", g.mig_start,
                " on GPU ", g.gpu, "; create it with nvidia-smi mig -cgi"));
          }
        }
      }
      out.gpu_ids.push_back(id);
    }
    if (in.resources.kind == "fraction" && in.node->gpu_memory_mib > 0) {
      memory_fraction = static_cast<double>(in.resources.gpu_memory_mib) /
                        static_cast<double>(in.node->gpu_memory_mib);
      if (in.mps) {
        mps_threads = std::max(1, in.resources.milli / 10);
        mps_memory = in.resources.gpu_memory_mib;
      }
    }
    if (in.resources.kind == "whole") tensor_parallel = in.resources.gpus;
  }
  absl::flat_hash_map<std::string, std::string> values = {
      {"self", in.self_path},
      {"host", out.host},
      {"model", in.model},
      {"name", in.deployment},
      {"port", std::to_string(*port)},
      {"metrics_port", std::to_string(*metrics_port)},
      {"gpu_memory_fraction", absl::StrFormat("%.3f", memory_fraction)},
      {"tensor_parallel", std::to_string(tensor_parallel)},
      {"replica", in.replica}};
  absl::StatusOr<std::vector<std::string>> argv =
      ExpandArgv(*in.engine, values);
  if (!argv.ok()) return argv.status();
  auto env = ExpandEnv(*in.engine, values);
  if (!env.ok()) return env.status();
  if (in.allocation.node >= 0) {
    auto gpu_env = GpuEnv(out.gpu_ids, mps_threads, mps_memory);
    if (!gpu_env.ok()) return gpu_env.status();
    for (auto& [k, v] : *gpu_env) (*env)[k] = v;
  }
  out.process.name = in.replica;
  out.process.engine = in.engine->name;
  out.process.argv = *std::move(argv);
  out.process.env = *std::move(env);
  out.process.log_dir = in.log_dir;
  out.process.port = out.port;
  out.process.readiness_path = in.engine->readiness.path;
  backends::ProcessPlacement& where = out.process.placement;
  where.deployment = in.deployment;
  if (in.allocation.node >= 0 && in.node != nullptr) {
    where.node = in.node->name;
    for (const inventory::GpuShare& g : in.allocation.gpus) {
      where.gpus.push_back(g.gpu);
    }
    where.fraction =
        in.resources.kind == "fraction" || in.resources.kind == "mig";
    if (in.resources.kind == "fraction") {
      double share = in.resources.milli / 1000.0;
      if (in.node->gpu_memory_mib > 0) share = std::max(share, memory_fraction);
      where.gpu_share = std::clamp(share, 0.0, 1.0);
    }
    if (in.resources.kind == "mig" && !in.allocation.gpus.empty()) {
      where.mig_profile = in.allocation.gpus[0].mig_profile;
      where.mig_start = in.allocation.gpus[0].mig_start;
    }
    where.cpu_milli = in.allocation.cpu_milli;
    where.memory_mib = in.allocation.memory_mib;
  }
  return out;
}

}  // namespace gpusched::runtime
