#include "config/manifest.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "config/access_manifest.h"
#include "config/quantity.h"
#include "config/spec_reader.h"
#include "serving/model_queue.h"

namespace gpusched::config {

serving::TenantSpec ServingTenant(const TenantSpec& t) {
  serving::TenantSpec s;
  s.name = t.name;
  s.weight = t.weight;
  s.limits = t.limits;
  return s;
}
namespace {

bool Contains(const std::vector<std::string>& list, const std::string& s) {
  return std::find(list.begin(), list.end(), s) != list.end();
}

void CheckPriorityClass(const std::string& name,
                        const std::vector<std::string>& classes,
                        std::vector<std::string>* problems) {
  if (!Contains(classes, name)) {
    problems->push_back(
        absl::StrCat("spec.priorityClass: unknown class '", name,
                     "'; known: ", absl::StrJoin(classes, ", ")));
  }
}

void CheckRouter(const serving::RouterConfig& r,
                 std::vector<std::string>* problems) {
  const std::vector<std::string> known = serving::RouterNames();
  if (!Contains(known, r.policy)) {
    problems->push_back(absl::StrCat("spec.router.policy: unknown policy '",
                                     r.policy,
                                     "'; known: ", absl::StrJoin(known, ", ")));
  }
  if (r.session_fallback == "session-affinity") {
    problems->push_back(
        "spec.router.sessionFallback: cannot be session-affinity itself");
  } else if (!Contains(known, r.session_fallback)) {
    problems->push_back(absl::StrCat(
        "spec.router.sessionFallback: unknown policy '", r.session_fallback,
        "'; known: ", absl::StrJoin(known, ", ")));
  }
}

void CheckResources(const ResourceSpec& r, std::vector<std::string>* problems) {
  auto problem = [&](absl::string_view field, absl::string_view what) {
    problems->push_back(absl::StrCat("spec.resources", field, ": ", what));
  };
  if (r.kind == "whole") {
    if (r.gpus < 1)
      problem(".whole", absl::StrCat("must be >= 1, got ", r.gpus));
  } else if (r.kind == "fraction") {
    if (r.milli < 1 || r.milli > 1000) {
      problem(".fraction.milli",
              absl::StrCat("required, in 1..1000 (thousandths of a GPU), got ",
                           r.milli));
    }
    if (r.gpu_memory_mib <= 0) {
      problem(".fraction.memory", "required: the GPU memory (e.g. 10Gi)");
    }
  } else if (r.kind == "mig") {
    if (r.mig_profile.empty()) problem(".mig", "a MIG profile, e.g. 1g.10gb");
  } else if (r.kind != "none") {
    problem("", absl::StrCat("unknown kind '", r.kind,
                             "'; known: none, whole, fraction, mig"));
  }
  if (r.nvlink != "any" && r.nvlink != "preferred" && r.nvlink != "required") {
    problem(".nvlink", absl::StrCat("must be any, preferred or required, got '",
                                    r.nvlink, "'"));
  } else if (r.nvlink != "any" && r.kind != "whole") {
    problem(".nvlink", "applies to whole GPUs only");
  }
  if (!r.gpu_models.empty() && r.kind == "none") {
    problem(".gpuModels", "needs a GPU request (whole, fraction or mig)");
  }
  if (r.cpu_milli < 0) problem(".cpu", "must be >= 0");
  if (r.memory_mib < 0) problem(".memory", "must be >= 0");
}

std::string HostPortString(const HostPort& hp) {
  return absl::StrCat(hp.host, ":", hp.port);
}

class Parser : public SpecReader {
 public:
  Parser(std::string source, AccessManifests* access)
      : SpecReader(std::move(source)), access_(access) {}

  absl::StatusOr<std::vector<Manifest>> Parse(absl::string_view text) {
    RETURN_IF_ERROR(
        ParseDocuments(text, [&](const YAML::Node& doc) { ParseOne(doc); }));
    return std::move(manifests_);
  }

 private:
  void ParseOne(const YAML::Node& doc) {
    if (!doc.IsDefined() || doc.IsNull()) return;  // an empty document
    if (++documents_ > kMaxManifests) {
      if (documents_ == kMaxManifests + 1) {
        Error(doc,
              absl::StrCat("more than ", kMaxManifests,
                           " manifests in one request; apply them in parts"));
      }
      return;
    }
    if (!doc.IsMap()) {
      Error(doc, absl::StrCat("a manifest must be a map, got ", YamlType(doc)));
      return;
    }
    Manifest m;
    m.line = Line(doc);
    CheckKeys(doc, "the manifest", {"apiVersion", "kind", "metadata", "spec"});
    std::string s;
    if (const YAML::Node api = doc["apiVersion"]; !api) {
      Fail(doc, "apiVersion", absl::StrCat("required (", kApiVersion, ")"));
    } else if (String(api, "apiVersion", &s) && s != kApiVersion) {
      Fail(api, "apiVersion",
           absl::StrCat("must be ", kApiVersion, ", got '", s, "'"));
    }
    bool kind_known = false;
    std::string access_kind;  // Role | RoleBinding
    if (const YAML::Node kind = doc["kind"]; !kind) {
      Fail(doc, "kind", "required (Deployment, Tenant or ModelRoute)");
    } else if (String(kind, "kind", &s)) {
      kind_known = true;
      if (s == KindName(Manifest::Kind::kDeployment)) {
        m.kind = Manifest::Kind::kDeployment;
      } else if (s == KindName(Manifest::Kind::kTenant)) {
        m.kind = Manifest::Kind::kTenant;
      } else if (s == KindName(Manifest::Kind::kModelRoute)) {
        m.kind = Manifest::Kind::kModelRoute;
      } else if (access_ != nullptr && (s == "Role" || s == "RoleBinding")) {
        access_kind = s;
      } else {
        Fail(kind, "kind",
             absl::StrCat("must be Deployment, Tenant or ModelRoute, got '", s,
                          "'"));
        kind_known = false;
      }
    }
    std::string name;
    std::map<std::string, std::string> labels;
    if (const YAML::Node meta = doc["metadata"]; !meta) {
      Fail(doc, "metadata.name", "required");
    } else if (Map(meta, "metadata")) {
      CheckKeys(meta, "metadata", {"name", "labels"});
      ReadName(meta, "name", "metadata.name", &name);
      if (const YAML::Node l = meta["labels"]) {
        StringMap(l, "metadata.labels", &labels);
      }
    }
    if (!kind_known) return;  // the spec's fields depend on the kind
    const YAML::Node spec = doc["spec"];
    if (!access_kind.empty()) {
      ParseAccess(access_kind, name, spec, doc);
      return;
    }
    if (m.kind == Manifest::Kind::kDeployment) {
      m.deployment.name = name;
      m.deployment.labels = std::move(labels);
      ReadDeployment(spec, doc, "spec", {}, DefaultPriorityClasses(),
                     &m.deployment);
    } else if (m.kind == Manifest::Kind::kTenant) {
      m.tenant.name = name;
      m.tenant.labels = std::move(labels);
      ReadTenant(spec, doc, "spec", {}, DefaultPriorityClasses(), &m.tenant);
    } else {
      m.route.name = name;
      m.route.labels = std::move(labels);
      ReadModelRoute(spec, doc, &m.route);
      std::vector<std::string> problems;
      CheckModelRoute(&m.route, &problems);
      ReportProblems(problems, spec, doc, "spec");
    }
    if (!name.empty()) {
      auto [it, inserted] =
          first_line_.emplace(std::make_pair(m.kind, name), m.line);
      if (!inserted) {
        Error(doc["metadata"]["name"],
              absl::StrCat(KindName(m.kind), " '", name,
                           "' is declared twice (first at line ", it->second,
                           ")"));
      }
    }
    manifests_.push_back(std::move(m));
  }

  // A Role's or RoleBinding's spec (config/access_manifest.h).
  void ParseAccess(const std::string& kind, const std::string& name,
                   const YAML::Node& spec, const YAML::Node& doc) {
    if (!spec) {
      Fail(doc, "spec", "required");
      return;
    }
    if (!Map(spec, "spec")) return;
    if (!name.empty() && !access_names_.emplace(kind, name).second) {
      Error(doc["metadata"]["name"],
            absl::StrCat(kind, " '", name, "' is declared twice"));
    }
    if (kind == "Role") {
      RoleSpec r;
      r.name = name;
      CheckKeys(spec, "spec", {"rules"});
      const YAML::Node rules = spec["rules"];
      if (!rules || !rules.IsSequence() || rules.size() == 0 ||
          rules.size() > kMaxRoleRules) {
        Fail(rules ? rules : spec, "spec.rules",
             absl::StrCat("must be a list of 1..", kMaxRoleRules,
                          " rules {verbs: [...], resources: [...]}"));
        return;
      }
      for (size_t i = 0; i < rules.size(); ++i) {
        const std::string path = absl::StrCat("spec.rules[", i, "]");
        if (!Map(rules[i], path)) continue;
        CheckKeys(rules[i], path, {"verbs", "resources"});
        RoleRule rule;
        for (auto [key, out] : {std::pair{"verbs", &rule.verbs},
                                std::pair{"resources", &rule.resources}}) {
          const YAML::Node n = rules[i][key];
          if (!n) {
            Fail(rules[i], absl::StrCat(path, ".", key),
                 "required (a list; [\"*\"] for all)");
          } else if (StringList(n, absl::StrCat(path, ".", key), out) &&
                     out->empty()) {
            Fail(n, absl::StrCat(path, ".", key), "must not be empty");
          }
        }
        r.rules.push_back(std::move(rule));
      }
      access_->roles.push_back(std::move(r));
      return;
    }
    RoleBindingSpec b;
    b.name = name;
    CheckKeys(spec, "spec", {"role", "tenant", "subjects"});
    if (const YAML::Node n = spec["role"]; !n) {
      Fail(spec, "spec.role", "required (a built-in or custom role's name)");
    } else {
      String(n, "spec.role", &b.role);
    }
    if (const YAML::Node n = spec["tenant"])
      String(n, "spec.tenant", &b.tenant);
    const YAML::Node subjects = spec["subjects"];
    if (!subjects || !subjects.IsSequence() || subjects.size() == 0 ||
        subjects.size() > kMaxBindingSubjects) {
      Fail(subjects ? subjects : spec, "spec.subjects",
           absl::StrCat("must be a list of 1..", kMaxBindingSubjects,
                        " subjects {kind: Key | User | Group, name: ...}"));
    } else {
      for (size_t i = 0; i < subjects.size(); ++i) {
        const std::string path = absl::StrCat("spec.subjects[", i, "]");
        if (!Map(subjects[i], path)) continue;
        CheckKeys(subjects[i], path, {"kind", "name"});
        Subject s;
        const YAML::Node k = subjects[i]["kind"];
        const YAML::Node nm = subjects[i]["name"];
        if (!k) {
          Fail(subjects[i], path + ".kind", "required (Key, User or Group)");
        } else if (String(k, path + ".kind", &s.kind) && s.kind != "Key" &&
                   s.kind != "User" && s.kind != "Group") {
          Fail(k, path + ".kind",
               absl::StrCat("must be Key, User or Group, got '", s.kind, "'"));
        }
        if (!nm) {
          Fail(subjects[i], path + ".name", "required");
        } else if (String(nm, path + ".name", &s.name) && s.name.empty()) {
          Fail(nm, path + ".name", "must not be empty");
        }
        b.subjects.push_back(std::move(s));
      }
    }
    access_->bindings.push_back(std::move(b));
  }

  AccessManifests* const access_;
  std::set<std::pair<std::string, std::string>> access_names_;
  int documents_ = 0;
  std::vector<Manifest> manifests_;
  std::map<std::pair<Manifest::Kind, std::string>, int> first_line_;
};

nlohmann::json DeploymentSpecJson(const DeploymentSpec& d) {
  using nlohmann::json;
  const ResourceSpec& r = d.resources;
  json resources = {{"gpuModels", r.gpu_models},
                    {"nvlink", r.nvlink},
                    {"cpu", FormatCpuMilli(r.cpu_milli)},
                    {"memory", FormatMemoryMib(r.memory_mib)}};
  if (r.kind == "whole") {
    resources["whole"] = r.gpus;
  } else if (r.kind == "fraction") {
    resources["fraction"] = {{"milli", r.milli},
                             {"memory", FormatMemoryMib(r.gpu_memory_mib)}};
  } else if (r.kind == "mig") {
    resources["mig"] = r.mig_profile;
  }
  json endpoints = json::array();
  for (const HostPort& hp : d.endpoints) {
    endpoints.push_back(HostPortString(hp));
  }
  // One integer when the count is fixed, else the range and where it is now.
  json replicas = d.replicas;
  if (!d.autoscaling &&
      (d.min_replicas != d.max_replicas || d.replicas != d.min_replicas)) {
    replicas = {{"min", d.min_replicas},
                {"max", d.max_replicas},
                {"desired", d.replicas}};
  }
  json out = {
      {"model", d.model},
      {"engine",
       {{"template", d.engine},
        {"args", d.args},
        {"env", d.env},
        {"weightsPath", d.weights_path}}},
      {"endpoints", std::move(endpoints)},
      {"resources", std::move(resources)},
      {"replicas", std::move(replicas)},
      {"priorityClass", d.priority_class},
      {"slo", {{"ttftMs", d.ttft_slo_ms}, {"tpotMs", d.tpot_slo_ms}}},
      {"maxOngoingRequests", d.max_ongoing_requests},
      {"router",
       {{"policy", d.router.policy},
        {"loadBoundEpsilon", d.router.load_bound_epsilon},
        {"affinityBlocks", d.router.affinity_blocks},
        {"sessionFallback", d.router.session_fallback}}},
      {"queue", {{"order", d.queue_order}, {"maxQueueSize", d.max_queue_size}}},
      {"kvBudgetTokens", d.kv_budget_tokens},
      {"tenant", d.tenant},
      {"preemptible", d.preemptible},
  };
  // Only when set, so manifests without them keep their canonical JSON.
  if (d.spread != "node") out["spread"] = d.spread;
  if (d.router.prefix_block_chars !=
      serving::RouterConfig{}.prefix_block_chars) {
    out["router"]["prefixBlockChars"] = d.router.prefix_block_chars;
  }
  if (d.autoscaling) {
    const autoscale::AutoscalingConfig& a = *d.autoscaling;
    out["autoscaling"] = {
        {"minReplicas", d.min_replicas},
        {"maxReplicas", d.max_replicas},
        {"policy", autoscale::PolicyName(a.policy)},
        {"targetOngoingRequests", a.target_ongoing_requests},
        {"lookBackPeriodS", a.look_back_period_s},
        {"upscaleDelayS", a.upscale_delay_s},
        {"downscaleDelayS", a.downscale_delay_s},
        {"maxConcurrentStarts", a.max_concurrent_starts},
        {"idleTimeoutS", a.idle_timeout_s},
        {"sloPercentile", a.slo_percentile},
        {"sloWindowS", a.slo_window_s},
        {"sloHeadroom", a.slo_headroom},
        {"maxHeld", d.max_held},
        {"holdTimeoutS", d.hold_timeout_s},
    };
  }
  return out;
}

nlohmann::json TenantSpecJson(const TenantSpec& t) {
  return {
      {"models", t.models},
      {"weight", t.weight},
      {"priorityClass", t.priority_class},
      {"limits",
       {{"requestsPerMinute", t.limits.requests_per_minute},
        {"tokensPerMinute", t.limits.tokens_per_minute},
        {"burstMinutes", t.limits.burst_minutes},
        {"maxQueued", t.limits.max_queued},
        {"maxConcurrency", t.limits.max_concurrency}}},
      {"quota",
       {{"gpus", t.quota.gpus},
        {"limit", t.quota.limit},
        {"overQuotaWeight", t.quota.over_quota_weight}}},
  };
}

}  // namespace

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

bool ValidObjectName(absl::string_view name, size_t max_size) {
  if (name.empty() || name.size() > max_size) return false;
  auto alnum = [](char c) {
    return absl::ascii_isdigit(static_cast<unsigned char>(c)) ||
           (c >= 'a' && c <= 'z');
  };
  if (!alnum(name.front()) || !alnum(name.back())) return false;
  return std::all_of(name.begin(), name.end(),
                     [&](char c) { return alnum(c) || c == '-' || c == '.'; });
}

const std::vector<std::string>& DefaultPriorityClasses() {
  static const auto* const kClasses = new std::vector<std::string>{
      "critical", "standard", "batch", "sheddable"};
  return *kClasses;
}

const char* KindName(Manifest::Kind kind) {
  switch (kind) {
    case Manifest::Kind::kDeployment:
      return "Deployment";
    case Manifest::Kind::kTenant:
      return "Tenant";
    case Manifest::Kind::kModelRoute:
      return "ModelRoute";
  }
  return "?";
}

void CheckDeployment(const DeploymentSpec& d,
                     const std::vector<std::string>& classes,
                     std::vector<std::string>* problems) {
  if (d.model.empty()) problems->push_back("spec.model: must not be empty");
  if (d.engine.empty()) {
    problems->push_back("spec.engine.template: must not be empty");
  }
  if (d.min_replicas < 0 || d.min_replicas > d.max_replicas) {
    problems->push_back(absl::StrCat("spec.replicas: min ", d.min_replicas,
                                     " must be in 0..max (", d.max_replicas,
                                     ")"));
  } else if (d.replicas < d.min_replicas || d.replicas > d.max_replicas) {
    problems->push_back(absl::StrCat("spec.replicas: desired ", d.replicas,
                                     " must be in min..max (", d.min_replicas,
                                     "..", d.max_replicas, ")"));
  }
  if (d.autoscaling) {
    const autoscale::AutoscalingConfig& a = *d.autoscaling;
    if (const absl::Status s = autoscale::ValidateAutoscalingConfig(a);
        !s.ok()) {
      problems->push_back(absl::StrCat("spec.", s.message()));
    }
    if (a.min_replicas != d.min_replicas || a.max_replicas != d.max_replicas) {
      problems->push_back(
          "spec.autoscaling: minReplicas/maxReplicas differ from the "
          "deployment's replica range");
    }
    if (!d.endpoints.empty()) {
      problems->push_back(
          "spec.autoscaling: attached endpoints cannot be scaled; remove "
          "autoscaling or endpoints");
    }
  }
  CheckPriorityClass(d.priority_class, classes, problems);
  if (d.spread != "node" && d.spread != "gpu" && d.spread != "none") {
    problems->push_back(absl::StrCat(
        "spec.spread: must be node, gpu or none, got '", d.spread, "'"));
  }
  CheckRouter(d.router, problems);
  serving::QueueOrder order;
  if (const absl::Status s = serving::ParseQueueOrder(d.queue_order, &order);
      !s.ok()) {
    problems->push_back(absl::StrCat("spec.queue.order: ", s.message()));
  }
  CheckResources(d.resources, problems);
}

void CheckTenant(const TenantSpec& t, const std::vector<std::string>& classes,
                 std::vector<std::string>* problems) {
  if (!(t.weight > 0)) {
    problems->push_back(
        absl::StrCat("spec.weight: must be > 0, got ", t.weight));
  }
  CheckPriorityClass(t.priority_class, classes, problems);
  if (const absl::Status s = serving::ValidateTenantLimits(t.limits); !s.ok()) {
    problems->push_back(absl::StrCat("spec.limits: ", s.message()));
  }
  if (!(t.quota.gpus >= 0) || !(t.quota.limit >= 0) ||
      !(t.quota.over_quota_weight >= 0)) {
    problems->push_back(
        "spec.quota: gpus, limit and overQuotaWeight must be "
        ">= 0");
  } else if (t.quota.limit > 0 && t.quota.limit < t.quota.gpus) {
    problems->push_back(
        absl::StrCat("spec.quota.limit: must be 0 (none) or "
                     ">= gpus (",
                     t.quota.gpus, "), got ", t.quota.limit));
  }
}

absl::StatusOr<std::vector<Manifest>> ParseManifests(absl::string_view text,
                                                     std::string source) {
  return Parser(std::move(source), nullptr).Parse(text);
}

absl::StatusOr<std::vector<Manifest>> ParseManifests(absl::string_view text,
                                                     std::string source,
                                                     AccessManifests* access) {
  return Parser(std::move(source), access).Parse(text);
}

nlohmann::json RoleJson(const RoleSpec& r) {
  nlohmann::json rules = nlohmann::json::array();
  for (const RoleRule& x : r.rules) {
    rules.push_back({{"verbs", x.verbs}, {"resources", x.resources}});
  }
  return {{"apiVersion", kApiVersion},
          {"kind", "Role"},
          {"metadata", {{"name", r.name}}},
          {"spec", {{"rules", rules}}}};
}

nlohmann::json RoleBindingJson(const RoleBindingSpec& b) {
  nlohmann::json subjects = nlohmann::json::array();
  for (const Subject& s : b.subjects) {
    subjects.push_back({{"kind", s.kind}, {"name", s.name}});
  }
  return {{"apiVersion", kApiVersion},
          {"kind", "RoleBinding"},
          {"metadata", {{"name", b.name}}},
          {"spec",
           {{"role", b.role}, {"tenant", b.tenant}, {"subjects", subjects}}}};
}

nlohmann::json ToJson(const Manifest& m) {
  const bool deployment = m.kind == Manifest::Kind::kDeployment;
  const bool tenant = m.kind == Manifest::Kind::kTenant;
  const auto& labels = deployment ? m.deployment.labels
                       : tenant   ? m.tenant.labels
                                  : m.route.labels;
  return {
      {"apiVersion", kApiVersion},
      {"kind", KindName(m.kind)},
      {"metadata", {{"name", m.name()}, {"labels", labels}}},
      {"spec", deployment ? DeploymentSpecJson(m.deployment)
               : tenant   ? TenantSpecJson(m.tenant)
                          : ModelRouteSpecJson(m.route)},
  };
}

absl::StatusOr<Manifest> ManifestFromJson(const nlohmann::json& j,
                                          std::string source) {
  if (!j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": a manifest must be an object, got ", j.type_name()));
  }
  // JSON is YAML: one parser, one set of messages. Indented, so that a
  // message's line points at its field.
  const std::string text =
      j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
  ASSIGN_OR_RETURN(std::vector<Manifest> manifests,
                   ParseManifests(text, source));
  if (manifests.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": expected one manifest"));
  }
  return std::move(manifests.front());
}

}  // namespace gpusched::config
