#include "cli/ctl.h"

#include <chrono>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "net/http_server.h"
#include "nlohmann/json.hpp"

namespace gpusched::cli {
namespace {

namespace http = boost::beast::http;
using net::HttpRequest;
using net::HttpResponse;
using net::Responder;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using Json = nlohmann::json;

constexpr char kKey[] = "admin-secret";

// Canned answers per docs/control-api.md.
const char kChat[] = R"({
  "apiVersion": "gpusched.io/v1", "kind": "Deployment",
  "metadata": {"name": "chat", "labels": {"team": "search"}, "generation": 2,
               "created": "2026-11-29T23:10:00Z"},
  "spec": {"model": "chat", "engine": {"template": "reference", "args": []},
           "endpoints": [],
           "resources": {"fraction": {"milli": 250, "memory": "10Gi"}},
           "replicas": 2, "minReplicas": 2, "maxReplicas": 2,
           "priorityClass": "standard"},
  "status": {"replicas": 2, "readyReplicas": 1, "queued": 3, "inFlight": 1,
             "message": "",
             "replicaStatus": [
    {"name": "chat-0", "deployment": "chat", "state": "ready",
     "endpoint": "127.0.0.1:41234", "node": "local", "gpus": [0],
     "gpuShare": [{"gpu": 0, "milli": 250, "memoryMiB": 10240}],
     "restarts": 0, "startedAt": "2026-11-29T23:11:00Z", "message": ""},
    {"name": "chat-1", "deployment": "chat", "state": "pending",
     "endpoint": "", "gpus": [], "gpuShare": [], "restarts": 0,
     "message": "0/1 nodes are available: 1 GpuFit: insufficient GPU milli"}]}
})";

const char kEmbed[] = R"({
  "apiVersion": "gpusched.io/v1", "kind": "Deployment",
  "metadata": {"name": "embed", "created": "2026-11-29T20:00:00Z"},
  "spec": {"model": "bge", "engine": {"template": "vllm"}, "endpoints": [],
           "resources": {"whole": 1}, "replicas": 1, "minReplicas": 1,
           "maxReplicas": 4},
  "status": {"replicas": 1, "readyReplicas": 1, "replicaStatus": []}
})";

const char kGpus[] = R"({"items": [
  {"node": "local", "index": 0, "uuid": "GPU-0", "model": "H100-SXM-80GB",
   "memoryMiB": 81559, "simulated": true, "healthy": true,
   "allocatedMilli": 250, "allocatedMemoryMiB": 10240,
   "replicas": [{"name": "chat-0", "deployment": "chat", "milli": 250}]},
  {"node": "local", "index": 1, "uuid": "GPU-1", "model": "H100-SXM-80GB",
   "memoryMiB": 81559, "simulated": true, "healthy": true,
   "allocatedMilli": 0, "allocatedMemoryMiB": 0, "replicas": []}]})";

// Newest first, as the server lists them.
const char kEvents[] = R"({"items": [
  {"id": 2, "time": "2026-11-29T23:11:01.5Z", "timeMicros": 1795993861500000,
   "kind": "replica.ready", "deployment": "chat", "tenant": "",
   "message": "chat-0 ready on 127.0.0.1:41234 after 0.41 s"},
  {"id": 1, "time": "2026-11-29T23:10:00Z", "timeMicros": 1795993800000000,
   "kind": "deployment.applied", "deployment": "chat", "tenant": "",
   "message": "chat created"}]})";

const char kTenants[] = R"({"items": [
  {"kind": "Tenant", "metadata": {"name": "team-a"},
   "spec": {"models": ["chat", "embed"], "weight": 2.5,
            "priorityClass": "critical"}},
  {"kind": "Tenant", "metadata": {"name": "team-b"},
   "spec": {"models": [], "weight": 1, "priorityClass": "batch"}}]})";

// A route at a manual step (created 2026-11-29T23:00:00Z, in microseconds).
const char kRoute[] = R"({
  "name": "assistant", "generation": 1, "created": 1795993200000000,
  "sticky": "session",
  "targets": [{"deployment": "chat-v1", "version": "1", "weight": 90},
              {"deployment": "chat-v2", "version": "2", "weight": 10}],
  "manifest": {"kind": "ModelRoute", "metadata": {"name": "assistant"}},
  "rollout": {"canary": "chat-v2", "stable": "chat-v1", "phase": "progressing",
              "step": 1, "steps": [10, 50], "canaryWeight": 10,
              "reason": "first look", "nextStepInSeconds": null,
              "manualStep": true}})";

// A stable parked by a promoted route.
const char kParked[] = R"({
  "kind": "Deployment", "metadata": {"name": "old"},
  "spec": {"engine": {"template": "reference"}, "replicas": 1,
           "minReplicas": 1, "maxReplicas": 1},
  "status": {"replicas": 0, "desiredReplicas": 0, "readyReplicas": 0,
             "parkedBy": "assistant", "replicaStatus": []}})";

struct Seen {
  std::string method;
  std::string target;
  std::string authorization;
  std::string content_type;
  std::string body;
};

net::HttpResponse JsonAnswer(http::status status, std::string body) {
  net::HttpResponse res{status, 11};
  res.set(http::field::content_type, "application/json");
  res.body() = std::move(body);
  return res;
}

net::HttpResponse Error(http::status status, const std::string& message,
                        std::vector<std::string> problems = {}) {
  Json e = {{"message", message}, {"type", "error"}};
  if (!problems.empty()) e["problems"] = problems;
  return JsonAnswer(status, Json{{"error", e}}.dump());
}

class CtlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    routes_ = {
        {"GET /api/v1/deployments",
         absl::StrCat(R"({"items": [)", kChat, ",", kEmbed, "]}")},
        {"GET /api/v1/deployments/chat", kChat},
        {"GET /api/v1/replicas",
         [] {
           Json items = Json::parse(kChat)["status"]["replicaStatus"];
           items.push_back(Json::parse(R"({"name": "slim-0",
             "deployment": "slim", "state": "ready",
             "endpoint": "10.0.0.3:8000", "node": "n3", "gpus": [2],
             "gpuShare": [{"gpu": 2, "milli": 142, "memoryMiB": 9984,
                           "mig": "1g.10gb", "migStart": 3}],
             "restarts": 0})"));
           return Json{{"items", items}}.dump();
         }()},
        {"GET /api/v1/gpus", kGpus},
        // A static node and a pool node (capacity on demand).
        {"GET /api/v1/nodes",
         R"({"items": [
           {"name": "n1", "gpus": 2, "gpuModel": "H100-SXM-80GB",
            "cpuMilli": 8000, "memoryMiB": 16000, "allocatedGpuMilli": 2000,
            "simulated": false},
           {"name": "c1", "gpus": 2, "gpuModel": "H100-SXM-80GB",
            "cpuMilli": 8000, "memoryMiB": 16000, "allocatedGpuMilli": 0,
            "simulated": false, "pool": "h100",
            "capacityState": "powering_up"}]})"},
        {"GET /api/v1/alerts",
         R"({"configured": true, "source": "http://p:9090", "omitted": 1,
             "items": [{"name": "GpuschedGpuUnhealthy",
               "severity": "critical", "activeAt": "2026-11-29T23:10:00Z",
               "summary": "GPU 1 of node n1 is unhealthy",
               "runbookUrl": "docs/runbooks.md#gpuschedgpuunhealthy",
               "labels": {"gpu": "1", "node": "n1",
                          "severity": "critical"}}]})"},
        {"GET /api/v1/tenants", kTenants},
        {"GET /api/v1/tenants/team-a",
         R"({"kind": "Tenant", "metadata": {"name": "team-a"},
             "spec": {"models": ["chat"], "weight": 2.5,
                      "priorityClass": "critical",
                      "limits": {"requestsPerMinute": 60, "maxQueued": 0}}})"},
        {"GET /api/v1/events?deployment=chat&limit=10", kEvents},
        {"GET /api/v1/events?deployment=chat&limit=5&kind=replica.ready&"
         "kind=deployment.applied",
         kEvents},
        {"DELETE /api/v1/deployments/chat",
         R"({"kind": "Deployment", "name": "chat", "action": "deleted"})"},
        {"GET /api/v1/routes", absl::StrCat(R"({"items": [)", kRoute, "]}")},
        {"GET /api/v1/routes/assistant", kRoute},
        {"GET /api/v1/events?deployment=assistant&limit=10", kEvents},
        {"DELETE /api/v1/routes/assistant",
         R"({"kind": "ModelRoute", "name": "assistant", "action": "deleted"})"},
        {"GET /api/v1/deployments/old", kParked},
    };
    auto s = net::HttpServer::Start(
        {}, [this](net::HttpRequest req, std::shared_ptr<net::Responder> r) {
          r->Send(Handle(req));
        });
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
    o_.server = absl::StrCat("http://127.0.0.1:", server_->port());
    o_.key = kKey;
    o_.timeout = std::chrono::milliseconds(10'000);
    absl::Time now;
    std::string why;
    ASSERT_TRUE(
        absl::ParseTime(absl::RFC3339_full, "2026-11-29T23:15:00Z", &now, &why))
        << why;
    o_.now = now;
  }

  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::milliseconds(100));
  }

  net::HttpResponse Handle(const net::HttpRequest& req) {
    Seen s{std::string(req.method_string()), std::string(req.target()),
           std::string(req[http::field::authorization]),
           std::string(req[http::field::content_type]), req.body()};
    {
      std::lock_guard<std::mutex> lock(mu_);
      seen_.push_back(s);
    }
    if (s.authorization != absl::StrCat("Bearer ", kKey)) {
      return Error(http::status::unauthorized, "unknown API key");
    }
    if (s.method == "POST" && s.target == "/api/v1/apply") {
      if (absl::StrContains(s.body, "name: lost")) {  // one problem
        return Error(http::status::unprocessable_entity,
                     "request body:1: ModelRoute/lost: unknown deployment",
                     {"request body:1: ModelRoute/lost: unknown deployment"});
      }
      if (absl::StrContains(s.body, "replicas: two")) {
        return Error(
            http::status::unprocessable_entity, "invalid manifest",
            {"-:7: spec.replicas: must be an integer in 0..1000, got 'two'",
             "-:12: spec.weight: must be > 0"});
      }
      return JsonAnswer(http::status::ok, R"({"items": [
        {"kind": "Deployment", "name": "chat", "action": "created"},
        {"kind": "Tenant", "name": "team-a", "action": "configured"}]})");
    }
    if (s.method == "POST" && s.target == "/api/v1/delete") {
      return JsonAnswer(http::status::ok, R"({"items": [
        {"kind": "Deployment", "name": "chat", "action": "deleted"}]})");
    }
    if (absl::StartsWith(s.target, "/api/v1/deployments/chat/logs")) {
      net::HttpResponse res{http::status::ok, 11};
      res.set(http::field::content_type, "text/plain");
      res.body() = "line 1\nline 2";
      return res;
    }
    auto it = routes_.find(s.method + " " + s.target);
    if (it == routes_.end()) {
      return Error(http::status::not_found,
                   absl::StrCat("no ", s.method, " ", s.target));
    }
    return JsonAnswer(http::status::ok, it->second);
  }

  std::vector<Seen> seen() {
    std::lock_guard<std::mutex> lock(mu_);
    return seen_;
  }

  // Runs `fn(o_, out, err)`, keeping what it printed.
  template <typename Fn>
  int Run(Fn fn) {
    std::ostringstream out, err;
    const int rc = fn(o_, out, err);
    out_ = out.str();
    err_ = err.str();
    return rc;
  }
  int Get(const std::string& kind, const std::string& name = "",
          const std::string& output = "table") {
    return Run([&](const CtlOptions& o, std::ostream& out, std::ostream& err) {
      return RunGet(o, kind, name, output, out, err);
    });
  }
  int Describe(const std::string& kind, const std::string& name) {
    return Run([&](const CtlOptions& o, std::ostream& out, std::ostream& err) {
      return RunDescribe(o, kind, name, out, err);
    });
  }
  int Apply(const std::string& text) {
    return Run([&](const CtlOptions& o, std::ostream& out, std::ostream& err) {
      std::istringstream in(text);
      return RunApply(o, "-", in, out, err);
    });
  }

  std::map<std::string, std::string> routes_;
  std::unique_ptr<net::HttpServer> server_;
  CtlOptions o_;
  std::string out_, err_;
  std::mutex mu_;
  std::vector<Seen> seen_;
};

TEST_F(CtlTest, GetDeploymentsPrintsATableAndSendsTheKey) {
  ASSERT_EQ(Get("deployments"), kExitOk) << err_;
  EXPECT_EQ(out_,
            "NAME   REPLICAS  READY  ENGINE     MODEL  RESOURCES       AGE\n"
            "chat   2         1/2    reference  chat   250m GPU, 10Gi  5m\n"
            "embed  1 (1-4)   1/1    vllm       bge    1 GPU           3h\n");
  EXPECT_EQ(err_, "");
  ASSERT_EQ(seen().size(), 1u);
  EXPECT_EQ(seen()[0].method, "GET");
  EXPECT_EQ(seen()[0].target, "/api/v1/deployments");
  EXPECT_EQ(seen()[0].authorization, "Bearer admin-secret");
}

TEST_F(CtlTest, GetReplicasGpusTenantsTables) {
  ASSERT_EQ(Get("replicas"), kExitOk) << err_;
  EXPECT_EQ(out_,
            "NAME    DEPLOYMENT  STATE    ENDPOINT         GPUS          "
            "RESTARTS\n"
            "chat-0  chat        ready    127.0.0.1:41234  0(250m)       0\n"
            "chat-1  chat        pending  -                -             0\n"
            "slim-0  slim        ready    10.0.0.3:8000    2(1g.10gb@3)  0\n");
  ASSERT_EQ(Get("gpu"), kExitOk) << err_;
  EXPECT_EQ(out_,
            "NODE   INDEX  MODEL          MEMORY  ALLOCATED  REPLICAS\n"
            "local  0      H100-SXM-80GB  79.6Gi  250m 10Gi  chat-0\n"
            "local  1      H100-SXM-80GB  79.6Gi  -          -\n");
  // A pool node says its pool and capacity state; a static node "-".
  ASSERT_EQ(Get("nodes"), kExitOk) << err_;
  EXPECT_EQ(out_,
            "NAME  GPUS  GPU-MODEL      CPU  MEMORY  GPU-ALLOCATED  SIMULATED  "
            "POOL\n"
            "n1    2     H100-SXM-80GB  8    15.6Gi  2000m          false      "
            "-\n"
            "c1    2     H100-SXM-80GB  8    15.6Gi  0m             false      "
            "h100/powering_up\n");
  ASSERT_EQ(Get("tenants"), kExitOk) << err_;
  EXPECT_EQ(out_,
            "NAME    MODELS      WEIGHT  PRIORITY\n"
            "team-a  chat,embed  2.5     critical\n"
            "team-b  *           1       batch\n");
}

TEST_F(CtlTest, GetAlertsShowsRunbooks) {
  ASSERT_EQ(Get("alerts"), kExitOk) << err_;
  EXPECT_EQ(out_,
            "ALERT                 SEVERITY  LABELS         SINCE  SUMMARY     "
            "                   RUNBOOK\n"
            "GpuschedGpuUnhealthy  critical  gpu=1 node=n1  5m     GPU 1 of "
            "node n1 is unhealthy  docs/runbooks.md#gpuschedgpuunhealthy\n");
  EXPECT_EQ(err_, "(1 more not listed)\n");
  EXPECT_EQ(seen().back().target, "/api/v1/alerts");
}

TEST_F(CtlTest, GetNameFiltersListsAndFetchesObjects) {
  ASSERT_EQ(Get("replica", "chat-1"), kExitOk) << err_;
  EXPECT_THAT(out_, HasSubstr("chat-1"));
  EXPECT_THAT(out_, ::testing::Not(HasSubstr("chat-0")));

  EXPECT_EQ(Get("replicas", "nope"), kExitServerError);
  EXPECT_EQ(err_, "error: replica \"nope\" not found\n");

  ASSERT_EQ(Get("deployment", "chat", "json"), kExitOk) << err_;
  EXPECT_EQ(Json::parse(out_), Json::parse(kChat));
  EXPECT_EQ(seen().back().target, "/api/v1/deployments/chat");
}

TEST_F(CtlTest, NotFoundIsExit1WithTheServersMessage) {
  EXPECT_EQ(Get("deployment", "nope"), kExitServerError);
  EXPECT_EQ(err_, "error: no GET /api/v1/deployments/nope\n");
  EXPECT_EQ(out_, "");
}

TEST_F(CtlTest, BadArgumentsAreExit2AndSendNothing) {
  EXPECT_EQ(Get("pods"), kExitUsage);
  EXPECT_THAT(err_, StartsWith("error: unknown kind 'pods'; known: "));
  EXPECT_EQ(Get("deployments", "", "yaml"), kExitUsage);
  EXPECT_EQ(Describe("gpu", "x"), kExitUsage);
  EXPECT_TRUE(seen().empty());
}

TEST_F(CtlTest, ApplySendsTheFileAndPrintsWhatWasDone) {
  const std::string text =
      "apiVersion: gpusched.io/v1\nkind: Deployment\nmetadata: {name: chat}\n"
      "---\napiVersion: gpusched.io/v1\nkind: Tenant\n"
      "metadata: {name: team-a}\n";
  ASSERT_EQ(Apply(text), kExitOk) << err_;
  EXPECT_EQ(out_, "deployment/chat created\ntenant/team-a configured\n");
  ASSERT_EQ(seen().size(), 1u);
  EXPECT_EQ(seen()[0].method, "POST");
  EXPECT_EQ(seen()[0].target, "/api/v1/apply");
  EXPECT_EQ(seen()[0].content_type, "application/yaml");
  EXPECT_EQ(seen()[0].body, text);
  EXPECT_EQ(seen()[0].authorization, "Bearer admin-secret");
}

TEST_F(CtlTest, InvalidManifestIsExit1WithEveryProblem) {
  EXPECT_EQ(Apply("kind: Deployment\nspec:\n  replicas: two\n"),
            kExitServerError);
  EXPECT_EQ(out_, "");
  EXPECT_EQ(err_,
            "error: invalid manifest\n"
            "  -:7: spec.replicas: must be an integer in 0..1000, got 'two'\n"
            "  -:12: spec.weight: must be > 0\n");
}

TEST_F(CtlTest, ApplyOfAMissingFileIsExit2) {
  EXPECT_EQ(Run([](const CtlOptions& o, std::ostream& out, std::ostream& err) {
              std::istringstream in;
              return RunApply(o, "/nonexistent/x.yaml", in, out, err);
            }),
            kExitUsage);
  EXPECT_EQ(err_,
            "error: cannot read /nonexistent/x.yaml: No such file or "
            "directory\n");
  EXPECT_TRUE(seen().empty());
}

TEST_F(CtlTest, WrongOrMissingKeyIsExit1) {
  o_.key = "wrong";
  EXPECT_EQ(Get("deployments"), kExitServerError);
  EXPECT_EQ(err_,
            "error: unknown API key\n"
            "hint: pass an admin key with --key KEY or $GPUSCHED_KEY "
            "(`gpusched serve` writes one to <key_dir>/admin.key)\n");
  EXPECT_EQ(seen().back().authorization, "Bearer wrong");
  o_.key = "";
  EXPECT_EQ(Get("deployments"), kExitServerError);
  EXPECT_EQ(seen().back().authorization, "");
}

TEST_F(CtlTest, UnreachableServerIsExit2) {
  const std::string url = o_.server;
  server_->Shutdown(std::chrono::milliseconds(100));
  server_.reset();
  EXPECT_EQ(Get("deployments"), kExitUsage);
  EXPECT_THAT(err_,
              StartsWith("error: cannot reach gpusched at " + url + ": "));
  EXPECT_THAT(err_, HasSubstr("\nhint: start it (`gpusched serve --config "
                              "FILE`), or point --server"));
  EXPECT_EQ(out_, "");
}

TEST_F(CtlTest, ServerUrlForms) {
  const std::string port = absl::StrCat(server_->port());
  for (const std::string& url :
       {"127.0.0.1:" + port, "http://localhost:" + port + "/"}) {
    o_.server = url;
    EXPECT_EQ(Get("gpus"), kExitOk) << url << ": " << err_;
  }
  o_.server = "https://127.0.0.1:" + port;
  EXPECT_EQ(Get("gpus"), kExitUsage);
  EXPECT_THAT(err_, HasSubstr("https is not supported"));
  o_.server = "http://127.0.0.1:99999";
  EXPECT_EQ(Get("gpus"), kExitUsage);
}

TEST_F(CtlTest, DescribeDeploymentShowsReplicasAndEvents) {
  ASSERT_EQ(Describe("deployment", "chat"), kExitOk) << err_;
  EXPECT_THAT(out_, HasSubstr("Name:        chat\n"));
  EXPECT_THAT(out_, HasSubstr("Labels:      team=search\n"));
  EXPECT_THAT(out_, HasSubstr("Created:     2026-11-29T23:10:00Z (5m ago)\n"));
  EXPECT_THAT(out_, HasSubstr("Resources:   250m GPU, 10Gi\n"));
  EXPECT_THAT(out_, HasSubstr("Replicas:    2 desired, 2 running, 1 ready\n"));
  EXPECT_THAT(out_, HasSubstr("Requests:    3 queued, 1 in flight\n"));
  EXPECT_THAT(out_, HasSubstr("  chat-1  pending  -   "));
  EXPECT_THAT(out_, HasSubstr("insufficient GPU milli\n"));
  // Events oldest first, under the replicas.
  const size_t applied = out_.find("deployment.applied");
  const size_t ready = out_.find("replica.ready");
  ASSERT_NE(applied, std::string::npos);
  ASSERT_NE(ready, std::string::npos);
  EXPECT_LT(out_.find("Replica list:"), out_.find("Events:"));
  EXPECT_LT(applied, ready);
  EXPECT_THAT(out_, HasSubstr("2026-11-29T23:11:01Z  replica.ready"));
  ASSERT_EQ(seen().size(), 2u);
  EXPECT_EQ(seen()[1].target, "/api/v1/events?deployment=chat&limit=10");
}

// Events the key may not read leave the rest of the view, and exit 0.
TEST_F(CtlTest, DescribeTenantWithoutEvents) {
  ASSERT_EQ(Describe("tenant", "team-a"), kExitOk) << err_;
  EXPECT_THAT(out_, HasSubstr("Models:    chat\n"));
  EXPECT_THAT(out_, HasSubstr("Weight:    2.5\n"));
  EXPECT_THAT(out_, HasSubstr("Limits:    requestsPerMinute=60 maxQueued=0\n"));
  EXPECT_THAT(out_, HasSubstr("Events: (unavailable: no GET "
                              "/api/v1/events?tenant=team-a&limit=10)\n"));
}

TEST_F(CtlTest, DeleteByNameAndByFile) {
  ASSERT_EQ(Run([](const CtlOptions& o, std::ostream& out, std::ostream& err) {
              return RunDelete(o, "deployments", "chat", out, err);
            }),
            kExitOk)
      << err_;
  EXPECT_EQ(out_, "deployment/chat deleted\n");
  EXPECT_EQ(seen().back().method, "DELETE");

  const std::string text = "apiVersion: gpusched.io/v1\nkind: Deployment\n";
  ASSERT_EQ(Run([&](const CtlOptions& o, std::ostream& out, std::ostream& err) {
              std::istringstream in(text);
              return RunDeleteFile(o, "-", in, out, err);
            }),
            kExitOk)
      << err_;
  EXPECT_EQ(out_, "deployment/chat deleted\n");
  EXPECT_EQ(seen().back().method, "POST");
  EXPECT_EQ(seen().back().target, "/api/v1/delete");
  EXPECT_EQ(seen().back().body, text);
}

TEST_F(CtlTest, LogsPassesTheQueryAndPrintsTheText) {
  LogsQuery q{
      .deployment = "chat", .replica = "chat-1", .stream = "stdout", .tail = 5};
  ASSERT_EQ(Run([&](const CtlOptions& o, std::ostream& out, std::ostream& err) {
              return RunLogs(o, q, out, err);
            }),
            kExitOk)
      << err_;
  EXPECT_EQ(out_, "line 1\nline 2\n");
  EXPECT_EQ(seen().back().target,
            "/api/v1/deployments/chat/logs?replica=chat-1&stream=stdout&"
            "tail=5");
  q.stream = "both";
  EXPECT_EQ(Run([&](const CtlOptions& o, std::ostream& out, std::ostream& err) {
              return RunLogs(o, q, out, err);
            }),
            kExitUsage);
}

TEST_F(CtlTest, EventsOldestFirst) {
  EventsQuery q;
  q.deployment = "chat";
  q.kinds = {"replica.ready", "deployment.applied"};
  q.limit = 5;
  ASSERT_EQ(Run([&](const CtlOptions& o, std::ostream& out, std::ostream& err) {
              return RunEvents(o, q, "table", out, err);
            }),
            kExitOk)
      << err_;
  EXPECT_EQ(out_,
            "TIME                  KIND                DEPLOYMENT  MESSAGE\n"
            "2026-11-29T23:10:00Z  deployment.applied  chat        chat "
            "created\n"
            "2026-11-29T23:11:01Z  replica.ready       chat        chat-0 "
            "ready on 127.0.0.1:41234 after 0.41 s\n");
}

}  // namespace
}  // namespace gpusched::cli

namespace gpusched::cli {
namespace {

// Every kind apply takes, by each of its names: get, describe (with the
// object's events) and delete.
TEST_F(CtlTest, RoutesAnswerToEveryNameOfTheirKind) {
  for (const char* kind :
       {"route", "routes", "modelroute", "ModelRoutes", "MODELROUTE"}) {
    SCOPED_TRACE(kind);
    ASSERT_EQ(Get(kind), kExitOk) << err_;
    EXPECT_EQ(out_,
              "NAME       VERSIONS     STICKY   ROLLOUT          AGE\n"
              "assistant  1=90% 2=10%  session  progressing 1/2  15m\n");
    ASSERT_EQ(Describe(kind, "assistant"), kExitOk) << err_;
    EXPECT_THAT(out_, HasSubstr("Route:     assistant\n"));
    EXPECT_THAT(out_, HasSubstr("Canary:    chat-v2 (stable chat-v1)\n"));
    EXPECT_THAT(out_, HasSubstr("Created:     2026-11-29T23:00:00Z (15m ago)"));
    EXPECT_THAT(out_, HasSubstr("replica.ready"));
    EXPECT_EQ(seen().back().target,
              "/api/v1/events?deployment=assistant&limit=10");
    ASSERT_EQ(
        Run([&](const CtlOptions& o, std::ostream& out, std::ostream& err) {
          return RunDelete(o, kind, "assistant", out, err);
        }),
        kExitOk)
        << err_;
    EXPECT_EQ(out_, "modelroute/assistant deleted\n");
  }
  ASSERT_EQ(Get("deploy", "chat"), kExitOk) << err_;
  EXPECT_EQ(Describe("replicas", "chat-0"), kExitUsage);
  EXPECT_EQ(err_,
            "error: unknown kind 'replicas': want deployment, tenant or "
            "route\n");
}

TEST_F(CtlTest, RolloutStatusAtAManualStepSaysItWaitsForPromote) {
  ASSERT_EQ(Run([](const CtlOptions& o, std::ostream& out, std::ostream& err) {
              return RunRollout(o, "status", "assistant", "", out, err);
            }),
            kExitOk)
      << err_;
  EXPECT_THAT(out_, HasSubstr("Phase:     progressing, step 1 of 2"));
  EXPECT_THAT(out_, HasSubstr("Next step: a manual step: waits for `gpusched "
                              "rollout promote assistant`\n"));
  EXPECT_THAT(out_, HasSubstr("Reason:    first look\n"));
}

TEST_F(CtlTest, AParkedStableSaysWhichRouteParkedIt) {
  ASSERT_EQ(Get("deployment", "old"), kExitOk) << err_;
  EXPECT_THAT(out_, HasSubstr("old   0 (parked by route assistant)  0/0 "));
  ASSERT_EQ(Describe("deployment", "old"), kExitOk) << err_;
  EXPECT_THAT(out_, HasSubstr("Replicas:    0 desired (parked by route "
                              "assistant; spec.replicas 1 when unparked), 0 "
                              "running, 0 ready\n"));
}

// One problem is printed once, located in the file the user named.
TEST_F(CtlTest, ProblemsNameTheFileAndArePrintedOnce) {
  const std::string path = ::testing::TempDir() + "/lost.yaml";
  {
    std::ofstream f(path);
    f << "kind: ModelRoute\nmetadata: {name: lost}\n";
  }
  EXPECT_EQ(Run([&](const CtlOptions& o, std::ostream& out, std::ostream& err) {
              std::istringstream in;
              return RunApply(o, path, in, out, err);
            }),
            kExitServerError);
  EXPECT_EQ(err_,
            "error: " + path + ":1: ModelRoute/lost: unknown deployment\n");
  EXPECT_EQ(Apply("kind: ModelRoute\nmetadata: {name: lost}\n"),
            kExitServerError);
  EXPECT_EQ(err_, "error: stdin:1: ModelRoute/lost: unknown deployment\n");
}

TEST(FlagSuggestionsTest, NamesTheNearFlagOfTheChosenCommand) {
  struct Case {
    std::vector<std::string> argv;
    std::string want;
  };
  const std::vector<Case> cases = {
      {{"gpusched", "events", "--limt", "5"},
       "error: unknown flag --limt; did you mean --limit?\n"},
      {{"gpusched", "logs", "chat", "--tial=5"},
       "error: unknown flag --tial; did you mean --tail?\n"},
      {{"gpusched", "get", "routes", "--sever", "x"},
       "error: unknown flag --sever; did you mean --server?\n"},
      {{"gpusched", "events", "--completely-else"}, ""},
  };
  for (const Case& c : cases) {
    CLI::App app;
    AddCtlCommands(app);
    std::vector<const char*> argv;
    for (const std::string& a : c.argv) argv.push_back(a.c_str());
    std::vector<std::string> args(c.argv.rbegin(), c.argv.rend() - 1);
    try {
      app.parse(args);
    } catch (const CLI::ParseError&) {
    }
    EXPECT_EQ(FlagSuggestions(app, static_cast<int>(argv.size()), argv.data()),
              c.want)
        << c.argv[2];
  }
}

}  // namespace
}  // namespace gpusched::cli
