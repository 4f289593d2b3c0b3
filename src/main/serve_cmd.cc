#include "main/serve_cmd.h"

#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "api/gateway.h"
#include "api/http_server.h"
#include "boost/asio.hpp"
#include "config/serve_config.h"
#include "nlohmann/json.hpp"
#include "runtime/engine_template.h"
#include "runtime/launcher.h"
#include "runtime/store.h"
#include "runtime/upstream.h"

namespace gpusched {
namespace {

struct ServeFlags {
  std::string config;
  double drain_s = 30;
};

int Fail(const std::string& msg) {
  std::fprintf(stderr, "gpusched serve: %s\n", msg.c_str());
  return 2;
}

Micros Now() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A port nothing listens on right now (the engine binds it next).
absl::StatusOr<int> FreePort() {
  boost::asio::io_context ioc;
  boost::asio::ip::tcp::acceptor a(ioc);
  boost::system::error_code ec;
  a.open(boost::asio::ip::tcp::v4(), ec);
  if (!ec) {
    a.bind({boost::asio::ip::make_address("127.0.0.1"), 0}, ec);
  }
  if (ec) return absl::UnavailableError("no free port: " + ec.message());
  return a.local_endpoint().port();
}

std::string SelfPath() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, n) : "gpusched";
}

struct Replica {
  std::string name;
  runtime::ProcessId pid = 0;
  runtime::Endpoint endpoint;
  runtime::ReadinessProbe readiness;  // from the engine's template
};

int RunServe(const ServeFlags& flags) {
  auto cfg = config::LoadServeFile(flags.config);
  if (!cfg.ok()) return Fail(std::string(cfg.status().message()));
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto store = runtime::Store::Open(cfg->state);
  if (!store.ok()) return Fail(std::string(store.status().message()));
  if (!cfg->admin_key.empty()) {
    auto admin = (*store)->EnsureAdminKey(cfg->admin_key, Now());
    if (!admin.ok()) return Fail(std::string(admin.status().message()));
  }

  // Engines: launch each replica and wait until its readiness probe passes.
  runtime::LocalLauncher launcher;
  runtime::UpstreamOptions probe_options;
  probe_options.connect_timeout = std::chrono::milliseconds(500);
  probe_options.first_byte_timeout = std::chrono::milliseconds(2000);
  runtime::UpstreamClient probe(probe_options);
  std::vector<Replica> launched;
  api::GatewayConfig gateway;
  auto stop_all = [&] {
    for (const Replica& r : launched) {
      (void)launcher.Stop(r.pid, 10 * kMicrosPerSecond, Now());
    }
    const Micros deadline = Now() + 12 * kMicrosPerSecond;
    while (launcher.size() > 0 && Now() < deadline) {
      launcher.Poll();
      launcher.Tick(Now());
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  };
  for (const config::DeploymentSpec& d : cfg->deployments) {
    api::GatewayDeployment gd;
    gd.spec.name = d.name;
    gd.spec.router = d.router;
    gd.spec.max_queue_size = d.max_queue_size;
    serving::QueueOrder order = serving::QueueOrder::kFair;
    (void)serving::ParseQueueOrder(d.queue_order, &order);
    for (const std::string& c : gateway.classes) {
      gd.spec.queue.classes.push_back({c, order, kNever});
    }
    gd.max_ongoing_requests = d.max_ongoing_requests;
    for (const config::HostPort& hp : d.endpoints) {
      gd.replicas.push_back({hp.host, static_cast<uint16_t>(hp.port)});
    }
    auto tmpl = runtime::FindTemplate(d.engine);
    if (!tmpl.ok()) {
      stop_all();
      return Fail(
          absl::StrCat("deployment '", d.name, "': ", tmpl.status().message()));
    }
    tmpl->extra_args = d.args;
    for (int i = 0; i < d.replicas; ++i) {
      auto port = FreePort();
      if (!port.ok()) {
        stop_all();
        return Fail(std::string(port.status().message()));
      }
      const std::string name = absl::StrCat(d.name, "-", i);
      absl::flat_hash_map<std::string, std::string> values = {
          {"self", SelfPath()},
          {"model", d.model},
          {"port", std::to_string(*port)},
          {"metrics_port", "0"},
          {"gpu_memory_fraction", "0.9"},
          {"tensor_parallel", "1"},
          {"replica", name}};
      auto argv = runtime::ExpandArgv(*tmpl, values);
      if (!argv.ok()) {
        stop_all();
        return Fail(absl::StrCat("deployment '", d.name,
                                 "': ", argv.status().message()));
      }
      runtime::ProcessSpec spec;
      spec.name = name;
      spec.argv = *argv;
      spec.log_dir = cfg->log_dir;
      auto pid = launcher.Start(spec);
      if (!pid.ok()) {
        stop_all();
        return Fail(absl::StrCat("deployment '", d.name,
                                 "': ", pid.status().message()));
      }
      launched.push_back({name,
                          *pid,
                          {"127.0.0.1", static_cast<uint16_t>(*port)},
                          tmpl->readiness});
      gd.replicas.push_back(launched.back().endpoint);
    }
    gateway.deployments.push_back(std::move(gd));
  }
  for (const Replica& r : launched) {
    const Micros deadline = Now() + r.readiness.startup_timeout;
    bool ready = false;
    while (!ready && Now() < deadline && launcher.IsAlive(r.pid)) {
      auto got = probe.Fetch(
          r.endpoint,
          boost::beast::http::request<boost::beast::http::string_body>{
              boost::beast::http::verb::get, r.readiness.path, 11});
      ready = got.ok() && got->status == 200;
      if (!ready) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      launcher.Poll();
    }
    if (!ready) {
      stop_all();
      return Fail(absl::StrCat("replica ", r.name,
                               " did not become ready; see ", cfg->log_dir, "/",
                               r.name, ".err"));
    }
  }

  // Tenants and their keys (stored hashed; printed once here).
  std::vector<std::pair<std::string, std::string>> keys;
  for (const config::TenantSpec& t : cfg->tenants) {
    api::GatewayTenant gt;
    gt.spec.name = t.name;
    gt.spec.weight = t.weight;
    gt.spec.limits = t.limits;
    gt.priority = t.priority_class;
    gt.models = t.models;
    gateway.tenants.push_back(gt);
    auto existing = (*store)->GetTenant(t.name);
    const int64_t generation = existing.ok() ? existing->generation + 1 : 1;
    auto put = (*store)->PutTenant(
        t.name,
        nlohmann::json{{"weight", t.weight}, {"models", t.models}}.dump(),
        generation, Now());
    if (!put.ok()) {
      stop_all();
      return Fail(std::string(put.message()));
    }
    auto key = (*store)->CreateApiKey(t.name, "serve", Now());
    if (!key.ok()) {
      stop_all();
      return Fail(std::string(key.status().message()));
    }
    keys.emplace_back(t.name, key->secret);
  }
  auto gw = api::Gateway::Create(gateway, store->get());
  if (!gw.ok()) {
    stop_all();
    return Fail(std::string(gw.status().message()));
  }
  api::HttpServerOptions http;
  http.address = cfg->listen.host;
  http.port = static_cast<uint16_t>(cfg->listen.port);
  api::Gateway* g = gw->get();
  auto server = api::HttpServer::Start(
      http, [g](api::HttpRequest req, std::shared_ptr<api::Responder> r) {
        g->Handle(std::move(req), std::move(r));
      });
  if (!server.ok()) {
    stop_all();
    return Fail(std::string(server.status().message()));
  }
  const std::string url =
      absl::StrCat("http://", cfg->listen.host, ":", (*server)->port());
  std::printf("gpusched serve: listening on %s\n", url.c_str());
  for (const auto& [tenant, key] : keys) {
    std::printf("tenant %s key: %s\n", tenant.c_str(), key.c_str());
  }
  const std::string model = cfg->deployments.front().name;
  std::printf(
      "try: curl %s/v1/chat/completions -H 'Authorization: Bearer %s' -H "
      "'Content-Type: application/json' -d '{\"model\":\"%s\",\"messages\":"
      "[{\"role\":\"user\",\"content\":\"hello\"}]}'\n",
      url.c_str(), keys.front().second.c_str(), model.c_str());
  std::fflush(stdout);

  int sig = 0;
  sigwait(&signals, &sig);
  std::fprintf(stderr, "gpusched serve: signal %d, draining\n", sig);
  (*server)->Shutdown(
      std::chrono::milliseconds(static_cast<int64_t>(flags.drain_s * 1000)));
  gw->reset();
  stop_all();
  return 0;
}

}  // namespace

void AddServeCommand(CLI::App& app) {
  auto flags = std::make_shared<ServeFlags>();
  CLI::App* cmd = app.add_subcommand(
      "serve", "Run the platform: launch engines, serve the gateway");
  cmd->add_option("--config", flags->config, "serve config YAML")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--drain-seconds", flags->drain_s,
                  "on SIGTERM, how long in-flight requests may finish")
      ->capture_default_str();
  cmd->callback([flags] {
    const int rc = RunServe(*flags);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace gpusched
