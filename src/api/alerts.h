// Alerts: the alerts a Prometheus reports firing, for GET /api/v1/alerts,
// the dashboard's alerts panel and `gpusched get alerts` (docs/runbooks.md,
// "Firing alerts in gpusched"). gpusched evaluates no rule itself: the
// shipped rules (deploy/prometheus/) run in Prometheus, and this asks
// Prometheus' GET /api/v1/alerts what fires now.
//
// Every call is bounded: one HTTP exchange whose every step waits at most
// `timeout`, a body of at most `max_bytes`, at most `max_alerts` alerts
// (the rest counted, not listed) and label and annotation values cut at
// 4 KiB. An unreachable or failing Prometheus is an Unavailable error that
// names the URL and what failed, never a hang.
//
// Thread-safe: each call makes its own connection. Owned by `gpusched
// serve` (one per process, when alerts.prometheus_url is set).
#ifndef GPUSCHED_API_ALERTS_H_
#define GPUSCHED_API_ALERTS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "net/http_client.h"
#include "nlohmann/json.hpp"

namespace gpusched::api {

struct AlertsOptions {
  std::string prometheus_url;    // http://host:port[/prefix]
  std::string runbook_base_url;  // prefixed to relative runbook_url's
  Micros timeout = 2 * kMicrosPerSecond;
  int max_alerts = 500;
  size_t max_bytes = 4 << 20;
};

struct FiringAlert {
  std::string name;      // labels.alertname
  std::string severity;  // labels.severity ("" when none)
  std::string active_at;
  std::string summary, description, runbook_url;  // annotations
  std::map<std::string, std::string> labels;      // all but alertname
};

struct FiringAlerts {
  std::vector<FiringAlert> items;  // critical, warning, info, other; by name
  int64_t omitted = 0;             // firing beyond max_alerts
  int64_t pending = 0;             // pending (not yet firing), not listed
};

// Parses the body of Prometheus' GET /api/v1/alerts; pure. `runbook_base`
// prefixes runbook_url's that are not absolute (no "scheme://").
absl::StatusOr<FiringAlerts> ParsePrometheusAlerts(
    std::string_view body, const std::string& runbook_base, int max_alerts);

nlohmann::json FiringAlertsJson(const FiringAlerts& alerts,
                                const std::string& source);

class AlertsSource {
 public:
  // InvalidArgument naming alerts.prometheus_url when it is not an
  // http://host:port URL.
  static absl::StatusOr<std::unique_ptr<AlertsSource>> Create(
      AlertsOptions options);

  // Asks Prometheus now.
  absl::StatusOr<FiringAlerts> Firing() const;
  const AlertsOptions& options() const { return options_; }

 private:
  AlertsSource(AlertsOptions options, std::unique_ptr<net::HttpClient> client,
               std::string path)
      : options_(std::move(options)),
        client_(std::move(client)),
        path_(std::move(path)) {}
  AlertsOptions options_;
  std::unique_ptr<net::HttpClient> client_;
  std::string path_;  // the URL's path prefix + /api/v1/alerts
};

}  // namespace gpusched::api

#endif  // GPUSCHED_API_ALERTS_H_
