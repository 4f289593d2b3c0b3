// The Controller's probes: readiness and health checks of replicas and
// external endpoints, engine-metric scrapes for the routers, WaitReady.
#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "api/controller.h"
#include "api/controller_internal.h"

namespace gpusched::api {

using nlohmann::json;

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

}  // namespace gpusched::api
