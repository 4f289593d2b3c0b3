#include "sim/placement_sim.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/random.h"
#include "common/status.h"
#include "placement/registry.h"
#include "placement/scheduler.h"

namespace gpusched::sim {

using placement::PodRequest;

namespace {

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since)
      .count();
}

// Python's round(x, 0) / round(x, 2): half to even.
double RoundHalfEven(double x, int digits) {
  const double scale = std::pow(10.0, digits);
  return std::nearbyint(x * scale) / scale;
}

}  // namespace

absl::StatusOr<PlacementRun> RunPlacementOnce(
    const std::vector<inventory::NodeSpec>& nodes,
    const std::vector<TracePod>& pods, const std::string& policy_name,
    uint64_t seed, double inflate, bool online_workload) {
  const auto start = std::chrono::steady_clock::now();
  // Nodes join in a seeded random order: that order breaks score ties (the
  // authors rename nodes with a seeded permutation for the same effect).
  inventory::ClusterState cs;
  std::vector<int> node_order(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) node_order[i] = static_cast<int>(i);
  Rng node_rng(seed ^ 0x6e6f64656f726465ULL);
  node_rng.Shuffle(node_order);
  for (int i : node_order) RETURN_IF_ERROR(cs.AddNode(nodes[i]).status());
  const int64_t capacity = cs.total_gpu_milli();
  if (capacity <= 0) {
    return absl::InvalidArgumentError("the node list has no GPUs");
  }
  // The originals, in name order (the authors sort before shuffling).
  std::vector<const TracePod*> originals;
  for (const TracePod& p : pods) originals.push_back(&p);
  std::stable_sort(
      originals.begin(), originals.end(),
      [](const TracePod* a, const TracePod* b) { return a->name < b->name; });
  std::vector<PodRequest> compiled;
  compiled.reserve(originals.size());
  for (const TracePod* p : originals) {
    auto c = placement::CompilePodRequest(p->request, cs);
    if (!c.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("pod ", p->name, ": ", c.status().message()));
    }
    compiled.push_back(*std::move(c));
  }
  placement::PolicyOptions options;
  if (!online_workload) options.workload = placement::TypicalShapes(compiled);
  options.seed = seed;
  ASSIGN_OR_RETURN(auto policy, placement::NewPolicy(policy_name, options));

  // Order: the shuffled originals, then clones drawn with replacement until
  // the next draw's (per-GPU) milli would pass inflate x capacity.
  Rng order_rng(seed);
  std::vector<int> order(compiled.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  order_rng.Shuffle(order);
  int64_t requested = 0;
  for (const PodRequest& p : compiled) requested += p.TotalGpuMilli();
  const double limit = inflate * static_cast<double>(capacity);
  while (!compiled.empty()) {
    const int idx = static_cast<int>(order_rng.Uniform(compiled.size()));
    const PodRequest& p = compiled[idx];
    if (static_cast<double>(requested + p.gpu_milli) > limit) break;
    requested += p.TotalGpuMilli();
    order.push_back(idx);
  }

  placement::Scheduler scheduler(&cs, std::move(policy),
                                 seed ^ 0x5eed5eed5eed5eedULL);
  PlacementRun run;
  run.policy = policy_name;
  run.seed = seed;
  run.pods_total = static_cast<int>(order.size());
  std::map<int, std::pair<double, int>> buckets;  // key -> (sum, count)
  int64_t arrived = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    const PodRequest& pod = compiled[order[i]];
    arrived += pod.TotalGpuMilli();
    const placement::Decision d = scheduler.Place(absl::StrCat("p", i), pod);
    if (!d.placed) {
      ++run.pods_failed;
      ++run.failed_by_reason[d.reasons.empty() ? "no nodes"
                                               : d.reasons[0].first];
    }
    const int key =
        static_cast<int>(RoundHalfEven(100.0 * arrived / capacity, 0));
    const double alloc =
        RoundHalfEven(100.0 * cs.allocated_gpu_milli() / capacity, 2);
    auto& [sum, count] = buckets[key];
    sum += alloc;
    ++count;
  }
  const int max_key = buckets.empty() ? 0 : buckets.rbegin()->first;
  for (int k = 0; k <= max_key; ++k) {
    // The bucket's mean; an empty bucket takes its two neighbours'.
    double sum = 0;
    int count = 0;
    const bool empty = !buckets.contains(k);
    for (int j = empty ? k - 1 : k; j <= (empty ? k + 1 : k); ++j) {
      auto it = buckets.find(j);
      if (it == buckets.end()) continue;
      sum += it->second.first;
      count += it->second.second;
    }
    if (count > 0) run.allocated_pct[k] = RoundHalfEven(sum / count, 2);
  }
  for (int k : {100, 130}) {
    auto it = run.allocated_pct.find(k);
    if (it != run.allocated_pct.end()) {
      run.unallocated_pct[k] = RoundHalfEven(100.0 - it->second, 2);
    }
  }
  run.wall_seconds = Seconds(start);
  return run;
}

absl::StatusOr<PlacementExperiment> RunPlacementExperiment(
    const PlacementSimConfig& config) {
  const auto start = std::chrono::steady_clock::now();
  if (config.nodes.empty()) return absl::InvalidArgumentError("no nodes");
  if (config.pods.empty()) return absl::InvalidArgumentError("no pods");
  if (config.policies.empty()) return absl::InvalidArgumentError("no policies");
  if (config.seeds.empty()) return absl::InvalidArgumentError("no seeds");
  if (config.threads < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--threads must be 0 (one per core) or more, got ", config.threads));
  }
  if (!(config.inflate > 0) || config.inflate > 10) {
    return absl::InvalidArgumentError(
        absl::StrCat("--inflate must be in (0, 10], got ", config.inflate));
  }
  for (const std::string& p : config.policies) {
    RETURN_IF_ERROR(placement::NewPolicy(p, {}).status());
  }
  PlacementExperiment exp;
  exp.nodes_total = static_cast<int>(config.nodes.size());
  for (const auto& n : config.nodes) exp.gpus_total += n.gpu_count;
  exp.inflate = config.inflate;
  exp.online_workload = config.online_workload;

  const size_t jobs = config.policies.size() * config.seeds.size();
  std::vector<absl::StatusOr<PlacementRun>> runs(jobs,
                                                 absl::UnknownError("not run"));
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t j; (j = next.fetch_add(1)) < jobs;) {
      runs[j] = RunPlacementOnce(config.nodes, config.pods,
                                 config.policies[j / config.seeds.size()],
                                 config.seeds[j % config.seeds.size()],
                                 config.inflate, config.online_workload);
    }
  };
  size_t threads =
      config.threads > 0 ? config.threads : std::thread::hardware_concurrency();
  threads = std::clamp<size_t>(threads, 1, jobs);
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();

  for (auto& r : runs) {
    if (!r.ok()) return r.status();
    exp.results.push_back(*std::move(r));
  }
  for (size_t p = 0; p < config.policies.size(); ++p) {
    PlacementSummary s;
    s.policy = config.policies[p];
    for (int k : {100, 130}) {
      std::vector<double> v;
      for (size_t i = 0; i < config.seeds.size(); ++i) {
        const auto& u =
            exp.results[p * config.seeds.size() + i].unallocated_pct;
        if (auto it = u.find(k); it != u.end()) v.push_back(it->second);
      }
      if (v.empty()) continue;
      double mean = 0;
      for (double x : v) mean += x;
      mean /= v.size();
      double var = 0;
      for (double x : v) var += (x - mean) * (x - mean);
      const double sd = v.size() > 1 ? std::sqrt(var / (v.size() - 1)) : 0;
      s.unallocated_pct[k] = {RoundHalfEven(mean, 3), RoundHalfEven(sd, 3)};
    }
    exp.summary.push_back(std::move(s));
  }
  exp.wall_seconds = Seconds(start);
  return exp;
}

absl::StatusOr<std::vector<uint64_t>> ParseSeeds(const std::string& text) {
  std::vector<uint64_t> seeds;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    std::vector<absl::string_view> ends = absl::StrSplit(part, '-');
    uint64_t lo = 0, hi = 0;
    if (ends.size() > 2 || !absl::SimpleAtoi(ends[0], &lo) ||
        !absl::SimpleAtoi(ends.back(), &hi) || hi < lo || hi - lo > 100000) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--seeds: bad item '", part, "' (want N, N-M or a comma list)"));
    }
    for (uint64_t s = lo; s <= hi; ++s) seeds.push_back(s);
  }
  if (seeds.empty()) return absl::InvalidArgumentError("--seeds: empty");
  return seeds;
}

}  // namespace gpusched::sim
