// A small Prometheus metrics library: counters, gauges and histograms, optionally with
// labels, collected in a MetricsRegistry and written in the text exposition format 0.0.4.
//
// The registry is an ordinary object that main() creates and injects; there is no global
// registry. Metric objects are owned by the registry and stay valid for its lifetime.
// Thread-safe: metrics are updated with atomics or under a mutex, and Serialize() may
// run concurrently with updates.
#ifndef FOLIO_COMMON_METRICS_H_
#define FOLIO_COMMON_METRICS_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace folio {

// A value that only goes up.
class Counter {
 public:
  void Increment(double amount = 1.0);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// A value that goes up and down.
class Gauge {
 public:
  void Set(double value) { value_.store(value, std::memory_order_relaxed); }
  void Add(double amount);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// Observations counted into cumulative buckets with upper bounds `bounds` (ascending;
// +Inf is implicit).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double value);

  struct Snapshot {
    std::vector<double> bounds;
    std::vector<uint64_t> cumulative_counts;  // [bounds.size() + 1]; the last is +Inf
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot Read() const;

 private:
  const std::vector<double> bounds_;
  mutable absl::Mutex mu_;
  std::vector<uint64_t> counts_ ABSL_GUARDED_BY(mu_);  // per bucket, not cumulative
  double sum_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t count_ ABSL_GUARDED_BY(mu_) = 0;
};

// Bucket bounds: `count` bounds starting at `start`, each `factor` times the last.
std::vector<double> ExponentialBuckets(double start, double factor, int count);
// `count` bounds starting at `start`, each `width` more than the last.
std::vector<double> LinearBuckets(double start, double width, int count);

// One metric name with a fixed set of label names; each distinct set of label values is
// its own child metric.
template <typename Metric>
class Family {
 public:
  Family(std::vector<std::string> label_names, std::function<std::unique_ptr<Metric>()> make)
      : label_names_(std::move(label_names)), make_(std::move(make)) {}

  // The child for these label values (created on first use). The number of values must
  // match the family's label names.
  Metric& WithLabels(const std::vector<std::string>& values);

  const std::vector<std::string>& label_names() const { return label_names_; }
  // Calls fn(label values, metric) for each child, in label order.
  void ForEach(const std::function<void(const std::vector<std::string>&, const Metric&)>& fn) const;

 private:
  const std::vector<std::string> label_names_;
  const std::function<std::unique_ptr<Metric>()> make_;
  mutable absl::Mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<Metric>> children_ ABSL_GUARDED_BY(mu_);
};

class MetricsRegistry {
 public:
  MetricsRegistry() = default;
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  // Names must be valid Prometheus names and unique in the registry (CHECKed: a clash is
  // a programming error).
  Counter& AddCounter(const std::string& name, const std::string& help);
  Gauge& AddGauge(const std::string& name, const std::string& help);
  Histogram& AddHistogram(const std::string& name, const std::string& help,
                          std::vector<double> bounds);
  Family<Counter>& AddCounterFamily(const std::string& name, const std::string& help,
                                    std::vector<std::string> label_names);
  Family<Gauge>& AddGaugeFamily(const std::string& name, const std::string& help,
                                std::vector<std::string> label_names);
  Family<Histogram>& AddHistogramFamily(const std::string& name, const std::string& help,
                                        std::vector<std::string> label_names,
                                        std::vector<double> bounds);

  // Runs before every Serialize(), so gauges derived from other state (a pool's free
  // blocks, say) are fresh when scraped.
  void AddCollectHook(std::function<void()> hook);

  // The whole registry in the Prometheus text format, version 0.0.4.
  std::string Serialize() const;

 private:
  enum class Type { kCounter, kGauge, kHistogram };
  struct Entry {
    std::string name;
    std::string help;
    Type type;
    std::unique_ptr<Family<Counter>> counters;
    std::unique_ptr<Family<Gauge>> gauges;
    std::unique_ptr<Family<Histogram>> histograms;
  };
  Entry& AddEntry(const std::string& name, const std::string& help, Type type);

  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<Entry>> entries_ ABSL_GUARDED_BY(mu_);
  std::vector<std::function<void()>> hooks_ ABSL_GUARDED_BY(mu_);
};

// Escapes a label value for the text format.
std::string EscapeLabelValue(const std::string& value);

template <typename Metric>
Metric& Family<Metric>::WithLabels(const std::vector<std::string>& values) {
  absl::MutexLock lock(&mu_);
  auto& slot = children_[values];
  if (slot == nullptr) slot = make_();
  return *slot;
}

template <typename Metric>
void Family<Metric>::ForEach(
    const std::function<void(const std::vector<std::string>&, const Metric&)>& fn) const {
  absl::MutexLock lock(&mu_);
  for (const auto& [values, metric] : children_) fn(values, *metric);
}

}  // namespace folio

#endif  // FOLIO_COMMON_METRICS_H_
