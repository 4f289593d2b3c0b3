#include "config/serve_config.h"

#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "config/yaml_reader.h"
#include "serving/model_queue.h"

namespace gpusched::config {

bool ParseHostPort(absl::string_view text, HostPort* out) {
  const size_t colon = text.rfind(':');
  if (colon == absl::string_view::npos || colon == 0) return false;
  int port = 0;
  if (!absl::SimpleAtoi(text.substr(colon + 1), &port) || port < 0 ||
      port > 65535) {
    return false;
  }
  out->host = std::string(text.substr(0, colon));
  out->port = port;
  return true;
}

namespace {

class Parser : public YamlReader {
 public:
  using YamlReader::YamlReader;

  absl::StatusOr<ServeConfig> Parse(absl::string_view text) {
    ServeConfig cfg;
    cfg.source = source();
    RETURN_IF_ERROR(ParseDocument(
        text, [&](const YAML::Node& root) { ParseRoot(root, cfg); }));
    return cfg;
  }

 private:
  void HostPortField(const YAML::Node& n, const char* what, HostPort* out) {
    std::string s;
    if (Scalar(n, what, &s) && !ParseHostPort(s, out)) {
      Error(n, absl::StrCat(what, " must be host:port (port 0..65535), got '",
                            s, "'"));
    }
  }

  void StringList(const YAML::Node& n, const char* what,
                  std::vector<std::string>* out) {
    if (!n.IsSequence()) {
      Error(n, absl::StrCat(what, " must be a list, got ", YamlType(n)));
      return;
    }
    for (const YAML::Node& v : n) {
      std::string s;
      if (Scalar(v, what, &s)) out->push_back(s);
    }
  }

  void ParseRoot(const YAML::Node& root, ServeConfig& cfg) {
    if (!root.IsMap()) {
      Error(root, absl::StrCat("expected a config map, got ", YamlType(root)));
      return;
    }
    CheckKeys(
        root, "the config",
        {"listen", "state", "admin_key", "log_dir", "deployments", "tenants"});
    if (const YAML::Node l = root["listen"]) {
      HostPortField(l, "listen", &cfg.listen);
    }
    OptString(root, "state", &cfg.state);
    OptString(root, "admin_key", &cfg.admin_key);
    OptString(root, "log_dir", &cfg.log_dir);
    const YAML::Node deps = root["deployments"];
    if (!deps || !deps.IsSequence() || deps.size() == 0) {
      Error(deps ? deps : root, "deployments: at least one is required");
    } else {
      std::set<std::string> names;
      for (const YAML::Node& d : deps) ParseDeployment(d, cfg, names);
    }
    std::set<std::string> dep_names;
    for (const auto& d : cfg.deployments) dep_names.insert(d.name);
    const YAML::Node tenants = root["tenants"];
    if (!tenants || !tenants.IsSequence() || tenants.size() == 0) {
      Error(tenants ? tenants : root, "tenants: at least one is required");
    } else {
      std::set<std::string> names;
      for (const YAML::Node& t : tenants) ParseTenant(t, cfg, dep_names, names);
    }
  }

  void ParseDeployment(const YAML::Node& d, ServeConfig& cfg,
                       std::set<std::string>& names) {
    if (!d.IsMap()) {
      Error(d, absl::StrCat("a deployment must be a map, got ", YamlType(d)));
      return;
    }
    CheckKeys(d, "a deployment",
              {"name", "engine", "model", "args", "replicas", "endpoints",
               "max_ongoing_requests", "router", "queue"});
    ServeDeploymentSpec s;
    if (!d["name"]) Error(d, "a deployment needs a name");
    OptString(d, "name", &s.name);
    if (!s.name.empty() && !ValidName(s.name)) {
      Error(d["name"],
            absl::StrCat("deployment name '", s.name,
                         "' may hold letters, digits, '.', '_', '-'"));
    }
    if (!s.name.empty() && !names.insert(s.name).second) {
      Error(d["name"],
            absl::StrCat("deployment '", s.name, "' is declared twice"));
    }
    OptString(d, "engine", &s.engine);
    s.model = s.name;
    OptString(d, "model", &s.model);
    if (const YAML::Node a = d["args"]) StringList(a, "args", &s.args);
    OptInt(d, "replicas", 0, 1024, &s.replicas);
    if (const YAML::Node e = d["endpoints"]) {
      std::vector<std::string> list;
      StringList(e, "endpoints", &list);
      for (const std::string& ep : list) {
        HostPort hp;
        if (!ParseHostPort(ep, &hp) || hp.port == 0) {
          Error(e, absl::StrCat("endpoint '", ep, "' must be host:port"));
        } else {
          s.endpoints.push_back(hp);
        }
      }
    }
    if (s.replicas == 0 && s.endpoints.empty()) {
      Error(d, absl::StrCat("deployment '", s.name,
                            "': needs replicas >= 1 or endpoints"));
    }
    OptInt(d, "max_ongoing_requests", 1, 1 << 20, &s.max_ongoing_requests);
    if (const YAML::Node r = d["router"]) {
      CheckKeys(r, "router", {"policy", "load_bound_epsilon"});
      OptString(r, "policy", &s.router.policy);
      OptDouble(r, "load_bound_epsilon", 1e-6, 1e6,
                &s.router.load_bound_epsilon);
      const auto known = serving::RouterNames();
      if (std::find(known.begin(), known.end(), s.router.policy) ==
          known.end()) {
        Error(r, absl::StrCat("unknown router policy '", s.router.policy,
                              "' (known: ", absl::StrJoin(known, ", "), ")"));
      }
    }
    if (const YAML::Node q = d["queue"]) {
      CheckKeys(q, "queue", {"order", "max_queue_size"});
      OptString(q, "order", &s.queue_order);
      serving::QueueOrder o;
      const absl::Status st = serving::ParseQueueOrder(s.queue_order, &o);
      if (!st.ok()) Error(q, st.message());
      OptInt(q, "max_queue_size", int64_t{0}, int64_t{1} << 40,
             &s.max_queue_size);
    }
    cfg.deployments.push_back(std::move(s));
  }

  void ParseTenant(const YAML::Node& t, ServeConfig& cfg,
                   const std::set<std::string>& deployments,
                   std::set<std::string>& names) {
    if (!t.IsMap()) {
      Error(t, absl::StrCat("a tenant must be a map, got ", YamlType(t)));
      return;
    }
    CheckKeys(t, "a tenant",
              {"name", "models", "weight", "priority", "requests_per_minute",
               "tokens_per_minute"});
    ServeTenantSpec s;
    if (!t["name"]) Error(t, "a tenant needs a name");
    OptString(t, "name", &s.name);
    if (!s.name.empty() && !names.insert(s.name).second) {
      Error(t["name"], absl::StrCat("tenant '", s.name, "' is declared twice"));
    }
    if (const YAML::Node m = t["models"]) {
      StringList(m, "models", &s.models);
      for (const std::string& name : s.models) {
        if (!deployments.count(name)) {
          Error(m, absl::StrCat("tenant '", s.name, "': model '", name,
                                "' is not a deployment"));
        }
      }
    }
    OptDouble(t, "weight", 1e-9, 1e9, &s.weight);
    OptString(t, "priority", &s.priority);
    OptDouble(t, "requests_per_minute", 0, 1e12, &s.limits.requests_per_minute);
    OptDouble(t, "tokens_per_minute", 0, 1e15, &s.limits.tokens_per_minute);
    cfg.tenants.push_back(std::move(s));
  }
};

}  // namespace

absl::StatusOr<ServeConfig> ParseServeYaml(absl::string_view text,
                                           std::string source) {
  return Parser(std::move(source)).Parse(text);
}

absl::StatusOr<ServeConfig> LoadServeFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::stringstream ss;
  ss << f.rdbuf();
  return ParseServeYaml(ss.str(), path);
}

}  // namespace gpusched::config
