// HaMetrics: the metrics of an installation's own availability
// (docs/metrics.md, "HA"): whether this instance leads, leadership changes,
// lease renewals, the store's round trips and errors, its reachability and
// the watch's lag. Hooked to the store's round-trip observer and the
// election's renewal observer; gauges are read at each scrape.
// Thread-safe (the registry's cells are).
#ifndef GPUSCHED_API_HA_METRICS_H_
#define GPUSCHED_API_HA_METRICS_H_

#include "metrics/registry.h"
#include "store/election.h"
#include "store/etcd_store.h"
#include "store/store.h"

namespace gpusched::api {

class HaMetrics {
 public:
  // Registers the families in `registry`; `store` and `election` outlive
  // the registry's scrapes (`etcd` is the store when it is etcd, else null).
  HaMetrics(metrics::Registry* registry, store::Store* store,
            store::EtcdStore* etcd, store::Election* election);
  ~HaMetrics() { Detach(); }
  HaMetrics(const HaMetrics&) = delete;
  HaMetrics& operator=(const HaMetrics&) = delete;
  // Stops observing (before the store or the election go away).
  void Detach();

 private:
  metrics::CounterFamily* store_requests_;
  metrics::HistogramFamily* store_seconds_;
  metrics::HistogramFamily* renewal_seconds_;
  metrics::CounterFamily* renewals_;
  store::Store* store_;
  store::Election* election_;
};

}  // namespace gpusched::api

#endif  // GPUSCHED_API_HA_METRICS_H_
