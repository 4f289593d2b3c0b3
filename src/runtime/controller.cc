#include "runtime/controller.h"

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
#include "backends/local/local_launcher.h"
#include "common/plural.h"
#include "common/status.h"
#include "control/room.h"
#include "placement/registry.h"
#include "runtime/controller_internal.h"

namespace gpusched::runtime {

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

const char* Controller::Row::state() const {
  return core ? control::ReplicaStateName(core->state) : "external";
}

bool Controller::Row::ready() const {
  // A replica serves while gpusched's probe and the cluster manager (where
  // it says) both find it ready.
  return core ? core->state == control::ReplicaState::kReady &&
                    (io == nullptr || io->manager_ready)
              : io->external_ok;
}

std::vector<Controller::Row> Controller::Rows(const Deployment& d) const {
  std::vector<Row> rows;
  for (const control::Replica& c : d.life.replicas()) {
    auto it = d.procs.find(c.name);
    rows.push_back({&c, it == d.procs.end() ? nullptr : &it->second});
  }
  for (const Replica& e : d.external) rows.push_back({nullptr, &e});
  return rows;
}

control::LifecycleOptions Controller::LifecycleOptionsFor(
    const runtime::EngineTemplate& engine) const {
  control::LifecycleOptions o;
  o.drain_grace = options_.drain_grace;
  o.health_period = options_.health_period;
  o.startup_timeout = engine.readiness.startup_timeout;
  o.failure_threshold = engine.readiness.failure_threshold;
  o.backoff = options_.backoff;
  return o;
}

absl::StatusOr<std::unique_ptr<Controller>> Controller::Create(
    ControllerOptions options, ControllerCluster cluster, store::Store* store,
    runtime::DataPlane* gateway, std::unique_ptr<backends::Launcher> launcher) {
  std::unique_ptr<Controller> c(new Controller());
  // No other thread sees it yet; the lock keeps the analysis whole.
  absl::MutexLock lock(&c->mu_);
  {
    absl::MutexLock l(&c->launcher_mu_);
    c->launcher_ = launcher != nullptr
                       ? std::move(launcher)
                       : std::make_unique<backends::LocalLauncher>();
    c->manager_readiness_ = c->launcher_->ReportsReadiness();
  }
  c->options_ = std::move(options);
  if (c->options_.clock == nullptr) {
    c->options_.clock = &runtime::SteadyClock::Get();
  }
  if (c->options_.wall_clock == nullptr) {
    c->options_.wall_clock = &runtime::WallClock::Get();
  }
  RETURN_IF_ERROR(c->LoadGpuPrices());
  c->planner_ = control::CapacityPlanner(
      control::CapacityOptionsFrom(c->options_.capacity));
  c->cluster_ = std::move(cluster);
  c->store_ = store;
  c->gateway_ = gateway;
  c->election_ = c->options_.election;
  if (c->election_ == nullptr) {
    c->own_election_ = std::make_unique<store::LocalElection>(
        store::InstanceInfo{"local", "", "", 0, 0});
    c->election_ = c->own_election_.get();
  }
  if (!c->options_.launcher_factory) {
    c->options_.launcher_factory =
        []() -> absl::StatusOr<std::unique_ptr<backends::Launcher>> {
      return std::make_unique<backends::LocalLauncher>();
    };
  }
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
  std::vector<store::Document> deployments, tenants;
  {
    ASSIGN_OR_RETURN(tenants, store_->ListTenants());
    ASSIGN_OR_RETURN(deployments, store_->ListDeployments());
  }
  absl::MutexLock lock(&mu_);
  // The desired state, as any instance keeps it; the loop leads once the
  // election says so.
  for (const auto& [docs, kind] :
       {std::pair{&tenants, config::Manifest::Kind::kTenant},
        std::pair{&deployments, config::Manifest::Kind::kDeployment}}) {
    for (const store::Document& doc : *docs) {
      if (absl::Status st = Absorb(kind, doc); !st.ok()) {
        return absl::Status(
            st.code(), absl::StrCat("restoring ", config::KindName(kind), " '",
                                    doc.name, "': ", st.message()));
      }
    }
  }
  RETURN_IF_ERROR(RestoreRoutes());
  synced_revision_ = store_->desired_revision();
  if (own_election_) RETURN_IF_ERROR(own_election_->Start());
  Event("server.started", "",
        absl::StrCat(election_->self().id,
                     " started: ", Counted(deployments.size(), "deployment"),
                     ", ", Counted(tenants.size(), "tenant"), " and ",
                     Counted(routes_.size(), "route"), " stored; ",
                     Counted(cluster_.nodes.size(), "node"), " (",
                     cluster_.source, ")"));
  loop_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

void Controller::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  if (loop_.joinable()) loop_.join();
  if (own_election_) own_election_->Stop(/*resign=*/true);
  std::unique_ptr<backends::Launcher> old;
  {
    absl::MutexLock lock(&mu_);
    {
      absl::MutexLock l(&launcher_mu_);
      if (!leading_ || launcher_ == nullptr) return;
      if (launcher_->ProcessesOutliveGpusched() &&
          !options_.stop_replicas_on_exit) {
        // Slurm jobs and Pods run on: the next leader (this instance
        // restarted, or another one) adopts them.
        old = std::move(launcher_);
      }
    }
    if (old != nullptr) {
      int running = 0;
      for (const auto& [name, d] : deployments_) {
        running += static_cast<int>(d.procs.size());
      }
      store::Event e;
      e.time = Wall();
      e.kind = "server.stopped";
      e.message =
          absl::StrCat(election_->self().id, " stopped; ", running,
                       " replicas keep running for the next leader to adopt");
      RecordEvent(std::move(e));
    }
  }
  if (old != nullptr) return;  // destroyed here, outside the locks
  absl::MutexLock lock(&mu_);
  const Micros now = Now();
  for (auto& [name, d] : deployments_) {
    for (auto& [rn, r] : d.procs) {
      if (r.pid != 0) {
        absl::MutexLock l(&launcher_mu_);
        (void)launcher_->Stop(r.pid, options_.stop_grace, now);
      }
    }
  }
  const Micros deadline = now + options_.stop_grace + 2 * kMicrosPerSecond;
  absl::MutexLock l(&launcher_mu_);
  while (launcher_->size() > 0 && Now() < deadline) {
    launcher_->Sync();
    launcher_->Poll();
    launcher_->Tick(Now());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (auto& [name, d] : deployments_) {
    for (auto& [rn, r] : d.procs) {
      std::error_code ec;
      std::filesystem::remove(PidFile(rn), ec);
    }
  }
}

void Controller::OnDemand(const std::string& deployment, Micros arrival) {
  {
    absl::MutexLock lock(&mu_);
    auto it = deployments_.find(deployment);
    if (it == deployments_.end()) return;
    (void)scaling_.Held(deployment, arrival);
    dirty_ = true;
    // Other instances (the leader) learn of it from our next document:
    // now, not at the next period.
    load_urgent_.store(true);
  }
}

void Controller::Wake() {
  absl::MutexLock lock(&mu_);
  dirty_ = true;
}

void Controller::OnStoreChange() {
  store_changed_.store(true);
  // Never waits: the store calls this from its watch while a writer may
  // hold mu_ and wait for that watch. Taken, the lock wakes the loop when
  // let go; else the loop sees the flag within a tick.
  if (mu_.TryLock()) mu_.Unlock();
}

void Controller::OnElectionChange() { Wake(); }

void Controller::Loop() {
  mu_.Lock();
  Micros next_gpu_read = Now() + options_.gpu_read_period;
  while (!stopping_) {
    store_changed_.store(false);
    SyncDesiredLocked();
    store::Leadership lead = election_->Current();
    if (leading_ && !lead.leader) {
      std::unique_ptr<backends::Launcher> old =
          Demote("the election says another instance leads or none does");
      mu_.Unlock();
      old.reset();  // a local launcher's engines end here, outside the lock
      mu_.Lock();
    }
    if (!leading_ && lead.acting) {
      const Micros elected_at = Now();
      // The launcher of this term: the one given to Create for the first,
      // a new one after. A cluster manager's first reading (nodes, jobs to
      // adopt) is taken outside the lock.
      std::unique_ptr<backends::Launcher> launcher;
      {
        absl::MutexLock l(&launcher_mu_);
        launcher = std::move(launcher_);
      }
      const bool first_term = !ever_led_;
      mu_.Unlock();
      std::string failed;
      if (launcher == nullptr) {
        auto made = options_.launcher_factory();
        if (made.ok()) {
          launcher = *std::move(made);
        } else {
          failed = std::string(made.status().message());
        }
      }
      if (launcher != nullptr) {
        if (!launcher->ProcessesOutliveGpusched() && first_term) {
          KillOrphans();
        }
        launcher->Sync();
      }
      mu_.Lock();
      lead = election_->Current();
      if (launcher != nullptr && lead.acting && !stopping_) {
        Promote(lead, std::move(launcher), Now());
        first_pass_ = {elected_at, Now(), lead.term};
      } else if (launcher != nullptr) {
        absl::MutexLock l(&launcher_mu_);
        launcher_ = std::move(launcher);  // for the next try
      } else {
        Event("leader.launcher_failed", "",
              absl::StrCat("cannot lead: no launcher: ", failed));
      }
    }
    FollowElection(lead);
    const bool acting = leading_ && !paused_;
    if (acting) {
      Reconcile(Now());
      if (first_pass_) {
        // The new leader's first complete pass: what a failover costs
        // after the election (bench/ha_failover.sh).
        const Micros done = Now();
        Event("leader.ready", "",
              absl::StrFormat(
                  "%s completed its first pass as the leader of term %d: "
                  "%.1f ms after it was elected (taking over %.1f ms, the "
                  "pass %.1f ms)",
                  election_->self().id, first_pass_->term,
                  (done - first_pass_->elected) / 1e3,
                  (first_pass_->promoted - first_pass_->elected) / 1e3,
                  (done - first_pass_->promoted) / 1e3),
              json{{"instance", election_->self().id},
                   {"term", first_pass_->term},
                   {"takeover_ms",
                    (first_pass_->promoted - first_pass_->elected) / 1e3},
                   {"first_pass_ms", (done - first_pass_->promoted) / 1e3}});
        first_pass_.reset();
      }
    } else if (!leading_) {
      FollowerPass();
    }
    // Engines planned in the pass start now, without mu_: the control API
    // and the gateway are not held up by fork and exec. A leader that can
    // no longer prove its lease starts none (the next leader will).
    if (!starts_.empty()) {
      std::vector<StartJob> starts = std::move(starts_);
      starts_.clear();
      mu_.Unlock();
      const bool still = election_->Current().acting;
      {
        absl::MutexLock l(&launcher_mu_);
        for (StartJob& s : starts) {
          s.pid = still && launcher_ != nullptr
                      ? RunStart(s)
                      : absl::UnavailableError(
                            "not started: this instance may no longer lead");
        }
      }
      mu_.Lock();
      const Micros now = Now();
      for (StartJob& s : starts) FinishStart(s, now);
      next_wake_ = std::min(next_wake_, now);  // its first probe is due
    }
    // At least 1 ms: a deadline already due runs at the next pass.
    const Micros wait =
        acting ? std::max<Micros>(kMicrosPerMilli,
                                  std::min(next_wake_ - Now(), options_.tick))
               : options_.tick;
    mu_.AwaitWithTimeout(absl::Condition(this, &Controller::WakeDue),
                         absl::Microseconds(wait));
    dirty_ = false;
    const bool act = leading_ && !paused_;
    mu_.Unlock();
    if (options_.metrics) options_.metrics->LoopPassed(ToSeconds(Wall()));
    gateway_->Tick();
    PublishLoad(Now());
    std::optional<std::vector<backends::DiscoveredGpu>> gpus;
    if (act) {
      {
        // A cluster manager's commands run here, outside the lock.
        absl::MutexLock l(&launcher_mu_);
        if (launcher_ != nullptr) launcher_->Sync();
      }
      // NVML GPUs are read again now and then (memory used, utilization,
      // health), outside the lock: a read takes milliseconds.
      if (cluster_.source == "nvml" && options_.gpu_read_period > 0 &&
          Now() >= next_gpu_read) {
        next_gpu_read = Now() + options_.gpu_read_period;
        auto read = backends::DiscoverLocalGpus();
        if (read.ok() && read->size() == cluster_.gpus.size()) {
          gpus = *std::move(read);
        }
      }
      PublishStatus(Now());
      PruneEvents(Now());
    }
    mu_.Lock();
    if (gpus) RefreshGpus(*std::move(gpus));
  }
  mu_.Unlock();
}

void Controller::RefreshGpus(std::vector<backends::DiscoveredGpu> gpus) {
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
  // A bounded pass: launches (each a placement) beyond the budget wait for
  // the next pass, which comes at once, after the lock was let go.
  launch_budget_ = now >= next_launch_at_ ? options_.max_launches_per_pass : 0;
  const int budget = launch_budget_;
  AccrueGpuTime(now);
  HandleExits(now);
  EndStaleLeftovers(now);
  {
    absl::MutexLock l(&launcher_mu_);
    launcher_->Tick(now);
  }
  Autoscale(now);
  next_wake_ = std::min(next_wake_, scaling_.NextDeadline());
  ProgressRollouts(now);
  // Higher classes first: they take GPUs freed in this pass. Before them,
  // a deployment with a replica whose victims are gone: it takes the GPUs
  // it made room for (another pending replica must not).
  std::vector<Deployment*> all;
  std::vector<control::PassEntry> entries;
  for (auto& [name, d] : deployments_) {
    bool gone = false;
    for (const auto& [rn, r] : d.procs) {
      if (r.awaiting.empty() || r.placed) continue;
      bool all_gone = true;
      for (const std::string& victim : r.awaiting) {
        for (const auto& [on, od] : deployments_) {
          auto it = od.procs.find(victim);
          all_gone = all_gone && !(it != od.procs.end() && it->second.placed);
        }
      }
      gone = gone || all_gone;
    }
    all.push_back(&d);
    entries.push_back({ClassRank(d.spec.priority_class), gone});
  }
  for (int i : control::PassOrder(entries)) {
    ReconcileDeployment(*all[i], now);
  }
  // Capacity on demand: nodes to ask for, move off or give back.
  PlanCapacity(now);
  AccrueCost(now);
  if (launch_budget_ < budget && options_.launch_interval > 0) {
    next_launch_at_ = now + options_.launch_interval;
  }
  for (auto it = deployments_.begin(); it != deployments_.end();) {
    Deployment& d = it->second;
    if (d.deleting && d.life.empty()) {
      gateway_->SetReplicas(it->first, {});
      it = deployments_.erase(it);
    } else {
      ++it;
    }
  }
}

void Controller::HandleExits(Micros now) {
  std::vector<backends::ExitEvent> exits;
  {
    absl::MutexLock l(&launcher_mu_);
    exits = launcher_->Poll();
  }
  for (const backends::ExitEvent& ev : exits) {
    for (auto& [name, d] : deployments_) {
      for (auto& [rn, r] : d.procs) {
        if (EndedAsk(r, ev.id) || r.pid != ev.id) continue;
        std::error_code ec;
        std::filesystem::remove(PidFile(rn), ec);
        std::string how = ev.signaled
                              ? absl::StrCat("signal ", ev.signal)
                              : absl::StrCat("exit code ", ev.exit_code);
        if (!ev.reason.empty()) absl::StrAppend(&how, " (", ev.reason, ")");
        r.pid = 0;
        control::LifecycleOutput out;
        d.life.Exited(rn, how,
                      absl::StrCat("see ", options_.log_dir, "/", rn, ".err"),
                      now, &out);
        for (control::LifecycleEvent& e : out.events) {
          e.details["signaled"] = ev.signaled;
          e.details["exit_code"] = ev.exit_code;
          e.details["signal"] = ev.signal;
        }
        Carry(d, out, now);
        break;
      }
    }
  }
  HandleClusterReports(now);
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

void Controller::ReconcileExternal(Deployment& d, Micros now) {
  std::vector<Replica> next;
  for (size_t i = 0; i < d.spec.endpoints.size() && !d.deleting; ++i) {
    const net::Endpoint ep{d.spec.endpoints[i].host,
                           static_cast<uint16_t>(d.spec.endpoints[i].port)};
    Replica r;
    r.name = absl::StrCat(d.spec.name, "-ext-", i);
    r.endpoint = ep;
    for (Replica& old : d.external) {
      if (net::EndpointKey(old.endpoint) == net::EndpointKey(ep)) {
        r = std::move(old);
      }
    }
    next.push_back(std::move(r));
  }
  d.external = std::move(next);
  for (Replica& r : d.external) {
    if (!r.probing && now >= r.next_probe) Probe(d, r, now);
    if (r.external_ok && !r.scraping && now >= r.next_scrape &&
        options_.metrics_period > 0) {
      Scrape(d, r, now);
    }
  }
}

void Controller::ReconcileDeployment(Deployment& d, Micros now) {
  ReconcileExternal(d, now);
  // How many replicas of the current version should run (-1: keep all, a
  // deleted deployment still serving its queue).
  int desired = d.spec.endpoints.empty() ? ReplicaTarget(d) : 0;
  if (d.deleting) {
    const bool queued =
        gateway_->Load(d.spec.name).queued +
            OthersLoad(d.spec.name, now, /*consume=*/false).queued >
        0;
    desired = queued && now < d.delete_deadline ? -1 : 0;
  }
  d.life.SetDesired(desired);
  for (const control::Replica& c : d.life.replicas()) {
    auto it = d.procs.find(c.name);
    if (it != d.procs.end() && it->second.pid != 0) {
      d.life.SetInFlight(c.name, gateway_->InFlightOn(it->second.endpoint),
                         now);
    }
  }
  control::LifecycleOutput out;
  d.life.Reconcile(now, &out, &launch_budget_);
  Carry(d, out, now);
  for (const control::Replica& c : d.life.replicas()) {
    auto it = d.procs.find(c.name);
    if (c.state != control::ReplicaState::kReady || it == d.procs.end()) {
      continue;
    }
    Replica& r = it->second;
    if (!r.scraping && now >= r.next_scrape && options_.metrics_period > 0) {
      Scrape(d, r, now);
    }
  }
  Micros due = d.life.NextDeadline();
  // Launches held by launch_interval are due at next_launch_at_, not now.
  if (now < next_launch_at_) {
    due = std::min(d.life.NextDeadline(false), std::max(due, next_launch_at_));
  }
  next_wake_ = std::min(next_wake_, due);
  PushReady(d);
}

void Controller::Carry(Deployment& d, control::LifecycleOutput& out,
                       Micros now) {
  size_t events = 0;
  for (size_t i = 0; i < out.actions.size() || events < out.events.size();) {
    // Events first: they explain the actions that follow.
    for (; events < out.events.size(); ++events) {
      const control::LifecycleEvent& e = out.events[events];
      Event(e.kind, d.spec.name, e.message, e.details);
      if (options_.metrics &&
          (e.kind == "replica.exited" || e.kind == "replica.failed" ||
           e.kind == "replica.unhealthy")) {
        options_.metrics->ReplicaFailed(d.spec.name, e.kind.substr(8));
      }
    }
    if (i >= out.actions.size()) break;
    const control::LifecycleAction a = out.actions[i++];
    Replica& r = d.procs[a.replica];
    r.name = a.replica;
    switch (a.kind) {
      case control::LifecycleAction::Kind::kLaunch:
        Launch(d, r, now, &out);
        break;
      case control::LifecycleAction::Kind::kProbe:
        Probe(d, r, now);
        break;
      case control::LifecycleAction::Kind::kKill:
        if (r.pid != 0) {
          absl::MutexLock l(&launcher_mu_);
          (void)launcher_->Kill(r.pid);
        }
        break;
      case control::LifecycleAction::Kind::kStop:
        if (r.pid != 0) {
          absl::MutexLock l(&launcher_mu_);
          (void)launcher_->Stop(r.pid, options_.stop_grace, now);
        }
        break;
      case control::LifecycleAction::Kind::kForget: {
        const bool held = r.placed;
        Release(r);
        d.procs.erase(a.replica);
        // GPUs were freed: pending replicas try again at once.
        if (held) {
          for (auto& [name, other] : deployments_) other.life.Retry(now);
        }
        break;
      }
    }
  }
  out.Clear();
}

void Controller::PushReady(Deployment& d) {
  std::vector<net::Endpoint> ready;
  std::vector<std::string> keys;
  for (const Row& r : Rows(d)) {
    if (r.ready() && r.io != nullptr) {
      ready.push_back(r.io->endpoint);
      keys.push_back(net::EndpointKey(r.io->endpoint));
    }
  }
  if (keys == d.pushed) return;
  // A new leader adopting what runs: the endpoints the gateway has (what
  // the last leader published) keep serving until their jobs are adopted.
  if (keys.size() < d.pushed.size()) {
    auto waiting = leftovers_.find(d.spec.name);
    if (waiting != leftovers_.end() && !waiting->second.empty()) return;
  }
  d.pushed = keys;
  gateway_->SetReplicas(d.spec.name, ready);
  // Held requests were dispatched by SetReplicas: the scale from zero is
  // done.
  if (d.cold && d.cold->ready > 0 && !ready.empty()) {
    const ColdStart& c = *d.cold;
    const Micros released = Now();
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
  if (!d.parked_by.empty()) return 0;  // a promoted rollout's old stable
  const int target = scaling_.target(d.spec.name);
  return target >= 0 ? target : d.spec.replicas;
}

void Controller::Autoscale(Micros now) {
  if (scaling_.size() == 0) return;
  for (auto& [name, d] : deployments_) {
    if (!scaling_.has(name)) continue;
    const runtime::ServingLoad load = gateway_->Load(name);
    // With other instances serving too: their loads, from their documents.
    DeploymentLoadDoc others =
        OthersLoad(name, now, /*consume=*/scaling_.WantsTtft(name));
    control::ScalingLoad l;
    l.in_flight = load.in_flight + others.in_flight;
    l.queued = load.queued + others.queued;
    if (others.held > 0) {
      (void)scaling_.Held(name, now - others.held_ms * kMicrosPerMilli);
    }
    // The SLO policy's samples: TTFTs of requests finished since the last
    // observation (the gateway's clock is the same steady clock).
    if (scaling_.WantsTtft(name)) {
      l.ttft_samples_s = gateway_->TtftSince(name, d.ttft_seen);
      d.ttft_seen = now;
      l.ttft_samples_s.insert(l.ttft_samples_s.end(), others.ttft_s.begin(),
                              others.ttft_s.end());
    }
    scaling_.Observe(name, now, std::move(l), d.life);
  }
  steps_.clear();
  scaling_.Evaluate(now, &steps_);
  for (const control::ScaleStep& step : steps_) {
    auto it = deployments_.find(step.deployment);
    if (it == deployments_.end()) continue;
    Deployment& d = it->second;
    if (options_.metrics) {
      options_.metrics->Scaled(step.deployment, step.from, step.to);
    }
    if (step.from == 0 && step.to > 0) {
      d.cold = ColdStart{};
      d.cold->arrival = step.demand_arrival;
      d.cold->decided = now;
    }
    if (step.to == 0) d.cold.reset();
    Event(step.event.kind, step.deployment, step.event.message,
          step.event.details);
    // A restart or the next leader resumes from this count.
    if (absl::Status st = store_->PutDesiredReplicas(step.deployment, step.to,
                                                     Wall(), FenceLocked());
        !st.ok()) {
      std::fprintf(stderr, "gpusched: %s: desired count not stored: %s\n",
                   step.deployment.c_str(), std::string(st.message()).c_str());
    }
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
    for (const auto& [rn, r] : d.procs) {
      if (!r.placed || r.allocation.node < 0) continue;
      const std::string& node = cluster_state_.spec(r.allocation.node).name;
      auto pn = pool_nodes_.find(node);
      // A pool node's GPUs cost the pool's price ("pool:<name>").
      const std::string model =
          pn != pool_nodes_.end()
              ? absl::StrCat("pool:", pn->second.pool)
              : cluster_state_.spec(r.allocation.node).gpu_model;
      for (const inventory::GpuShare& g : r.allocation.gpus) {
        by_model[model] += g.milli / 1000.0;
      }
    }
    options_.metrics->Accrue(name, {by_model.begin(), by_model.end()}, seconds);
  }
}

}  // namespace gpusched::runtime
