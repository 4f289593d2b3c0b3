#include "api/ha_metrics.h"

#include <string>

namespace gpusched::api {

HaMetrics::HaMetrics(metrics::Registry* r, store::Store* store,
                     store::EtcdStore* etcd, store::Election* election)
    : store_(store), election_(election) {
  store_requests_ = r->AddCounter(
      "gpusched_store_requests_total",
      "Round trips to the store (etcd), by call and result (ok, error: no "
      "answer or an error answer).",
      {"op", "result"});
  store_seconds_ =
      r->AddHistogram("gpusched_store_request_seconds",
                      "Seconds a round trip to the store (etcd) took, by call.",
                      {"op"}, metrics::ExponentialBuckets(0.0005, 2, 14));
  renewal_seconds_ = r->AddHistogram(
      "gpusched_lease_renewal_seconds",
      "Seconds a renewal of this instance's lease took (answered ones).", {},
      metrics::ExponentialBuckets(0.0005, 2, 14));
  renewals_ = r->AddCounter(
      "gpusched_lease_renewals_total",
      "Renewals of this instance's lease, by result (ok, failed).", {"result"});
  r->AddCollector(
      {{"gpusched_leader",
        "1 while this instance leads and acts (runs the controller), else 0.",
        metrics::MetricType::kGauge,
        {}},
       {"gpusched_leader_transitions_total",
        "Times this instance became the leader (elected) or stopped being it "
        "(lost).",
        metrics::MetricType::kCounter,
        {"change"}},
       {"gpusched_leader_term",
        "The term of the leader this instance knows (the election key's "
        "revision; 0 when none leads).",
        metrics::MetricType::kGauge,
        {}},
       {"gpusched_instances",
        "Instances registered in the store (live leases).",
        metrics::MetricType::kGauge,
        {}},
       {"gpusched_store_reachable",
        "1 while the store answers, 0 while this instance serves from its "
        "last known state.",
        metrics::MetricType::kGauge,
        {"store"}},
       {"gpusched_store_watch_lag_seconds",
        "Seconds this instance's last write waited for the store's watch to "
        "bring it back (etcd).",
        metrics::MetricType::kGauge,
        {}}},
      [this, etcd](std::vector<std::vector<metrics::Sample>>* out) {
        const store::Leadership lead = election_->Current();
        const store::ElectionStats s = election_->Stats();
        (*out)[0].push_back({{}, lead.acting ? 1.0 : 0.0});
        (*out)[1].push_back({{"elected"}, static_cast<double>(s.elected)});
        (*out)[1].push_back({{"lost"}, static_cast<double>(s.lost)});
        const std::optional<store::LeaderInfo> leader = election_->Leader();
        (*out)[2].push_back({{}, leader ? double(leader->term) : 0.0});
        (*out)[3].push_back(
            {{}, static_cast<double>(election_->Instances().size())});
        const store::StoreHealth h = store_->Health();
        (*out)[4].push_back({{h.kind}, h.reachable ? 1.0 : 0.0});
        if (etcd != nullptr)
          (*out)[5].push_back({{}, etcd->last_watch_lag_s()});
      });
  store->SetRoundTripObserver(
      [this](std::string_view op, double seconds, bool ok) {
        store_requests_->With({std::string(op), ok ? "ok" : "error"})->Add();
        if (ok) store_seconds_->With({std::string(op)})->Observe(seconds);
      });
  election->SetRenewalObserver([this](double seconds, bool ok) {
    renewals_->With({ok ? "ok" : "failed"})->Add();
    if (ok) renewal_seconds_->With({})->Observe(seconds);
  });
}

void HaMetrics::Detach() {
  store_->SetRoundTripObserver(nullptr);
  election_->SetRenewalObserver(nullptr);
}

}  // namespace gpusched::api
