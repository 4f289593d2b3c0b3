#include "main/serve_cmd.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "api/control_api.h"
#include "api/controller_metrics.h"
#include "api/ha_metrics.h"
#include "api/static_assets.h"
#include "auth/access_control.h"
#include "auth/audit_log.h"
#include "auth/token.h"
#include "backends/kubernetes/kube_client.h"
#include "backends/kubernetes/kube_launcher.h"
#include "backends/kubernetes/kube_nodes.h"
#include "backends/slurm/slurm_launcher.h"
#include "backends/slurm/slurm_nodes.h"
#include "backends/slurm/slurm_pools.h"
#include "common/status.h"
#include "common/worker_pool.h"
#include "config/serve_config.h"
#include "gateway/gateway.h"
#include "gateway/gateway_metrics.h"
#include "gateway/key_cache.h"
#include "main/inventory_source.h"
#include "main/serve_state.h"
#include "metrics/registry.h"
#include "net/http_server.h"
#include "runtime/controller.h"
#include "runtime/real_clock.h"
#include "store/api_keys.h"

namespace gpusched {
namespace {

// Threads that answer the control API and /metrics, and the calls that may
// wait for them (beyond: 503 with Retry-After).
constexpr int kControlThreads = 2;
constexpr size_t kControlQueued = 256;

struct ServeFlags {
  std::string config;
  double drain_s = -1;        // -1: the config's drain_grace_s
  double drain_delay_s = -1;  // -1: the config's drain_delay_s
  bool wait_ready = true;
  bool stop_replicas_on_exit = false;  // or the config's
  std::string instance_id;             // overrides ha.instance_id
  std::string advertise;               // overrides ha.advertise
  // Apply the config's deployments and tenants over the stored ones.
  bool reapply_config = false;
};

int Fail(const std::string& msg) {
  std::fprintf(stderr, "gpusched serve: %s\n", msg.c_str());
  return 2;
}

std::string SelfPath() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, n) : "gpusched";
}

// The nodes of a Slurm cluster (those of `partition` when one is set) and the
// launcher that runs replicas there as jobs.
using LauncherFactory =
    std::function<absl::StatusOr<std::unique_ptr<backends::Launcher>>()>;

absl::Status FromSlurm(const config::SlurmConfig& cfg,
                       runtime::ControllerCluster* cluster,
                       std::unique_ptr<backends::Launcher>* launcher,
                       LauncherFactory* factory) {
  std::unique_ptr<backends::SlurmClient> client = backends::SystemSlurmClient(
      cfg.bin_dir, cfg.command_timeout_ms * kMicrosPerMilli);
  absl::StatusOr<std::vector<backends::SlurmNode>> all =
      backends::ReadSlurmNodes(*client);
  if (!all.ok()) {
    return absl::Status(
        all.status().code(),
        absl::StrCat("slurm: cannot read the nodes: ", all.status().message()));
  }
  std::vector<backends::SlurmNode> nodes;
  for (backends::SlurmNode& n : *all) {
    if (cfg.partition.empty() ||
        std::find(n.partitions.begin(), n.partitions.end(), cfg.partition) !=
            n.partitions.end()) {
      nodes.push_back(std::move(n));
    }
  }
  if (nodes.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "slurm: no nodes", cfg.partition.empty() ? "" : " in partition ",
        cfg.partition));
  }
  absl::flat_hash_map<std::string, std::string> gres_map(cfg.gres_map.begin(),
                                                         cfg.gres_map.end());
  absl::StatusOr<std::vector<inventory::NodeSpec>> specs =
      backends::SlurmNodeSpecs(nodes, gres_map);
  if (!specs.ok()) return specs.status();
  // Slurm's power saving: CLOUD nodes (and nodes with a pool= feature) are
  // pools the launcher powers up and down; pools that do not form are a
  // configuration error to fix, not capacity to ignore.
  if (absl::StatusOr<std::vector<backends::PoolReport>> pools =
          backends::SlurmPools(nodes);
      !pools.ok()) {
    return absl::Status(pools.status().code(),
                        absl::StrCat("slurm: node pools (docs/capacity.md): ",
                                     pools.status().message()));
  }
  cluster->nodes = *specs;
  cluster->source = "slurm";
  backends::SlurmLauncherOptions o;
  o.partition = cfg.partition;
  o.account = cfg.account;
  o.qos = cfg.qos;
  o.job_prefix = cfg.job_prefix;
  o.poll_interval = cfg.poll_interval_ms * kMicrosPerMilli;
  o.default_memory_mib = cfg.default_memory_mib;
  *launcher = std::make_unique<backends::SlurmLauncher>(
      o, std::move(client), nodes, *specs, &runtime::SteadyClock::Get());
  // Each later term this instance leads gets a launcher of its own over
  // the same nodes (it adopts the jobs the last leader left).
  *factory = [cfg, o, nodes, specs = *specs]()
      -> absl::StatusOr<std::unique_ptr<backends::Launcher>> {
    return std::make_unique<backends::SlurmLauncher>(
        o,
        backends::SystemSlurmClient(cfg.bin_dir,
                                    cfg.command_timeout_ms * kMicrosPerMilli),
        nodes, specs, &runtime::SteadyClock::Get());
  };
  return absl::OkStatus();
}

// The nodes of a Kubernetes cluster (those with the node selector's labels)
// and the launcher that runs replicas there as Pods.
absl::Status FromKubernetes(const config::KubernetesConfig& cfg,
                            runtime::ControllerCluster* cluster,
                            std::unique_ptr<backends::Launcher>* launcher) {
  absl::StatusOr<backends::KubeCredentials> creds =
      backends::ResolveKubeCredentials(cfg.kubeconfig, cfg.api_server);
  if (!creds.ok()) {
    return absl::Status(creds.status().code(),
                        absl::StrCat("kubernetes: ", creds.status().message()));
  }
  backends::KubeClient::Options co;
  co.timeout = cfg.request_timeout_ms * kMicrosPerMilli;
  auto client = [&]() { return backends::KubeClient::Create(*creds, co); };
  absl::StatusOr<std::unique_ptr<backends::KubeClient>> api = client();
  if (!api.ok()) return api.status();
  std::string selector;
  for (const auto& [k, v] : cfg.node_selector) {
    absl::StrAppend(&selector, selector.empty() ? "" : ",", k, "=", v);
  }
  absl::StatusOr<backends::KubeResponse> r = (*api)->Request(
      "GET", selector.empty()
                 ? std::string("/api/v1/nodes")
                 : absl::StrCat("/api/v1/nodes?labelSelector=",
                                backends::KubeQueryEscape(selector)));
  absl::Status st =
      r.ok() ? backends::KubeStatusError(*r, "list nodes") : r.status();
  if (!st.ok()) {
    return absl::Status(st.code(),
                        absl::StrCat("kubernetes: cannot read the nodes (",
                                     creds->source, "): ", st.message()));
  }
  absl::StatusOr<std::vector<backends::KubeNode>> nodes =
      backends::ParseKubeNodeList(
          nlohmann::json::parse(r->body, nullptr, false), cfg.tolerations);
  if (!nodes.ok()) {
    return absl::Status(nodes.status().code(),
                        absl::StrCat("kubernetes: ", nodes.status().message()));
  }
  if (nodes->empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("kubernetes: no nodes",
                     selector.empty() ? "" : " labelled ", selector));
  }
  absl::flat_hash_map<std::string, std::string> product_map(
      cfg.product_map.begin(), cfg.product_map.end());
  absl::StatusOr<std::vector<inventory::NodeSpec>> specs =
      backends::KubeNodeSpecs(*nodes, product_map);
  if (!specs.ok()) return specs.status();
  cluster->nodes = *specs;
  cluster->source = "kubernetes";
  absl::StatusOr<std::unique_ptr<backends::KubeClient>> pods = client();
  absl::StatusOr<std::unique_ptr<backends::KubeClient>> node_client = client();
  if (!pods.ok()) return pods.status();
  if (!node_client.ok()) return node_client.status();
  backends::KubeLauncherOptions o;
  o.namespace_name = cfg.namespace_name;
  o.instance = cfg.instance;
  o.scheduler_name = cfg.scheduler_name;
  o.tolerations = cfg.tolerations;
  o.images = {cfg.images.begin(), cfg.images.end()};
  o.image = cfg.image.empty()
                ? std::string("ghcr.io/gpusched/gpusched:" GPUSCHED_VERSION)
                : cfg.image;
  o.service_account = cfg.service_account;
  o.default_memory_mib = cfg.default_memory_mib;
  for (const config::KubernetesPoolConfig& p : cfg.pools) {
    o.pools.push_back({.name = p.name,
                       .labels = {p.labels.begin(), p.labels.end()},
                       .gpu_product = p.gpu_product,
                       .gpus_per_node = static_cast<int>(p.gpus_per_node),
                       .cpu_milli = p.cpu_milli,
                       .memory_mib = p.memory_mib,
                       .spot = p.spot,
                       .max_nodes = static_cast<int>(p.max_nodes)});
  }
  o.pool_labels = cfg.pool_labels;
  o.karpenter_nodepools = cfg.karpenter_nodepools;
  o.product_map = product_map;
  *launcher = std::make_unique<backends::KubeLauncher>(
      o, *std::move(api), *std::move(pods), *std::move(node_client),
      *std::move(nodes), *std::move(specs));
  return absl::OkStatus();
}

// The secret in `path`, or a new one written there (mode 0600).
absl::StatusOr<std::pair<std::string, bool>> KeyFromFile(
    const std::string& path) {
  std::ifstream in(path);
  if (in) {
    std::string secret;
    std::getline(in, secret);
    secret = std::string(absl::StripAsciiWhitespace(secret));
    if (!secret.empty()) return std::pair{secret, false};
  }
  auto secret = store::GenerateApiKeySecret();
  if (!secret.ok()) return secret.status();
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(),
                                      ec);
  const mode_t old = umask(077);
  std::ofstream out(path, std::ios::trunc);
  out << *secret << "\n";
  umask(old);
  if (!out) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot write the key file ", path));
  }
  return std::pair{*secret, true};
}

int RunServe(const ServeFlags& flags) {
  auto cfg = config::LoadServeFile(flags.config);
  if (!cfg.ok()) return Fail(std::string(cfg.status().message()));
  if (!flags.instance_id.empty()) cfg->ha.instance_id = flags.instance_id;
  if (!flags.advertise.empty()) cfg->ha.advertise = flags.advertise;
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  // The cluster: Slurm's nodes, else NVML GPUs, else the declared inventory.
  runtime::ControllerCluster cluster;
  std::unique_ptr<backends::Launcher> launcher;
  LauncherFactory launcher_factory;  // null: local processes
  if (cfg->slurm.enabled) {
    if (absl::Status st =
            FromSlurm(cfg->slurm, &cluster, &launcher, &launcher_factory);
        !st.ok()) {
      return Fail(std::string(st.message()));
    }
  } else if (cfg->kubernetes.enabled) {
    if (absl::Status st = FromKubernetes(cfg->kubernetes, &cluster, &launcher);
        !st.ok()) {
      return Fail(std::string(st.message()));
    }
    // A later term reads the cluster again, with clients of its own.
    launcher_factory = [kcfg = cfg->kubernetes]()
        -> absl::StatusOr<std::unique_ptr<backends::Launcher>> {
      runtime::ControllerCluster ignored;
      std::unique_ptr<backends::Launcher> l;
      RETURN_IF_ERROR(FromKubernetes(kcfg, &ignored, &l));
      return l;
    };
  } else if (!cfg->inventory.empty() || cfg->gpu_discovery != "declared") {
    auto inv = LoadInventory(
        cfg->gpu_discovery, cfg->inventory, true, [](const std::string& why) {
          std::fprintf(stderr,
                       "gpusched serve: %s; using the declared inventory "
                       "(simulated GPUs)\n",
                       why.c_str());
        });
    if (!inv.ok() &&
        !(cfg->inventory.empty() && cfg->gpu_discovery == "auto")) {
      return Fail(std::string(inv.status().message()));
    }
    if (inv.ok()) {
      cluster.nodes = inv->nodes;
      cluster.gpus = inv->gpus;
      cluster.source = inv->source;
    }
  }
  if (cluster.nodes.empty()) cluster.source = "none (CPU-only replicas)";

  // The state: SQLite, or etcd shared with other instances (docs/ha.md).
  const std::string instance = InstanceId(*cfg);
  absl::StatusOr<ServeState> state = OpenServeState(*cfg, instance);
  if (!state.ok()) return Fail(std::string(state.status().message()));
  store::Store* const st_store = state->store.get();

  // Metrics (GET /metrics): declared before the gateway and the
  // controller, which update them, so they outlive both.
  metrics::Registry registry;
  gateway::GatewayMetrics gateway_metrics(&registry);
  api::ControllerMetrics controller_metrics(&registry, &gateway_metrics,
                                            cfg->gpu_prices);

  gateway::GatewayConfig gateway_config;
  gateway_config.metrics = &gateway_metrics;
  gateway_config.version = GPUSCHED_VERSION;
  // The data plane checks keys itself, over the store (never through the
  // controller).
  gateway::KeyCache keys(st_store);
  // Who a credential is (an API key, or a token when oidc: is set), with
  // the roles and bindings the store holds, and the audit log.
  auth::AccessControl access(st_store);
  std::unique_ptr<auth::TokenVerifier> tokens;
  if (cfg->oidc.enabled) {
    auth::TokenConfig tc;
    tc.issuer = cfg->oidc.issuer;
    tc.audience = cfg->oidc.audience;
    tc.jwks_file = cfg->oidc.jwks_file;
    tc.jwks_url = cfg->oidc.jwks_url;
    tc.jwks_refresh = cfg->oidc.jwks_refresh_s * kMicrosPerSecond;
    tc.jwks_min_refresh = std::min(tc.jwks_refresh, 10 * kMicrosPerSecond);
    tc.leeway = cfg->oidc.leeway_s * kMicrosPerSecond;
    tc.subject_claim = cfg->oidc.subject_claim;
    tc.groups_claim = cfg->oidc.groups_claim;
    tc.tenant_claim = cfg->oidc.tenant_claim;
    for (const config::OidcClaimRole& m : cfg->oidc.claim_roles) {
      tc.claim_roles.push_back({m.claim, m.value, m.role, m.tenant});
    }
    auth::TokenVerifier::Fetch fetch = auth::JwksSource(tc);
    auto v = auth::TokenVerifier::Create(std::move(tc), std::move(fetch), [] {
      return absl::ToUnixMicros(absl::Now());
    });
    if (!v.ok()) return Fail(std::string(v.status().message()));
    tokens = *std::move(v);
  }
  const auth::Authenticator authenticator(
      [&keys](std::string_view secret) { return keys.Authenticate(secret); },
      &access, tokens.get());
  auth::AuditOptions audit_options;
  audit_options.export_path = cfg->audit.export_path;
  audit_options.max_records = cfg->audit.max_records;
  audit_options.max_age = cfg->audit.max_age_days * 86400 * kMicrosPerSecond;
  auth::AuditLog audit(st_store, audit_options);
  auto gateway = gateway::Gateway::Create(
      gateway_config, [&authenticator](std::string_view bearer) {
        return authenticator.Authenticate(bearer);
      });
  if (!gateway.ok()) return Fail(std::string(gateway.status().message()));

  runtime::ControllerOptions options;
  options.log_dir = cfg->log_dir;
  options.self_path = SelfPath();
  if (cfg->kubernetes.enabled) {
    // In a Pod: gpusched in the image, and the Pod's IP.
    options.self_path = cfg->kubernetes.engine_path;
    options.engine_host = "$(POD_IP)";
  }
  options.placement_policy = cfg->placement_policy;
  options.classes = gateway_config.classes;
  options.health_period = cfg->health_check_period_ms * kMicrosPerMilli;
  options.drain_grace = static_cast<Micros>(cfg->drain_grace_s * 1e6);
  options.swap_min_idle = static_cast<Micros>(cfg->swap_min_idle_s * 1e6);
  options.capacity = cfg->capacity;
  options.max_launches_per_pass = static_cast<int>(cfg->max_launches_per_pass);
  options.launch_interval = cfg->launch_interval_ms * kMicrosPerMilli;
  options.metrics = &controller_metrics;
  // MPS on this machine says nothing of a Slurm node's or a Kubernetes
  // node's (docs/slurm.md).
  options.mps = !cfg->slurm.enabled && !cfg->kubernetes.enabled &&
                (std::filesystem::exists("/tmp/nvidia-mps") ||
                 getenv("CUDA_MPS_PIPE_DIRECTORY") != nullptr);
  // Which instance leads: this one alone (SQLite), or one of those sharing
  // etcd; it starts campaigning once the server listens (its address).
  absl::StatusOr<std::unique_ptr<store::Election>> election =
      MakeElection(*cfg, *state,
                   store::InstanceInfo{instance, "", GPUSCHED_VERSION,
                                       runtime::WallClock::Get().Now(), 0});
  if (!election.ok()) return Fail(std::string(election.status().message()));
  options.election = election->get();
  options.launcher_factory = launcher_factory;
  options.stop_replicas_on_exit =
      flags.stop_replicas_on_exit || cfg->stop_replicas_on_exit;
  if (state->etcd != nullptr) {
    options.max_events = cfg->etcd.max_events;
    options.max_event_age = cfg->etcd.max_event_age_h * 3600 * kMicrosPerSecond;
  }
  std::unique_ptr<runtime::Controller> controller;
  runtime::Controller* ctl = nullptr;
  auto made = runtime::Controller::Create(options, cluster, st_store,
                                          gateway->get(), std::move(launcher));
  if (!made.ok()) return Fail(std::string(made.status().message()));
  controller = *std::move(made);
  ctl = controller.get();
  (*gateway)->SetEventSink(
      [&ctl](store::Event e) { ctl->RecordEvent(std::move(e)); });
  store::Election* elect = election->get();
  elect->SetChangeCallback([ctl] { ctl->OnElectionChange(); });
  api::HaMetrics ha_metrics(&registry, st_store, state->etcd, elect);
  // What other instances write wakes the election (the key may be gone)
  // and the controller (desired state to absorb).
  st_store->SetChangeCallback([ctl, elect] {
    elect->Wake();
    ctl->OnStoreChange();
  });
  if (absl::Status st = controller->Start(); !st.ok()) {
    return Fail(std::string(st.message()));
  }

  // The config's deployments and tenants seed what the store lacks (it is
  // the one source of truth: a restart does not undo what was applied
  // since), applied like `gpusched apply`; with --reapply-config they
  // overwrite the stored ones. Another instance seeding the same object at
  // once is no error.
  std::vector<config::Manifest> manifests;
  const auto seeds = [&flags](const absl::Status& stored) {
    return flags.reapply_config || absl::IsNotFound(stored);
  };
  for (const config::TenantSpec& t : cfg->tenants) {
    if (!seeds(st_store->GetTenant(t.name).status())) continue;
    config::Manifest m;
    m.kind = config::Manifest::Kind::kTenant;
    m.tenant = t;
    manifests.push_back(m);
  }
  for (const config::DeploymentSpec& d : cfg->deployments) {
    if (!seeds(st_store->GetDeployment(d.name).status())) continue;
    config::Manifest m;
    m.kind = config::Manifest::Kind::kDeployment;
    m.deployment = d;
    manifests.push_back(m);
  }
  if (!manifests.empty()) {
    auto applied = controller->Apply(manifests);
    if (!applied.ok() && !absl::IsFailedPrecondition(applied.status())) {
      return Fail(absl::StrCat(cfg->source, ": ", applied.status().message()));
    }
  }

  // Keys: the admin key, and one per config tenant (from key_dir when set,
  // else a new one printed at each start).
  std::vector<std::pair<std::string, std::string>> printed;
  std::string admin_secret = cfg->admin_key;
  if (!cfg->admin_key_file.empty()) {
    std::ifstream in(cfg->admin_key_file);
    std::getline(in, admin_secret);
    admin_secret = std::string(absl::StripAsciiWhitespace(admin_secret));
    if (admin_secret.empty()) {
      return Fail(absl::StrCat("admin_key_file: cannot read a key from ",
                               cfg->admin_key_file));
    }
  }
  if (admin_secret.empty() && !cfg->key_dir.empty()) {
    auto k = KeyFromFile(cfg->key_dir + "/admin.key");
    if (!k.ok()) return Fail(std::string(k.status().message()));
    admin_secret = k->first;
  }
  if (!admin_secret.empty()) {
    if (absl::Status st = controller->EnsureKey(admin_secret, "", true);
        !st.ok()) {
      return Fail(std::string(st.message()));
    }
  }
  for (const config::TenantSpec& t : cfg->tenants) {
    if (!cfg->key_dir.empty()) {
      auto k = KeyFromFile(absl::StrCat(cfg->key_dir, "/", t.name, ".key"));
      if (!k.ok()) return Fail(std::string(k.status().message()));
      if (absl::Status st = controller->EnsureKey(k->first, t.name, false);
          !st.ok()) {
        return Fail(std::string(st.message()));
      }
      printed.emplace_back(t.name, k->first);
      continue;
    }
    auto key = controller->CreateKey(t.name, "serve", false);
    if (!key.ok()) return Fail(std::string(key.status().message()));
    printed.emplace_back(t.name, key->secret);
  }

  // The control API and /metrics wait for the controller's lock: they are
  // answered on these threads, never on the gateway's I/O thread.
  WorkerPool control_pool(kControlThreads, kControlQueued);
  const api::ClusterView cluster_view{elect, st_store};
  std::unique_ptr<api::AlertsSource> alerts;
  if (!cfg->alerts.prometheus_url.empty()) {
    auto made = api::AlertsSource::Create(
        {.prometheus_url = cfg->alerts.prometheus_url,
         .runbook_base_url = cfg->alerts.runbook_base_url,
         .timeout = cfg->alerts.timeout_ms * kMicrosPerMilli,
         .max_alerts = static_cast<int>(cfg->alerts.max_alerts)});
    if (!made.ok()) return Fail(std::string(made.status().message()));
    alerts = *std::move(made);
  }
  api::ControlApi control(
      controller.get(),
      api::ControlAccess{&authenticator, &access, &audit, st_store},
      &(*gateway)->stats(), &control_pool, &cluster_view, alerts.get());
  std::atomic<bool> draining{false};
  net::HttpServerOptions http;
  http.address = cfg->listen.host;
  http.port = static_cast<uint16_t>(cfg->listen.port);
  http.tls_cert_file = cfg->tls.cert;
  http.tls_key_file = cfg->tls.key;
  gateway::Gateway* g = gateway->get();
  auto server = net::HttpServer::Start(
      http, [g, &control, &registry, &control_pool, &cluster_view, &draining](
                net::HttpRequest req, std::shared_ptr<net::Responder> r) {
        // Readiness for a load balancer or Kubernetes: not while draining
        // or before this instance has a copy of the state (docs/ha.md).
        if (req.method() == net::http::verb::get &&
            req.target().substr(0, req.target().find('?')) == "/readyz") {
          nlohmann::json body;
          bool ready = cluster_view.Ready(&body);
          if (draining.load()) {
            ready = false;
            body["ready"] = false;
            body["draining"] = true;
          }
          net::HttpResponse res{ready ? net::http::status::ok
                                      : net::http::status::service_unavailable,
                                11};
          res.set(net::http::field::content_type, "application/json");
          res.body() = body.dump();
          r->Send(std::move(res));
          return;
        }
        if (req.method() == net::http::verb::get &&
            req.target().substr(0, req.target().find('?')) == "/metrics") {
          const bool queued = control_pool.TrySubmit([&registry, r] {
            net::HttpResponse res{net::http::status::ok, 11};
            res.set(net::http::field::content_type,
                    "text/plain; version=0.0.4; charset=utf-8");
            res.body() = registry.Expose();
            r->Send(std::move(res));
          });
          if (!queued) {
            net::HttpResponse busy = net::JsonError(
                net::http::status::service_unavailable,
                "busy: the control API's queue is full; retry shortly",
                "server_error");
            busy.set(net::http::field::retry_after, "1");
            r->Send(std::move(busy));
          }
          return;
        }
        // The dashboard's files (/ and /ui/*), unauthenticated.
        if (api::ServeStaticAsset(req, r)) return;
        if (control.Handle(req, r)) return;
        g->Handle(std::move(req), std::move(r));
      });
  if (!server.ok()) return Fail(std::string(server.status().message()));
  // Requests are read, proxied and answered on the server's threads.
  g->UseIoContext((*server)->io_context());
  const std::string url =
      absl::StrCat(cfg->tls.cert.empty() ? "http" : "https", "://",
                   cfg->listen.host, ":", (*server)->port());
  std::printf("gpusched serve: listening on %s (%zu nodes, %s)\n", url.c_str(),
              cluster.nodes.size(), cluster.source.c_str());
  elect->SetAddress(AdvertiseUrl(*cfg, (*server)->port()));
  if (absl::Status st = elect->Start(); !st.ok()) {
    return Fail(std::string(st.message()));
  }
  if (state->etcd != nullptr) {
    std::printf(
        "gpusched serve: instance %s on etcd %s%s (the leader runs the "
        "controller; gpusched get instances)\n",
        instance.c_str(), st_store->Health().where.c_str(),
        cfg->etcd.prefix.c_str());
  }
  std::fflush(stdout);
  if (flags.wait_ready) {
    absl::Status ready = controller->WaitReady(120 * kMicrosPerSecond);
    if (!ready.ok()) {
      std::fprintf(stderr,
                   "gpusched serve: %s (still trying; see gpusched "
                   "get replicas)\n",
                   std::string(ready.message()).c_str());
    } else {
      std::printf("gpusched serve: all replicas ready\n");
    }
  }
  if (!admin_secret.empty() && !cfg->key_dir.empty()) {
    std::printf(
        "admin key: in %s/admin.key (export GPUSCHED_KEY=$(cat "
        "%s/admin.key))\n",
        cfg->key_dir.c_str(), cfg->key_dir.c_str());
  }
  for (const auto& [tenant, key] : printed) {
    std::printf("tenant %s key: %s\n", tenant.c_str(), key.c_str());
  }
  if (!printed.empty() && !cfg->deployments.empty()) {
    std::printf(
        "try: curl %s/v1/chat/completions -H 'Authorization: Bearer %s' -H "
        "'Content-Type: application/json' -d '{\"model\":\"%s\",\"messages\":"
        "[{\"role\":\"user\",\"content\":\"hello\"}]}'\n",
        url.c_str(), printed.front().second.c_str(),
        cfg->deployments.front().name.c_str());
  }
  std::fflush(stdout);

  int sig = 0;
  sigwait(&signals, &sig);
  std::fprintf(stderr, "gpusched serve: signal %d, draining\n", sig);
  draining.store(true);
  // /readyz fails from now on; new connections are still taken for the
  // delay, the time a load balancer takes to see it (docs/ha.md).
  const double delay =
      flags.drain_delay_s >= 0 ? flags.drain_delay_s : cfg->drain_delay_s;
  if (delay > 0) {
    std::this_thread::sleep_for(
        std::chrono::milliseconds(static_cast<int64_t>(delay * 1000)));
  }
  const double drain = flags.drain_s >= 0 ? flags.drain_s : cfg->drain_grace_s;
  (*server)->Shutdown(
      std::chrono::milliseconds(static_cast<int64_t>(drain * 1000)));
  control_pool.Stop();  // its calls use the controller
  // The controller stops acting (a leader leaves Slurm jobs and Pods
  // running for the next one), then the election is handed on at once.
  controller->Stop();
  elect->Stop(/*resign=*/true);
  ha_metrics.Detach();
  st_store->SetChangeCallback(nullptr);
  controller.reset();
  gateway->reset();
  return 0;
}

}  // namespace

void AddServeCommand(CLI::App& app) {
  auto flags = std::make_shared<ServeFlags>();
  CLI::App* cmd = app.add_subcommand(
      "serve",
      "Run the platform: place and launch engines, serve the gateway and the "
      "control API");
  cmd->add_option("--config", flags->config, "serve config YAML")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--drain-seconds", flags->drain_s,
                  "on SIGTERM, how long in-flight requests may finish "
                  "(default: the config's drain_grace_s)");
  cmd->add_option("--drain-delay-seconds", flags->drain_delay_s,
                  "on SIGTERM, fail /readyz but keep taking requests this "
                  "long before draining (default: the config's "
                  "drain_delay_s)")
      ->check(CLI::Range(0.0, 600.0));
  cmd->add_option("--instance-id", flags->instance_id,
                  "this instance's id among those sharing etcd (default: the "
                  "config's ha.instance_id, else <hostname>-<port>)");
  cmd->add_option("--advertise", flags->advertise,
                  "the URL other instances reach this one at, e.g. "
                  "http://$(POD_IP):8080 (default: the config's ha.advertise, "
                  "else from listen)");
  cmd->add_flag("--stop-replicas-on-exit", flags->stop_replicas_on_exit,
                "on SIGTERM, end Slurm jobs and Pods too (by default they keep "
                "running and the next leader adopts them; local engines "
                "always end with gpusched)");
  cmd->add_flag("--reapply-config", flags->reapply_config,
                "apply the config's deployments and tenants over the stored "
                "ones (by default the config only seeds what the store lacks, "
                "and what was applied through the API since stays)");
  cmd->callback([flags] {
    const int rc = RunServe(*flags);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace gpusched
