#include "metrics/registry.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/check.h"

namespace gpusched::metrics {

const char* TypeName(MetricType type) {
  switch (type) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
  }
  return "untyped";
}

// --- Cells ------------------------------------------------------------------

Histogram::Histogram(const std::vector<double>* bounds)
    : bounds_(bounds), counts_(new std::atomic<uint64_t>[bounds->size() + 1]) {
  for (size_t i = 0; i <= bounds_->size(); ++i) counts_[i].store(0);
}

void Histogram::Observe(double v) {
  // Buckets are few (~15): a linear scan beats a binary search here.
  size_t i = 0;
  const size_t n = bounds_->size();
  while (i < n && v > (*bounds_)[i]) ++i;
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot s;
  uint64_t total = 0;
  for (size_t i = 0; i <= bounds_->size(); ++i) {
    total += counts_[i].load(std::memory_order_relaxed);
    s.cumulative.push_back(total);
  }
  // The count is the +Inf bucket, so count and buckets always agree.
  s.count = total;
  s.sum = sum_.load(std::memory_order_relaxed);
  return s;
}

// --- Families ---------------------------------------------------------------

template <typename Cell>
Family<Cell>::Family(FamilyDesc desc, size_t max_series,
                     std::vector<double> bounds)
    : desc_(std::move(desc)),
      max_series_(max_series),
      bounds_(std::move(bounds)) {}

template <typename Cell>
std::unique_ptr<Cell> Family<Cell>::NewCell() {
  if constexpr (std::is_same_v<Cell, Histogram>) {
    return std::make_unique<Histogram>(&bounds_);
  } else {
    return std::make_unique<Cell>();
  }
}

template <typename Cell>
Cell* Family<Cell>::With(const LabelValues& values) {
  CHECK(values.size() == desc_.labels.size())
      << desc_.name << ": " << values.size() << " label values for "
      << desc_.labels.size() << " labels";
  absl::MutexLock lock(&mu_);
  auto it = cells_.find(values);
  if (it != cells_.end()) return it->second.get();
  if (cells_.size() >= max_series_) {
    if (!overflow_) overflow_ = NewCell();
    return overflow_.get();
  }
  return cells_.emplace(values, NewCell()).first->second.get();
}

template <typename Cell>
std::vector<std::pair<LabelValues, const Cell*>> Family<Cell>::Cells() {
  absl::MutexLock lock(&mu_);
  std::vector<std::pair<LabelValues, const Cell*>> out;
  out.reserve(cells_.size() + 1);
  for (const auto& [labels, cell] : cells_)
    out.emplace_back(labels, cell.get());
  if (overflow_) {
    out.emplace_back(LabelValues(desc_.labels.size(), "_overflow"),
                     overflow_.get());
  }
  return out;
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

// --- Registry ---------------------------------------------------------------

void Registry::Reserve(const std::string& name) {
  CHECK(std::find(names_.begin(), names_.end(), name) == names_.end())
      << "metric " << name << " registered twice";
  names_.push_back(name);
}

CounterFamily* Registry::AddCounter(const std::string& name,
                                    const std::string& help,
                                    std::vector<std::string> labels) {
  absl::MutexLock lock(&mu_);
  Reserve(name);
  counters_.emplace_back(new CounterFamily(
      {name, help, MetricType::kCounter, std::move(labels)}, max_series_));
  entries_.push_back({.counter = counters_.back().get()});
  return counters_.back().get();
}

GaugeFamily* Registry::AddGauge(const std::string& name,
                                const std::string& help,
                                std::vector<std::string> labels) {
  absl::MutexLock lock(&mu_);
  Reserve(name);
  gauges_.emplace_back(new GaugeFamily(
      {name, help, MetricType::kGauge, std::move(labels)}, max_series_));
  entries_.push_back({.gauge = gauges_.back().get()});
  return gauges_.back().get();
}

HistogramFamily* Registry::AddHistogram(const std::string& name,
                                        const std::string& help,
                                        std::vector<std::string> labels,
                                        std::vector<double> bounds) {
  CHECK(std::is_sorted(bounds.begin(), bounds.end()) && !bounds.empty())
      << name << ": bucket bounds must be ascending";
  absl::MutexLock lock(&mu_);
  Reserve(name);
  histograms_.emplace_back(new HistogramFamily(
      {name, help, MetricType::kHistogram, std::move(labels)}, max_series_,
      std::move(bounds)));
  entries_.push_back({.histogram = histograms_.back().get()});
  return histograms_.back().get();
}

void Registry::AddCollector(std::vector<FamilyDesc> families, CollectFn fn) {
  absl::MutexLock lock(&mu_);
  for (const FamilyDesc& f : families) {
    CHECK(f.type != MetricType::kHistogram)
        << f.name << ": collectors give counters and gauges";
    Reserve(f.name);
  }
  collectors_.push_back(std::make_unique<Collector>(
      Collector{std::move(families), std::move(fn)}));
  entries_.push_back({.collector = collectors_.back().get()});
}

// --- Exposition -------------------------------------------------------------

std::string EscapeLabelValue(const std::string& v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string EscapeHelp(const std::string& v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 9007199254740992.0) {
    return std::to_string(static_cast<int64_t>(v));
  }
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, end);
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  std::vector<double> b;
  double v = start;
  for (int i = 0; i < count; ++i, v *= factor) b.push_back(v);
  return b;
}

namespace {

void Header(const FamilyDesc& d, std::string* out) {
  absl::StrAppend(out, "# HELP ", d.name, " ", EscapeHelp(d.help), "\n",
                  "# TYPE ", d.name, " ", TypeName(d.type), "\n");
}

// `name{a="x",b="y"[,extra]} value`
void Line(const std::string& name, const std::vector<std::string>& keys,
          const LabelValues& values, const std::string& extra,
          const std::string& value, std::string* out) {
  out->append(name);
  if (!keys.empty() || !extra.empty()) {
    out->push_back('{');
    for (size_t i = 0; i < keys.size(); ++i) {
      if (i) out->push_back(',');
      absl::StrAppend(out, keys[i], "=\"", EscapeLabelValue(values[i]), "\"");
    }
    if (!extra.empty()) {
      if (!keys.empty()) out->push_back(',');
      out->append(extra);
    }
    out->push_back('}');
  }
  absl::StrAppend(out, " ", value, "\n");
}

template <typename Cell>
void Simple(Family<Cell>* f, std::string* out,
            std::vector<std::pair<LabelValues, const Cell*>> cells) {
  Header(f->desc(), out);
  for (const auto& [labels, cell] : cells) {
    Line(f->desc().name, f->desc().labels, labels, "",
         FormatValue(cell->value()), out);
  }
}

}  // namespace

std::string Registry::Expose() {
  std::vector<Entry> entries;
  {
    absl::MutexLock lock(&mu_);
    entries = entries_;
  }
  std::string out;
  out.reserve(16 << 10);
  for (const Entry& e : entries) {
    if (e.counter) Simple(e.counter, &out, e.counter->Cells());
    if (e.gauge) Simple(e.gauge, &out, e.gauge->Cells());
    if (e.histogram) {
      HistogramFamily* h = e.histogram;
      const FamilyDesc& d = h->desc();
      Header(d, &out);
      for (const auto& [labels, cell] : h->Cells()) {
        const Histogram::Snapshot s = cell->snapshot();
        for (size_t i = 0; i < s.cumulative.size(); ++i) {
          const std::string le =
              i < h->bounds_.size() ? FormatValue(h->bounds_[i]) : "+Inf";
          Line(d.name + "_bucket", d.labels, labels,
               absl::StrCat("le=\"", le, "\""), FormatValue(s.cumulative[i]),
               &out);
        }
        Line(d.name + "_sum", d.labels, labels, "", FormatValue(s.sum), &out);
        Line(d.name + "_count", d.labels, labels, "",
             FormatValue(static_cast<double>(s.count)), &out);
      }
    }
    if (e.collector) {
      const std::vector<FamilyDesc>& fams = e.collector->families;
      std::vector<std::vector<Sample>> samples(fams.size());
      e.collector->fn(&samples);
      for (size_t i = 0; i < fams.size(); ++i) {
        Header(fams[i], &out);
        if (i >= samples.size()) continue;
        for (const Sample& s : samples[i]) {
          CHECK(s.labels.size() == fams[i].labels.size())
              << fams[i].name << ": wrong number of label values";
          Line(fams[i].name, fams[i].labels, s.labels, "", FormatValue(s.value),
               &out);
        }
      }
    }
  }
  return out;
}

}  // namespace gpusched::metrics
