#include "api/controller.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "api/controller_internal.h"
#include "common/status.h"
#include "placement/registry.h"

namespace gpusched::api {

using nlohmann::json;

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

std::string QueueOf(const std::string& tenant) {
  return tenant.empty() ? "-" : tenant;
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
