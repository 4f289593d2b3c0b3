// The `gpusched serve` configuration (first version: the platform started
// from one file). Every field, with its default:
//
//   listen: 127.0.0.1:8080        # host:port of the gateway (port 0: any)
//   state: gpusched-state.db      # SQLite state (":memory:" for none)
//   admin_key: ""                 # optional admin API key (gs-...)
//   log_dir: gpusched-logs        # engine stdout/stderr, one pair per replica
//   deployments:                  # required, at least one
//     - name: chat                # required, unique
//       engine: reference         # engine template (docs/engines.md)
//       model: chat               # the template's {model}
//       args: []                  # extra engine arguments, verbatim
//       replicas: 1               # engine processes to launch
//       endpoints: []             # or attach to running engines: host:port
//       max_ongoing_requests: 32
//       router: {policy: least-outstanding}   # serving/router.h knobs
//       queue: {order: fair, max_queue_size: 0}
//   tenants:                      # required, at least one
//     - name: demo
//       models: []                # deployments it may use; empty = all
//       weight: 1
//       priority: standard
//       requests_per_minute: 0    # 0: unlimited
//       tokens_per_minute: 0
//
// Each start creates one API key per tenant and prints it (keys are stored
// hashed only). Errors name the file and line; every problem is listed.
#ifndef GPUSCHED_CONFIG_SERVE_CONFIG_H_
#define GPUSCHED_CONFIG_SERVE_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "serving/admission.h"
#include "serving/router.h"

namespace gpusched::config {

struct HostPort {
  std::string host = "127.0.0.1";
  int port = 0;
};

struct ServeDeploymentSpec {
  std::string name;
  std::string engine = "reference";
  std::string model;
  std::vector<std::string> args;
  int replicas = 1;
  std::vector<HostPort> endpoints;
  int max_ongoing_requests = 32;
  serving::RouterConfig router;
  std::string queue_order = "fair";
  int64_t max_queue_size = 0;
};

struct ServeTenantSpec {
  std::string name;
  std::vector<std::string> models;
  double weight = 1;
  std::string priority = "standard";
  serving::TenantLimits limits;
};

struct ServeConfig {
  std::string source;
  HostPort listen{"127.0.0.1", 8080};
  std::string state = "gpusched-state.db";
  std::string admin_key;
  std::string log_dir = "gpusched-logs";
  std::vector<ServeDeploymentSpec> deployments;
  std::vector<ServeTenantSpec> tenants;
};

// "host:port" with port 0..65535.
bool ParseHostPort(absl::string_view text, HostPort* out);

absl::StatusOr<ServeConfig> ParseServeYaml(absl::string_view text,
                                           std::string source);
absl::StatusOr<ServeConfig> LoadServeFile(const std::string& path);

}  // namespace gpusched::config

#endif  // GPUSCHED_CONFIG_SERVE_CONFIG_H_
