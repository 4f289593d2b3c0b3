#include "api/alerts.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "net/http_server.h"

namespace gpusched::api {
namespace {

using ::testing::HasSubstr;

constexpr char kAnswer[] = R"({"status":"success","data":{"alerts":[
 {"labels":{"alertname":"GpuschedGpuUnhealthy","severity":"critical","node":"n1","gpu":"1"},
  "annotations":{"summary":"GPU 1 of node n1 is unhealthy","description":"d1",
                 "runbook_url":"docs/runbooks.md#gpuschedgpuunhealthy"},
  "state":"firing","activeAt":"2026-12-06T05:00:00Z","value":"0e+00"},
 {"labels":{"alertname":"GpuschedDeploymentIdle","severity":"info","deployment":"x"},
  "annotations":{"runbook_url":"https://example.org/r#idle"},
  "state":"firing","activeAt":"2026-12-06T04:00:00Z","value":"1e+00"},
 {"labels":{"alertname":"GpuschedReplicaCrashLooping","severity":"warning","deployment":"b"},
  "annotations":{},"state":"firing","activeAt":"t","value":"3"},
 {"labels":{"alertname":"GpuschedReplicaCrashLooping","severity":"warning","deployment":"a"},
  "annotations":{},"state":"firing","activeAt":"t","value":"3"},
 {"labels":{"alertname":"GpuschedSloBurnFast","severity":"critical"},
  "annotations":{},"state":"pending","activeAt":"t","value":"20"}
]}})";

TEST(ParsePrometheusAlertsTest, FiringOnlyBySeverityThenName) {
  auto got =
      ParsePrometheusAlerts(kAnswer, "https://docs.example/gpusched/", 10);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->items.size(), 4u);
  EXPECT_EQ(got->pending, 1);
  EXPECT_EQ(got->omitted, 0);
  const FiringAlert& gpu = got->items[0];
  EXPECT_EQ(gpu.name, "GpuschedGpuUnhealthy");
  EXPECT_EQ(gpu.severity, "critical");
  EXPECT_EQ(gpu.labels.at("node"), "n1");
  EXPECT_FALSE(gpu.labels.contains("alertname"));
  EXPECT_EQ(gpu.summary, "GPU 1 of node n1 is unhealthy");
  EXPECT_EQ(gpu.active_at, "2026-12-06T05:00:00Z");
  // A relative runbook_url gets the base; an absolute one is kept.
  EXPECT_EQ(gpu.runbook_url,
            "https://docs.example/gpusched/docs/runbooks.md"
            "#gpuschedgpuunhealthy");
  EXPECT_EQ(got->items[1].labels.at("deployment"), "a");
  EXPECT_EQ(got->items[2].labels.at("deployment"), "b");
  EXPECT_EQ(got->items[3].runbook_url, "https://example.org/r#idle");
}

TEST(ParsePrometheusAlertsTest, BoundedList) {
  auto got = ParsePrometheusAlerts(kAnswer, "", 2);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->items.size(), 2u);
  EXPECT_EQ(got->omitted, 2);
  EXPECT_EQ(got->items[0].runbook_url, "docs/runbooks.md#gpuschedgpuunhealthy");
}

TEST(ParsePrometheusAlertsTest, BadAnswers) {
  struct Case {
    const char* body;
    const char* error;
  };
  for (const Case& c : std::vector<Case>{
           {"not json", "not JSON"},
           {"[1]", "not JSON"},
           {R"({"status":"error","error":"boom"})", "boom"},
           {R"({"status":"success","data":{}})", "no data.alerts"},
           {R"({"status":"success","data":{"alerts":{}}})", "no data.alerts"},
       }) {
    auto got = ParsePrometheusAlerts(c.body, "", 10);
    ASSERT_FALSE(got.ok()) << c.body;
    EXPECT_THAT(std::string(got.status().message()), HasSubstr(c.error))
        << c.body;
  }
}

TEST(AlertsSourceTest, BadUrlsNameTheField) {
  for (const char* url :
       {"", "127.0.0.1:9090", "https://127.0.0.1:9090", "http://host",
        "http://:9090", "http://host:0", "http://host:70000"}) {
    auto s = AlertsSource::Create({.prometheus_url = url});
    ASSERT_FALSE(s.ok()) << url;
    EXPECT_THAT(std::string(s.status().message()),
                HasSubstr("alerts.prometheus_url"))
        << url;
  }
}

// A free port nobody listens on: bound, then closed.
int ClosedPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t n = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n);
  close(fd);
  return ntohs(a.sin_port);
}

TEST(AlertsSourceTest, UnreachableIsAnError) {
  const std::string url = "http://127.0.0.1:" + std::to_string(ClosedPort());
  auto s = AlertsSource::Create({.prometheus_url = url});
  ASSERT_TRUE(s.ok()) << s.status();
  auto got = (*s)->Firing();
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(got.status().message()), HasSubstr(url));
}

// A peer that accepts (the kernel's backlog) and never answers: the call
// ends with an error after its timeout, it does not hang.
TEST(AlertsSourceTest, SilentPeerTimesOut) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(listen(fd, 4), 0);
  socklen_t n = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n);
  auto s =
      AlertsSource::Create({.prometheus_url = "http://127.0.0.1:" +
                                              std::to_string(ntohs(a.sin_port)),
                            .timeout = 200 * kMicrosPerMilli});
  ASSERT_TRUE(s.ok()) << s.status();
  auto got = (*s)->Firing();
  close(fd);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable);
}

class FakePrometheus {
 public:
  explicit FakePrometheus(std::string body, unsigned status = 200) {
    auto s = net::HttpServer::Start(
        {}, [body, status, this](net::HttpRequest req,
                                 std::shared_ptr<net::Responder> r) {
          target_ = std::string(req.target());
          net::HttpResponse res{static_cast<net::http::status>(status),
                                req.version()};
          res.body() = body;
          res.prepare_payload();
          r->Send(std::move(res));
        });
    EXPECT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
  }
  std::string url() const {
    return "http://127.0.0.1:" + std::to_string(server_->port());
  }
  std::string target_;

 private:
  std::unique_ptr<net::HttpServer> server_;
};

TEST(AlertsSourceTest, ReadsFiringAlerts) {
  FakePrometheus prometheus(kAnswer);
  auto s = AlertsSource::Create({.prometheus_url = prometheus.url() + "/prom/",
                                 .runbook_base_url = "https://d/"});
  ASSERT_TRUE(s.ok()) << s.status();
  auto got = (*s)->Firing();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(prometheus.target_, "/prom/api/v1/alerts");
  ASSERT_EQ(got->items.size(), 4u);
  EXPECT_EQ(got->items[0].runbook_url,
            "https://d/docs/runbooks.md#gpuschedgpuunhealthy");
  const nlohmann::json j = FiringAlertsJson(*got, prometheus.url());
  EXPECT_EQ(j["items"][0]["name"], "GpuschedGpuUnhealthy");
  EXPECT_EQ(j["items"][0]["labels"]["gpu"], "1");
  EXPECT_EQ(j["pending"], 1);
}

TEST(AlertsSourceTest, ErrorStatusAndOversizedBody) {
  {
    FakePrometheus prometheus("{}", 503);
    auto s = AlertsSource::Create({.prometheus_url = prometheus.url()});
    ASSERT_TRUE(s.ok());
    auto got = (*s)->Firing();
    ASSERT_FALSE(got.ok());
    EXPECT_THAT(std::string(got.status().message()), HasSubstr("HTTP 503"));
  }
  {
    FakePrometheus prometheus(std::string(64 * 1024, ' ') + kAnswer);
    auto s = AlertsSource::Create(
        {.prometheus_url = prometheus.url(), .max_bytes = 16 * 1024});
    ASSERT_TRUE(s.ok());
    auto got = (*s)->Firing();
    ASSERT_FALSE(got.ok());
    EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable);
  }
}

}  // namespace
}  // namespace gpusched::api
