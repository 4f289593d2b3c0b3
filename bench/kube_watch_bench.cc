// Watch events handled per second by gpusched's Kubernetes watcher
// (runtime/kube_watch.h), against the transport alone in the same
// invocation: a local HTTP server streams N watch events (Pod objects shaped
// as the API server sends them, ~2 KB each) in chunks; the watcher parses
// each one, keeps its copy and records the change, while the peer
// (KubeClient::Stream counting lines, no JSON) shows what the connection
// itself allows. Medians of ROUNDS.
// Usage: kube_watch_bench [EVENTS] [ROUNDS]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "backends/kubernetes/kube_client.h"
#include "backends/kubernetes/kube_watch.h"
#include "net/http_server.h"
#include "nlohmann/json.hpp"

namespace gs = gpusched;
using nlohmann::json;

namespace {

std::string Event(int i) {
  json pod = {
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata",
       {{"name", absl::StrCat("gpusched-chat-", i % 500, "-", i)},
        {"namespace", "gpusched"},
        {"uid", absl::StrCat("0f2c9a4e-", i)},
        {"resourceVersion", std::to_string(100 + i)},
        {"labels",
         {{"app.kubernetes.io/managed-by", "gpusched"},
          {"gpusched.io/instance", "gpusched"},
          {"gpusched.io/deployment", "chat"},
          {"gpusched.io/replica", absl::StrCat("chat-", i % 500)}}},
        {"annotations",
         {{"gpusched.io/gpus", "0,1"}, {"gpusched.io/tag", "8000.0.ab12"}}}}},
      {"spec",
       {{"nodeName", absl::StrCat("gpu-", i % 64)},
        {"schedulerName", "gpusched"},
        {"restartPolicy", "Never"},
        {"containers",
         {{{"name", "engine"},
           {"image", "ghcr.io/gpusched/gpusched:0.1.0"},
           {"command",
            {"/usr/local/bin/gpusched", "engine", "--host", "$(POD_IP)",
             "--port", "8000"}},
           {"env",
            {{{"name", "NVIDIA_VISIBLE_DEVICES"}, {"value", "0,1"}},
             {{"name", "POD_IP"},
              {"valueFrom", {{"fieldRef", {{"fieldPath", "status.podIP"}}}}}}}},
           {"resources",
            {{"requests", {{"cpu", "2"}, {"memory", "8Gi"}}}}}}}}}},
      {"status",
       {{"phase", "Running"},
        {"podIP", absl::StrCat("10.1.", i % 250, ".", i % 200)},
        {"conditions",
         {{{"type", "Ready"}, {"status", "True"}},
          {{"type", "PodScheduled"}, {"status", "True"}}}}}}};
  return json{{"type", i % 3 == 0 ? "ADDED" : "MODIFIED"}, {"object", pod}}
             .dump() +
         "\n";
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2]
                      : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  const int events = argc > 1 ? std::max(1, atoi(argv[1])) : 20000;
  const int rounds = argc > 2 ? std::max(1, atoi(argv[2])) : 5;
  // The stream, pre-rendered, in chunks of 64 events.
  std::vector<std::string> chunks;
  size_t bytes = 0;
  for (int i = 0; i < events; i += 64) {
    std::string c;
    for (int j = i; j < std::min(events, i + 64); ++j) c += Event(j);
    bytes += c.size();
    chunks.push_back(std::move(c));
  }
  auto server = gs::net::HttpServer::Start(
      {}, [&](gs::net::HttpRequest req, std::shared_ptr<gs::net::Responder> r) {
        gs::net::HttpResponse res;
        res.version(11);
        res.result(200);
        res.set(gs::net::http::field::content_type, "application/json");
        if (!absl::StrContains(std::string(req.target()), "watch=true")) {
          res.body() = R"({"kind":"PodList","apiVersion":"v1",)"
                       R"("metadata":{"resourceVersion":"1"},"items":[]})";
          r->Send(std::move(res));
          return;
        }
        r->StartStream(std::move(res));
        for (const std::string& c : chunks) r->SendChunk(c);
        r->EndStream();
      });
  if (!server.ok()) {
    std::fprintf(stderr, "%s\n", server.status().ToString().c_str());
    return 1;
  }
  gs::backends::KubeCredentials creds;
  creds.host = "127.0.0.1";
  creds.port = (*server)->port();
  creds.tls = false;
  creds.server = "bench";
  std::vector<double> watcher, peer;
  for (int round = 0; round < rounds; ++round) {
    {
      auto client = *gs::backends::KubeClient::Create(creds, {});
      int64_t lines = 0;
      gs::backends::KubeResponse error;
      const auto t0 = std::chrono::steady_clock::now();
      (void)client->Stream(
          "/api/v1/pods?watch=true", 10 * gs::kMicrosPerSecond,
          [&](absl::string_view) {
            ++lines;
            return true;
          },
          &error);
      const double s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
              .count();
      if (lines != events) {
        std::fprintf(stderr, "peer read %lld of %d events\n",
                     static_cast<long long>(lines), events);
        return 1;
      }
      peer.push_back(events / s);
    }
    {
      auto client = *gs::backends::KubeClient::Create(creds, {});
      gs::backends::KubeWatcher w(client.get(),
                                  {.path = "/api/v1/pods",
                                   .label_selector = "",
                                   .min_backoff = gs::kMicrosPerSecond});
      const auto t0 = std::chrono::steady_clock::now();
      w.Start();
      while (w.stats().events < events) {
        if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(60)) {
          std::fprintf(stderr, "the watcher handled %lld of %d events\n",
                       static_cast<long long>(w.stats().events), events);
          return 1;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
      const double s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
              .count();
      watcher.push_back(events / s);
      w.Stop();
    }
  }
  (*server)->Shutdown(std::chrono::milliseconds(100));
  const double wm = Median(watcher), pm = Median(peer);
  std::printf("watch stream: %d events, %.0f bytes each, %d rounds\n", events,
              static_cast<double>(bytes) / events, rounds);
  std::printf("watcher (parse, copy, change set): %.0f events/s (median)\n",
              wm);
  std::printf("peer (the stream's lines, no JSON): %.0f events/s (median)\n",
              pm);
  std::printf("ratio watcher/peer: %.2f\n", wm / pm);
  return 0;
}
