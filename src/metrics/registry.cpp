#include "metrics/registry.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "util/status.h"

namespace kvserve::metrics {

void Counter::inc(double v) {
  if (!(v > 0)) return;  // also drops NaN
  double cur = value_.load(std::memory_order_relaxed);
  while (!value_.compare_exchange_weak(cur, cur + v, std::memory_order_relaxed)) {
  }
}

void Gauge::add(double v) {
  double cur = value_.load(std::memory_order_relaxed);
  while (!value_.compare_exchange_weak(cur, cur + v, std::memory_order_relaxed)) {
  }
}

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  if (std::isnan(v)) return;
  // Buckets are "less than or equal": the first bound >= v takes the sample.
  size_t i = size_t(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  std::lock_guard<std::mutex> lk(mu_);
  counts_[i] += 1;
  sum_ += v;
  count_ += 1;
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot s;
  s.upper_bounds = bounds_;
  std::lock_guard<std::mutex> lk(mu_);
  uint64_t acc = 0;
  for (uint64_t c : counts_) {
    acc += c;
    s.cumulative.push_back(acc);
  }
  s.sum = sum_;
  s.count = count_;
  return s;
}

std::string escape_label_value(const std::string& v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string escape_help(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string format_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  // Integers (token counts, bytes) print without an exponent so they stay readable.
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.0f", v);
    return buf;
  }
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  // Prefer the shortest representation that reads back to the same double.
  for (int prec = 6; prec < 17; ++prec) {
    char shorter[40];
    std::snprintf(shorter, sizeof shorter, "%.*g", prec, v);
    if (std::strtod(shorter, nullptr) == v) return shorter;
  }
  return buf;
}

std::string format_labels(const Labels& labels) {
  if (labels.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < labels.size(); ++i) {
    if (i) out += ',';
    out += labels[i].first + "=\"" + escape_label_value(labels[i].second) + "\"";
  }
  return out + "}";
}

std::vector<double> exponential_buckets(double start, double factor, int count) {
  std::vector<double> b;
  double v = start;
  for (int i = 0; i < count; ++i, v *= factor) b.push_back(v);
  return b;
}

Registry::Series& Registry::series(const std::string& name, const std::string& help, MetricType type,
                                   const Labels& labels, const std::vector<double>* buckets) {
  std::lock_guard<std::mutex> lk(mu_);
  Family* fam = nullptr;
  for (auto& f : families_)
    if (f->name == name) fam = f.get();
  if (!fam) {
    families_.push_back(std::make_unique<Family>(Family{name, help, type, buckets ? *buckets : std::vector<double>{}, {}}));
    fam = families_.back().get();
  }
  KVS_ASSERT(fam->type == type, "metric family registered twice with different types");
  std::string key = format_labels(labels);
  auto it = fam->series.find(key);
  if (it != fam->series.end()) return it->second;
  Series s;
  s.labels = labels;
  if (type == MetricType::kCounter) s.counter = std::make_unique<Counter>();
  if (type == MetricType::kGauge) s.gauge = std::make_unique<Gauge>();
  if (type == MetricType::kHistogram) s.histogram = std::make_unique<Histogram>(fam->buckets);
  return fam->series.emplace(key, std::move(s)).first->second;
}

Counter& Registry::counter(const std::string& name, const std::string& help, const Labels& labels) {
  return *series(name, help, MetricType::kCounter, labels, nullptr).counter;
}

Gauge& Registry::gauge(const std::string& name, const std::string& help, const Labels& labels) {
  return *series(name, help, MetricType::kGauge, labels, nullptr).gauge;
}

Histogram& Registry::histogram(const std::string& name, const std::string& help, const std::vector<double>& buckets,
                               const Labels& labels) {
  return *series(name, help, MetricType::kHistogram, labels, &buckets).histogram;
}

std::string Registry::expose() const {
  std::lock_guard<std::mutex> lk(mu_);
  std::string out;
  for (const auto& f : families_) {
    const char* type = f->type == MetricType::kCounter ? "counter" : f->type == MetricType::kGauge ? "gauge" : "histogram";
    out += "# HELP " + f->name + " " + escape_help(f->help) + "\n";
    out += "# TYPE " + f->name + " " + type + "\n";
    for (const auto& [key, s] : f->series) {
      if (s.counter) out += f->name + key + " " + format_value(s.counter->value()) + "\n";
      if (s.gauge) out += f->name + key + " " + format_value(s.gauge->value()) + "\n";
      if (s.histogram) {
        Histogram::Snapshot snap = s.histogram->snapshot();
        for (size_t i = 0; i <= snap.upper_bounds.size(); ++i) {
          Labels with_le = s.labels;
          with_le.emplace_back("le", i < snap.upper_bounds.size() ? format_value(snap.upper_bounds[i]) : "+Inf");
          out += f->name + "_bucket" + format_labels(with_le) + " " + format_value(double(snap.cumulative[i])) + "\n";
        }
        out += f->name + "_sum" + key + " " + format_value(snap.sum) + "\n";
        out += f->name + "_count" + key + " " + format_value(double(snap.count)) + "\n";
      }
    }
  }
  return out;
}

}  // namespace kvserve::metrics
