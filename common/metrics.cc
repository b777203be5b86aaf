#include "common/metrics.h"

#include <algorithm>
#include <cmath>
#include <regex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "glog/logging.h"

namespace folio {
namespace {

void AtomicAdd(std::atomic<double>& target, double amount) {
  double current = target.load(std::memory_order_relaxed);
  while (!target.compare_exchange_weak(current, current + amount, std::memory_order_relaxed)) {
  }
}

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return absl::StrFormat("%.0f", v);
  return absl::StrFormat("%.17g", v);
}

std::string EscapeHelp(const std::string& help) {
  std::string out;
  for (char c : help) {
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

// {a="x",b="y"} with an optional extra label (histogram "le") appended.
std::string LabelSet(const std::vector<std::string>& names, const std::vector<std::string>& values,
                     const std::string& extra_name = "", const std::string& extra_value = "") {
  std::vector<std::string> parts;
  for (size_t i = 0; i < names.size(); ++i) {
    parts.push_back(absl::StrCat(names[i], "=\"", EscapeLabelValue(values[i]), "\""));
  }
  if (!extra_name.empty()) parts.push_back(absl::StrCat(extra_name, "=\"", extra_value, "\""));
  if (parts.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < parts.size(); ++i) absl::StrAppend(&out, i ? "," : "", parts[i]);
  return out + "}";
}

bool ValidName(const std::string& name) {
  static const std::regex kName("[a-zA-Z_:][a-zA-Z0-9_:]*");
  return std::regex_match(name, kName);
}

}  // namespace

std::string EscapeLabelValue(const std::string& value) {
  std::string out;
  for (char c : value) {
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

void Counter::Increment(double amount) {
  DCHECK_GE(amount, 0.0) << "counters only go up";
  AtomicAdd(value_, amount);
}

void Gauge::Add(double amount) { AtomicAdd(value_, amount); }

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {
  CHECK(std::is_sorted(bounds_.begin(), bounds_.end())) << "histogram bounds must ascend";
}

void Histogram::Observe(double value) {
  const size_t bucket =
      std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  absl::MutexLock lock(&mu_);
  ++counts_[bucket];
  sum_ += value;
  ++count_;
}

Histogram::Snapshot Histogram::Read() const {
  Snapshot s;
  s.bounds = bounds_;
  absl::MutexLock lock(&mu_);
  uint64_t running = 0;
  for (uint64_t c : counts_) {
    running += c;
    s.cumulative_counts.push_back(running);
  }
  s.sum = sum_;
  s.count = count_;
  return s;
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  std::vector<double> bounds;
  double b = start;
  for (int i = 0; i < count; ++i, b *= factor) bounds.push_back(b);
  return bounds;
}

std::vector<double> LinearBuckets(double start, double width, int count) {
  std::vector<double> bounds;
  for (int i = 0; i < count; ++i) bounds.push_back(start + width * i);
  return bounds;
}

MetricsRegistry::Entry& MetricsRegistry::AddEntry(const std::string& name,
                                                  const std::string& help, Type type) {
  CHECK(ValidName(name)) << "invalid metric name " << name;
  absl::MutexLock lock(&mu_);
  for (const auto& e : entries_) CHECK_NE(e->name, name) << "metric registered twice";
  entries_.push_back(std::make_unique<Entry>());
  Entry& e = *entries_.back();
  e.name = name;
  e.help = help;
  e.type = type;
  return e;
}

Family<Counter>& MetricsRegistry::AddCounterFamily(const std::string& name,
                                                   const std::string& help,
                                                   std::vector<std::string> label_names) {
  Entry& e = AddEntry(name, help, Type::kCounter);
  e.counters = std::make_unique<Family<Counter>>(std::move(label_names),
                                                 [] { return std::make_unique<Counter>(); });
  return *e.counters;
}

Family<Gauge>& MetricsRegistry::AddGaugeFamily(const std::string& name, const std::string& help,
                                               std::vector<std::string> label_names) {
  Entry& e = AddEntry(name, help, Type::kGauge);
  e.gauges = std::make_unique<Family<Gauge>>(std::move(label_names),
                                             [] { return std::make_unique<Gauge>(); });
  return *e.gauges;
}

Family<Histogram>& MetricsRegistry::AddHistogramFamily(const std::string& name,
                                                       const std::string& help,
                                                       std::vector<std::string> label_names,
                                                       std::vector<double> bounds) {
  Entry& e = AddEntry(name, help, Type::kHistogram);
  e.histograms = std::make_unique<Family<Histogram>>(
      std::move(label_names), [bounds] { return std::make_unique<Histogram>(bounds); });
  return *e.histograms;
}

Counter& MetricsRegistry::AddCounter(const std::string& name, const std::string& help) {
  return AddCounterFamily(name, help, {}).WithLabels({});
}

Gauge& MetricsRegistry::AddGauge(const std::string& name, const std::string& help) {
  return AddGaugeFamily(name, help, {}).WithLabels({});
}

Histogram& MetricsRegistry::AddHistogram(const std::string& name, const std::string& help,
                                         std::vector<double> bounds) {
  return AddHistogramFamily(name, help, {}, std::move(bounds)).WithLabels({});
}

void MetricsRegistry::AddCollectHook(std::function<void()> hook) {
  absl::MutexLock lock(&mu_);
  hooks_.push_back(std::move(hook));
}

std::string MetricsRegistry::Serialize() const {
  std::vector<std::function<void()>> hooks;
  {
    absl::MutexLock lock(&mu_);
    hooks = hooks_;
  }
  for (const auto& hook : hooks) hook();

  std::string out;
  absl::MutexLock lock(&mu_);
  for (const auto& e : entries_) {
    const char* type = e->type == Type::kCounter ? "counter"
                       : e->type == Type::kGauge ? "gauge"
                                                 : "histogram";
    absl::StrAppend(&out, "# HELP ", e->name, " ", EscapeHelp(e->help), "\n");
    absl::StrAppend(&out, "# TYPE ", e->name, " ", type, "\n");
    if (e->counters) {
      e->counters->ForEach([&](const auto& values, const Counter& c) {
        absl::StrAppend(&out, e->name, LabelSet(e->counters->label_names(), values), " ",
                        FormatValue(c.value()), "\n");
      });
    } else if (e->gauges) {
      e->gauges->ForEach([&](const auto& values, const Gauge& g) {
        absl::StrAppend(&out, e->name, LabelSet(e->gauges->label_names(), values), " ",
                        FormatValue(g.value()), "\n");
      });
    } else {
      const auto& names = e->histograms->label_names();
      e->histograms->ForEach([&](const auto& values, const Histogram& h) {
        const Histogram::Snapshot s = h.Read();
        for (size_t i = 0; i <= s.bounds.size(); ++i) {
          const std::string le = i < s.bounds.size() ? FormatValue(s.bounds[i]) : "+Inf";
          absl::StrAppend(&out, e->name, "_bucket", LabelSet(names, values, "le", le), " ",
                          s.cumulative_counts[i], "\n");
        }
        absl::StrAppend(&out, e->name, "_sum", LabelSet(names, values), " ", FormatValue(s.sum),
                        "\n");
        absl::StrAppend(&out, e->name, "_count", LabelSet(names, values), " ", s.count, "\n");
      });
    }
  }
  return out;
}

}  // namespace folio
