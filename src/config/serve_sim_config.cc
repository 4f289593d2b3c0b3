#include "config/serve_sim_config.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "config/manifest.h"
#include "config/spec_reader.h"
#include "config/yaml_reader.h"

namespace gpusched::config {
namespace {

constexpr double kBig = 1e12;
constexpr int64_t kBigInt = std::numeric_limits<int64_t>::max() / 4;

class Parser : public YamlReader {
 public:
  Parser(std::string source, std::string base_dir)
      : YamlReader(std::move(source)), base_dir_(std::move(base_dir)) {}

  absl::StatusOr<ServeSimConfig> Parse(absl::string_view text) {
    ServeSimConfig cfg;
    cfg.source = source();
    RETURN_IF_ERROR(ParseDocument(
        text, [&](const YAML::Node& root) { ParseRoot(root, cfg); }));
    return cfg;
  }

 private:
  std::string Resolve(const std::string& path) const {
    if (path.empty() || base_dir_.empty() || path[0] == '/') return path;
    return (std::filesystem::path(base_dir_) / path).string();
  }

  bool IsMap(const YAML::Node& n, absl::string_view what) {
    if (n.IsMap()) return true;
    Error(n, absl::StrCat(what, " must be a map, got ", YamlType(n)));
    return false;
  }

  bool IsList(const YAML::Node& n, absl::string_view what) {
    if (n.IsSequence()) return true;
    Error(n, absl::StrCat(what, " must be a list, got ", YamlType(n)));
    return false;
  }

  void ParseRoot(const YAML::Node& root, ServeSimConfig& cfg) {
    if (!root.IsDefined() || root.IsNull()) {
      Error(YAML::Mark::null_mark(),
            "empty file; expected deployments and a workload");
      return;
    }
    if (!IsMap(root, "the config")) return;
    CheckKeys(
        root, "the config",
        {"seed", "fairness_window_s", "load_sample_s", "priority_classes",
         "deployments", "tenants", "tenant_defaults", "workload", "cluster",
         "cold_start", "autoscaling_interval_s", "routes", "capacity"});
    int64_t seed = static_cast<int64_t>(cfg.seed);
    OptInt(root, "seed", 0, kBigInt, &seed);
    cfg.seed = static_cast<uint64_t>(seed);
    OptDouble(root, "fairness_window_s", 1e-3, kBig, &cfg.fairness_window_s);
    OptDouble(root, "load_sample_s", 1e-3, kBig, &cfg.load_sample_s);
    OptDouble(root, "autoscaling_interval_s", 1e-3, kBig,
              &cfg.autoscaling_interval_s);
    if (const YAML::Node c = root["cluster"]; c && IsMap(c, "cluster")) {
      CheckKeys(c, "cluster",
                {"gpus", "gpus_per_node", "swap_min_idle_s",
                 "price_per_gpu_hour", "pools"});
      OptInt(c, "gpus", 0, 1 << 24, &cfg.cluster_gpus);
      OptInt(c, "gpus_per_node", 1, 64, &cfg.gpus_per_node);
      OptDouble(c, "swap_min_idle_s", 0, kBig, &cfg.swap_min_idle_s);
      OptDouble(c, "price_per_gpu_hour", 0, kBig, &cfg.price_per_gpu_hour);
      if (const YAML::Node ps = c["pools"]; ps && IsList(ps, "cluster.pools")) {
        if (ps.size() > 64) Error(ps, "cluster.pools: at most 64 pools");
        std::set<std::string> names;
        for (size_t i = 0; i < ps.size() && i < 64; ++i) {
          PoolSpec p;
          if (!ParsePoolSpec(*this, ps[i],
                             absl::StrCat("cluster.pools[", i, "]"),
                             /*require_gpu=*/true, base_dir_, &p)) {
            continue;
          }
          if (!names.insert(p.name).second) {
            Error(ps[i], absl::StrCat("cluster.pools[", i, "].name: pool '",
                                      p.name, "' is declared twice"));
          }
          cfg.pools.push_back(std::move(p));
        }
      }
    }
    if (const YAML::Node c = root["capacity"]; c && IsMap(c, "capacity")) {
      ParseCapacitySpec(*this, c, /*with_pools=*/false, base_dir_,
                        &cfg.capacity);
      if (cfg.pools.empty()) {
        Error(c, "capacity: needs cluster.pools (nodes it can add)");
      }
    }
    if (const YAML::Node c = root["cold_start"]; c && IsMap(c, "cold_start")) {
      CheckKeys(c, "cold_start",
                {"profile", "format", "engine_init_s", "default_s",
                 "local_load_factor"});
      OptString(c, "profile", &cfg.cold_start.profile);
      cfg.cold_start.profile = Resolve(cfg.cold_start.profile);
      OptString(c, "format", &cfg.cold_start.format);
      OptDouble(c, "engine_init_s", 0, kBig, &cfg.cold_start.engine_init_s);
      OptDouble(c, "default_s", 0, kBig, &cfg.cold_start.default_s);
      OptDouble(c, "local_load_factor", 0, 1,
                &cfg.cold_start.local_load_factor);
    }

    if (const YAML::Node pc = root["priority_classes"]) {
      if (IsList(pc, "priority_classes")) {
        for (const YAML::Node& c : pc) ParseClass(c, cfg);
        if (cfg.classes.empty()) Error(pc, "priority_classes is empty");
      }
    } else {
      for (const std::string& n : DefaultPriorityClasses()) {
        cfg.classes.push_back({n, 0, ""});
      }
    }
    std::set<std::string> class_names;
    for (const PriorityClassSpec& c : cfg.classes) class_names.insert(c.name);

    const YAML::Node deps = root["deployments"];
    if (!deps) {
      Error(root, "missing deployments (at least one)");
    } else if (IsList(deps, "deployments")) {
      std::set<std::string> names;
      for (const YAML::Node& d : deps) {
        SimDeploymentSpec spec;
        if (!ParseDeployment(d, class_names, spec)) continue;
        int count = 1;
        OptInt(d, "count", 1, 100000, &count);
        for (int i = 0; i < count; ++i) {
          SimDeploymentSpec copy = spec;
          copy.name = ExpandName(spec.name, d["count"].IsDefined(), i);
          if (!names.insert(copy.name).second) {
            Error(d, absl::StrCat("deployment '", copy.name,
                                  "' is declared twice"));
          }
          cfg.deployments.push_back(std::move(copy));
        }
      }
      if (deps.size() == 0) Error(deps, "deployments is empty");
    }

    if (const YAML::Node rs = root["routes"]; rs && IsList(rs, "routes")) {
      std::set<std::string> deployments, names;
      for (const SimDeploymentSpec& d : cfg.deployments) {
        deployments.insert(d.name);
      }
      if (rs.size() > 256) Error(rs, "routes: at most 256 routes");
      for (size_t i = 0; i < rs.size() && i < 256; ++i) {
        const YAML::Node& r = rs[i];
        if (!IsMap(r, "a route")) continue;
        ModelRouteSpec route;
        SpecReader spec(source());
        spec.ReadName(r, "name", absl::StrCat("routes[", i, "].name"),
                      &route.name);
        spec.ReadModelRoute(r, r, &route, {"name"});
        // Unknown targets first: a problem about spec.targets as a whole
        // would hide those about its items.
        std::vector<std::string> problems;
        for (size_t t = 0; t < route.targets.size(); ++t) {
          if (!route.targets[t].deployment.empty() &&
              !deployments.contains(route.targets[t].deployment)) {
            problems.push_back(
                absl::StrCat("spec.targets[", t, "].deployment: '",
                             route.targets[t].deployment, "' is not declared"));
          }
        }
        CheckModelRoute(&route, &problems);
        if (deployments.contains(route.name)) {
          problems.push_back("spec: a deployment has the route's name");
        }
        if (!route.name.empty() && !names.insert(route.name).second) {
          problems.push_back("spec: the route is declared twice");
        }
        spec.ReportProblems(problems, r, r, absl::StrCat("routes[", i, "]"));
        TakeErrors(spec);
        cfg.routes.push_back(std::move(route));
      }
    }

    if (const YAML::Node td = root["tenant_defaults"]) {
      if (IsMap(td, "tenant_defaults")) {
        ParseTenant(td, /*named=*/false, class_names, cfg.tenant_defaults);
      }
    } else {
      // No classes: an error was reported already (found by
      // fuzz_serve_config: classes[0] of none).
      cfg.tenant_defaults.priority =
          class_names.count("standard") || cfg.classes.empty()
              ? "standard"
              : cfg.classes[0].name;
    }
    if (const YAML::Node ts = root["tenants"]) {
      if (IsList(ts, "tenants")) {
        std::set<std::string> names;
        for (const YAML::Node& t : ts) {
          SimTenantSpec spec = cfg.tenant_defaults;
          if (!IsMap(t, "a tenant")) continue;
          ParseTenant(t, /*named=*/true, class_names, spec);
          if (!names.insert(spec.name).second) {
            Error(t,
                  absl::StrCat("tenant '", spec.name, "' is declared twice"));
          }
          cfg.tenants.push_back(std::move(spec));
        }
      }
    }

    const YAML::Node w = root["workload"];
    if (!w) {
      Error(root, "missing workload (trace or synthetic)");
    } else if (IsMap(w, "workload")) {
      ParseWorkload(w, cfg);
    }
  }

  // `count` copies: "{i}" in `text` becomes the copy's index (0, 1, ...);
  // a counted name without "{i}" gets "-<i>" appended.
  static std::string Expand(const std::string& text, bool counted, int i) {
    if (!counted) return text;
    std::string out = text;
    const std::string index = std::to_string(i);
    size_t at = out.find("{i}");
    if (at == std::string::npos) return text;
    while (at != std::string::npos) {
      out.replace(at, 3, index);
      at = out.find("{i}", at + index.size());
    }
    return out;
  }
  static std::string ExpandName(const std::string& name, bool counted, int i) {
    if (!counted || name.find("{i}") != std::string::npos) {
      return Expand(name, counted, i);
    }
    return absl::StrCat(name, "-", i);
  }

  void ParseClass(const YAML::Node& c, ServeSimConfig& cfg) {
    PriorityClassSpec spec;
    if (c.IsScalar()) {
      spec.name = c.Scalar();
    } else if (IsMap(c, "a priority class")) {
      CheckKeys(c, "a priority class",
                {"name", "timeout_s", "order", "preemptible"});
      OptBool(c, "preemptible", &spec.preemptible);
      if (!c["name"]) Error(c, "a priority class needs a name");
      OptString(c, "name", &spec.name);
      OptDouble(c, "timeout_s", 0, kBig, &spec.timeout_s);
      OptString(c, "order", &spec.order);
      CheckOrder(c["order"], spec.order, /*allow_empty=*/true);
    } else {
      return;
    }
    if (!ValidName(spec.name)) {
      Error(c, absl::StrCat("priority class name '", spec.name,
                            "' is not a valid name"));
    }
    cfg.classes.push_back(spec);
  }

  void CheckOrder(const YAML::Node& at, const std::string& order,
                  bool allow_empty) {
    if (allow_empty && order.empty()) return;
    serving::QueueOrder o;
    const absl::Status st = serving::ParseQueueOrder(order, &o);
    if (!st.ok()) Error(at, st.message());
  }

  // The deployment's `autoscaling:` block (autoscale/autoscaler.h knobs).
  void ParseAutoscaling(const YAML::Node& a, const std::string& where,
                        bool replicas_given, SimDeploymentSpec& spec) {
    CheckKeys(
        a, "autoscaling",
        {"min_replicas", "max_replicas", "policy", "target_ongoing_requests",
         "look_back_period_s", "upscale_delay_s", "downscale_delay_s",
         "max_concurrent_starts", "idle_timeout_s", "slo_ttft_s",
         "slo_percentile", "slo_window_s", "slo_headroom", "cold_start_s"});
    autoscale::AutoscalingConfig& c = spec.autoscaling_config;
    spec.autoscaling = true;
    OptInt(a, "min_replicas", 0, 1000000, &c.min_replicas);
    c.max_replicas = std::max(c.min_replicas, 1);
    OptInt(a, "max_replicas", 1, 1000000, &c.max_replicas);
    std::string policy = autoscale::PolicyName(c.policy);
    OptString(a, "policy", &policy);
    if (!autoscale::ParsePolicy(policy, &c.policy)) {
      Error(a["policy"], absl::StrCat(where,
                                      ": autoscaling.policy must be "
                                      "target-ongoing or slo, got '",
                                      policy, "'"));
    }
    OptDouble(a, "target_ongoing_requests", 0, kBig,
              &c.target_ongoing_requests);
    OptDouble(a, "look_back_period_s", 0, kBig, &c.look_back_period_s);
    OptDouble(a, "upscale_delay_s", 0, kBig, &c.upscale_delay_s);
    OptDouble(a, "downscale_delay_s", 0, kBig, &c.downscale_delay_s);
    OptInt(a, "max_concurrent_starts", 1, 1000000, &c.max_concurrent_starts);
    OptDouble(a, "idle_timeout_s", 0, kBig, &c.idle_timeout_s);
    OptDouble(a, "slo_ttft_s", 0, kBig, &c.slo_ttft_s);
    OptDouble(a, "slo_percentile", 0, 1, &c.slo_percentile);
    OptDouble(a, "slo_window_s", 0, kBig, &c.slo_window_s);
    OptDouble(a, "slo_headroom", 0, 0.99, &c.slo_headroom);
    OptDouble(a, "cold_start_s", -1, kBig, &spec.cold_start_s);
    if (absl::Status st = autoscale::ValidateAutoscalingConfig(c); !st.ok()) {
      Error(a, absl::StrCat(where, ": ", st.message()));
    }
    if (!replicas_given) {
      spec.replicas = c.min_replicas;
    } else if (spec.replicas < c.min_replicas ||
               spec.replicas > c.max_replicas) {
      Error(a, absl::StrCat(where, ": replicas ", spec.replicas,
                            " must be in min_replicas..max_replicas (",
                            c.min_replicas, "..", c.max_replicas, ")"));
    }
  }

  bool ParseDeployment(const YAML::Node& d,
                       const std::set<std::string>& classes,
                       SimDeploymentSpec& spec) {
    if (!IsMap(d, "a deployment")) return false;
    spec.line = d.Mark().line + 1;
    CheckKeys(
        d, "a deployment",
        {"name", "kind", "model", "gpu", "tensor_parallel", "gpu_fraction",
         "replicas", "max_ongoing_requests", "router", "queue", "engine",
         "batching", "autoscaling", "count", "priority_class", "owner", "spot",
         "latency_multiplier", "error_rate"});
    if (!d["name"]) {
      Error(d, "a deployment needs a name");
      return false;
    }
    OptString(d, "name", &spec.name);
    if (!ValidName(ExpandName(spec.name, d["count"].IsDefined(), 0))) {
      Error(d["name"], absl::StrCat("deployment name '", spec.name,
                                    "' is not a valid name"));
    }
    const std::string where = absl::StrCat("deployment '", spec.name, "'");
    if (!classes.empty()) {
      spec.priority_class =
          classes.count("standard") ? "standard" : *classes.begin();
    }
    OptString(d, "priority_class", &spec.priority_class);
    if (!classes.count(spec.priority_class)) {
      Error(d["priority_class"] ? d["priority_class"] : d,
            absl::StrCat(where, ": unknown priority class '",
                         spec.priority_class, "'"));
    }
    OptString(d, "owner", &spec.owner);
    OptBool(d, "spot", &spec.spot);
    OptString(d, "kind", &spec.kind);
    if (spec.kind != "llm" && spec.kind != "tensor") {
      Error(d["kind"],
            absl::StrCat(where, ": kind must be llm or tensor, got '",
                         spec.kind, "'"));
    }
    OptString(d, "model", &spec.model);
    OptString(d, "gpu", &spec.gpu);
    if (spec.kind == "llm" && (spec.model.empty() || spec.gpu.empty())) {
      Error(d, absl::StrCat(where,
                            ": an llm deployment needs model and gpu (see "
                            "`gpusched profiles list`)"));
    }
    OptInt(d, "tensor_parallel", 1, 64, &spec.tensor_parallel);
    OptDouble(d, "gpu_fraction", 0, 1, &spec.gpu_fraction);
    if (spec.gpu_fraction > 0 && spec.tensor_parallel > 1) {
      Error(d["gpu_fraction"],
            absl::StrCat(where,
                         ": gpu_fraction is for replicas on part of one "
                         "GPU; tensor_parallel must then be 1"));
    }
    OptInt(d, "replicas", d["autoscaling"] ? 0 : 1, 1000000, &spec.replicas);
    OptInt(d, "max_ongoing_requests", 1, 1000000, &spec.max_ongoing_requests);
    OptDouble(d, "latency_multiplier", 0.01, 100, &spec.latency_multiplier);
    OptDouble(d, "error_rate", 0, 1, &spec.error_rate);
    if (const YAML::Node r = d["router"]; r && IsMap(r, "router")) {
      CheckKeys(r, "router",
                {"policy", "load_bound_epsilon", "affinity_blocks",
                 "prefix_index_capacity", "session_fallback"});
      serving::RouterConfig& rc = spec.router;
      OptString(r, "policy", &rc.policy);
      OptDouble(r, "load_bound_epsilon", 1e-6, kBig, &rc.load_bound_epsilon);
      OptInt(r, "affinity_blocks", 1, 1 << 20, &rc.affinity_blocks);
      OptInt(r, "prefix_index_capacity", int64_t{1}, kBigInt,
             &rc.prefix_index_capacity);
      OptString(r, "session_fallback", &rc.session_fallback);
      bool known = false;
      for (const std::string& n : serving::RouterNames()) {
        known |= n == rc.policy;
      }
      if (!known) {
        std::string names;
        for (const std::string& n : serving::RouterNames()) {
          absl::StrAppend(&names, names.empty() ? "" : ", ", n);
        }
        Error(r["policy"] ? r["policy"] : r,
              absl::StrCat(where, ": unknown router policy '", rc.policy,
                           "' (known: ", names, ")"));
      }
    }
    if (const YAML::Node q = d["queue"]; q && IsMap(q, "queue")) {
      CheckKeys(q, "queue",
                {"order", "max_queue_size", "aging_s", "demote_late",
                 "late_margin_s", "input_weight", "output_weight",
                 "fair_share_headroom", "reject_infeasible"});
      SimQueueSpec& qs = spec.queue;
      OptString(q, "order", &qs.order);
      CheckOrder(q["order"] ? q["order"] : q, qs.order, false);
      OptInt(q, "max_queue_size", int64_t{0}, kBigInt, &qs.max_queue_size);
      OptDouble(q, "aging_s", 0, kBig, &qs.aging_s);
      OptBool(q, "demote_late", &qs.demote_late);
      OptDouble(q, "late_margin_s", 0, kBig, &qs.late_margin_s);
      OptDouble(q, "input_weight", 0, kBig, &qs.input_weight);
      OptDouble(q, "output_weight", 0, kBig, &qs.output_weight);
      OptDouble(q, "fair_share_headroom", 0, 0.99, &qs.fair_share_headroom);
      OptBool(q, "reject_infeasible", &qs.reject_infeasible);
    }
    if (const YAML::Node a = d["autoscaling"]; a && IsMap(a, "autoscaling")) {
      ParseAutoscaling(a, where, d["replicas"].IsDefined(), spec);
    }
    if (const YAML::Node e = d["engine"]; e && IsMap(e, "engine")) {
      CheckKeys(e, "engine",
                {"max_num_seqs", "max_num_batched_tokens", "kv_capacity_tokens",
                 "kv_budget_tokens", "block_tokens", "prefix_caching"});
      SimEngineSpec& es = spec.engine;
      OptInt(e, "max_num_seqs", 1, 1 << 20, &es.max_num_seqs);
      OptInt(e, "max_num_batched_tokens", int64_t{1}, kBigInt,
             &es.max_num_batched_tokens);
      OptInt(e, "kv_capacity_tokens", int64_t{0}, kBigInt,
             &es.kv_capacity_tokens);
      OptInt(e, "kv_budget_tokens", int64_t{-1}, kBigInt, &es.kv_budget_tokens);
      OptInt(e, "block_tokens", 1, 1 << 20, &es.block_tokens);
      OptBool(e, "prefix_caching", &es.prefix_caching);
    }
    if (const YAML::Node b = d["batching"]; b && IsMap(b, "batching")) {
      CheckKeys(b, "batching",
                {"max_batch_size", "max_queue_delay_microseconds",
                 "preferred_batch_size", "instances", "base_s", "per_item_s"});
      SimBatchingSpec& bs = spec.batching;
      OptInt(b, "max_batch_size", 1, 1 << 20, &bs.max_batch_size);
      OptInt(b, "max_queue_delay_microseconds", int64_t{0}, kBigInt,
             &bs.max_queue_delay_microseconds);
      if (const YAML::Node p = b["preferred_batch_size"];
          p && IsList(p, "preferred_batch_size")) {
        for (const YAML::Node& v : p) {
          int64_t n = 0;
          if (Int(v, "preferred_batch_size", 1, bs.max_batch_size, &n)) {
            bs.preferred_batch_size.push_back(static_cast<int>(n));
          }
        }
      }
      OptInt(b, "instances", 1, 1 << 16, &bs.instances);
      OptDouble(b, "base_s", 0, kBig, &bs.base_s);
      OptDouble(b, "per_item_s", 0, kBig, &bs.per_item_s);
    }
    return true;
  }

  void ParseTenant(const YAML::Node& t, bool named,
                   const std::set<std::string>& classes, SimTenantSpec& spec) {
    spec.line = t.Mark().line + 1;
    std::vector<absl::string_view> keys = {"weight",
                                           "priority",
                                           "requests_per_minute",
                                           "tokens_per_minute",
                                           "burst_minutes",
                                           "max_queued",
                                           "max_concurrency",
                                           "slo",
                                           "quota"};
    if (named) keys.push_back("name");
    CheckKeys(t, named ? "a tenant" : "tenant_defaults", keys);
    if (named) {
      if (!t["name"]) Error(t, "a tenant needs a name");
      OptString(t, "name", &spec.name);
    }
    OptDouble(t, "weight", 1e-9, kBig, &spec.weight);
    OptString(t, "priority", &spec.priority);
    if (!classes.count(spec.priority)) {
      std::string names;
      for (const std::string& n : classes) {
        absl::StrAppend(&names, names.empty() ? "" : ", ", n);
      }
      Error(t["priority"] ? t["priority"] : t,
            absl::StrCat("unknown priority class '", spec.priority,
                         "' (classes: ", names, ")"));
    }
    OptDouble(t, "requests_per_minute", 0, kBig,
              &spec.limits.requests_per_minute);
    OptDouble(t, "tokens_per_minute", 0, kBig, &spec.limits.tokens_per_minute);
    OptDouble(t, "burst_minutes", 1e-9, kBig, &spec.limits.burst_minutes);
    OptInt(t, "max_queued", int64_t{0}, kBigInt, &spec.limits.max_queued);
    OptInt(t, "max_concurrency", int64_t{0}, kBigInt,
           &spec.limits.max_concurrency);
    if (const YAML::Node s = t["slo"]; s && IsMap(s, "slo")) {
      CheckKeys(s, "slo", {"ttft_s", "tpot_s", "e2e_s"});
      OptDouble(s, "ttft_s", 0, kBig, &spec.slo.ttft_s);
      OptDouble(s, "tpot_s", 0, kBig, &spec.slo.tpot_s);
      OptDouble(s, "e2e_s", 0, kBig, &spec.slo.e2e_s);
    }
    if (const YAML::Node q = t["quota"]; q && IsMap(q, "quota")) {
      CheckKeys(q, "quota", {"gpus", "limit", "over_quota_weight"});
      OptDouble(q, "gpus", 0, kBig, &spec.quota_gpus);
      OptDouble(q, "limit", 0, kBig, &spec.limit_gpus);
      OptDouble(q, "over_quota_weight", 0, kBig, &spec.over_quota_weight);
      if (spec.limit_gpus > 0 && spec.limit_gpus < spec.quota_gpus) {
        Error(q["limit"],
              absl::StrCat("quota.limit must be 0 (none) or at "
                           "least quota.gpus (",
                           spec.quota_gpus, "), got ", spec.limit_gpus));
      }
    }
  }

  void ParseWorkload(const YAML::Node& w, ServeSimConfig& cfg) {
    SimWorkloadSpec& ws = cfg.workload;
    CheckKeys(w, "workload",
              {"trace", "synthetic", "time_scale", "max_requests",
               "max_seconds", "deployment", "tenant"});
    const YAML::Node trace = w["trace"];
    const YAML::Node syn = w["synthetic"];
    if (trace && syn) {
      Error(syn, "workload: set trace or synthetic, not both");
    } else if (!trace && !syn) {
      Error(w, "workload: missing trace (format, path) or synthetic");
    }
    if (trace && IsMap(trace, "trace")) {
      CheckKeys(trace, "trace", {"format", "path"});
      if (!trace["format"] || !trace["path"]) {
        Error(trace,
              "trace needs format (azure, mooncake, vtc, aegaeon) and path");
      }
      OptString(trace, "format", &ws.trace_format);
      if (ws.trace_format != "azure" && ws.trace_format != "mooncake" &&
          ws.trace_format != "vtc" && ws.trace_format != "aegaeon" &&
          !ws.trace_format.empty()) {
        Error(trace["format"],
              absl::StrCat("unknown trace format '", ws.trace_format,
                           "' (azure, mooncake, vtc, aegaeon)"));
      }
      OptString(trace, "path", &ws.trace_path);
      ws.trace_path = Resolve(ws.trace_path);
    }
    if (syn && IsMap(syn, "synthetic")) {
      ws.synthetic = true;
      CheckKeys(syn, "synthetic", {"duration_s", "tenants"});
      OptDouble(syn, "duration_s", 1e-6, kBig, &ws.duration_s);
      const YAML::Node ts = syn["tenants"];
      if (!ts) {
        Error(syn, "synthetic needs tenants (at least one)");
      } else if (IsList(ts, "synthetic tenants")) {
        for (const YAML::Node& t : ts) {
          if (!IsMap(t, "a synthetic tenant")) continue;
          CheckKeys(t, "a synthetic tenant",
                    {"name", "model", "arrival", "rate", "cv", "servegen_trace",
                     "servegen_offset_s", "servegen_rate_scale",
                     "servegen_dataset", "input_tokens", "input_max",
                     "output_tokens", "output_max", "count"});
          SyntheticTenant st;
          if (!t["name"]) Error(t, "a synthetic tenant needs a name");
          OptString(t, "name", &st.name);
          OptString(t, "model", &st.model);
          OptString(t, "arrival", &st.arrival);
          if (st.arrival != "poisson" && st.arrival != "gamma" &&
              st.arrival != "servegen") {
            Error(t["arrival"], absl::StrCat("unknown arrival '", st.arrival,
                                             "' (poisson, gamma, servegen)"));
          }
          OptDouble(t, "rate", 0, kBig, &st.rate);
          OptDouble(t, "cv", 1e-6, kBig, &st.cv);
          OptString(t, "servegen_trace", &st.servegen_trace);
          const std::string raw_trace = st.servegen_trace;
          if (st.arrival == "servegen" && st.servegen_trace.empty()) {
            Error(t, "arrival servegen needs servegen_trace");
          }
          OptDouble(t, "servegen_offset_s", 0, kBig, &st.servegen_offset_s);
          OptDouble(t, "servegen_rate_scale", 0, kBig, &st.servegen_rate_scale);
          OptString(t, "servegen_dataset", &st.servegen_dataset);
          const std::string raw_dataset = st.servegen_dataset;
          OptInt(t, "input_tokens", 1, 1 << 24, &st.input_tokens);
          OptInt(t, "input_max", 0, 1 << 24, &st.input_max);
          OptInt(t, "output_tokens", 1, 1 << 24, &st.output_tokens);
          OptInt(t, "output_max", 0, 1 << 24, &st.output_max);
          int count = 1;
          OptInt(t, "count", 1, 100000, &count);
          const bool counted = t["count"].IsDefined();
          for (int i = 0; i < count; ++i) {
            SyntheticTenant copy = st;
            copy.name = ExpandName(st.name, counted, i);
            copy.model = Expand(st.model, counted, i);
            copy.servegen_trace = Resolve(Expand(raw_trace, counted, i));
            copy.servegen_dataset = Resolve(Expand(raw_dataset, counted, i));
            ws.synthetic_tenants.push_back(std::move(copy));
          }
        }
      }
    }
    OptDouble(w, "time_scale", 1e-9, kBig, &ws.time_scale);
    OptInt(w, "max_requests", int64_t{0}, kBigInt, &ws.max_requests);
    OptDouble(w, "max_seconds", 0, kBig, &ws.max_seconds);
    OptString(w, "deployment", &ws.deployment);
    OptString(w, "tenant", &ws.tenant);
    if (ws.deployment.empty() && !cfg.deployments.empty()) {
      ws.deployment = cfg.deployments.front().name;
    }
    bool found = ws.deployment.empty();
    for (const SimDeploymentSpec& d : cfg.deployments) {
      found |= d.name == ws.deployment;
    }
    for (const ModelRouteSpec& r : cfg.routes) found |= r.name == ws.deployment;
    if (!found) {
      Error(w["deployment"], absl::StrCat("workload.deployment '",
                                          ws.deployment, "' is not declared"));
    }
  }

  std::string base_dir_;
};

}  // namespace

absl::StatusOr<ServeSimConfig> ParseServeSimYaml(absl::string_view text,
                                                 std::string source,
                                                 const std::string& base_dir) {
  return Parser(std::move(source), base_dir).Parse(text);
}

absl::StatusOr<ServeSimConfig> LoadServeSimFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::stringstream ss;
  ss << f.rdbuf();
  return ParseServeSimYaml(ss.str(), path,
                           std::filesystem::path(path).parent_path().string());
}

}  // namespace gpusched::config
