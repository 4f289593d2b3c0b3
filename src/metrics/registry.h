// A metrics registry: counters, gauges and histograms with label sets, plus
// collectors evaluated at scrape time, exposed in the Prometheus text format
// (version 0.0.4).
//
// Hot path: a family hands out a pointer to the cell of one label tuple
// (Family::With); the caller keeps that pointer and updates it with one
// atomic operation per call (a histogram: a bucket search over a few
// bounds, then three atomic adds). Only With() takes the family's mutex;
// cells live as long as the registry.
//
// Bounded labels: label values must come from a bounded set (deployment,
// tenant, node and GPU names, priority classes, reject reasons, placement
// plugin reasons), never from request data. As a last guard, a family holds
// at most `max_series` label tuples (default 10,000); With() beyond that
// returns one shared overflow cell whose label values are all "_overflow",
// so a runaway label never grows memory or the exposition without bound.
//
// Collectors: families whose samples are computed at each scrape by a
// callback (gauges read from other components' state). One callback fills
// several families, so a component takes its lock once per scrape.
//
// Thread-safety: everything is thread-safe. Collector callbacks run on the
// scraping thread, without registry locks held.
#ifndef GPUSCHED_METRICS_REGISTRY_H_
#define GPUSCHED_METRICS_REGISTRY_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace gpusched::metrics {

enum class MetricType { kCounter, kGauge, kHistogram };
const char* TypeName(MetricType type);

using LabelValues = std::vector<std::string>;

// A monotonically increasing value.
class Counter {
 public:
  void Add(double v = 1) { value_.fetch_add(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// A value that goes up and down.
class Gauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Add(double v) { value_.fetch_add(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// Observations counted in fixed buckets (upper bounds, ascending; +Inf is
// implicit). Each bucket counts only its own range; the exposition makes
// them cumulative.
class Histogram {
 public:
  explicit Histogram(const std::vector<double>* bounds);
  void Observe(double v);

  struct Snapshot {
    std::vector<uint64_t> cumulative;  // per bound, then +Inf
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot snapshot() const;

 private:
  const std::vector<double>* bounds_;                // owned by the family
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // bounds + 1
  std::atomic<double> sum_{0};
};

struct FamilyDesc {
  std::string name;
  std::string help;
  MetricType type = MetricType::kGauge;
  std::vector<std::string> labels;
};

// One label tuple's value, from a collector.
struct Sample {
  LabelValues labels;
  double value = 0;
};

// The cells of one metric name, one per label tuple.
template <typename Cell>
class Family {
 public:
  // The cell for `values` (one per label name), created at first use.
  Cell* With(const LabelValues& values);
  const FamilyDesc& desc() const { return desc_; }

 private:
  friend class Registry;
  Family(FamilyDesc desc, size_t max_series, std::vector<double> bounds = {});
  std::unique_ptr<Cell> NewCell();
  // Cells in label order, for the exposition.
  std::vector<std::pair<LabelValues, const Cell*>> Cells();

  FamilyDesc desc_;
  size_t max_series_;
  std::vector<double> bounds_;  // histograms
  absl::Mutex mu_;
  std::map<LabelValues, std::unique_ptr<Cell>> cells_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<Cell> overflow_ ABSL_GUARDED_BY(mu_);
};

using CounterFamily = Family<Counter>;
using GaugeFamily = Family<Gauge>;
using HistogramFamily = Family<Histogram>;

// Fills one vector of samples per family, in the order they were declared.
using CollectFn = std::function<void(std::vector<std::vector<Sample>>*)>;

class Registry {
 public:
  explicit Registry(size_t max_series = 10000) : max_series_(max_series) {}
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // A name registered twice is a programming error (CHECK).
  CounterFamily* AddCounter(const std::string& name, const std::string& help,
                            std::vector<std::string> labels = {});
  GaugeFamily* AddGauge(const std::string& name, const std::string& help,
                        std::vector<std::string> labels = {});
  HistogramFamily* AddHistogram(const std::string& name,
                                const std::string& help,
                                std::vector<std::string> labels,
                                std::vector<double> bounds);
  // Families (counters or gauges) whose samples `fn` computes per scrape.
  void AddCollector(std::vector<FamilyDesc> families, CollectFn fn);

  // The text exposition of every family, in registration order; every
  // family has HELP and TYPE lines, even with no samples yet.
  std::string Expose();

 private:
  struct Collector {
    std::vector<FamilyDesc> families;
    CollectFn fn;
  };
  struct Entry {  // exactly one is set
    CounterFamily* counter = nullptr;
    GaugeFamily* gauge = nullptr;
    HistogramFamily* histogram = nullptr;
    Collector* collector = nullptr;
  };
  void Reserve(const std::string& name) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  size_t max_series_;
  absl::Mutex mu_;
  // The families themselves are never removed.
  std::vector<Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> names_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<CounterFamily>> counters_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<GaugeFamily>> gauges_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<HistogramFamily>> histograms_
      ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Collector>> collectors_ ABSL_GUARDED_BY(mu_);
};

// Exposition helpers (exposed for tests).
// A label value with \, " and newline escaped.
std::string EscapeLabelValue(const std::string& v);
// A HELP text with \ and newline escaped.
std::string EscapeHelp(const std::string& v);
// A sample value: integers without a decimal point, others in the shortest
// form that reads back exactly; NaN, +Inf, -Inf.
std::string FormatValue(double v);

// Bucket bounds for durations in seconds.
std::vector<double> ExponentialBuckets(double start, double factor, int count);

}  // namespace gpusched::metrics

#endif  // GPUSCHED_METRICS_REGISTRY_H_
