// The control CLI's views of the control API's JSON answers: reads that
// never throw (the server's answers are input), formatting (sizes, ages,
// resources), one table per kind (`gpusched get`) and the `describe` pages.
// Used by cli/ctl.cc; stateless, thread-compatible.
#ifndef GPUSCHED_CLI_VIEWS_H_
#define GPUSCHED_CLI_VIEWS_H_

#include <initializer_list>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace gpusched::cli {

using Json = nlohmann::ordered_json;
using Rows = std::vector<std::vector<std::string>>;

// One kind `gpusched get` knows.
struct KindInfo {
  const char* plural;    // also the path under /api/v1
  const char* singular;  // in messages and "kind/name"
  bool get_one;          // has GET /api/v1/{plural}/{name}
  // Without get_one: NAME is this query parameter, or else filters the list
  // on `field`.
  const char* query;
  const char* field;
  Rows (*rows)(const Json& items, absl::Time now);
  // Other names it answers to, space-separated ("modelroute modelroutes").
  const char* aliases = "";
  // The kinds `apply` takes (get_one too): `describe` shows the object with
  // `describe` and its events (GET /api/v1/events?{events}=NAME); `delete`
  // is DELETE /api/v1/{plural}/{name}.
  void (*describe)(const Json& object, absl::Time now,
                   std::ostream& out) = nullptr;
  const char* events = nullptr;
};

const Json* Find(const Json& j, std::initializer_list<const char*> path);
std::string Dump(const Json& j, int indent = -1);
std::string Text(const Json* v, const std::string& none = "");
std::string Text(const Json& j, std::initializer_list<const char*> path,
                 const std::string& none = "");
std::string Cell(const Json& j, std::initializer_list<const char*> path);
double Number(const Json& j, std::initializer_list<const char*> path);
const Json& Array(const Json& j, std::initializer_list<const char*> path);
std::string KeyValues(const Json* obj);
std::string Lower(std::string s);
std::string Indent(const std::string& text);
std::string FormatMiB(double mib);
std::optional<absl::Time> ParseRfc3339(const std::string& s);
std::string FormatAge(absl::Duration d);
std::string Age(const Json& j, std::initializer_list<const char*> path,
                absl::Time now);
std::string EventTime(const Json& e);
std::string Resources(const Json& d);
std::string Replicas(const Json& d);
std::string Engine(const Json& d);
std::string ReplicaGpus(const Json& r);
Rows DeploymentRows(const Json& items, absl::Time now);
Rows ReplicaRows(const Json& items, absl::Time);
Rows TenantRows(const Json& items, absl::Time);
Rows GpuRows(const Json& items, absl::Time);
Rows NodeRows(const Json& items, absl::Time);
Rows QueueRows(const Json& items, absl::Time);
Rows AlertRows(const Json& items, absl::Time now);
Rows EventRows(const Json& items, absl::Time);
Rows RouteRows(const Json& items, absl::Time now);
Rows InstanceRows(const Json& items, absl::Time now);
// A route's weights and rollout (`gpusched rollout status`).
void DescribeRollout(const Json& route, std::ostream& out);
// By plural, singular or alias, in any case.
const KindInfo* FindKind(const std::string& name);
// "deployments, replicas, ..." (with each one's aliases in parentheses).
std::string KnownKinds();
// The kinds `describe` and `delete` take: "deployment, tenant or route".
std::string ObjectKinds();
std::string Labels(const Json& obj);
std::string Created(const Json& obj, absl::Time now);
void DescribeDeployment(const Json& d, absl::Time now, std::ostream& out);
void DescribeTenant(const Json& t, absl::Time now, std::ostream& out);
// A ModelRoute: its fields, weights and rollout (DescribeRollout).
void DescribeRoute(const Json& r, absl::Time now, std::ostream& out);
// "parked by route X" for a deployment a route holds at 0 replicas, else "".
std::string Parked(const Json& d);

}  // namespace gpusched::cli

#endif  // GPUSCHED_CLI_VIEWS_H_
