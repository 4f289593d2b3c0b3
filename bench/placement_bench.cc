// Placement speed at 100,000 GPUs: 12,500 nodes x 8 GPUs, a mixed stream of
// fractional, whole and multi-GPU requests with churn (each placement after
// warm-up is paired with the release of a random earlier pod, so the
// cluster stays ~75% allocated and node states keep changing).
//
// Also: the same stream on 1,000 nodes whose inventory came from Slurm
// (`scontrol show node -d --oneliner` text, parsed and mapped through the
// GRES map) against the same nodes declared, and the cost of reading that
// text once (what each poll of the Slurm launcher parses).
//
// Peer in the same run: "scan", the same filters and policy evaluated on
// every node for every pod (what a scheduler without a candidate index,
// e.g. kube-scheduler at percentageOfNodesToScore=100, does). Counters:
// decisions/s, and p50/p99 microseconds per decision.
#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/slurm/slurm_nodes.h"
#include "benchmark/benchmark.h"
#include "common/check.h"
#include "common/random.h"
#include "placement/registry.h"
#include "placement/scheduler.h"

namespace gpusched::placement {
namespace {

constexpr int kNodes = 12500;
constexpr int kGpusPerNode = 8;

void BuildCluster(ClusterState& cs) {
  for (int i = 0; i < kNodes; ++i) {
    inventory::NodeSpec s;
    s.name = "node-" + std::to_string(i);
    s.cpu_milli = 128000;
    s.memory_mib = 1048576;
    s.gpu_model = i % 5 == 0 ? "H100-SXM-80GB" : "A100-SXM4-80GB";
    s.gpu_count = kGpusPerNode;
    s.gpu_memory_mib = 81920;
    s.nvlink_group.assign(kGpusPerNode, 0);
    CHECK(cs.AddNode(std::move(s)).ok());
  }
}

std::vector<PodRequest> Shapes(const ClusterState& cs) {
  std::vector<PodRequest> out;
  auto add = [&](inventory::ResourceRequest r, int copies) {
    auto p = CompilePodRequest(r, cs);
    CHECK(p.ok()) << p.status();
    for (int i = 0; i < copies; ++i) out.push_back(*p);
  };
  for (int milli : {250, 500, 750}) {
    inventory::ResourceRequest r;
    r.kind = GpuKind::kFraction;
    r.gpu_milli = milli;
    r.gpu_memory_mib = milli * 80;
    r.cpu_milli = milli * 8;
    r.memory_mib = milli * 64;
    add(r, 4);
  }
  for (int gpus : {1, 1, 1, 2, 4, 8}) {
    inventory::ResourceRequest r;
    r.kind = GpuKind::kWhole;
    r.gpus = gpus;
    r.cpu_milli = gpus * 12000;
    r.memory_mib = gpus * 98304;
    if (gpus >= 4) r.topology = inventory::Topology::kPreferred;
    add(r, 2);
  }
  {
    inventory::ResourceRequest r;
    r.kind = GpuKind::kWhole;
    r.gpus = 1;
    r.cpu_milli = 8000;
    r.gpu_models = {"H100-SXM-80GB"};
    add(r, 2);
  }
  return out;
}

// Brute force over every node, as a scheduler without an index does.
class ScanScheduler {
 public:
  ScanScheduler(ClusterState* cs, std::unique_ptr<ScorePlugin> policy)
      : cs_(cs),
        policy_(std::move(policy)),
        filters_(DefaultFilters()),
        rng_(1) {}
  bool Place(const std::string& id, const PodRequest& pod) {
    int best = -1;
    double best_score = 0;
    for (int n = 0; n < cs_->num_nodes(); ++n) {
      bool ok = true;
      for (const auto& f : filters_) ok = ok && f->Filter(pod, *cs_, n).ok();
      if (!ok) continue;
      const double s = policy_->Score(pod, *cs_, n);
      if (best < 0 || s > best_score) {
        best = n;
        best_score = s;
      }
    }
    if (best < 0) return false;
    inventory::Allocation a;
    a.node = best;
    a.cpu_milli = pod.cpu_milli;
    a.memory_mib = pod.memory_mib;
    a.gpus = policy_->SelectGpus(pod, *cs_, best, rng_);
    return cs_->Assume(id, a).ok();
  }

 private:
  ClusterState* cs_;
  std::unique_ptr<ScorePlugin> policy_;
  std::vector<std::unique_ptr<FilterPlugin>> filters_;
  Rng rng_;
};

PolicyOptions Options(const ClusterState& cs) {
  PolicyOptions o;
  o.workload = TypicalShapes(Shapes(cs));
  return o;
}

// Warms the cluster up to ~75% of GPU milli allocated (with the indexed
// scheduler, whatever is measured), then measures `place` under churn.
template <typename Placer>
void RunStream(benchmark::State& state, ClusterState& cs, const char* policy,
               Placer&& place) {
  const std::vector<PodRequest> shapes = Shapes(cs);
  Rng rng(12);
  std::vector<std::string> live;
  int64_t next = 0;
  {
    Scheduler warm(&cs, *NewPolicy(policy, Options(cs)), 1);
    while (cs.allocated_gpu_milli() < cs.total_gpu_milli() * 3 / 4) {
      const std::string id = "p" + std::to_string(next++);
      if (warm.Place(id, shapes[rng.Uniform(shapes.size())]).placed) {
        live.push_back(id);
      }
    }
  }
  auto one = [&] {
    const std::string id = "p" + std::to_string(next++);
    if (place(id, shapes[rng.Uniform(shapes.size())])) live.push_back(id);
  };
  std::vector<double> micros;
  for (auto _ : state) {
    const size_t victim = rng.Uniform(live.size());
    cs.Forget(live[victim]);
    live[victim] = live.back();
    live.pop_back();
    const auto t0 = std::chrono::steady_clock::now();
    one();
    micros.push_back(std::chrono::duration<double, std::micro>(
                         std::chrono::steady_clock::now() - t0)
                         .count());
  }
  std::sort(micros.begin(), micros.end());
  auto pct = [&](double p) {
    return micros.empty()
               ? 0
               : micros[static_cast<size_t>(p * (micros.size() - 1))];
  };
  state.counters["decisions_per_s"] = benchmark::Counter(
      static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["p50_us"] = pct(0.50);
  state.counters["p99_us"] = pct(0.99);
  state.counters["classes"] = static_cast<double>(cs.live_classes().size());
}

void BM_Indexed(benchmark::State& state, const char* policy) {
  ClusterState cs;
  BuildCluster(cs);
  Scheduler s(&cs, *NewPolicy(policy, Options(cs)), 1);
  RunStream(state, cs, policy, [&](const std::string& id, const PodRequest& p) {
    return s.Place(id, p).placed;
  });
}

void BM_Scan(benchmark::State& state, const char* policy) {
  ClusterState cs;
  BuildCluster(cs);
  ScanScheduler s(&cs, *NewPolicy(policy, Options(cs)));
  RunStream(state, cs, policy, [&](const std::string& id, const PodRequest& p) {
    return s.Place(id, p);
  });
}

// 1,000 nodes as Slurm prints them: 8 GPUs each, one in five H100 (GRES
// type h100), the others A100 (type a100, mapped).
constexpr int kSlurmNodes = 1000;
std::string SlurmNodeText() {
  std::string out;
  for (int i = 0; i < kSlurmNodes; ++i) {
    const char* type = i % 5 == 0 ? "h100" : "a100";
    absl::StrAppend(&out, "NodeName=sn-", i,
                    " Arch=x86_64 CoresPerSocket=64 CPUAlloc=0 CPUTot=128 "
                    "Gres=gpu:",
                    type, ":8(S:0-1) GresDrain=N/A GresUsed=gpu:", type,
                    ":0(IDX:N/A) NodeAddr=10.1.", i / 250, ".", i % 250,
                    " NodeHostName=sn-", i,
                    " OS=Linux 6.1.0 #1 SMP RealMemory=1048576 AllocMem=0 "
                    "State=IDLE Partitions=gpu CfgTRES=cpu=128\n");
  }
  return out;
}
const absl::flat_hash_map<std::string, std::string> kGresMap = {
    {"a100", "A100-SXM4-80GB"}};

std::vector<inventory::NodeSpec> SlurmSpecs(const std::string& text) {
  auto nodes = backends::ParseSlurmNodes(text);
  CHECK(nodes.ok()) << nodes.status();
  auto specs = backends::SlurmNodeSpecs(*nodes, kGresMap);
  CHECK(specs.ok()) << specs.status();
  return *std::move(specs);
}

// The same nodes written out by hand, as a declared inventory gives them.
std::vector<inventory::NodeSpec> DeclaredSpecs() {
  std::vector<inventory::NodeSpec> out;
  const auto& catalog = inventory::GpuCatalog::Builtin();
  for (int i = 0; i < kSlurmNodes; ++i) {
    inventory::NodeSpec s;
    s.name = absl::StrCat("sn-", i);
    s.cpu_milli = 128000;
    s.memory_mib = 1048576;
    s.gpu_model = catalog.Find(i % 5 == 0 ? "h100" : "A100-SXM4-80GB")->name;
    s.gpu_count = 8;
    s.gpu_memory_mib = catalog.Find(s.gpu_model)->memory_mib;
    out.push_back(std::move(s));
  }
  return out;
}

void BM_Inventory1k(benchmark::State& state, bool slurm) {
  ClusterState cs;
  for (inventory::NodeSpec& s :
       slurm ? SlurmSpecs(SlurmNodeText()) : DeclaredSpecs()) {
    CHECK(cs.AddNode(std::move(s)).ok());
  }
  Scheduler s(&cs, *NewPolicy("fillfrag", Options(cs)), 1);
  RunStream(state, cs, "fillfrag",
            [&](const std::string& id, const PodRequest& p) {
              return s.Place(id, p).placed;
            });
}

void BM_SlurmPoll1k(benchmark::State& state) {
  const std::string text = SlurmNodeText();
  for (auto _ : state) {
    benchmark::DoNotOptimize(SlurmSpecs(text));
  }
  state.counters["bytes"] = static_cast<double>(text.size());
}

BENCHMARK_CAPTURE(BM_Inventory1k, declared, false)
    ->Iterations(20000)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Inventory1k, slurm, true)
    ->Iterations(20000)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_SlurmPoll1k)->Unit(benchmark::kMillisecond);

BENCHMARK_CAPTURE(BM_Indexed, fgd, "fgd")
    ->Iterations(20000)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Indexed, fillfrag, "fillfrag")
    ->Iterations(20000)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Indexed, best_fit, "best-fit")
    ->Iterations(20000)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Scan, fgd, "fgd")
    ->Iterations(200)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Scan, fillfrag, "fillfrag")
    ->Iterations(200)
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace gpusched::placement

BENCHMARK_MAIN();
