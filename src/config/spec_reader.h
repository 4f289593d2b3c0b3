// SpecReader: reads a Deployment or Tenant spec (config/manifest.h) from a
// YAML map. The manifest parser reads `spec:` with it and the serve config
// (config/serve_config.h) reads each `deployments:` and `tenants:` item with
// it, so both accept exactly the same fields with the same messages.
// Internal to config/. Thread-compatible.
//
// Messages name the field by its path ("spec.replicas: must be an integer
// >= 0, got 'two'"). After reading, the spec is cross-checked
// (CheckDeployment, CheckTenant) and each problem is reported at the line of
// the field it names; a problem about a field that already has an error is
// not repeated.
#ifndef GPUSCHED_CONFIG_SPEC_READER_H_
#define GPUSCHED_CONFIG_SPEC_READER_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "config/manifest.h"
#include "config/model_route.h"
#include "config/yaml_reader.h"
#include "yaml-cpp/yaml.h"

namespace gpusched::config {

// Bounds on what a spec may hold (docs/control-api.md, "Bounds"): a count
// or list beyond them is a problem naming the field and the bound, so no
// manifest can make the controller hold or start an unbounded amount.
inline constexpr int kMaxReplicas = 1000;     // replicas, min/max, desired
inline constexpr int kMaxListItems = 256;     // args, env, labels, endpoints
inline constexpr int kMaxStringBytes = 4096;  // one string value

class SpecReader : public YamlReader {
 public:
  using YamlReader::YamlReader;

  // Reads the map `spec` (an undefined node reads as empty; `at` then gives
  // the line) into `d`, whose name must be set (the model defaults to it).
  // `path` prefixes field names ("spec", "deployments[0]"); `extra` are
  // further keys the caller reads itself (the serve config's `name`).
  // Problems are checked against `classes`.
  void ReadDeployment(const YAML::Node& spec, const YAML::Node& at,
                      const std::string& path,
                      const std::vector<absl::string_view>& extra,
                      const std::vector<std::string>& classes,
                      DeploymentSpec* d);
  void ReadTenant(const YAML::Node& spec, const YAML::Node& at,
                  const std::string& path,
                  const std::vector<absl::string_view>& extra,
                  const std::vector<std::string>& classes, TenantSpec* t);

  // Reads a ModelRoute's `spec` (config/model_route.h) into `r`, whose
  // name is set; `at` gives the line when `spec` is missing.
  // `extra`: further keys the caller reads itself (the sim config's name).
  void ReadModelRoute(const YAML::Node& spec, const YAML::Node& at,
                      ModelRouteSpec* r,
                      const std::vector<absl::string_view>& extra = {});

  // A required object name (ValidObjectName) at `map[key]`.
  void ReadName(const YAML::Node& map, const char* key, const std::string& path,
                std::string* out);

  // Typed fields: each reports "path: must be ..." and returns false on a
  // bad value, leaving `out` unchanged. An `hi` at the type's maximum is
  // "no upper bound" in messages.
  void Fail(const YAML::Node& at, const std::string& path,
            absl::string_view what);
  bool String(const YAML::Node& n, const std::string& path, std::string* out);
  bool Int(const YAML::Node& n, const std::string& path, int64_t lo, int64_t hi,
           int64_t* out);
  bool Int(const YAML::Node& n, const std::string& path, int lo, int* out);
  bool Int(const YAML::Node& n, const std::string& path, int lo, int hi,
           int* out);
  bool Number(const YAML::Node& n, const std::string& path, double lo,
              bool lo_open, double* out);
  // A number in lo..hi.
  bool Bounded(const YAML::Node& n, const std::string& path, double lo,
               double hi, double* out);
  bool StringList(const YAML::Node& n, const std::string& path,
                  std::vector<std::string>* out);
  bool StringMap(const YAML::Node& n, const std::string& path,
                 std::map<std::string, std::string>* out);
  // `n` is a map; else reports it and returns false.
  bool Map(const YAML::Node& n, const std::string& path);

  // Reports `problems` ("spec.x.y: what", from CheckDeployment/CheckTenant)
  // with "spec" replaced by `path`, each at the line of the deepest field of
  // `spec` it names (else at `at`); skips those about fields already
  // reported.
  void ReportProblems(const std::vector<std::string>& problems,
                      const YAML::Node& spec, const YAML::Node& at,
                      const std::string& path);

 private:
  void ReadResources(const YAML::Node& r, const std::string& path,
                     ResourceSpec* out);
  // After replicas and slo: sets d->autoscaling and min/max/desired.
  void ReadAutoscaling(const YAML::Node& a, const YAML::Node& replicas,
                       const std::string& path, DeploymentSpec* d);
  void ReadReplicas(const YAML::Node& r, const std::string& path,
                    DeploymentSpec* d);
  bool AlreadyReported(absl::string_view path) const;

  std::vector<std::string> failed_paths_;
};

}  // namespace gpusched::config

#endif  // GPUSCHED_CONFIG_SPEC_READER_H_
