// What each gpusched instance of an HA installation says of its own data
// plane (docs/ha.md, "Every instance serves"), and what the instances make
// of it together:
//
// - Each instance publishes an InstanceLoad under its own lease
//   (store::Election::Publish, name "load") every ControllerOptions::
//   load_period, and at once when a request is held at zero replicas: per
//   deployment its queue, in-flight and held requests and the TTFTs seen
//   since its last document; per tenant its demand (requests and tokens
//   per minute that reached admission, smoothed).
// - The leader's autoscaler adds the other instances' loads to its own,
//   so N instances sharing the load decide what one instance
//   with all of it decides; a request held on any instance scales from
//   zero.
// - Every instance takes its share of each tenant's limits (TenantShares):
//   rates and bucket depths in proportion to its demand, with a reserve of
//   kShareReserve spread evenly so an idle instance can still admit; the
//   concurrency and queue bounds as whole slots by the largest remainder,
//   in instance order. Every instance computes the same shares from the
//   same documents, so they sum to the whole limit.
//
// Pure functions and plain data; thread-safe as values are.
#ifndef GPUSCHED_RUNTIME_INSTANCE_LOAD_H_
#define GPUSCHED_RUNTIME_INSTANCE_LOAD_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "serving/admission.h"

namespace gpusched::runtime {

// Bounds on what a document may carry (a bad or hostile document is cut,
// never trusted beyond them).
inline constexpr int kMaxLoadDeployments = 10000;
inline constexpr int kMaxLoadTenants = 10000;
inline constexpr int kMaxTtftSamples = 256;  // per deployment and document
// Of each limit, this part is spread evenly over the instances, the rest
// by demand.
inline constexpr double kShareReserve = 0.1;

struct DeploymentLoadDoc {
  int64_t queued = 0;
  int64_t in_flight = 0;
  int64_t held = 0;
  // How long the oldest held request had waited when the document was
  // written (ms; 0 when none is held).
  int64_t held_ms = 0;
  std::vector<double> ttft_s;  // first tokens since the previous document
};

struct TenantDemand {
  double requests_per_minute = 0;
  double tokens_per_minute = 0;
};

struct InstanceLoad {
  int64_t seq = 0;  // grows with every document of the instance
  std::map<std::string, DeploymentLoadDoc> deployments;
  std::map<std::string, TenantDemand> tenants;
};

std::string LoadToJson(const InstanceLoad& load);
// InvalidArgument naming the field; bounds enforced (kMax*).
absl::StatusOr<InstanceLoad> LoadFromJson(const std::string& text);

// `self`'s shares of each limited tenant's limits, from every live
// instance's document (`loads`, `self` included; instances are ordered by
// id). A tenant without limits, or a single instance, gets all of them
// (left out of the result).
std::map<std::string, serving::TenantShare> TenantShares(
    const std::string& self, const std::map<std::string, InstanceLoad>& loads,
    const std::map<std::string, serving::TenantLimits>& limits);

// Whole slots of `total` for each of `weights` (>= 0; all 0: equal), by the
// largest remainder, ties to the lower index; they sum to `total`.
std::vector<int64_t> Apportion(int64_t total,
                               const std::vector<double>& weights);

}  // namespace gpusched::runtime

#endif  // GPUSCHED_RUNTIME_INSTANCE_LOAD_H_
