#include "serving/router.h"

#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "serving/routers/routers.h"

namespace gpusched::serving {
namespace {

struct RouterInfo {
  const char* name;
  bool needs_latency_model;
};

// The registry, in the order RouterNames lists it.
constexpr RouterInfo kRouters[] = {
    {"round-robin", false},      {"least-outstanding", false},
    {"power-of-two", false},     {"prefix-affinity", false},
    {"kv-aware", false},         {"latency-predictive", true},
    {"session-affinity", false},
};

const RouterInfo* FindRouter(const std::string& name) {
  for (const RouterInfo& info : kRouters) {
    if (name == info.name) return &info;
  }
  return nullptr;
}

absl::Status UnknownPolicy(const std::string& knob, const std::string& name) {
  return absl::InvalidArgumentError(
      absl::StrCat("router ", knob, ": unknown policy '", name,
                   "'; known: ", absl::StrJoin(RouterNames(), ", ")));
}

absl::Status Invalid(const char* knob, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("router ", knob, " ", why));
}

// Every knob is checked whatever the policy, so a typo fails at load time
// rather than when someone switches policies.
absl::Status Validate(const RouterConfig& c) {
  if (FindRouter(c.policy) == nullptr) return UnknownPolicy("policy", c.policy);
  if (!(c.load_bound_epsilon > 0) || !std::isfinite(c.load_bound_epsilon)) {
    return Invalid("load_bound_epsilon",
                   absl::StrCat("must be > 0, got ", c.load_bound_epsilon));
  }
  if (c.affinity_blocks <= 0) {
    return Invalid("affinity_blocks",
                   absl::StrCat("must be > 0, got ", c.affinity_blocks));
  }
  if (c.prefix_index_capacity <= 0) {
    return Invalid("prefix_index_capacity",
                   absl::StrCat("must be > 0, got ", c.prefix_index_capacity));
  }
  if (c.virtual_nodes <= 0 || c.virtual_nodes > 10000) {
    return Invalid("virtual_nodes",
                   absl::StrCat("must be in 1..10000, got ", c.virtual_nodes));
  }
  if (c.prefix_block_chars < 8 || c.prefix_block_chars > 65536) {
    return Invalid(
        "prefix_block_chars",
        absl::StrCat("must be in 8..65536, got ", c.prefix_block_chars));
  }
  if (c.session_capacity <= 0) {
    return Invalid("session_capacity",
                   absl::StrCat("must be > 0, got ", c.session_capacity));
  }
  const RouterInfo* fallback = FindRouter(c.session_fallback);
  if (fallback == nullptr) {
    return UnknownPolicy("session_fallback", c.session_fallback);
  }
  if (c.session_fallback == "session-affinity") {
    return Invalid("session_fallback", "cannot be session-affinity itself");
  }
  if (!(c.kv_weight >= 0) || !(c.queue_weight >= 0) ||
      !std::isfinite(c.kv_weight) || !std::isfinite(c.queue_weight) ||
      c.kv_weight + c.queue_weight <= 0) {
    return Invalid("kv_weight/queue_weight",
                   absl::StrCat("must be finite, >= 0 and not both 0, got ",
                                c.kv_weight, "/", c.queue_weight));
  }
  if (c.ttft.prefill_chunk_tokens <= 0) {
    return Invalid(
        "ttft.prefill_chunk_tokens",
        absl::StrCat("must be > 0, got ", c.ttft.prefill_chunk_tokens));
  }
  if (!(c.ttft.kv_full_fraction > 0 && c.ttft.kv_full_fraction <= 1)) {
    return Invalid(
        "ttft.kv_full_fraction",
        absl::StrCat("must be in (0, 1], got ", c.ttft.kv_full_fraction));
  }
  if (c.ttft.default_output_tokens <= 0) {
    return Invalid(
        "ttft.default_output_tokens",
        absl::StrCat("must be > 0, got ", c.ttft.default_output_tokens));
  }
  return absl::OkStatus();
}

std::unique_ptr<Router> Make(const std::string& policy,
                             const RouterConfig& config,
                             const LatencyModel* latency, uint64_t seed) {
  if (policy == "round-robin") return internal::NewRoundRobinRouter();
  if (policy == "least-outstanding") {
    return internal::NewLeastOutstandingRouter();
  }
  if (policy == "power-of-two") return internal::NewPowerOfTwoRouter(seed);
  if (policy == "prefix-affinity") {
    return internal::NewPrefixAffinityRouter(config);
  }
  if (policy == "kv-aware") return internal::NewKvAwareRouter(config);
  if (policy == "latency-predictive") {
    return internal::NewLatencyPredictiveRouter(config, *latency);
  }
  // session-affinity (Validate rejected anything else).
  return internal::NewSessionAffinityRouter(
      config, Make(config.session_fallback, config, latency, seed));
}

}  // namespace

std::vector<std::string> RouterNames() {
  std::vector<std::string> names;
  for (const RouterInfo& info : kRouters) names.push_back(info.name);
  return names;
}

absl::StatusOr<std::unique_ptr<Router>> MakeRouter(const RouterConfig& config,
                                                   const LatencyModel* latency,
                                                   uint64_t seed) {
  RETURN_IF_ERROR(Validate(config));
  const bool session = config.policy == "session-affinity";
  const std::string& effective =
      session ? config.session_fallback : config.policy;
  if (FindRouter(effective)->needs_latency_model && latency == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "router policy '", config.policy,
        session ? absl::StrCat("' (session_fallback '", effective, "')") : "'",
        " needs a latency model for the deployment's model and GPU; none "
        "was given"));
  }
  return Make(config.policy, config, latency, seed);
}

}  // namespace gpusched::serving
