#include "config/serve_config.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "config/capacity_config.h"
#include "config/quantity.h"
#include "config/spec_reader.h"

namespace gpusched::config {
namespace {

class Parser : public SpecReader {
 public:
  Parser(std::string source, std::string base_dir)
      : SpecReader(std::move(source)), base_dir_(std::move(base_dir)) {}

  absl::StatusOr<ServeConfig> Parse(absl::string_view text) {
    ServeConfig cfg;
    cfg.source = source();
    RETURN_IF_ERROR(ParseDocument(
        text, [&](const YAML::Node& root) { ParseRoot(root, cfg); }));
    return cfg;
  }

 private:
  // A path relative to the config file's directory.
  void PathField(const YAML::Node& n, const std::string& field,
                 std::string* out) {
    std::string s;
    if (!String(n, field, &s)) return;
    if (s.empty()) {
      Fail(n, field, "must not be empty");
      return;
    }
    const std::filesystem::path p(s);
    *out = p.is_relative() && !base_dir_.empty()
               ? (std::filesystem::path(base_dir_) / p).string()
               : s;
  }

  void ParseRoot(const YAML::Node& root, ServeConfig& cfg) {
    if (!root.IsMap()) {
      Error(root, absl::StrCat("expected a config map, got ", YamlType(root)));
      return;
    }
    CheckKeys(root, "the config",
              {"listen",
               "state",
               "admin_key",
               "admin_key_file",
               "key_dir",
               "log_dir",
               "inventory",
               "gpu_discovery",
               "placement_policy",
               "tls",
               "health_check_period_ms",
               "drain_grace_s",
               "drain_delay_s",
               "swap_min_idle_s",
               "max_launches_per_pass",
               "launch_interval_ms",
               "gpu_prices",
               "alerts",
               "store",
               "ha",
               "audit",
               "oidc",
               "stop_replicas_on_exit",
               "capacity",
               "slurm",
               "kubernetes",
               "deployments",
               "tenants"});
    if (const YAML::Node n = root["store"]; n && Map(n, "store")) {
      CheckKeys(n, "store", {"etcd"});
      if (const YAML::Node e = n["etcd"]; e && Map(e, "store.etcd")) {
        ParseEtcd(e, cfg);
        if (root["state"]) {
          Fail(root["state"], "state",
               "cannot be used with store.etcd: the state lives in etcd");
        }
      }
    }
    if (const YAML::Node n = root["ha"]; n && Map(n, "ha")) ParseHa(n, cfg);
    if (const YAML::Node n = root["audit"]; n && Map(n, "audit")) {
      CheckKeys(n, "audit", {"export_path", "max_records", "max_age_days"});
      if (const YAML::Node v = n["export_path"]) {
        PathField(v, "audit.export_path", &cfg.audit.export_path);
      }
      OptInt(n, "max_records", 1, 10000000, &cfg.audit.max_records);
      OptInt(n, "max_age_days", 1, 3650, &cfg.audit.max_age_days);
    }
    if (const YAML::Node n = root["oidc"]; n && Map(n, "oidc")) {
      ParseOidc(n, cfg.oidc);
    }
    if (const YAML::Node n = root["stop_replicas_on_exit"]) {
      Bool(n, "stop_replicas_on_exit", &cfg.stop_replicas_on_exit);
    }
    if (const YAML::Node n = root["listen"]) {
      std::string s;
      if (String(n, "listen", &s) && !ParseHostPort(s, &cfg.listen)) {
        Fail(n, "listen",
             absl::StrCat("must be host:port (port 0..65535), got '", s, "'"));
      }
    }
    if (const YAML::Node n = root["state"]) String(n, "state", &cfg.state);
    if (const YAML::Node n = root["admin_key_file"]) {
      PathField(n, "admin_key_file", &cfg.admin_key_file);
      if (root["admin_key"]) {
        Fail(n, "admin_key_file", "give admin_key or admin_key_file, not both");
      }
    }
    if (const YAML::Node n = root["admin_key"]) {
      String(n, "admin_key", &cfg.admin_key);
    }
    if (const YAML::Node n = root["key_dir"]) {
      String(n, "key_dir", &cfg.key_dir);
    }
    if (const YAML::Node n = root["log_dir"])
      String(n, "log_dir", &cfg.log_dir);
    if (const YAML::Node n = root["inventory"]) {
      PathField(n, "inventory", &cfg.inventory);
    }
    if (const YAML::Node n = root["gpu_discovery"];
        n && String(n, "gpu_discovery", &cfg.gpu_discovery) &&
        cfg.gpu_discovery != "auto" && cfg.gpu_discovery != "nvml" &&
        cfg.gpu_discovery != "declared") {
      Fail(n, "gpu_discovery",
           absl::StrCat("must be auto, nvml or declared, got '",
                        cfg.gpu_discovery, "'"));
    }
    if (const YAML::Node n = root["placement_policy"];
        n && String(n, "placement_policy", &cfg.placement_policy) &&
        cfg.placement_policy.empty()) {
      Fail(n, "placement_policy", "must not be empty");
    }
    if (const YAML::Node t = root["tls"]; t && Map(t, "tls")) {
      CheckKeys(t, "tls", {"cert", "key"});
      if (!t["cert"] != !t["key"]) {
        Fail(t, "tls", "set both cert and key, or neither");
      } else if (t["cert"]) {
        PathField(t["cert"], "tls.cert", &cfg.tls.cert);
        PathField(t["key"], "tls.key", &cfg.tls.key);
      }
    }
    if (const YAML::Node n = root["health_check_period_ms"]) {
      Int(n, "health_check_period_ms", 1, std::numeric_limits<int64_t>::max(),
          &cfg.health_check_period_ms);
    }
    if (const YAML::Node n = root["swap_min_idle_s"]) {
      Number(n, "swap_min_idle_s", 0, false, &cfg.swap_min_idle_s);
    }
    if (const YAML::Node n = root["capacity"]) {
      ParseCapacitySpec(*this, n, /*with_pools=*/true, base_dir_,
                        &cfg.capacity);
    }
    if (const YAML::Node n = root["max_launches_per_pass"]) {
      Int(n, "max_launches_per_pass", 1, 100000, &cfg.max_launches_per_pass);
    }
    if (const YAML::Node n = root["launch_interval_ms"]) {
      Int(n, "launch_interval_ms", 0, 60000, &cfg.launch_interval_ms);
    }
    if (const YAML::Node n = root["drain_grace_s"]) {
      Number(n, "drain_grace_s", 0, false, &cfg.drain_grace_s);
    }
    if (const YAML::Node n = root["drain_delay_s"]) {
      Bounded(n, "drain_delay_s", 0, 600, &cfg.drain_delay_s);
    }
    if (const YAML::Node n = root["gpu_prices"]; n && Map(n, "gpu_prices")) {
      for (const auto& kv : n) {
        const std::string model = kv.first.as<std::string>();
        double price = 0;
        if (Number(kv.second, absl::StrCat("gpu_prices.", model), 0, false,
                   &price)) {
          cfg.gpu_prices[model] = price;
        }
      }
    }
    if (const YAML::Node n = root["alerts"]; n && Map(n, "alerts")) {
      ParseAlerts(n, cfg);
    }
    if (const YAML::Node n = root["slurm"]; n && Map(n, "slurm")) {
      ParseSlurm(n, cfg);
      if (root["inventory"]) {
        Fail(root["inventory"], "inventory",
             "cannot be used with slurm: the nodes come from Slurm");
      }
    }
    if (const YAML::Node n = root["kubernetes"]; n && Map(n, "kubernetes")) {
      ParseKubernetes(n, cfg);
      if (root["inventory"]) {
        Fail(root["inventory"], "inventory",
             "cannot be used with kubernetes: the nodes come from the API");
      }
      if (root["slurm"]) {
        Fail(n, "kubernetes", "cannot be used with slurm: choose one");
      }
    }
    ParseList(root, "deployments",
              [&](const YAML::Node& item, const std::string& path) {
                DeploymentSpec d;
                ReadName(item, "name", path + ".name", &d.name);
                ReadDeployment(item, item, path, {"name"},
                               DefaultPriorityClasses(), &d);
                // Zero replicas only where autoscaling brings them up.
                if (d.replicas == 0 && d.endpoints.empty() &&
                    !(d.autoscaling && d.autoscaling->max_replicas > 0)) {
                  Fail(item["replicas"] ? item["replicas"] : item,
                       path + ".replicas", "needs replicas >= 1 or endpoints");
                }
                cfg.deployments.push_back(std::move(d));
                return cfg.deployments.back().name;
              });
    ParseList(
        root, "tenants", [&](const YAML::Node& item, const std::string& path) {
          TenantSpec t;
          ReadName(item, "name", path + ".name", &t.name);
          ReadTenant(item, item, path, {"name"}, DefaultPriorityClasses(), &t);
          cfg.tenants.push_back(std::move(t));
          return cfg.tenants.back().name;
        });
  }

  void ParseEtcd(const YAML::Node& n, ServeConfig& cfg) {
    EtcdConfig& e = cfg.etcd;
    e.enabled = true;
    CheckKeys(n, "store.etcd",
              {"endpoints", "prefix", "username", "password_file", "ca", "cert",
               "key", "request_timeout_ms", "connect_timeout_ms", "max_events",
               "max_event_age_h"});
    if (const YAML::Node v = n["endpoints"];
        v && StringList(v, "store.etcd.endpoints", &e.endpoints)) {
      if (e.endpoints.empty() || e.endpoints.size() > 16) {
        Fail(v, "store.etcd.endpoints",
             absl::StrCat("has ", e.endpoints.size(),
                          " endpoints; give 1..16 (the members' client URLs)"));
      }
      for (const std::string& url : e.endpoints) {
        const bool scheme =
            url.rfind("http://", 0) == 0 || url.rfind("https://", 0) == 0;
        if (!scheme || url.size() > 512) {
          Fail(v, "store.etcd.endpoints",
               absl::StrCat("'", url,
                            "' is not an http:// or https:// URL of a member "
                            "(e.g. http://10.0.0.1:2379)"));
        }
      }
    }
    if (const YAML::Node v = n["prefix"];
        v && String(v, "store.etcd.prefix", &e.prefix)) {
      if (e.prefix.size() < 2 || e.prefix.size() > 256 ||
          e.prefix.front() != '/' || e.prefix.back() != '/') {
        Fail(v, "store.etcd.prefix",
             "must start and end with '/' and name something, e.g. "
             "/gpusched/ (at most 256 bytes)");
      }
    }
    if (const YAML::Node v = n["username"]) {
      String(v, "store.etcd.username", &e.username);
    }
    for (auto [key, out] :
         {std::pair{"password_file", &e.password_file}, std::pair{"ca", &e.ca},
          std::pair{"cert", &e.cert}, std::pair{"key", &e.key}}) {
      if (const YAML::Node v = n[key]) {
        PathField(v, absl::StrCat("store.etcd.", key), out);
      }
    }
    if (e.username.empty() != e.password_file.empty()) {
      Fail(n, "store.etcd.username",
           "username and password_file go together (etcd's user "
           "authentication), or neither");
    }
    if (e.cert.empty() != e.key.empty()) {
      Fail(n, "store.etcd.cert",
           "a client cert needs its key, and a key its cert");
    }
    if (const YAML::Node v = n["request_timeout_ms"]) {
      Int(v, "store.etcd.request_timeout_ms", 100, 60000,
          &e.request_timeout_ms);
    }
    if (const YAML::Node v = n["connect_timeout_ms"]) {
      Int(v, "store.etcd.connect_timeout_ms", 100, 600000,
          &e.connect_timeout_ms);
    }
    if (const YAML::Node v = n["max_events"]) {
      Int(v, "store.etcd.max_events", 100, 1000000, &e.max_events);
    }
    if (const YAML::Node v = n["max_event_age_h"]) {
      Int(v, "store.etcd.max_event_age_h", 1, 8760, &e.max_event_age_h);
    }
  }

  void ParseAlerts(const YAML::Node& n, ServeConfig& cfg) {
    AlertsConfig& a = cfg.alerts;
    CheckKeys(
        n, "alerts",
        {"prometheus_url", "runbook_base_url", "timeout_ms", "max_alerts"});
    if (const YAML::Node v = n["prometheus_url"];
        v && String(v, "alerts.prometheus_url", &a.prometheus_url) &&
        !a.prometheus_url.empty() &&
        (a.prometheus_url.rfind("http://", 0) != 0 ||
         a.prometheus_url.size() > 512)) {
      Fail(v, "alerts.prometheus_url",
           "must be an http://host:port URL of a Prometheus (https is not "
           "supported)");
    }
    if (const YAML::Node v = n["runbook_base_url"];
        v && String(v, "alerts.runbook_base_url", &a.runbook_base_url) &&
        a.runbook_base_url.size() > 512) {
      Fail(v, "alerts.runbook_base_url", "must be at most 512 characters");
    }
    if (const YAML::Node v = n["timeout_ms"]) {
      Int(v, "alerts.timeout_ms", 100, 30000, &a.timeout_ms);
    }
    if (const YAML::Node v = n["max_alerts"]) {
      Int(v, "alerts.max_alerts", 1, 10000, &a.max_alerts);
    }
  }

  void ParseOidc(const YAML::Node& n, OidcConfig& o) {
    o.enabled = true;
    CheckKeys(n, "oidc",
              {"issuer", "audience", "jwks_file", "jwks_url", "jwks_refresh_s",
               "leeway_s", "subject_claim", "groups_claim", "tenant_claim",
               "claim_roles"});
    OptString(n, "issuer", &o.issuer);
    OptString(n, "audience", &o.audience);
    if (const YAML::Node v = n["jwks_file"]) {
      PathField(v, "oidc.jwks_file", &o.jwks_file);
    }
    OptString(n, "jwks_url", &o.jwks_url);
    OptInt(n, "jwks_refresh_s", 1, 86400, &o.jwks_refresh_s);
    OptInt(n, "leeway_s", 0, 300, &o.leeway_s);
    OptString(n, "subject_claim", &o.subject_claim);
    OptString(n, "groups_claim", &o.groups_claim);
    OptString(n, "tenant_claim", &o.tenant_claim);
    if (o.issuer.empty()) Fail(n, "oidc.issuer", "required");
    if (o.audience.empty()) Fail(n, "oidc.audience", "required");
    if (o.jwks_file.empty() == o.jwks_url.empty()) {
      Fail(n, "oidc", "give one of jwks_file and jwks_url");
    }
    if (const YAML::Node list = n["claim_roles"]) {
      if (!list.IsSequence() || list.size() > 256) {
        Fail(list, "oidc.claim_roles", "must be a list of at most 256 items");
        return;
      }
      for (size_t i = 0; i < list.size(); ++i) {
        const std::string path = absl::StrCat("oidc.claim_roles[", i, "]");
        if (!Map(list[i], path)) continue;
        CheckKeys(list[i], path, {"claim", "value", "role", "tenant"});
        OidcClaimRole m;
        OptString(list[i], "claim", &m.claim);
        OptString(list[i], "value", &m.value);
        OptString(list[i], "role", &m.role);
        OptString(list[i], "tenant", &m.tenant);
        if (m.claim.empty() || m.value.empty() || m.role.empty()) {
          Fail(list[i], path, "claim, value and role are required");
        }
        o.claim_roles.push_back(std::move(m));
      }
    }
  }

  void ParseHa(const YAML::Node& n, ServeConfig& cfg) {
    HaConfig& h = cfg.ha;
    CheckKeys(n, "ha",
              {"instance_id", "advertise", "lease_ttl_s", "renew_interval_ms"});
    if (const YAML::Node v = n["instance_id"];
        v && String(v, "ha.instance_id", &h.instance_id)) {
      const bool ok =
          !h.instance_id.empty() && h.instance_id.size() <= 128 &&
          std::all_of(h.instance_id.begin(), h.instance_id.end(), [](char c) {
            return std::isalnum(static_cast<unsigned char>(c)) || c == '.' ||
                   c == '_' || c == '-' || c == ':';
          });
      if (!ok) {
        Fail(v, "ha.instance_id",
             "must be 1..128 letters, digits, '.', '_', '-' or ':'");
      }
    }
    if (const YAML::Node v = n["advertise"];
        v && String(v, "ha.advertise", &h.advertise)) {
      const bool scheme = h.advertise.rfind("http://", 0) == 0 ||
                          h.advertise.rfind("https://", 0) == 0;
      if (!scheme || h.advertise.size() > 512) {
        Fail(v, "ha.advertise",
             "must be the http:// or https:// URL other instances reach this "
             "one at");
      }
    }
    if (const YAML::Node v = n["lease_ttl_s"]) {
      Int(v, "ha.lease_ttl_s", 1, 3600, &h.lease_ttl_s);
    }
    if (const YAML::Node v = n["renew_interval_ms"]) {
      Int(v, "ha.renew_interval_ms", 0, 1800000, &h.renew_interval_ms);
      if (h.renew_interval_ms * 3 >= h.lease_ttl_s * 2000) {
        Fail(v, "ha.renew_interval_ms",
             "must be less than two thirds of ha.lease_ttl_s (a second "
             "renewal must fit in the lease)");
      }
    }
  }

  void ParseSlurm(const YAML::Node& n, ServeConfig& cfg) {
    SlurmConfig& s = cfg.slurm;
    s.enabled = true;
    CheckKeys(n, "slurm",
              {"partition", "account", "qos", "job_prefix", "bin_dir",
               "poll_interval_ms", "command_timeout_ms", "default_memory_mib",
               "gres_map"});
    // Words passed to sbatch as they are: no spaces, commas or quotes.
    auto word = [&](const char* key, std::string* out) {
      const YAML::Node v = n[key];
      if (!v || !String(v, absl::StrCat("slurm.", key), out)) return;
      if (out->size() > 256 ||
          out->find_first_of(" \t\n,'\"=") != std::string::npos) {
        Fail(v, absl::StrCat("slurm.", key),
             "must be one word of at most 256 characters (no spaces, commas, "
             "quotes or '=')");
      }
    };
    word("partition", &s.partition);
    word("account", &s.account);
    word("qos", &s.qos);
    if (const YAML::Node v = n["job_prefix"];
        v && String(v, "slurm.job_prefix", &s.job_prefix)) {
      const bool ok =
          !s.job_prefix.empty() && s.job_prefix.size() <= 32 &&
          std::all_of(s.job_prefix.begin(), s.job_prefix.end(), [](char c) {
            return std::isalnum(static_cast<unsigned char>(c)) || c == '_' ||
                   c == '-';
          });
      if (!ok) {
        Fail(v, "slurm.job_prefix",
             "must be 1..32 letters, digits, '_' or '-'");
      }
    }
    if (const YAML::Node v = n["bin_dir"]) {
      PathField(v, "slurm.bin_dir", &s.bin_dir);
    }
    if (const YAML::Node v = n["poll_interval_ms"]) {
      Int(v, "slurm.poll_interval_ms", 100, 60000, &s.poll_interval_ms);
    }
    if (const YAML::Node v = n["command_timeout_ms"]) {
      Int(v, "slurm.command_timeout_ms", 100, 600000, &s.command_timeout_ms);
    }
    if (const YAML::Node v = n["default_memory_mib"]) {
      Int(v, "slurm.default_memory_mib", 1, 16777216, &s.default_memory_mib);
    }
    if (const YAML::Node v = n["gres_map"];
        v && StringMap(v, "slurm.gres_map", &s.gres_map) &&
        s.gres_map.size() > 256) {
      Fail(v, "slurm.gres_map",
           absl::StrCat("has ", s.gres_map.size(), " entries; at most 256"));
    }
  }

  void ParseKubernetes(const YAML::Node& n, ServeConfig& cfg) {
    KubernetesConfig& k = cfg.kubernetes;
    k.enabled = true;
    CheckKeys(
        n, "kubernetes",
        {"api_server", "kubeconfig", "namespace", "instance", "node_selector",
         "tolerations", "image", "images", "engine_path", "scheduler_name",
         "service_account", "product_map", "request_timeout_ms",
         "default_memory_mib", "pools", "pool_labels", "karpenter_nodepools"});
    if (const YAML::Node v = n["api_server"]) {
      String(v, "kubernetes.api_server", &k.api_server);
    }
    if (const YAML::Node v = n["kubeconfig"]) {
      PathField(v, "kubernetes.kubeconfig", &k.kubeconfig);
    }
    // DNS-1123 names (namespace, instance, scheduler, service account).
    auto dns = [&](const char* key, std::string* out, size_t max) {
      const YAML::Node v = n[key];
      if (!v || !String(v, absl::StrCat("kubernetes.", key), out)) return;
      const bool ok = !out->empty() && out->size() <= max &&
                      std::all_of(out->begin(), out->end(),
                                  [](char c) {
                                    return (c >= 'a' && c <= 'z') ||
                                           (c >= '0' && c <= '9') || c == '-';
                                  }) &&
                      out->front() != '-' && out->back() != '-';
      if (!ok) {
        Fail(v, absl::StrCat("kubernetes.", key),
             absl::StrCat("must be 1..", max,
                          " lowercase letters, digits or '-', starting and "
                          "ending with a letter or digit"));
      }
    };
    dns("namespace", &k.namespace_name, 63);
    dns("instance", &k.instance, 20);
    dns("scheduler_name", &k.scheduler_name, 63);
    dns("service_account", &k.service_account, 63);
    auto bounded_map = [&](const char* key,
                           std::map<std::string, std::string>* out) {
      const YAML::Node v = n[key];
      if (v && StringMap(v, absl::StrCat("kubernetes.", key), out) &&
          out->size() > 256) {
        Fail(v, absl::StrCat("kubernetes.", key),
             absl::StrCat("has ", out->size(), " entries; at most 256"));
      }
    };
    bounded_map("node_selector", &k.node_selector);
    bounded_map("images", &k.images);
    bounded_map("product_map", &k.product_map);
    if (const YAML::Node v = n["tolerations"];
        v && StringList(v, "kubernetes.tolerations", &k.tolerations) &&
        k.tolerations.size() > 64) {
      Fail(v, "kubernetes.tolerations",
           absl::StrCat("has ", k.tolerations.size(), " keys; at most 64"));
    }
    if (const YAML::Node v = n["image"]) {
      String(v, "kubernetes.image", &k.image);
    }
    if (const YAML::Node v = n["engine_path"]) {
      String(v, "kubernetes.engine_path", &k.engine_path);
    }
    if (const YAML::Node v = n["request_timeout_ms"]) {
      Int(v, "kubernetes.request_timeout_ms", 100, 600000,
          &k.request_timeout_ms);
    }
    if (const YAML::Node v = n["default_memory_mib"]) {
      Int(v, "kubernetes.default_memory_mib", 1, 16777216,
          &k.default_memory_mib);
    }
    if (const YAML::Node v = n["pool_labels"];
        v && StringList(v, "kubernetes.pool_labels", &k.pool_labels) &&
        k.pool_labels.size() > 16) {
      Fail(v, "kubernetes.pool_labels",
           absl::StrCat("has ", k.pool_labels.size(), " keys; at most 16"));
    }
    if (const YAML::Node v = n["karpenter_nodepools"]) {
      Bool(v, "kubernetes.karpenter_nodepools", &k.karpenter_nodepools);
    }
    if (const YAML::Node v = n["pools"]) ParseKubernetesPools(v, k);
  }

  void ParseKubernetesPools(const YAML::Node& list, KubernetesConfig& k) {
    if (!list.IsSequence() || list.size() > 256) {
      Fail(list, "kubernetes.pools", "must be a list of at most 256 pools");
      return;
    }
    for (size_t i = 0; i < list.size(); ++i) {
      const YAML::Node p = list[i];
      const std::string at = absl::StrCat("kubernetes.pools[", i, "]");
      if (!p.IsMap()) {
        Fail(p, at, "must be a map");
        continue;
      }
      CheckKeys(p, at,
                {"name", "labels", "gpu_product", "gpus_per_node", "cpu",
                 "memory", "spot", "max_nodes"});
      KubernetesPoolConfig pool;
      if (!p["name"] || !String(p["name"], at + ".name", &pool.name)) {
        Fail(p, at + ".name", "is required");
        continue;
      }
      const bool dns = !pool.name.empty() && pool.name.size() <= 63 &&
                       std::all_of(pool.name.begin(), pool.name.end(),
                                   [](char c) {
                                     return (c >= 'a' && c <= 'z') ||
                                            (c >= '0' && c <= '9') || c == '-';
                                   }) &&
                       pool.name.front() != '-' && pool.name.back() != '-';
      if (!dns) {
        Fail(p["name"], at + ".name",
             "must be 1..63 lowercase letters, digits or '-'");
      }
      for (const KubernetesPoolConfig& other : k.pools) {
        if (other.name == pool.name) {
          Fail(p["name"], at + ".name",
               absl::StrCat("'", pool.name, "' is declared twice"));
        }
      }
      if (const YAML::Node v = p["labels"];
          v && StringMap(v, at + ".labels", &pool.labels) &&
          pool.labels.size() > 32) {
        Fail(v, at + ".labels", "has more than 32 labels");
      }
      if (const YAML::Node v = p["gpu_product"]) {
        String(v, at + ".gpu_product", &pool.gpu_product);
      }
      if (const YAML::Node v = p["gpus_per_node"]) {
        Int(v, at + ".gpus_per_node", 0, 1024, &pool.gpus_per_node);
      }
      if (const YAML::Node v = p["cpu"]) {
        Quantity(v, at + ".cpu", &ParseCpuMilli, "95500m", &pool.cpu_milli);
      }
      if (const YAML::Node v = p["memory"]) {
        Quantity(v, at + ".memory", &ParseMemoryMib, "1000Gi",
                 &pool.memory_mib);
      }
      if (const YAML::Node v = p["spot"]) Bool(v, at + ".spot", &pool.spot);
      if (const YAML::Node v = p["max_nodes"]) {
        Int(v, at + ".max_nodes", 0, 10000, &pool.max_nodes);
      }
      k.pools.push_back(std::move(pool));
    }
  }

  // `key`, when present, is a list of maps; `read` reads one item and
  // returns its name, which must be unique.
  template <typename Read>
  void ParseList(const YAML::Node& root, const char* key, Read read) {
    const YAML::Node list = root[key];
    if (!list || list.IsNull()) return;
    if (!list.IsSequence()) {
      Fail(list, key, absl::StrCat("must be a list, got ", YamlType(list)));
      return;
    }
    std::map<std::string, int> first_line;
    for (size_t i = 0; i < list.size(); ++i) {
      const YAML::Node item = list[i];
      const std::string path = absl::StrCat(key, "[", i, "]");
      if (!Map(item, path)) continue;
      const std::string name = read(item, path);
      if (name.empty()) continue;
      const int line = item.Mark().line + 1;
      if (auto [it, inserted] = first_line.emplace(name, line); !inserted) {
        Fail(item["name"], path + ".name",
             absl::StrCat("'", name, "' is declared twice (first at line ",
                          it->second, ")"));
      }
    }
  }

  std::string base_dir_;
};

}  // namespace

absl::StatusOr<ServeConfig> ParseServeYaml(absl::string_view text,
                                           std::string source,
                                           const std::string& base_dir) {
  return Parser(std::move(source), base_dir).Parse(text);
}

absl::StatusOr<ServeConfig> LoadServeFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::stringstream ss;
  ss << f.rdbuf();
  return ParseServeYaml(ss.str(), path,
                        std::filesystem::path(path).parent_path().string());
}

}  // namespace gpusched::config
