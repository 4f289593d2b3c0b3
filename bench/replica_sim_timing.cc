// How fast LlmReplicaSim runs a whole trace: 16 simulated vLLM-like replicas
// serving the Mooncake conversation trace (12,031 requests, ~1 h), requests
// sent round-robin or by prefix affinity (the hash of the 4th block, which
// tells conversations apart past shared system prompts). Prints wall time and
// what the replicas did. Not a test (timings vary by machine) and not a
// Google Benchmark: the figure is the wall time of one whole run.
//
//   replica_sim_timing [trace.jsonl] [replicas]
//
// Without a trace it generates a Mooncake-like workload (750 requests per
// replica, prompts ~12k tokens in 512-token blocks with shared prefixes,
// outputs ~343 tokens, Poisson arrivals over an hour).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "common/random.h"
#include "nlohmann/json.hpp"
#include "sim/replica_sim.h"

namespace {

using gpusched::kNever;
using gpusched::Micros;
using gpusched::sim::LlmReplicaSim;
using gpusched::sim::SimRequest;

struct Trace {
  std::vector<std::vector<uint64_t>> hashes;
  std::vector<SimRequest> requests;
};

bool ReadMooncake(const std::string& path, Trace& trace) {
  std::ifstream in(path);
  if (!in) return false;
  std::string line;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded()) return false;
    SimRequest r;
    r.req.id = trace.requests.size() + 1;
    r.req.arrival = j["timestamp"].get<int64_t>() * 1000;
    r.req.input_tokens = j["input_length"].get<int32_t>();
    r.output_tokens = j["output_length"].get<int32_t>();
    trace.hashes.push_back(j["hash_ids"].get<std::vector<uint64_t>>());
    trace.requests.push_back(r);
  }
  return true;
}

void Synthesize(int n, Trace& trace) {
  gpusched::Rng rng(42);
  Micros t = 0;
  const double rate = n / 3600.0;  // requests per second
  uint64_t unique = 1 << 30;
  for (int i = 0; i < n; ++i) {
    t += gpusched::FromSeconds(-std::log(1 - rng.UniformDouble()) / rate);
    SimRequest r;
    r.req.id = i + 1;
    r.req.arrival = t;
    // Log-normal-ish sizes: median ~7k prompt, mean ~12k; output mean ~343.
    const double z =
        rng.UniformDouble() + rng.UniformDouble() + rng.UniformDouble() - 1.5;
    r.req.input_tokens = static_cast<int32_t>(
        std::clamp(7000 * std::exp(2.0 * z), 100.0, 126000.0));
    r.output_tokens = 1 + static_cast<int32_t>(rng.Uniform(686));
    const int blocks = (r.req.input_tokens + 511) / 512;
    const uint64_t conversation = rng.Uniform(400);
    const int shared = static_cast<int>(rng.Uniform(blocks + 1));
    std::vector<uint64_t> h;
    for (int b = 0; b < blocks; ++b) {
      h.push_back(b < shared ? conversation * 1000 + b : unique++);
    }
    trace.hashes.push_back(std::move(h));
    trace.requests.push_back(r);
  }
}

// Spreads small sequential hash ids (as Mooncake's) over the replicas.
uint64_t Mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  return x ^ (x >> 33);
}

class Counter : public gpusched::sim::ReplicaSimListener {
 public:
  void OnFirstToken(SimRequest* r, Micros t) override {
    ttft_sum += t - r->req.arrival;
  }
  void OnFinished(SimRequest* r, Micros t) override { ++finished; }
  int64_t finished = 0;
  Micros ttft_sum = 0;
};

void Run(Trace& trace, int replicas, bool affinity) {
  gpusched::sim::LlmReplicaConfig config;
  config.latency.p0 = 0.015;
  config.latency.p1 = 8e-5;
  config.latency.d0 = 0.012;
  config.latency.d1 = 2e-5;
  config.latency.d2 = 3e-8;
  config.kv_capacity_tokens = 128 * 1024;
  config.block_tokens = 512;
  for (SimRequest& r : trace.requests) {
    r.first_token = r.finished = kNever;
  }
  std::vector<std::unique_ptr<LlmReplicaSim>> sims;
  for (int i = 0; i < replicas; ++i) {
    sims.push_back(*LlmReplicaSim::Create(config));
  }
  Counter counter;
  const auto start = std::chrono::steady_clock::now();
  size_t next = 0;
  int64_t round_robin = 0;
  while (true) {
    Micros t = next < trace.requests.size() ? trace.requests[next].req.arrival
                                            : kNever;
    int which = -1;
    for (int i = 0; i < replicas; ++i) {
      const Micros e = sims[i]->NextEventTime();
      if (e <= t) {
        t = e;
        which = i;
      }
    }
    if (t == kNever) break;
    if (which >= 0) {
      sims[which]->Advance(t, counter);
      continue;
    }
    SimRequest& r = trace.requests[next++];
    const int target =
        affinity && !r.req.prefix_blocks.empty()
            ? static_cast<int>(Mix(r.req.prefix_blocks[std::min<size_t>(
                                   3, r.req.prefix_blocks.size() - 1)]) %
                               replicas)
            : static_cast<int>(round_robin++ % replicas);
    sims[target]->Enqueue(&r, t);
  }
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  gpusched::sim::LlmReplicaCounters total;
  for (const auto& s : sims) {
    const auto& c = s->counters();
    total.iterations += c.iterations;
    total.prompt_tokens += c.prompt_tokens;
    total.cached_tokens += c.cached_tokens;
    total.generated_tokens += c.generated_tokens;
    total.preemptions += c.preemptions;
    total.rejected_too_long += c.rejected_too_long;
  }
  Micros last = 0;
  for (const SimRequest& r : trace.requests) last = std::max(last, r.finished);
  std::printf(
      "%s: %zu requests on %d replicas in %.2f s wall (%.0f iterations/s)\n"
      "  iterations=%lld finished=%lld rejected_too_long=%lld "
      "preemptions=%lld\n"
      "  prompt_tokens=%lld cached_tokens=%lld (%.1f%% hit) "
      "generated=%lld\n"
      "  simulated span %.0f s, mean TTFT %.3f s\n",
      affinity ? "prefix-affinity" : "round-robin", trace.requests.size(),
      replicas, wall, total.iterations / wall,
      static_cast<long long>(total.iterations),
      static_cast<long long>(counter.finished),
      static_cast<long long>(total.rejected_too_long),
      static_cast<long long>(total.preemptions),
      static_cast<long long>(total.prompt_tokens),
      static_cast<long long>(total.cached_tokens),
      100.0 * total.cached_tokens /
          std::max<int64_t>(1, total.prompt_tokens + total.cached_tokens),
      static_cast<long long>(total.generated_tokens), gpusched::ToSeconds(last),
      gpusched::ToSeconds(counter.ttft_sum) /
          std::max<int64_t>(1, counter.finished - total.rejected_too_long));
}

}  // namespace

int main(int argc, char** argv) {
  const int replicas = argc > 2 ? std::atoi(argv[2]) : 16;
  Trace trace;
  if (argc > 1) {
    if (!ReadMooncake(argv[1], trace)) {
      std::fprintf(stderr, "cannot read %s\n", argv[1]);
      return 1;
    }
  } else {
    Synthesize(750 * replicas, trace);
  }
  for (size_t i = 0; i < trace.requests.size(); ++i) {
    trace.requests[i].req.prefix_blocks = trace.hashes[i];
  }
  Run(trace, replicas, /*affinity=*/false);
  Run(trace, replicas, /*affinity=*/true);
  return 0;
}
