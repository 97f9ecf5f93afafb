// A small metrics registry: counters, gauges and histograms, each a family of series told
// apart by label values, rendered in the Prometheus text exposition format (version 0.0.4).
//
// Families are created once at start-up; the series handles they return stay valid for the
// registry's lifetime, so the hot path is one atomic add (counters, gauges) or one short
// mutex-guarded update (histograms) and never a map lookup.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace kvserve::metrics {

// Label name/value pairs of one series, in the order they are rendered.
using Labels = std::vector<std::pair<std::string, std::string>>;

class Counter {
 public:
  void inc(double v = 1.0);  // v < 0 is ignored: a counter only goes up
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Gauge {
 public:
  void set(double v) { value_.store(v, std::memory_order_relaxed); }
  void add(double v);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Histogram {
 public:
  // `upper_bounds` ascending, without +Inf (added on output).
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double v);

  struct Snapshot {
    std::vector<double> upper_bounds;
    std::vector<uint64_t> cumulative;  // one per bound, then +Inf (== count)
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot snapshot() const;

 private:
  const std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative), last one is +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

enum class MetricType { kCounter, kGauge, kHistogram };

class Registry {
 public:
  // Returns the series of family `name` with these labels, creating family and series on
  // first use. A family keeps the type and help of its first registration; asking for the
  // same name with another type is a programming error and aborts.
  Counter& counter(const std::string& name, const std::string& help, const Labels& labels = {});
  Gauge& gauge(const std::string& name, const std::string& help, const Labels& labels = {});
  Histogram& histogram(const std::string& name, const std::string& help, const std::vector<double>& buckets,
                       const Labels& labels = {});

  // The whole registry in the Prometheus text format, families in registration order.
  std::string expose() const;

 private:
  struct Series {
    Labels labels;
    std::unique_ptr<Counter> counter;
    std::unique_ptr<Gauge> gauge;
    std::unique_ptr<Histogram> histogram;
  };
  struct Family {
    std::string name;
    std::string help;
    MetricType type;
    std::vector<double> buckets;
    std::map<std::string, Series> series;  // keyed by the rendered label set
  };
  Series& series(const std::string& name, const std::string& help, MetricType type, const Labels& labels,
                 const std::vector<double>* buckets);

  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Family>> families_;
};

// Exposition helpers, public for tests.
std::string escape_label_value(const std::string& v);  // \ " and newline escaped
std::string escape_help(const std::string& v);         // \ and newline escaped
std::string format_value(double v);                    // shortest round-trip, +Inf/-Inf/NaN
std::string format_labels(const Labels& labels);       // {a="x",b="y"} or "" when empty

// Exponential bucket bounds: start, start*factor, ... (count bounds).
std::vector<double> exponential_buckets(double start, double factor, int count);

}  // namespace kvserve::metrics
