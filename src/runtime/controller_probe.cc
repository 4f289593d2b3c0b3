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
#include "runtime/controller.h"
#include "runtime/controller_internal.h"

namespace gpusched::runtime {

using nlohmann::json;

void Controller::Probe(Deployment& d, Replica& r, Micros now) {
  r.probing = true;  // attached endpoints; the core tracks its replicas
  const std::string deployment = d.spec.name, replica = r.name;
  const backends::ProcessId pid = r.pid;
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
    absl::MutexLock lock(&mu_);
    auto dit = deployments_.find(deployment);
    if (dit == deployments_.end()) return;
    Deployment& d = dit->second;
    Replica* r = nullptr;
    if (auto it = d.procs.find(replica); it != d.procs.end()) r = &it->second;
    for (Replica& e : d.external) {
      if (e.name == replica) r = &e;
    }
    for (Replica& f : d.followed) {
      if (f.name == replica) r = &f;
    }
    if (r == nullptr) return;
    r->scraping = false;
    r->signals = s;
  };
  probe_->Send(at,
               boost::beast::http::request<boost::beast::http::string_body>{
                   boost::beast::http::verb::get, d.engine.metrics_path, 11},
               std::move(cb));
}

void Controller::OnProbe(const std::string& deployment,
                         const std::string& replica, backends::ProcessId pid,
                         bool ok) {
  absl::MutexLock lock(&mu_);
  auto dit = deployments_.find(deployment);
  if (dit == deployments_.end()) return;
  Deployment& d = dit->second;
  const Micros now = Now();
  if (auto it = d.procs.find(replica);
      it != d.procs.end() && it->second.pid == pid && pid != 0) {
    control::LifecycleOutput out;
    d.life.ProbeResult(replica, ok, now, &out,
                       net::EndpointKey(it->second.endpoint));
    for (const control::LifecycleEvent& e : out.events) {
      if (e.kind != "replica.ready") continue;
      if (options_.metrics) {
        options_.metrics->ReplicaReady(deployment,
                                       e.details.value("startup_seconds", 0.0));
      }
      if (d.cold && d.cold->replica == replica) d.cold->ready = now;
    }
    Carry(d, out, now);
    dirty_ = true;
  }
  for (Replica& r : d.external) {
    if (r.name != replica || pid != 0) continue;
    r.probing = false;
    if (ok != r.external_ok) {
      Event(ok ? "replica.ready" : "replica.unhealthy", deployment,
            absl::StrCat(
                "endpoint ", net::EndpointKey(r.endpoint),
                ok ? " answers its health check" : " fails its health check"));
      dirty_ = true;
    }
    r.external_ok = ok;
    r.next_probe = now + (ok ? options_.health_period : kMicrosPerSecond);
  }
}

absl::Status Controller::WaitReady(Micros timeout) {
  const Micros deadline = Now() + timeout;
  while (true) {
    std::vector<std::string> waiting;
    if (!Leading()) {
      waiting = FollowerNotReady();
    } else {
      absl::MutexLock lock(&mu_);
      for (const auto& [name, d] : deployments_) {
        int ready = 0;
        for (const Row& r : Rows(d)) {
          const std::string message = r.core ? r.core->message : "";
          if (r.ready()) {
            ++ready;
          } else if (!r.core ||
                     r.core->state != control::ReplicaState::kDraining) {
            waiting.push_back(
                absl::StrCat(r.name(), " (", r.state(),
                             message.empty() ? "" : ": " + message, ")"));
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
    if (Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("not ready: ", absl::StrJoin(waiting, "; ")));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace gpusched::runtime
