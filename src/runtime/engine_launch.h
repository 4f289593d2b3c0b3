// What it takes to start one replica's engine on the GPUs placement chose:
// free ports, the GPU ids the engine sees (NVML UUIDs or MIG UUIDs on a
// discovered node, indexes else), the engine's memory fraction and tensor
// parallelism, MPS limits, and the template's argv and environment expanded
// with them. The Launcher then runs the ProcessSpec. No policy here: where
// the replica goes was decided before.
//
// Stateless; thread-compatible. The ports are free when chosen (bound and
// released on 127.0.0.1): an engine that loses the race fails its start and
// is restarted with backoff.
#ifndef GPUSCHED_RUNTIME_ENGINE_LAUNCH_H_
#define GPUSCHED_RUNTIME_ENGINE_LAUNCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "backends/launcher.h"
#include "backends/local/nvml.h"
#include "config/manifest.h"
#include "inventory/cluster_state.h"
#include "runtime/engine_template.h"

namespace gpusched::runtime {

struct EngineLaunchInput {
  const EngineTemplate* engine = nullptr;
  std::string replica;     // the replica's name (the process and log name)
  std::string deployment;  // {name}
  std::string model;       // {model}
  config::ResourceSpec resources;
  inventory::Allocation allocation;           // node -1: no GPU
  const inventory::NodeSpec* node = nullptr;  // the allocation's node
  // The node's NVML GPUs when it is this machine and was discovered
  // (UUIDs, MIG instances); null else.
  const std::vector<backends::DiscoveredGpu>* nvml_gpus = nullptr;
  std::string self_path;  // {self}: this binary
  bool mps = false;       // an MPS control daemon runs: set MPS limits
  std::string log_dir;
  // Where the engine binds and the gateway reaches it, when not the node's
  // address ("$(POD_IP)" in a Pod, which Kubernetes expands; the launcher
  // reports the real address once it runs).
  std::string host;
};

struct EngineLaunch {
  // Where the engine listens and the gateway reaches it ({host}): the
  // node's address when it has one, else 127.0.0.1.
  std::string host = "127.0.0.1";
  backends::ProcessSpec process;
  uint16_t port = 0;
  uint16_t metrics_port = 0;         // 0: the engine's port
  std::vector<std::string> gpu_ids;  // CUDA_VISIBLE_DEVICES
};

// A free TCP port on 127.0.0.1.
absl::StatusOr<int> FreePort();

// FailedPrecondition when the allocation names a MIG slot with no instance
// (the message says how to create it); the template's expansion errors
// otherwise.
absl::StatusOr<EngineLaunch> PlanEngineLaunch(const EngineLaunchInput& in);

}  // namespace gpusched::runtime

#endif  // GPUSCHED_RUNTIME_ENGINE_LAUNCH_H_
