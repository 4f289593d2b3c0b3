// The Controller's desired state: apply, delete and scale (validated
// against what only the runtime knows, all or nothing), and the Store's
// keys and events.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "inventory/gpu_catalog.h"
#include "placement/pod_request.h"
#include "runtime/controller.h"
#include "runtime/controller_internal.h"

namespace gpusched::runtime {

using nlohmann::json;

// --- Events and the store ---------------------------------------------------

void Controller::Event(const std::string& kind, const std::string& deployment,
                       const std::string& message, json details) {
  store::Event e;
  e.time = Wall();
  e.kind = kind;
  e.deployment = deployment;
  e.message = message;
  e.details = details.is_null() ? json::object() : std::move(details);
  RecordEvent(std::move(e));
}

void Controller::RecordEvent(store::Event e) {
  if (e.instance.empty()) e.instance = election_->self().id;
  // The leader's events are its decisions: fenced like its other writes.
  std::optional<store::Fence> fence;
  {
    absl::MutexLock l(&fence_mu_);
    fence = event_fence_;
  }
  auto id = store_->AppendEvent(e, fence ? &*fence : nullptr);
  if (!id.ok()) {
    std::fprintf(stderr, "gpusched: event %s not stored: %s\n", e.kind.c_str(),
                 std::string(id.status().message()).c_str());
  }
}

absl::StatusOr<store::NewApiKey> Controller::CreateKey(
    const std::string& tenant, const std::string& name, bool admin) {
  return store_->CreateApiKey(tenant, name, Wall(), admin);
}

absl::Status Controller::EnsureKey(std::string_view secret,
                                   const std::string& tenant, bool admin) {
  return store_
      ->EnsureKey(secret, tenant, admin ? "admin (config)" : "serve", admin,
                  Wall())
      .status();
}

absl::Status Controller::RevokeKey(const std::string& key_id) {
  return store_->RevokeApiKey(key_id, Wall());
}

absl::StatusOr<std::vector<store::KeyInfo>> Controller::ListKeys(
    const std::string& tenant) {
  return store_->ListApiKeys(tenant);
}

absl::StatusOr<std::vector<store::Event>> Controller::Events(
    const store::EventFilter& filter) {
  return store_->QueryEvents(filter);
}

// --- Apply ------------------------------------------------------------------

void Controller::CheckRuntime(const config::DeploymentSpec& d,
                              const std::string& where,
                              std::vector<std::string>* problems) {
  auto tmpl = runtime::FindTemplate(d.engine);
  if (!tmpl.ok()) {
    problems->push_back(absl::StrCat(
        where, ": spec.engine.template: ", tmpl.status().message()));
  } else if (tmpl->argv.empty() && d.args.empty() && d.endpoints.empty()) {
    problems->push_back(absl::StrCat(
        where,
        ": spec.engine.args: the 'command' template needs the command line "
        "in args"));
  }
  if (!d.weights_path.empty()) {
    auto path = runtime::ExpandPlaceholders(
        d.weights_path, {{"model", d.model}, {"name", d.name}});
    if (!path.ok()) {
      problems->push_back(absl::StrCat(
          where, ": spec.engine.weightsPath: ", path.status().message()));
    }
  }
  const inventory::GpuCatalog& catalog = inventory::GpuCatalog::Builtin();
  for (const std::string& m : d.resources.gpu_models) {
    if (catalog.Find(m) == nullptr) {
      problems->push_back(absl::StrCat(
          where, ": spec.resources.gpuModels: unknown GPU model '", m, "'"));
    }
  }
  if (d.resources.kind == "mig") {
    bool known = false;
    for (const inventory::GpuModelSpec& g : catalog.models()) {
      for (const inventory::MigProfile& p : g.mig_profiles) {
        known = known || p.name == d.resources.mig_profile;
      }
    }
    if (!known) {
      problems->push_back(
          absl::StrCat(where, ": spec.resources.mig: unknown MIG profile '",
                       d.resources.mig_profile, "'"));
    }
  }
  if (d.resources.kind != "none" && d.endpoints.empty()) {
    auto pod =
        placement::CompilePodRequest(ToRequest(d.resources), cluster_state_);
    if (!pod.ok()) {
      problems->push_back(
          absl::StrCat(where, ": spec.resources: ", pod.status().message()));
    }
  }
}

absl::StatusOr<std::vector<ApplyResult>> Controller::Apply(
    const std::vector<config::Manifest>& manifests) {
  std::vector<std::string> problems;
  absl::MutexLock lock(&mu_);
  // What other instances wrote counts: validation, generations and the
  // "unchanged" answer are against the store's state.
  SyncDesiredLocked();
  for (const config::Manifest& m : manifests) {
    const std::string where =
        absl::StrCat(config::KindName(m.kind), "/", m.name());
    if (m.kind == config::Manifest::Kind::kModelRoute) {
      CheckRoute(m.route, manifests, &problems);
      CheckShadow(m.route, manifests, &problems);
    }
    if (m.kind == config::Manifest::Kind::kDeployment) {
      if (routes_.contains(m.name())) {
        problems.push_back(
            absl::StrCat(where, ": metadata.name: a ModelRoute has this name"));
      }
      CheckRuntime(m.deployment, where, &problems);
      if (!m.deployment.tenant.empty() &&
          !tenants_.count(m.deployment.tenant) &&
          std::none_of(manifests.begin(), manifests.end(),
                       [&](const config::Manifest& o) {
                         return o.kind == config::Manifest::Kind::kTenant &&
                                o.name() == m.deployment.tenant;
                       })) {
        problems.push_back(absl::StrCat(where,
                                        ": spec.tenant: unknown tenant '",
                                        m.deployment.tenant, "'"));
      }
      auto it = deployments_.find(m.name());
      if (it != deployments_.end() && it->second.deleting) {
        problems.push_back(absl::StrCat(
            where, ": is being deleted; apply it again once it is gone"));
      }
    }
  }
  if (!problems.empty()) {
    return absl::InvalidArgumentError(absl::StrJoin(problems, "\n"));
  }
  std::vector<ApplyResult> results;
  // Tenants first, so a deployment's tenants are known when it starts;
  // routes last, over their deployments.
  constexpr config::Manifest::Kind kOrder[] = {
      config::Manifest::Kind::kTenant, config::Manifest::Kind::kDeployment,
      config::Manifest::Kind::kModelRoute};
  for (const config::Manifest::Kind kind : kOrder) {
    for (const config::Manifest& m : manifests) {
      if (m.kind != kind) continue;
      ApplyResult r;
      switch (kind) {
        case config::Manifest::Kind::kTenant:
          RETURN_IF_ERROR(ApplyTenant(m.tenant, &r, true));
          break;
        case config::Manifest::Kind::kDeployment:
          RETURN_IF_ERROR(ApplyDeployment(m.deployment, &r, true));
          break;
        case config::Manifest::Kind::kModelRoute:
          RETURN_IF_ERROR(ApplyRoute(m.route, &r, true));
          break;
      }
      results.push_back(r);
    }
  }
  dirty_ = true;
  return results;
}

absl::Status Controller::ApplyDeployment(const config::DeploymentSpec& spec,
                                         ApplyResult* result, bool persist) {
  config::Manifest m;
  m.kind = config::Manifest::Kind::kDeployment;
  m.deployment = spec;
  if (m.deployment.model.empty()) m.deployment.model = spec.name;
  const json canonical = config::ToJson(m);
  auto it = deployments_.find(spec.name);
  const bool exists = it != deployments_.end();
  const int64_t generation =
      PlanApply("Deployment", spec.name, canonical,
                exists ? &it->second.manifest : nullptr,
                exists ? it->second.generation : 0, result);
  if (generation == 0) return absl::OkStatus();
  if (spec.autoscaling) {
    RETURN_IF_ERROR(autoscale::ValidateAutoscalingConfig(*spec.autoscaling));
  }
  const Micros wall = Wall();
  if (persist) {
    RETURN_IF_ERROR(
        store_->PutDeployment(spec.name, canonical.dump(), generation, wall));
  }
  ASSIGN_OR_RETURN(runtime::EngineTemplate engine,
                   runtime::FindTemplate(spec.engine));
  engine.extra_args = spec.args;
  for (const auto& [k, v] : spec.env) engine.env[k] = v;
  if (!spec.weights_path.empty()) engine.weights_path = spec.weights_path;
  RETURN_IF_ERROR(gateway_->ServeDeployment(m.deployment, options_.classes));
  Deployment& d = deployments_[spec.name];
  const int before = exists ? ReplicaTarget(d) : 0;
  if (options_.metrics) {
    options_.metrics->SetSlo(spec.name, spec.ttft_slo_ms, spec.tpot_slo_ms);
  }
  d.spec = m.deployment;
  // With spec.autoscaling the autoscaler owns the count: a new entry starts
  // from the count running now (a new deployment, or a restart: from
  // spec.replicas); a changed one keeps its target (rule 1 clamps it).
  if (d.spec.autoscaling) {
    RETURN_IF_ERROR(scaling_.Set(spec.name, *d.spec.autoscaling,
                                 exists ? before : d.spec.replicas, Now()));
  } else {
    scaling_.Remove(spec.name, Now());
  }
  if (options_.metrics && exists) {
    options_.metrics->Scaled(spec.name, before, ReplicaTarget(d));
  }
  d.manifest = canonical;
  d.generation = generation;
  if (!exists) d.created = wall;
  d.updated = wall;
  d.engine = std::move(engine);
  if (!exists) {
    d.life = control::ReplicaSet(spec.name, LifecycleOptionsFor(d.engine));
  } else {
    d.life.set_options(LifecycleOptionsFor(d.engine));
  }
  // What a replica is launched from: a change replaces them, rolling.
  d.life.SetVersion(TemplateKey(m.deployment));
  if (persist) {
    Event(exists ? "deployment.configured" : "deployment.created", spec.name,
          absl::StrCat("deployment ", spec.name, " ", result->action,
                       " (generation ", generation, ")"));
  }
  return absl::OkStatus();
}

absl::Status Controller::ApplyTenant(const config::TenantSpec& spec,
                                     ApplyResult* result, bool persist) {
  config::Manifest m;
  m.kind = config::Manifest::Kind::kTenant;
  m.tenant = spec;
  const json canonical = config::ToJson(m);
  auto it = tenants_.find(spec.name);
  const bool exists = it != tenants_.end();
  const int64_t generation = PlanApply(
      "Tenant", spec.name, canonical, exists ? &it->second.manifest : nullptr,
      exists ? it->second.generation : 0, result);
  if (generation == 0) return absl::OkStatus();
  const Micros wall = Wall();
  {
    // Validate in the dispatcher before anything is stored.
    serving::Dispatcher check(1);
    RETURN_IF_ERROR(check.AddTenant(config::ServingTenant(spec)).status());
  }
  if (persist) {
    RETURN_IF_ERROR(
        store_->PutTenant(spec.name, canonical.dump(), generation, wall));
  }
  RETURN_IF_ERROR(gateway_->ServeTenant(spec));
  Tenant& t = tenants_[spec.name];
  t.spec = spec;
  t.manifest = canonical;
  t.generation = generation;
  if (!exists) t.created = wall;
  t.updated = wall;
  if (persist) {
    store::Event e;
    e.time = wall;
    e.kind = "tenant.applied";
    e.tenant = spec.name;
    e.message = absl::StrCat("tenant ", spec.name, " ", result->action);
    RecordEvent(std::move(e));
  }
  return absl::OkStatus();
}

absl::StatusOr<ApplyResult> Controller::Delete(config::Manifest::Kind kind,
                                               const std::string& name) {
  absl::MutexLock lock(&mu_);
  SyncDesiredLocked();
  return DeleteLocked(kind, name, /*persist=*/true);
}

absl::StatusOr<ApplyResult> Controller::DeleteLocked(
    config::Manifest::Kind kind, const std::string& name, bool persist) {
  ApplyResult result{config::KindName(kind), name, "deleted"};
  if (kind == config::Manifest::Kind::kModelRoute) {
    RETURN_IF_ERROR(DeleteRoute(name, persist));
    dirty_ = true;
    return result;
  }
  if (kind == config::Manifest::Kind::kTenant) {
    if (!tenants_.count(name)) {
      return absl::NotFoundError(absl::StrCat("tenant '", name, "' not found"));
    }
    if (persist) RETURN_IF_ERROR(store_->DeleteTenant(name));
    gateway_->RemoveTenant(name);
    tenants_.erase(name);
    if (persist) {
      store::Event e;
      e.time = Wall();
      e.kind = "tenant.deleted";
      e.tenant = name;
      e.message = absl::StrCat("tenant ", name, " deleted with its keys");
      RecordEvent(std::move(e));
    }
    return result;
  }
  auto it = deployments_.find(name);
  if (it == deployments_.end() || it->second.deleting) {
    return absl::NotFoundError(
        absl::StrCat("deployment '", name, "' not found"));
  }
  if (const std::string route = RouteOf(name); !route.empty() && persist) {
    return absl::FailedPreconditionError(
        absl::StrCat("deployment '", name, "' is a target of ModelRoute '",
                     route, "'; change or delete the route first"));
  }
  if (persist) RETURN_IF_ERROR(store_->DeleteDeployment(name));
  gateway_->RemoveDeployment(name);
  it->second.deleting = true;
  it->second.delete_deadline = Now() + options_.drain_grace;
  scaling_.Remove(name, Now());
  if (persist) {
    Event("deployment.deleted", name,
          absl::StrCat("deployment ", name,
                       " deleted: queued requests are served, then its "
                       "replicas drain and stop"));
  }
  dirty_ = true;
  return result;
}

absl::Status Controller::Scale(const std::string& name, int replicas) {
  config::DeploymentSpec spec;
  {
    absl::MutexLock lock(&mu_);
    auto it = deployments_.find(name);
    if (it == deployments_.end() || it->second.deleting) {
      return absl::NotFoundError(
          absl::StrCat("deployment '", name, "' not found"));
    }
    spec = it->second.spec;
  }
  if (spec.autoscaling) {
    return absl::FailedPreconditionError(absl::StrCat(
        "deployment '", name,
        "' is autoscaled (spec.autoscaling): its replica count follows its "
        "load within minReplicas..maxReplicas (",
        spec.min_replicas, "..", spec.max_replicas,
        "); apply a manifest with other bounds instead"));
  }
  if (!spec.endpoints.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("deployment '", name,
                     "' attaches to endpoints; it has no replicas "
                     "to scale"));
  }
  if (replicas < spec.min_replicas || replicas > spec.max_replicas) {
    return absl::InvalidArgumentError(absl::StrCat(
        "replicas must be within the deployment's min..max (",
        spec.min_replicas, "..", spec.max_replicas, "), got ", replicas));
  }
  spec.replicas = replicas;
  config::Manifest m;
  m.kind = config::Manifest::Kind::kDeployment;
  m.deployment = spec;
  RETURN_IF_ERROR(Apply({m}).status());
  Event("deployment.scaled", name,
        absl::StrCat("deployment ", name, " scaled to ", replicas, " replicas"),
        json{{"replicas", replicas}});
  return absl::OkStatus();
}

}  // namespace gpusched::runtime
