#include "api/alerts.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status.h"

namespace gpusched::api {

namespace {

using json = nlohmann::json;

constexpr size_t kMaxValue = 4096;  // one label or annotation value

int SeverityRank(const std::string& s) {
  if (s == "critical") return 0;
  if (s == "warning") return 1;
  if (s == "info") return 2;
  return 3;
}

std::string Str(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return "";
  std::string s = it->get<std::string>();
  if (s.size() > kMaxValue) s.resize(kMaxValue);
  return s;
}

}  // namespace

absl::StatusOr<FiringAlerts> ParsePrometheusAlerts(
    std::string_view body, const std::string& runbook_base, int max_alerts) {
  const json j = json::parse(body.begin(), body.end(), nullptr,
                             /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(
        "Prometheus' /api/v1/alerts answer is not JSON");
  }
  if (Str(j, "status") != "success") {
    return absl::UnavailableError(absl::StrCat("Prometheus answered status \"",
                                               Str(j, "status"),
                                               "\": ", Str(j, "error")));
  }
  const json* alerts = nullptr;
  if (auto d = j.find("data"); d != j.end() && d->is_object()) {
    if (auto a = d->find("alerts"); a != d->end() && a->is_array()) {
      alerts = &*a;
    }
  }
  if (alerts == nullptr) {
    return absl::InvalidArgumentError(
        "Prometheus' /api/v1/alerts answer has no data.alerts list");
  }
  FiringAlerts out;
  for (const json& a : *alerts) {
    if (!a.is_object()) continue;
    const std::string state = Str(a, "state");
    if (state != "firing") {
      if (state == "pending") ++out.pending;
      continue;
    }
    FiringAlert f;
    if (auto l = a.find("labels"); l != a.end() && l->is_object()) {
      for (auto it = l->begin(); it != l->end(); ++it) {
        if (!it.value().is_string()) continue;
        std::string v = it.value().get<std::string>();
        if (v.size() > kMaxValue) v.resize(kMaxValue);
        if (it.key() == "alertname") {
          f.name = std::move(v);
        } else {
          if (it.key() == "severity") f.severity = v;
          f.labels[it.key()] = std::move(v);
        }
      }
    }
    if (auto n = a.find("annotations"); n != a.end() && n->is_object()) {
      f.summary = Str(*n, "summary");
      f.description = Str(*n, "description");
      f.runbook_url = Str(*n, "runbook_url");
    }
    if (!f.runbook_url.empty() && !absl::StrContains(f.runbook_url, "://")) {
      f.runbook_url = absl::StrCat(runbook_base, f.runbook_url);
    }
    f.active_at = Str(a, "activeAt");
    out.items.push_back(std::move(f));
  }
  auto key = [](const FiringAlert& f) { return std::tie(f.name, f.labels); };
  std::sort(out.items.begin(), out.items.end(),
            [&](const FiringAlert& a, const FiringAlert& b) {
              const int ra = SeverityRank(a.severity);
              const int rb = SeverityRank(b.severity);
              return ra != rb ? ra < rb : key(a) < key(b);
            });
  if (static_cast<int>(out.items.size()) > max_alerts) {
    out.omitted = static_cast<int64_t>(out.items.size()) - max_alerts;
    out.items.resize(max_alerts);
  }
  return out;
}

json FiringAlertsJson(const FiringAlerts& alerts, const std::string& source) {
  json items = json::array();
  for (const FiringAlert& f : alerts.items) {
    items.push_back({{"name", f.name},
                     {"severity", f.severity},
                     {"activeAt", f.active_at},
                     {"summary", f.summary},
                     {"description", f.description},
                     {"runbookUrl", f.runbook_url},
                     {"labels", f.labels}});
  }
  return {{"source", source},
          {"items", items},
          {"omitted", alerts.omitted},
          {"pending", alerts.pending}};
}

absl::StatusOr<std::unique_ptr<AlertsSource>> AlertsSource::Create(
    AlertsOptions options) {
  const std::string& url = options.prometheus_url;
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat("alerts.prometheus_url: ", why, ", got '", url, "'"));
  };
  constexpr absl::string_view kScheme = "http://";
  if (!absl::StartsWith(url, kScheme)) {
    return bad("must be an http://host:port URL (https is not supported)");
  }
  const std::string rest = url.substr(kScheme.size());
  const size_t slash = rest.find('/');
  const std::string authority = rest.substr(0, slash);
  std::string prefix = slash == std::string::npos ? "" : rest.substr(slash);
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  const size_t colon = authority.rfind(':');
  uint32_t port = 0;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(authority.substr(colon + 1), &port) || port == 0 ||
      port > 65535) {
    return bad("needs a host and a port 1..65535");
  }
  std::string host = authority.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (options.max_alerts < 1) return bad("max_alerts must be >= 1");
  net::HttpClientOptions h;
  h.host = host;
  h.port = static_cast<uint16_t>(port);
  h.timeout = options.timeout;
  h.max_body = options.max_bytes;
  h.peer = absl::StrCat("Prometheus ", url);
  ASSIGN_OR_RETURN(std::unique_ptr<net::HttpClient> client,
                   net::HttpClient::Create(std::move(h)));
  std::string path = absl::StrCat(prefix, "/api/v1/alerts");
  return std::unique_ptr<AlertsSource>(
      new AlertsSource(std::move(options), std::move(client), std::move(path)));
}

absl::StatusOr<FiringAlerts> AlertsSource::Firing() const {
  auto res = client_->Request("GET", path_, {{"Accept", "application/json"}});
  if (!res.ok()) {
    return absl::UnavailableError(
        absl::StrCat("cannot read alerts from Prometheus at ",
                     options_.prometheus_url, ": ", res.status().message()));
  }
  if (res->body.size() > options_.max_bytes) {
    return absl::UnavailableError(absl::StrCat(
        "Prometheus at ", options_.prometheus_url, " answered ",
        res->body.size(), " bytes, over the bound of ", options_.max_bytes));
  }
  if (res->status != 200) {
    return absl::UnavailableError(absl::StrCat(
        "Prometheus at ", options_.prometheus_url, " answered HTTP ",
        res->status, " to GET ", path_, ": ", res->body.substr(0, 200)));
  }
  auto parsed = ParsePrometheusAlerts(res->body, options_.runbook_base_url,
                                      options_.max_alerts);
  if (!parsed.ok()) {
    return absl::UnavailableError(absl::StrCat("Prometheus at ",
                                               options_.prometheus_url, ": ",
                                               parsed.status().message()));
  }
  return parsed;
}

}  // namespace gpusched::api
