#include "api/controller.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "api/controller_internal.h"
#include "autoscale/swap.h"
#include "boost/asio.hpp"
#include "common/status.h"
#include "control/room.h"
#include "inventory/gpu_catalog.h"
#include "placement/pod_request.h"
#include "placement/preemption.h"
#include "placement/priority.h"
#include "placement/quota.h"
#include "placement/registry.h"
#include "runtime/engine_launch.h"

namespace gpusched::api {

using nlohmann::json;

namespace {

// How often a starting replica is probed for readiness: its readiness is
// part of a cold start's latency.
constexpr Micros kStartingProbe = 10 * kMicrosPerMilli;

// A port nothing listens on right now (the engine binds it next).

inventory::ResourceRequest ToRequest(const config::ResourceSpec& r) {
  inventory::ResourceRequest q;
  if (r.kind == "whole") {
    q.kind = inventory::GpuKind::kWhole;
    q.gpus = r.gpus;
  } else if (r.kind == "fraction") {
    q.kind = inventory::GpuKind::kFraction;
    q.gpu_milli = r.milli;
    q.gpu_memory_mib = r.gpu_memory_mib;
  } else if (r.kind == "mig") {
    q.kind = inventory::GpuKind::kMig;
    q.mig_profile = r.mig_profile;
  }
  q.cpu_milli = r.cpu_milli;
  q.memory_mib = r.memory_mib;
  q.gpu_models = r.gpu_models;
  q.topology = r.nvlink == "required"    ? inventory::Topology::kRequired
               : r.nvlink == "preferred" ? inventory::Topology::kPreferred
                                         : inventory::Topology::kAny;
  return q;
}

gateway::GatewayDeployment ToGateway(const config::DeploymentSpec& s,
                                     const std::vector<std::string>& classes) {
  gateway::GatewayDeployment g;
  g.spec.name = s.name;
  g.spec.router = s.router;
  g.spec.max_queue_size = s.max_queue_size;
  if (s.autoscaling) {
    g.queue_timeout = static_cast<Micros>(s.hold_timeout_s * kMicrosPerSecond);
    g.max_held = s.max_held;
  }
  serving::QueueOrder order = serving::QueueOrder::kFair;
  (void)serving::ParseQueueOrder(s.queue_order, &order);
  for (const std::string& c : classes) {
    g.spec.queue.classes.push_back({c, order, g.queue_timeout});
  }
  g.max_ongoing_requests = s.max_ongoing_requests;
  g.kv_budget_tokens = s.kv_budget_tokens;
  return g;
}

// What a replica is launched from: a change means new replicas.
std::string TemplateKey(const config::DeploymentSpec& s) {
  config::Manifest m;
  m.deployment = s;
  const json spec = config::ToJson(m)["spec"];
  json key = json::object();
  for (const char* k : {"model", "engine", "resources"}) {
    if (spec.contains(k)) key[k] = spec[k];
  }
  return key.dump();
}

// How applying `canonical` over the stored object (null: none) goes: fills
// `result` and returns the new generation, or 0 when nothing changes.
int64_t PlanApply(const char* kind, const std::string& name,
                  const json& canonical, const json* stored,
                  int64_t stored_generation, ApplyResult* result) {
  result->kind = kind;
  result->name = name;
  if (stored != nullptr && *stored == canonical) {
    result->action = "unchanged";
    return 0;
  }
  result->action = stored != nullptr ? "configured" : "created";
  return stored != nullptr ? stored_generation + 1 : 1;
}

}  // namespace

Micros SteadyNow() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

Micros WallNow() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string TailLines(const std::string& path, int lines) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  const std::streamoff want = std::min<std::streamoff>(size, 1 << 20);
  in.seekg(size - want);
  std::string text(static_cast<size_t>(want), '\0');
  in.read(text.data(), want);
  size_t pos = text.size();
  if (pos > 0 && text[pos - 1] == '\n') --pos;
  int seen = 0;
  while (pos > 0) {
    if (text[pos - 1] == '\n' && ++seen == lines) break;
    --pos;
  }
  return text.substr(pos);
}

std::string IsoTime(Micros wall) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", absl::FromUnixMicros(wall),
                          absl::UTCTimeZone());
}

const char* Controller::StateName(State s) {
  switch (s) {
    case State::kPending:
      return "pending";
    case State::kStarting:
      return "starting";
    case State::kReady:
      return "ready";
    case State::kUnhealthy:
      return "unhealthy";
    case State::kBackoff:
      return "backoff";
    case State::kDraining:
      return "draining";
    case State::kExternal:
      return "external";
  }
  return "?";
}

absl::StatusOr<std::unique_ptr<Controller>> Controller::Create(
    ControllerOptions options, ControllerCluster cluster, runtime::Store* store,
    gateway::Gateway* gateway, std::unique_ptr<runtime::Launcher> launcher) {
  std::unique_ptr<Controller> c(new Controller());
  c->launcher_ = launcher != nullptr
                     ? std::move(launcher)
                     : std::make_unique<runtime::LocalLauncher>();
  c->options_ = std::move(options);
  c->cluster_ = std::move(cluster);
  c->store_ = store;
  c->gateway_ = gateway;
  for (const inventory::NodeSpec& n : c->cluster_.nodes) {
    auto id = c->cluster_state_.AddNode(n);
    if (!id.ok()) return id.status();
  }
  // Discovered GPUs that are unhealthy take no replica.
  for (size_t g = 0; g < c->cluster_.gpus.size(); ++g) {
    if (!c->cluster_.gpus[g].healthy && !c->cluster_.nodes.empty()) {
      (void)c->cluster_state_.SetGpuHealth(0, static_cast<int>(g), false);
    }
  }
  auto policy = placement::NewPolicy(c->options_.placement_policy,
                                     placement::PolicyOptions{});
  if (!policy.ok()) return policy.status();
  c->scheduler_ = std::make_unique<placement::Scheduler>(
      &c->cluster_state_, *std::move(policy), /*seed=*/1);
  net::UpstreamOptions probe;
  probe.connect_timeout = std::chrono::milliseconds(500);
  probe.first_byte_timeout = std::chrono::milliseconds(5000);
  probe.idle_timeout = std::chrono::milliseconds(5000);
  probe.max_idle_per_endpoint = 2;
  c->probe_ = std::make_unique<net::UpstreamClient>(probe);
  if (c->options_.metrics) {
    Controller* self = c.get();
    c->options_.metrics->SetSource([self] { return self->MetricsSnapshot(); });
  }
  if (c->gateway_ != nullptr) {
    Controller* self = c.get();
    c->gateway_->SetDemandSink(
        [self](const std::string& deployment, Micros arrival) {
          self->OnDemand(deployment, arrival);
        });
  }
  return c;
}

Controller::~Controller() {
  if (options_.metrics) options_.metrics->SetSource(nullptr);
  if (gateway_ != nullptr) gateway_->SetDemandSink(nullptr);
  Stop();
  probe_.reset();  // no probe callback runs after this
}

// --- Events and the store ---------------------------------------------------

void Controller::Event(const std::string& kind, const std::string& deployment,
                       const std::string& message, json details) {
  runtime::Event e;
  e.time = WallNow();
  e.kind = kind;
  e.deployment = deployment;
  e.message = message;
  e.details = details.is_null() ? json::object() : std::move(details);
  RecordEvent(std::move(e));
}

void Controller::RecordEvent(runtime::Event e) {
  auto id = store_->AppendEvent(e);
  if (!id.ok()) {
    std::fprintf(stderr, "gpusched: event not stored: %s\n",
                 std::string(id.status().message()).c_str());
    return;
  }
  // Bounded retention: the newest 100,000 events.
  if (*id % 1000 == 0) (void)store_->PruneEvents(100000, INT64_MIN);
}

absl::StatusOr<runtime::NewApiKey> Controller::CreateKey(
    const std::string& tenant, const std::string& name, bool admin) {
  return store_->CreateApiKey(tenant, name, WallNow(), admin);
}

absl::Status Controller::EnsureKey(std::string_view secret,
                                   const std::string& tenant, bool admin) {
  return store_
      ->EnsureKey(secret, tenant, admin ? "admin (config)" : "serve", admin,
                  WallNow())
      .status();
}

absl::Status Controller::RevokeKey(const std::string& key_id) {
  return store_->RevokeApiKey(key_id, WallNow());
}

absl::StatusOr<std::vector<runtime::KeyInfo>> Controller::ListKeys(
    const std::string& tenant) {
  return store_->ListApiKeys(tenant);
}

absl::StatusOr<std::vector<runtime::Event>> Controller::Events(
    const runtime::EventFilter& filter) {
  return store_->QueryEvents(filter);
}

// --- Start and stop ---------------------------------------------------------

std::string Controller::PidFile(const std::string& replica) const {
  return absl::StrCat(options_.log_dir, "/", replica, ".pid");
}

void Controller::KillOrphans() {
  std::error_code ec;
  if (!std::filesystem::is_directory(options_.log_dir, ec)) return;
  for (const auto& entry :
       std::filesystem::directory_iterator(options_.log_dir, ec)) {
    if (entry.path().extension() != ".pid") continue;
    std::ifstream in(entry.path());
    pid_t pid = 0;
    std::string argv0;
    in >> pid;
    in.ignore(1);
    std::getline(in, argv0);
    std::ifstream cmd(absl::StrCat("/proc/", pid, "/cmdline"));
    std::string running;
    std::getline(cmd, running, '\0');
    if (pid > 1 && !argv0.empty() && running == argv0) {
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      Event("replica.orphan_killed", "",
            absl::StrCat("killed engine pid ", pid, " (",
                         entry.path().stem().string(),
                         ") left running by a previous gpusched"));
    }
    std::filesystem::remove(entry.path(), ec);
  }
}

absl::Status Controller::Start() {
  KillOrphans();
  std::vector<runtime::Document> deployments, tenants;
  {
    ASSIGN_OR_RETURN(tenants, store_->ListTenants());
    ASSIGN_OR_RETURN(deployments, store_->ListDeployments());
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [docs, what] :
       {std::pair{&tenants, "tenant"}, std::pair{&deployments, "deployment"}}) {
    for (const runtime::Document& doc : *docs) {
      json j = json::parse(doc.manifest_json, nullptr, false);
      auto m = config::ManifestFromJson(
          j, absl::StrCat("stored ", what, " ", doc.name));
      ApplyResult result;
      absl::Status st =
          !m.ok() ? m.status()
          : m->kind == config::Manifest::Kind::kTenant
              ? ApplyTenant(m->tenant, &result, /*persist=*/false)
              : ApplyDeployment(m->deployment, &result, /*persist=*/false);
      if (!st.ok()) {
        return absl::Status(st.code(),
                            absl::StrCat("restoring ", what, " '", doc.name,
                                         "': ", st.message()));
      }
      if (what == std::string("tenant")) {
        tenants_[doc.name].generation = doc.generation;
        tenants_[doc.name].created = doc.created;
        tenants_[doc.name].updated = doc.updated;
      } else {
        deployments_[doc.name].generation = doc.generation;
        deployments_[doc.name].created = doc.created;
        deployments_[doc.name].updated = doc.updated;
      }
    }
  }
  // Autoscaled deployments resume at the count last decided for them (the
  // newest deployment.autoscaled or replica.evicted event says it), not
  // at their manifest's initial count.
  for (auto& [name, d] : deployments_) {
    if (d.autoscale < 0) continue;
    runtime::EventFilter f;
    f.kinds = {"deployment.autoscaled", "replica.evicted"};
    f.deployment = name;
    f.limit = 1;
    absl::StatusOr<std::vector<runtime::Event>> last;
    { last = store_->QueryEvents(f); }
    if (!last.ok() || last->empty()) continue;
    const json& details = (*last)[0].details;
    const char* key = (*last)[0].kind == "replica.evicted" ? "replicas" : "to";
    if (!details.contains(key) || !details[key].is_number_integer()) continue;
    const autoscale::AutoscalingConfig& c = autoscaler_->config(d.autoscale);
    const int target =
        std::clamp(details[key].get<int>(), c.min_replicas, c.max_replicas);
    autoscaler_->SetTarget(d.autoscale, target);
  }
  Event("server.started", "",
        absl::StrCat("restored ", deployments.size(), " deployments and ",
                     tenants.size(), " tenants; ", cluster_.nodes.size(),
                     " nodes (", cluster_.source, ")"));
  loop_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

void Controller::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  wake_.notify_all();
  if (loop_.joinable()) loop_.join();
  std::lock_guard<std::mutex> lock(mu_);
  const Micros now = SteadyNow();
  for (auto& [name, d] : deployments_) {
    for (auto& r : d.replicas) {
      if (r->pid != 0) (void)launcher_->Stop(r->pid, options_.stop_grace, now);
    }
  }
  const Micros deadline = now + options_.stop_grace + 2 * kMicrosPerSecond;
  while (launcher_->size() > 0 && SteadyNow() < deadline) {
    launcher_->Poll();
    launcher_->Tick(SteadyNow());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (auto& [name, d] : deployments_) {
    for (auto& r : d.replicas) {
      std::error_code ec;
      std::filesystem::remove(PidFile(r->name), ec);
    }
  }
}

void Controller::OnDemand(const std::string& deployment, Micros arrival) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = deployments_.find(deployment);
    if (it == deployments_.end()) return;
    if (it->second.demand_arrival == 0) it->second.demand_arrival = arrival;
    dirty_ = true;
  }
  wake_.notify_all();
}

void Controller::Wake() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    dirty_ = true;
  }
  wake_.notify_all();
}

void Controller::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  Micros next_gpu_read = SteadyNow() + options_.gpu_read_period;
  while (!stopping_) {
    Reconcile(SteadyNow());
    // At least 1 ms: a deadline already due runs at the next pass.
    const Micros wait = std::max<Micros>(
        kMicrosPerMilli, std::min(next_wake_ - SteadyNow(), options_.tick));
    wake_.wait_for(lock, std::chrono::microseconds(wait),
                   [this] { return dirty_ || stopping_; });
    dirty_ = false;
    lock.unlock();
    gateway_->Tick();
    // NVML GPUs are read again now and then (memory used, utilization,
    // health), outside the lock: a read takes milliseconds.
    std::optional<std::vector<inventory::DiscoveredGpu>> gpus;
    if (cluster_.source == "nvml" && options_.gpu_read_period > 0 &&
        SteadyNow() >= next_gpu_read) {
      next_gpu_read = SteadyNow() + options_.gpu_read_period;
      auto read = inventory::DiscoverLocalGpus();
      if (read.ok() && read->size() == cluster_.gpus.size()) {
        gpus = *std::move(read);
      }
    }
    lock.lock();
    if (gpus) RefreshGpus(*std::move(gpus));
  }
}

void Controller::RefreshGpus(std::vector<inventory::DiscoveredGpu> gpus) {
  for (size_t g = 0; g < gpus.size(); ++g) {
    if (gpus[g].healthy != cluster_.gpus[g].healthy) {
      (void)cluster_state_.SetGpuHealth(0, static_cast<int>(g),
                                        gpus[g].healthy);
      Event(gpus[g].healthy ? "gpu.healthy" : "gpu.unhealthy", "",
            absl::StrCat(
                "GPU ", g, " (", gpus[g].uuid, ") ",
                gpus[g].healthy
                    ? "is healthy again"
                    : absl::StrCat("is unhealthy: ",
                                   absl::StrJoin(gpus[g].health_notes, "; "))));
    }
  }
  cluster_.gpus = std::move(gpus);
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
  std::lock_guard<std::mutex> lock(mu_);
  for (const config::Manifest& m : manifests) {
    const std::string where = absl::StrCat(
        m.kind == config::Manifest::Kind::kDeployment ? "Deployment/"
                                                      : "Tenant/",
        m.name());
    if (m.kind == config::Manifest::Kind::kDeployment) {
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
  // Tenants first, so a deployment's tenants are known when it starts.
  for (int pass = 0; pass < 2; ++pass) {
    for (const config::Manifest& m : manifests) {
      const bool tenant = m.kind == config::Manifest::Kind::kTenant;
      if (tenant != (pass == 0)) continue;
      ApplyResult r;
      RETURN_IF_ERROR(tenant ? ApplyTenant(m.tenant, &r, true)
                             : ApplyDeployment(m.deployment, &r, true));
      results.push_back(r);
    }
  }
  dirty_ = true;
  wake_.notify_all();
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
  const Micros wall = WallNow();
  if (persist) {
    RETURN_IF_ERROR(
        store_->PutDeployment(spec.name, canonical.dump(), generation, wall));
  }
  ASSIGN_OR_RETURN(runtime::EngineTemplate engine,
                   runtime::FindTemplate(spec.engine));
  engine.extra_args = spec.args;
  for (const auto& [k, v] : spec.env) engine.env[k] = v;
  if (!spec.weights_path.empty()) engine.weights_path = spec.weights_path;
  RETURN_IF_ERROR(
      gateway_->UpsertDeployment(ToGateway(m.deployment, options_.classes)));
  Deployment& d = deployments_[spec.name];
  const int before = exists ? ReplicaTarget(d) : 0;
  if (options_.metrics) {
    options_.metrics->SetSlo(spec.name, spec.ttft_slo_ms, spec.tpot_slo_ms);
  }
  d.spec = m.deployment;
  // With spec.autoscaling the autoscaler owns the count: a new entry starts
  // from the count running now (a new deployment, or a restart: from
  // spec.replicas); a changed one keeps its target (rule 1 clamps it).
  if (d.spec.autoscaling && d.autoscale >= 0) {
    RETURN_IF_ERROR(
        autoscaler_->UpdateConfig(d.autoscale, *d.spec.autoscaling));
  } else if (d.spec.autoscaling) {
    ASSIGN_OR_RETURN(d.autoscale,
                     autoscaler_->AddDeployment(
                         spec.name, *d.spec.autoscaling,
                         exists ? before : d.spec.replicas, SteadyNow()));
  } else if (d.autoscale >= 0) {
    RebuildAutoscaler(SteadyNow());
  }
  if (options_.metrics && exists) {
    options_.metrics->Scaled(spec.name, before, ReplicaTarget(d));
  }
  d.manifest = canonical;
  d.generation = generation;
  if (!exists) d.created = wall;
  d.updated = wall;
  d.engine = std::move(engine);
  d.template_key = TemplateKey(m.deployment);
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
  const Micros wall = WallNow();
  gateway::GatewayTenant gt;
  gt.spec.name = spec.name;
  gt.spec.weight = spec.weight;
  gt.spec.limits = spec.limits;
  gt.priority = spec.priority_class;
  gt.models = spec.models;
  {
    // Validate in the dispatcher before anything is stored.
    serving::Dispatcher check(1);
    RETURN_IF_ERROR(check.AddTenant(gt.spec).status());
  }
  if (persist) {
    RETURN_IF_ERROR(
        store_->PutTenant(spec.name, canonical.dump(), generation, wall));
  }
  RETURN_IF_ERROR(gateway_->UpsertTenant(gt));
  Tenant& t = tenants_[spec.name];
  t.spec = spec;
  t.manifest = canonical;
  t.generation = generation;
  if (!exists) t.created = wall;
  t.updated = wall;
  if (persist) {
    RecordEvent({0, wall, "tenant.applied", "", spec.name,
                 absl::StrCat("tenant ", spec.name, " ", result->action),
                 json::object()});
  }
  return absl::OkStatus();
}

absl::StatusOr<ApplyResult> Controller::Delete(config::Manifest::Kind kind,
                                               const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  ApplyResult result{
      kind == config::Manifest::Kind::kTenant ? "Tenant" : "Deployment", name,
      "deleted"};
  if (kind == config::Manifest::Kind::kTenant) {
    if (!tenants_.count(name)) {
      return absl::NotFoundError(absl::StrCat("tenant '", name, "' not found"));
    }
    { RETURN_IF_ERROR(store_->DeleteTenant(name)); }
    gateway_->RemoveTenant(name);
    tenants_.erase(name);
    RecordEvent({0, WallNow(), "tenant.deleted", "", name,
                 absl::StrCat("tenant ", name, " deleted with its keys"),
                 json::object()});
    return result;
  }
  auto it = deployments_.find(name);
  if (it == deployments_.end() || it->second.deleting) {
    return absl::NotFoundError(
        absl::StrCat("deployment '", name, "' not found"));
  }
  { RETURN_IF_ERROR(store_->DeleteDeployment(name)); }
  gateway_->RemoveDeployment(name);
  it->second.deleting = true;
  it->second.delete_deadline = SteadyNow() + options_.drain_grace;
  if (it->second.autoscale >= 0) RebuildAutoscaler(SteadyNow());
  Event("deployment.deleted", name,
        absl::StrCat("deployment ", name,
                     " deleted: queued requests are served, then its "
                     "replicas drain and stop"));
  dirty_ = true;
  wake_.notify_all();
  return result;
}

absl::Status Controller::Scale(const std::string& name, int replicas) {
  config::DeploymentSpec spec;
  {
    std::lock_guard<std::mutex> lock(mu_);
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

// --- Reconcile --------------------------------------------------------------

void Controller::Reconcile(Micros now) {
  next_wake_ = now + options_.tick;
  AccrueGpuTime(now);
  HandleExits(now);
  launcher_->Tick(now);
  Autoscale(now);
  next_wake_ = std::min(next_wake_, autoscaler_->NextDeadline());
  // Higher classes first: they take GPUs freed in this pass.
  std::vector<Deployment*> order;
  for (auto& [name, d] : deployments_) order.push_back(&d);
  std::stable_sort(order.begin(), order.end(),
                   [&](const Deployment* a, const Deployment* b) {
                     return ClassRank(a->spec.priority_class) <
                            ClassRank(b->spec.priority_class);
                   });
  for (Deployment* d : order) ReconcileDeployment(*d, now);
  for (auto it = deployments_.begin(); it != deployments_.end();) {
    Deployment& d = it->second;
    if (d.deleting && d.replicas.empty()) {
      gateway_->SetReplicas(it->first, {});
      it = deployments_.erase(it);
    } else {
      ++it;
    }
  }
}

void Controller::HandleExits(Micros now) {
  for (const runtime::ExitEvent& ev : launcher_->Poll()) {
    for (auto& [name, d] : deployments_) {
      for (auto& r : d.replicas) {
        if (r->pid != ev.id) continue;
        std::error_code ec;
        std::filesystem::remove(PidFile(r->name), ec);
        const std::string how = ev.signaled
                                    ? absl::StrCat("signal ", ev.signal)
                                    : absl::StrCat("exit code ", ev.exit_code);
        r->pid = 0;
        r->probing = false;
        if (r->remove_on_exit) {
          Event("replica.stopped", name,
                absl::StrCat(r->name, " stopped (", how, ")"));
          r->state = State::kDraining;
          r->stop_sent = true;
          continue;
        }
        r->backoff.OnExit(now);
        r->next_start = r->backoff.NextStart(now);
        r->state = State::kBackoff;
        ++r->restarts;
        r->message =
            absl::StrCat("engine exited (", how, "); restarting in ",
                         absl::StrFormat("%.1f", (r->next_start - now) / 1e6),
                         " s; see ", options_.log_dir, "/", r->name, ".err");
        Event("replica.exited", name, absl::StrCat(r->name, ": ", r->message),
              json{{"replica", r->name},
                   {"signaled", ev.signaled},
                   {"exit_code", ev.exit_code},
                   {"signal", ev.signal},
                   {"restarts", r->restarts}});
      }
    }
  }
}

std::string Controller::WeightsPath(const Deployment& d) const {
  if (d.engine.weights_path.empty()) return "";
  auto path = runtime::ExpandPlaceholders(
      d.engine.weights_path,
      {{"model", d.spec.model.empty() ? d.spec.name : d.spec.model},
       {"name", d.spec.name}});
  return path.ok() ? *path : "";
}

int Controller::ClassRank(const std::string& priority_class) const {
  for (size_t i = 0; i < options_.classes.size(); ++i) {
    if (options_.classes[i] == priority_class) return static_cast<int>(i);
  }
  return static_cast<int>(options_.classes.size());
}

namespace {
// The leaf queue of a deployment's owner ("-" for none).
std::string QueueOf(const std::string& tenant) {
  return tenant.empty() ? "-" : tenant;
}
}  // namespace

inventory::PodInfo Controller::PodInfoOf(const Deployment& d) const {
  inventory::PodInfo info{QueueOf(d.spec.tenant), 500, d.spec.preemptible};
  auto cls = placement::PriorityClasses::Defaults().Find(d.spec.priority_class);
  if (cls.ok()) {
    info.priority = cls->value;
    info.preemptible = info.preemptible && cls->preemptible;
  }
  return info;
}

void Controller::DrainReplica(Deployment& d, Replica& r, const std::string& why,
                              Micros now) {
  r.state = State::kDraining;
  r.remove_on_exit = true;
  r.drain_deadline = now + options_.drain_grace;
  Event("replica.draining", d.spec.name,
        absl::StrCat(r.name, " draining: ", why));
}

bool Controller::MakeRoom(Deployment& d, Replica& r,
                          const placement::PodRequest& pod, Micros now) {
  // Victims already draining for it: wait for them.
  std::erase_if(r.awaiting, [&](const std::string& victim) {
    for (const auto& [name, od] : deployments_) {
      for (const auto& o : od.replicas) {
        if (o->name == victim && o->placed) return false;
      }
    }
    return true;
  });
  if (!r.awaiting.empty()) return true;
  // The placed replicas, and the owners' queues with their quotas.
  control::RoomAsk ask;
  ask.pod = pod;
  ask.replica = r.name;
  ask.class_rank = ClassRank(d.spec.priority_class);
  std::vector<control::RoomCandidate> candidates;
  absl::flat_hash_map<std::string, std::pair<Deployment*, Replica*>> placed;
  std::set<std::string> owners = {QueueOf(d.spec.tenant)};
  int index = 0;
  for (auto& [name, od] : deployments_) {
    ++index;
    if (&od == &d) ask.deployment = index;
    owners.insert(QueueOf(od.spec.tenant));
    const bool queued = &od != &d && gateway_->Load(name).queued > 0;
    for (auto& o : od.replicas) {
      if (!o->placed || o->name == r.name) continue;
      placed[o->name] = {&od, o.get()};
      candidates.push_back({o->name, index, ClassRank(od.spec.priority_class),
                            od.autoscale >= 0, od.spec.preemptible,
                            o->state == State::kReady && !od.deleting,
                            o->state == State::kReady && !queued &&
                                gateway_->InFlightOn(o->endpoint) == 0,
                            o->last_busy});
    }
  }
  std::vector<control::RoomQueue> queues;
  for (const std::string& q : owners) {
    if (auto t = tenants_.find(q); t != tenants_.end()) {
      const config::TenantQuotaSpec& quota = t->second.spec.quota;
      queues.push_back({q, quota.gpus, quota.limit, quota.over_quota_weight});
    }
  }
  const control::RoomPlan plan =
      control::PlanRoom(cluster_state_, *scheduler_, preemption_filters_, ask,
                        candidates, queues, now, options_.swap_min_idle);
  for (const control::RoomVictim& v : plan.victims) {
    auto it = placed.find(v.replica);
    if (it == placed.end()) continue;
    auto [vd, vr] = it->second;
    if (vr->state == State::kDraining) {
      r.awaiting.push_back(vr->name);
      continue;
    }
    if (plan.kind == control::RoomPlan::Kind::kSwap) {
      const int target = autoscaler_->target(vd->autoscale);
      autoscaler_->SetTarget(vd->autoscale, std::max(0, target - 1));
      const double idle_s = v.idle_for >= 0 ? v.idle_for / 1e6 : -1;
      const std::string why = absl::StrFormat(
          "swapped out for %s (%s, class %s): idle%s, least recently used of "
          "class %s or lower",
          r.name, d.spec.name, d.spec.priority_class,
          idle_s >= 0 ? absl::StrFormat(" for %.1f s", idle_s) : "",
          d.spec.priority_class);
      DrainReplica(*vd, *vr, why, now);
      Event("replica.evicted", vd->spec.name, absl::StrCat(vr->name, " ", why),
            json{{"replica", vr->name},
                 {"for", d.spec.name},
                 {"for_replica", r.name},
                 {"class", vd->spec.priority_class},
                 {"idle_s", idle_s},
                 {"replicas", std::max(0, target - 1)}});
      if (options_.metrics) options_.metrics->Evicted();
    } else {
      const std::string why = absl::StrFormat(
          "preempted by %s (%s, class %s, priority %d): %s", r.name,
          d.spec.name, d.spec.priority_class, pod.info.priority, v.rule);
      DrainReplica(*vd, *vr, why, now);
      Event("replica.preempted", vd->spec.name,
            absl::StrCat(vr->name, " ", why),
            json{{"replica", vr->name},
                 {"for", d.spec.name},
                 {"for_replica", r.name},
                 {"priority", v.priority},
                 {"preemptor_priority", pod.info.priority},
                 {"gpu_milli", v.gpu_milli},
                 {"rule", v.rule},
                 {"node", cluster_state_.spec(plan.node).name}});
      if (options_.metrics) options_.metrics->Preempted();
    }
    r.awaiting.push_back(vr->name);
  }
  return !r.awaiting.empty();
}

void Controller::Release(Replica& r) {
  if (r.placed) cluster_state_.Forget(r.name);
  r.placed = false;
}

void Controller::ReconcileDeployment(Deployment& d, Micros now) {
  auto& reps = d.replicas;
  if (!d.spec.endpoints.empty()) {
    // Attached engines: one "replica" per endpoint, probed, never launched.
    std::vector<std::unique_ptr<Replica>> next;
    for (size_t i = 0; i < d.spec.endpoints.size() && !d.deleting; ++i) {
      const net::Endpoint ep{d.spec.endpoints[i].host,
                             static_cast<uint16_t>(d.spec.endpoints[i].port)};
      std::unique_ptr<Replica> r;
      for (auto& old : reps) {
        if (old && old->state == State::kExternal &&
            gateway::EndpointKey(old->endpoint) == gateway::EndpointKey(ep)) {
          r = std::move(old);
        }
      }
      if (!r) {
        r = std::make_unique<Replica>();
        r->name = absl::StrCat(d.spec.name, "-ext-", i);
        r->state = State::kExternal;
        r->endpoint = ep;
      }
      next.push_back(std::move(r));
    }
    // Launched replicas of an earlier version of the deployment drain.
    for (auto& old : reps) {
      if (old && old->state != State::kExternal) next.push_back(std::move(old));
    }
    reps = std::move(next);
  }
  // How many replicas of the current version should run.
  int desired = d.spec.endpoints.empty() ? ReplicaTarget(d) : 0;
  if (d.deleting) {
    const bool queued = gateway_->Load(d.spec.name).queued > 0;
    desired = queued && now < d.delete_deadline ? -1 : 0;  // -1: keep all
  }
  std::vector<Replica*> current;
  int ready_current = 0;
  std::set<int> used;
  for (auto& r : reps) {
    if (r->state == State::kExternal) continue;
    used.insert(r->index);
    if (r->state == State::kDraining) continue;
    if (r->template_key == d.template_key) {
      current.push_back(r.get());
      if (r->state == State::kReady) ++ready_current;
    }
  }
  auto drain = [&](Replica& r, const std::string& why) {
    DrainReplica(d, r, why, now);
  };
  if (desired >= 0) {
    while (static_cast<int>(current.size()) < desired) {
      int index = 0;
      while (used.count(index)) ++index;
      used.insert(index);
      auto r = std::make_unique<Replica>();
      r->name = absl::StrCat(d.spec.name, "-", index);
      r->index = index;
      r->template_key = d.template_key;
      r->backoff = runtime::RestartBackoff(options_.backoff);
      current.push_back(r.get());
      reps.push_back(std::move(r));
    }
    // Extra replicas drain, the least ready and highest index first.
    std::sort(current.begin(), current.end(), [](Replica* a, Replica* b) {
      const bool ra = a->state == State::kReady, rb = b->state == State::kReady;
      return ra != rb ? ra : a->index < b->index;
    });
    while (static_cast<int>(current.size()) > desired) {
      drain(*current.back(), d.deleting ? "deployment deleted" : "scaled down");
      current.pop_back();
    }
    // Older versions drain once the new ones are ready (or at once when
    // they serve nothing anyway).
    for (auto& r : reps) {
      if (r->state == State::kExternal || r->state == State::kDraining ||
          r->template_key == d.template_key) {
        continue;
      }
      if (r->state != State::kReady || ready_current >= desired) {
        drain(*r, "replaced by the deployment's new version");
      }
    }
  }
  for (auto& rp : reps) {
    Replica& r = *rp;
    switch (r.state) {
      case State::kPending:
      case State::kBackoff:
        if (now >= r.next_start) Launch(d, r, now);
        break;
      case State::kStarting:
        if (now - r.started > d.engine.readiness.startup_timeout) {
          r.message = absl::StrCat(
              "not ready after ",
              d.engine.readiness.startup_timeout / kMicrosPerSecond,
              " s; restarting");
          Event("replica.unhealthy", d.spec.name,
                absl::StrCat(r.name, ": ", r.message));
          r.state = State::kUnhealthy;
          (void)launcher_->Kill(r.pid);
        } else if (!r.probing && now >= r.next_probe) {
          Probe(d, r, now);
        }
        break;
      case State::kReady:
      case State::kExternal:
        if (r.state == State::kReady && gateway_->InFlightOn(r.endpoint) > 0) {
          r.last_busy = now;
        }
        if (!r.probing && now >= r.next_probe) Probe(d, r, now);
        if (!r.scraping && now >= r.next_scrape &&
            options_.metrics_period > 0 &&
            (r.state == State::kReady || r.external_ok)) {
          Scrape(d, r, now);
        }
        break;
      case State::kUnhealthy:
        break;  // killed; its exit restarts it
      case State::kDraining:
        if (!r.stop_sent &&
            (r.pid == 0 || gateway_->InFlightOn(r.endpoint) == 0 ||
             now >= r.drain_deadline)) {
          r.stop_sent = true;
          if (r.pid != 0)
            (void)launcher_->Stop(r.pid, options_.stop_grace, now);
        }
        break;
    }
  }
  // The loop runs again when a replica is due to launch or, starting (just
  // launched too), to be probed.
  for (const auto& r : reps) {
    if (r->state == State::kPending || r->state == State::kBackoff) {
      next_wake_ = std::min(next_wake_, r->next_start);
    } else if (r->state == State::kStarting && !r->probing) {
      next_wake_ = std::min(next_wake_, r->next_probe);
    }
  }
  // Stopped replicas are forgotten and their GPUs released.
  std::erase_if(reps, [&](const std::unique_ptr<Replica>& r) {
    if (r->state != State::kDraining || !r->stop_sent || r->pid != 0) {
      return false;
    }
    Release(*r);
    return true;
  });
  PushReady(d);
}

void Controller::PushReady(Deployment& d) {
  std::vector<net::Endpoint> ready;
  std::vector<std::string> keys;
  for (const auto& r : d.replicas) {
    if (r->state == State::kReady ||
        (r->state == State::kExternal && r->external_ok)) {
      ready.push_back(r->endpoint);
      keys.push_back(gateway::EndpointKey(r->endpoint));
    }
  }
  if (keys == d.pushed) return;
  d.pushed = keys;
  gateway_->SetReplicas(d.spec.name, ready);
  // Held requests were dispatched by SetReplicas: the scale from zero is
  // done.
  if (d.cold && d.cold->ready > 0 && !ready.empty()) {
    const ColdStart& c = *d.cold;
    const Micros released = SteadyNow();
    auto ms = [](Micros from, Micros to) {
      return from > 0 && to >= from ? (to - from) / 1e3 : -1.0;
    };
    const json phases = {
        {"replica", c.replica},
        {"decision_ms", ms(c.arrival, c.decided)},
        {"placement_ms", ms(c.decided, c.placed)},
        {"launch_ms", ms(c.placed, c.launched)},
        {"engine_ready_ms", ms(c.launched, c.ready)},
        {"release_ms", ms(c.ready, released)},
        {"total_ms", ms(c.arrival, released)},
        // gpusched's own part, but for readiness detection (inside
        // engine_ready_ms; bench/cold_start.sh measures it all).
        {"gpusched_ms", c.launched > 0 && c.ready > 0
                            ? ms(c.arrival, c.launched) + ms(c.ready, released)
                            : -1.0},
    };
    Event("replica.cold_start", d.spec.name,
          absl::StrFormat(
              "%s: scaled from zero, first request released %.1f ms after "
              "it arrived (decision %.1f, placement %.1f, launch %.1f, engine "
              "start and readiness %.1f, release %.1f ms)",
              c.replica, ms(c.arrival, released), ms(c.arrival, c.decided),
              ms(c.decided, c.placed), ms(c.placed, c.launched),
              ms(c.launched, c.ready), ms(c.ready, released)),
          phases);
    d.cold.reset();
  }
}

int Controller::ReplicaTarget(const Deployment& d) const {
  return d.autoscale >= 0 ? autoscaler_->target(d.autoscale) : d.spec.replicas;
}

void Controller::RebuildAutoscaler(Micros now) {
  auto next = std::make_unique<autoscale::Autoscaler>();
  for (auto& [name, d] : deployments_) {
    if (d.autoscale < 0) continue;
    const int target = autoscaler_->target(d.autoscale);
    d.autoscale = -1;
    if (d.deleting || !d.spec.autoscaling) continue;
    // Cannot fail: the config was validated when applied, names are unique.
    auto index = next->AddDeployment(name, *d.spec.autoscaling, target, now);
    if (index.ok()) d.autoscale = *index;
  }
  autoscaler_ = std::move(next);
}

void Controller::Autoscale(Micros now) {
  if (autoscaler_->num_deployments() == 0) return;
  for (auto& [name, d] : deployments_) {
    if (d.autoscale < 0) continue;
    const gateway::DeploymentLoad load = gateway_->Load(name);
    autoscale::Observation o;
    o.in_flight = load.in_flight;
    o.queued = load.queued;
    for (const auto& r : d.replicas) {
      if (r->state == State::kDraining || r->state == State::kExternal ||
          r->template_key != d.template_key) {
        continue;
      }
      if (r->state == State::kReady) {
        ++o.ready;
      } else {
        ++o.starting;
      }
    }
    // The SLO policy's samples: TTFTs of requests finished since the last
    // observation (the gateway's clock is the same steady clock).
    if (autoscaler_->config(d.autoscale).policy == autoscale::Policy::kSlo) {
      o.ttft_samples_s = gateway_->stats().TtftSince(name, d.ttft_seen);
      d.ttft_seen = now;
    }
    autoscaler_->Observe(d.autoscale, now, o);
  }
  decisions_.clear();
  autoscaler_->Evaluate(now, &decisions_);
  for (const autoscale::Decision& dec : decisions_) {
    auto it = deployments_.find(dec.deployment);
    if (it == deployments_.end()) continue;
    Deployment& d = it->second;
    const autoscale::Signals& s = dec.signals;
    if (options_.metrics) {
      options_.metrics->Scaled(dec.deployment, dec.from, dec.to);
    }
    if (dec.from == 0 && dec.to > 0) {
      d.cold = ColdStart{};
      d.cold->arrival = d.demand_arrival > 0 ? d.demand_arrival : now;
      d.cold->decided = now;
    }
    if (dec.to == 0) {
      d.demand_arrival = 0;
      d.cold.reset();
    }
    const char* reason = autoscale::ReasonName(dec.reason);
    Event("deployment.autoscaled", dec.deployment,
          absl::StrCat("deployment ", dec.deployment, " autoscaled from ",
                       dec.from, " to ", dec.to, " replicas (", reason, ": ",
                       s.ToString(), ")"),
          json{{"from", dec.from},
               {"to", dec.to},
               {"reason", reason},
               {"signals",
                {{"desired", s.desired},
                 {"in_flight", s.in_flight},
                 {"queued", s.queued},
                 {"ready", s.ready},
                 {"starting", s.starting},
                 {"ongoing_mean", s.ongoing_mean},
                 {"ttft_p_s", s.ttft_p_s},
                 {"samples", s.samples},
                 {"idle_s", s.idle_s},
                 {"run_s", s.run_s}}}});
  }
}

void Controller::Launch(Deployment& d, Replica& r, Micros now) {
  // The first replica launched after a scale from zero serves the held
  // requests.
  ColdStart* cold =
      d.cold && (d.cold->replica.empty() || d.cold->replica == r.name)
          ? &*d.cold
          : nullptr;
  if (cold) cold->replica = r.name;
  auto fail = [&](const std::string& why) {
    r.backoff.OnExit(now);
    r.next_start = r.backoff.NextStart(now);
    r.state = State::kBackoff;
    r.message = why;
    Event("replica.failed", d.spec.name, absl::StrCat(r.name, ": ", why));
  };
  if (!r.placed) {
    if (d.spec.resources.kind == "none") {
      r.placed = true;
      r.allocation = {};
    } else {
      auto pod = placement::CompilePodRequest(ToRequest(d.spec.resources),
                                              cluster_state_, PodInfoOf(d));
      if (!pod.ok()) {
        fail(std::string(pod.status().message()));
        return;
      }
      // The owner's GPU limit (quota.limit, in GPUs) bounds what its
      // deployments hold.
      if (auto t = tenants_.find(d.spec.tenant);
          t != tenants_.end() && t->second.spec.quota.limit > 0) {
        int64_t used = 0;
        for (const auto& [name, other] : deployments_) {
          if (other.spec.tenant != d.spec.tenant) continue;
          for (const auto& o : other.replicas) {
            if (o->placed) used += o->allocation.GpuMilli();
          }
        }
        const int64_t limit =
            static_cast<int64_t>(t->second.spec.quota.limit * 1000 + 0.5);
        if (used + pod->TotalGpuMilli() > limit) {
          const std::string why = absl::StrFormat(
              "tenant %s's GPU limit: %.2f of %.2f GPUs in use, this replica "
              "needs %.2f more",
              d.spec.tenant, used / 1000.0, limit / 1000.0,
              pod->TotalGpuMilli() / 1000.0);
          r.state = State::kPending;
          r.next_start = now + kMicrosPerSecond;
          if (why != r.message) {
            r.message = why;
            Event("replica.unschedulable", d.spec.name,
                  absl::StrCat(r.name, ": ", why),
                  json{{"reasons", {{"TenantQuota", 1}}}});
          }
          return;
        }
      }
      const Micros place_start = SteadyNow();
      // Nodes where the weights are local first.
      const std::string weights = WeightsPath(d);
      placement::Decision dec;
      bool weights_local = false;
      if (!weights.empty()) {
        if (cluster_.source == "nvml" && std::filesystem::exists(weights)) {
          weights_nodes_[weights].insert(0);  // this machine
        }
        for (int n : weights_nodes_[weights]) {
          dec = scheduler_->PlaceOn(r.name, *pod, n);
          if (dec.placed) {
            weights_local = true;
            break;
          }
        }
      }
      if (!dec.placed) dec = scheduler_->Place(r.name, *pod);
      if (options_.metrics) {
        options_.metrics->Placement(dec, ToSeconds(SteadyNow() - place_start));
      }
      if (!dec.placed) {
        const std::string why = dec.Summary(cluster_state_);
        r.state = State::kPending;
        r.next_start = now + kMicrosPerSecond;
        if (MakeRoom(d, r, *pod, now)) {
          // Placed once its victims are gone (checked every tick).
          r.next_start = now + options_.tick;
          r.message = absl::StrCat("waiting for ", r.awaiting.size(),
                                   " replica(s) to drain to make room: ",
                                   absl::StrJoin(r.awaiting, ", "));
          return;
        }
        if (why != r.message) {
          r.message = why;
          json reasons = json::object();
          for (const auto& [reason, n] : dec.reasons) reasons[reason] = n;
          Event("replica.unschedulable", d.spec.name,
                absl::StrCat(r.name, ": ", why), json{{"reasons", reasons}});
        }
        return;
      }
      (void)cluster_state_.Bind(r.name);
      r.placed = true;
      r.allocation = dec.allocation;
      json top = json::array();
      for (const placement::Candidate& c : dec.top) {
        top.push_back(
            {{"node", cluster_state_.spec(c.node).name}, {"score", c.score}});
      }
      json gpus = json::array();
      for (const inventory::GpuShare& g : dec.allocation.gpus) {
        gpus.push_back({{"gpu", g.gpu},
                        {"milli", g.milli},
                        {"memoryMiB", g.memory_mib},
                        {"mig", g.mig_profile}});
      }
      Event("replica.placed", d.spec.name,
            absl::StrCat(r.name, ": ", dec.Summary(cluster_state_)),
            json{{"node", cluster_state_.spec(dec.allocation.node).name},
                 {"gpus", gpus},
                 {"score", dec.score},
                 {"top", top},
                 {"policy", options_.placement_policy},
                 {"weightsPath", weights},
                 {"weightsLocal", weights_local}});
    }
  }
  if (cold && cold->placed == 0) cold->placed = SteadyNow();
  runtime::EngineLaunchInput in;
  in.engine = &d.engine;
  in.replica = r.name;
  in.deployment = d.spec.name;
  in.model = d.spec.model.empty() ? d.spec.name : d.spec.model;
  in.resources = d.spec.resources;
  in.allocation = r.allocation;
  if (r.allocation.node >= 0) {
    in.node = &cluster_state_.spec(r.allocation.node);
    // NVML GPUs belong to node 0, this machine, when discovered.
    if (!in.node->simulated && r.allocation.node == 0 &&
        !cluster_.gpus.empty()) {
      in.nvml_gpus = &cluster_.gpus;
    }
  }
  in.self_path = options_.self_path;
  in.mps = options_.mps;
  in.log_dir = options_.log_dir;
  absl::StatusOr<runtime::EngineLaunch> launch = runtime::PlanEngineLaunch(in);
  if (!launch.ok()) {
    fail(std::string(launch.status().message()));
    return;
  }
  const runtime::ProcessSpec& spec = launch->process;
  const std::vector<std::string>& ids = launch->gpu_ids;
  const int port = launch->port;
  auto pid = launcher_->Start(spec);
  if (!pid.ok()) {
    fail(std::string(pid.status().message()));
    return;
  }
  {
    std::ofstream out(PidFile(r.name), std::ios::trunc);
    out << *pid << "\n" << spec.argv.front() << "\n";
  }
  if (cold) cold->launched = SteadyNow();
  r.pid = *pid;
  r.endpoint = {"127.0.0.1", launch->port};
  r.metrics_port = launch->metrics_port;
  r.state = State::kStarting;
  r.last_busy = now;  // residency for swap_min_idle counts from its start
  // The engine loads its weights on this node: they are local there now.
  if (const std::string w = WeightsPath(d);
      !w.empty() && r.placed && r.allocation.node >= 0) {
    weights_nodes_[w].insert(r.allocation.node);
  }
  r.started = now;
  r.started_wall = WallNow();
  r.next_probe = now + kStartingProbe;
  r.health_failures = 0;
  r.message.clear();
  r.backoff.OnStarted(now);
  if (options_.metrics) options_.metrics->ReplicaStarted(d.spec.name);
  Event("replica.started", d.spec.name,
        absl::StrCat(r.name, " started: pid ", *pid, ", port ", port,
                     ids.empty() ? ""
                                 : absl::StrCat(", CUDA_VISIBLE_DEVICES=",
                                                absl::StrJoin(ids, ","))),
        json{{"replica", r.name},
             {"pid", *pid},
             {"port", port},
             {"gpus", ids},
             {"argv", spec.argv}});
}

void Controller::Probe(Deployment& d, Replica& r, Micros now) {
  r.probing = true;
  const std::string deployment = d.spec.name, replica = r.name;
  const runtime::ProcessId pid = r.pid;
  net::UpstreamCallbacks cb;
  auto status = std::make_shared<unsigned>(0);
  cb.on_head = [status](const boost::beast::http::response_header<>& h) {
    *status = h.result_int();
  };
  cb.on_data = [](std::string) {};
  cb.on_done = [this, deployment, replica, pid, status](absl::Status st) {
    OnProbe(deployment, replica, pid, st.ok() && *status == 200);
  };
  (void)now;
  probe_->Send(r.endpoint,
               boost::beast::http::request<boost::beast::http::string_body>{
                   boost::beast::http::verb::get, d.engine.readiness.path, 11},
               std::move(cb));
}

void Controller::Scrape(Deployment& d, Replica& r, Micros now) {
  const auto names = runtime::MetricNamesFor(d.engine.metrics_prefix);
  r.next_scrape = now + options_.metrics_period;
  if (!names) return;
  r.scraping = true;
  net::Endpoint at = r.endpoint;
  if (r.metrics_port != 0) at.port = r.metrics_port;
  const std::string deployment = d.spec.name, replica = r.name;
  const net::Endpoint serving_ep = r.endpoint;
  auto text = std::make_shared<std::string>();
  auto status = std::make_shared<unsigned>(0);
  net::UpstreamCallbacks cb;
  cb.on_head = [status](const boost::beast::http::response_header<>& h) {
    *status = h.result_int();
  };
  cb.on_data = [text](std::string data) {
    if (text->size() < (4 << 20)) *text += data;
  };
  cb.on_done = [this, deployment, replica, serving_ep, text, status,
                names = *names](absl::Status st) {
    runtime::EngineSignals s;
    if (st.ok() && *status == 200) {
      s = runtime::ParseEngineSignals(*text, names);
      if (options_.metrics) {
        options_.metrics->EngineScraped(deployment, replica, s);
      }
      serving::EngineLoad load;
      load.running = s.running;
      load.waiting = s.waiting;
      load.kv_used_fraction = s.kv_used_fraction;
      gateway_->UpdateEngineLoad(serving_ep, load);
    }
    std::lock_guard<std::mutex> lock(mu_);
    auto dit = deployments_.find(deployment);
    if (dit == deployments_.end()) return;
    for (auto& rp : dit->second.replicas) {
      if (rp->name != replica) continue;
      rp->scraping = false;
      rp->signals = s;
    }
  };
  probe_->Send(at,
               boost::beast::http::request<boost::beast::http::string_body>{
                   boost::beast::http::verb::get, d.engine.metrics_path, 11},
               std::move(cb));
}

void Controller::OnProbe(const std::string& deployment,
                         const std::string& replica, runtime::ProcessId pid,
                         bool ok) {
  std::lock_guard<std::mutex> lock(mu_);
  auto dit = deployments_.find(deployment);
  if (dit == deployments_.end()) return;
  Deployment& d = dit->second;
  Replica* r = nullptr;
  for (auto& rp : d.replicas) {
    if (rp->name == replica && rp->pid == pid) r = rp.get();
  }
  if (r == nullptr) return;
  r->probing = false;
  const Micros now = SteadyNow();
  const Micros health = options_.health_period;
  switch (r->state) {
    case State::kStarting:
      if (ok) {
        r->state = State::kReady;
        r->next_probe = now + health;
        if (options_.metrics) {
          options_.metrics->ReplicaReady(deployment,
                                         ToSeconds(now - r->started));
        }
        if (d.cold && d.cold->replica == r->name) d.cold->ready = now;
        Event("replica.ready", deployment,
              absl::StrCat(r->name, " ready on ",
                           gateway::EndpointKey(r->endpoint), " after ",
                           absl::StrFormat("%.2f", (now - r->started) / 1e6),
                           " s"),
              json{{"replica", r->name},
                   {"startup_seconds", (now - r->started) / 1e6}});
        dirty_ = true;
      } else {
        // The loop probes again when this is due.
        r->next_probe = now + kStartingProbe;
        dirty_ = true;
      }
      break;
    case State::kReady:
      if (ok) {
        r->health_failures = 0;
        r->next_probe = now + health;
        break;
      }
      r->next_probe = now + std::min(health, kMicrosPerSecond);
      if (++r->health_failures >= d.engine.readiness.failure_threshold) {
        r->state = State::kUnhealthy;
        r->message = absl::StrCat("failed ", r->health_failures,
                                  " health checks in a row; restarting");
        Event("replica.unhealthy", deployment,
              absl::StrCat(r->name, ": ", r->message));
        (void)launcher_->Kill(r->pid);
        dirty_ = true;
      }
      break;
    case State::kExternal:
      if (ok != r->external_ok) {
        Event(ok ? "replica.ready" : "replica.unhealthy", deployment,
              absl::StrCat("endpoint ", gateway::EndpointKey(r->endpoint),
                           ok ? " answers its health check"
                              : " fails its health check"));
        dirty_ = true;
      }
      r->external_ok = ok;
      r->next_probe = now + (ok ? health : kMicrosPerSecond);
      break;
    default:
      break;
  }
  if (dirty_) wake_.notify_all();
}

absl::Status Controller::WaitReady(Micros timeout) {
  const Micros deadline = SteadyNow() + timeout;
  while (true) {
    std::vector<std::string> waiting;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& [name, d] : deployments_) {
        int ready = 0;
        for (const auto& r : d.replicas) {
          if (r->state == State::kReady ||
              (r->state == State::kExternal && r->external_ok)) {
            ++ready;
          } else if (r->state != State::kDraining) {
            waiting.push_back(
                absl::StrCat(r->name, " (", StateName(r->state),
                             r->message.empty() ? "" : ": " + r->message, ")"));
          }
        }
        const int want = d.spec.endpoints.empty()
                             ? ReplicaTarget(d)
                             : static_cast<int>(d.spec.endpoints.size());
        if (ready < want && waiting.empty()) {
          waiting.push_back(
              absl::StrCat(name, " (", ready, "/", want, " replicas ready)"));
        }
      }
    }
    if (waiting.empty()) return absl::OkStatus();
    if (SteadyNow() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("not ready: ", absl::StrJoin(waiting, "; ")));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

// --- Views ------------------------------------------------------------------

void Controller::AccrueGpuTime(Micros now) {
  if (options_.metrics == nullptr) return;
  if (last_accrue_ == 0) last_accrue_ = now;
  if (now - last_accrue_ < kMicrosPerSecond) return;
  const double seconds = ToSeconds(now - last_accrue_);
  last_accrue_ = now;
  for (const auto& [name, d] : deployments_) {
    std::map<std::string, double> by_model;  // GPU model -> GPUs held
    for (const auto& r : d.replicas) {
      if (!r->placed || r->allocation.node < 0) continue;
      const std::string& model =
          cluster_state_.spec(r->allocation.node).gpu_model;
      for (const inventory::GpuShare& g : r->allocation.gpus) {
        by_model[model] += g.milli / 1000.0;
      }
    }
    options_.metrics->Accrue(name, {by_model.begin(), by_model.end()}, seconds);
  }
}

}  // namespace gpusched::api
