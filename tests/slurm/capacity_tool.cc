// slurm_capacity_tool: drives the Slurm launcher's CapacityManager
// (backends/slurm/slurm_launcher.h) from a shell test, against the real
// cluster SLURM_CONF names (tests/slurm_capacity_test.sh). One launcher per
// run, built as `gpusched serve` builds it (the nodes read at start); the
// commands run in order on it:
//   pools                      one line per pool: "pool <name> gpu=<type>x<n>
//                              cpus=<n> memory=<MiB> spot=<0|1> max=<n>
//                              nodes=<a,b>"
//   states                     a Sync, then one line per pool node whose
//                              state changed: "state <node> <pool> <state>
//                              [reason]" (every node on the first call)
//   nodes                      a Sync, then "node <name> usable=<0|1>
//                              <Slurm's state>" per node report
//   add <pool> <count> <req>   "added <node,...>" or "error <message>"
//   release <node>             "released <node>" or "error <message>"
// Exits 2 on a usage error, else 0 (errors are printed lines).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "backends/slurm/slurm_launcher.h"
#include "common/clock.h"

namespace {

using gpusched::backends::CapacityManager;
using gpusched::backends::SlurmLauncher;

class WallClock : public gpusched::Clock {
 public:
  gpusched::Micros Now() const override { return now_ += 10'000'000; }

 private:
  mutable gpusched::Micros now_ = 0;  // every Sync queries Slurm
};

int Usage() {
  std::fprintf(stderr,
               "usage: slurm_capacity_tool pools|states|nodes|add POOL COUNT "
               "REQUEST|release NODE ...\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace gpusched;  // NOLINT: a test tool
  auto client = backends::SystemSlurmClient("", 10 * kMicrosPerSecond);
  absl::StatusOr<std::vector<backends::SlurmNode>> nodes =
      backends::ReadSlurmNodes(*client);
  if (!nodes.ok()) {
    std::fprintf(stderr, "cannot read the nodes: %s\n",
                 std::string(nodes.status().message()).c_str());
    return 1;
  }
  absl::StatusOr<std::vector<inventory::NodeSpec>> specs =
      backends::SlurmNodeSpecs(*nodes, {});
  if (!specs.ok()) {
    std::fprintf(stderr, "%s\n", std::string(specs.status().message()).c_str());
    return 1;
  }
  WallClock clock;
  SlurmLauncher launcher(backends::SlurmLauncherOptions{}, std::move(client),
                         *nodes, *specs, &clock);
  CapacityManager* cap = launcher.capacity();
  if (cap == nullptr) {
    std::printf("error no pools: %s\n", launcher.pool_error().c_str());
    return 0;
  }
  for (int i = 1; i < argc; ++i) {
    const std::string cmd = argv[i];
    if (cmd == "pools") {
      for (const backends::PoolReport& p : cap->Pools()) {
        std::printf(
            "pool %s gpu=%sx%d cpus=%lld memory=%lld spot=%d max=%d "
            "nodes=%s\n",
            p.pool.c_str(), p.gpu_model.c_str(), p.gpus_per_node,
            static_cast<long long>(p.cpu_milli / 1000),
            static_cast<long long>(p.memory_mib), p.spot ? 1 : 0, p.max_nodes,
            absl::StrJoin(p.nodes, ",").c_str());
      }
    } else if (cmd == "states") {
      launcher.Sync();
      for (const backends::PoolNodeReport& r : cap->PoolNodeReports()) {
        std::printf("state %s %s %s%s%s\n", r.node.c_str(), r.pool.c_str(),
                    backends::PoolNodeStateName(r.state),
                    r.reason.empty() ? "" : " ", r.reason.c_str());
      }
    } else if (cmd == "nodes") {
      launcher.Sync();
      for (const backends::NodeReport& r : launcher.NodeReports()) {
        std::printf("node %s usable=%d %s\n", r.node.c_str(), r.usable ? 1 : 0,
                    r.state.c_str());
      }
    } else if (cmd == "add" && i + 3 < argc) {
      int count = 0;
      if (!absl::SimpleAtoi(argv[i + 2], &count)) return Usage();
      absl::StatusOr<std::vector<std::string>> added =
          cap->AddNodes(argv[i + 1], count, argv[i + 3]);
      i += 3;
      if (added.ok()) {
        std::printf("added %s\n", absl::StrJoin(*added, ",").c_str());
      } else {
        std::printf("error %s\n",
                    std::string(added.status().message()).c_str());
      }
    } else if (cmd == "release" && i + 1 < argc) {
      absl::Status s = cap->ReleaseNode(argv[++i]);
      if (s.ok()) {
        std::printf("released %s\n", argv[i]);
      } else {
        std::printf("error %s\n", std::string(s.message()).c_str());
      }
    } else {
      return Usage();
    }
    std::fflush(stdout);
  }
  return 0;
}
